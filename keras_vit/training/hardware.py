"""What the CPU can do: its vector instruction set, and native bfloat16.

`vector_isa()` classes the CPU by the widest vector instructions TensorFlow's
(and PyTorch's) oneDNN kernels can use on it, one of `ISA_CLASSES`:

| class | needs (`/proc/cpuinfo` flags) | bfloat16 matmuls |
|---|---|---|
| `"AMX"` | `amx_bf16`, `amx_tile` on top of `"AVX-512+BF16"` | AMX tiles |
| `"AVX-512+BF16"` | `avx512_bf16`, `avx512_vnni` on top of `"AVX-512"` | `vdpbf16ps` |
| `"AVX-512"` | `avx512f`, `avx512bw`, `avx512vl`, `avx512dq` | converted to fp32 |
| `"AVX2"` | `avx2` (and `avx`) | converted to fp32 |
| `"AVX"` | `avx` | converted to fp32 |
| `"baseline"` | none of these (or no flags: not Linux, not x86) | fp32 |

Each class needs the flags of the classes below it, as oneDNN's own
dispatcher does. Only the top two compute in bfloat16 natively
(`native_bfloat16()`); elsewhere bfloat16 is converted to float32 and back
around every matmul, which is slower than float32 alone.

oneDNN's environment variable `ONEDNN_MAX_CPU_ISA` (older name
`DNNL_MAX_CPU_ISA`; `ONEDNN_` wins when both are set) makes its kernels
behave like a smaller machine, so it caps the class: `AVX2` on an AMX CPU
gives `"AVX2"`, while a cap above the CPU does not raise it.

No TensorFlow here: this module is cheap to import.

Example:

>>> keras_vit.training.hardware.vector_isa()
'AVX2'
>>> keras_vit.training.hardware.native_bfloat16()
False
>>> # under ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16
>>> keras_vit.training.hardware.describe_cpu()
'AVX-512+BF16 (capped from AMX by ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16)'
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# From narrowest to widest.
ISA_CLASSES = ("baseline", "AVX", "AVX2", "AVX-512", "AVX-512+BF16", "AMX")

# Each class, with the flags it adds to the class below it.
_NEEDS = (
    ("AVX", {"avx"}),
    ("AVX2", {"avx2"}),
    ("AVX-512", {"avx512f", "avx512bw", "avx512vl", "avx512dq"}),
    ("AVX-512+BF16", {"avx512_bf16", "avx512_vnni"}),
    ("AMX", {"amx_bf16", "amx_tile"}),
)

# oneDNN's `ONEDNN_MAX_CPU_ISA` values (case-insensitive, as oneDNN reads
# them), each with the class it caps to; None: no cap.
_CAPS = {
    "SSE41": "baseline",
    "AVX": "AVX",
    "AVX2": "AVX2",
    "AVX2_VNNI": "AVX2",
    "AVX2_VNNI_2": "AVX2",  # bf16 conversions only, no bf16 dot products
    "AVX512_CORE": "AVX-512",
    "AVX512_CORE_VNNI": "AVX-512",
    "AVX512_CORE_BF16": "AVX-512+BF16",
    "AVX10_1_512": "AVX-512+BF16",
    "AVX512_CORE_FP16": "AVX-512+BF16",
    "AVX10_1_512_AMX": "AMX",
    "AVX512_CORE_AMX": "AMX",
    "AVX10_1_512_AMX_FP16": "AMX",
    "AVX512_CORE_AMX_FP16": "AMX",
    "ALL": None,
    "DEFAULT": None,
}
_CAP_VARIABLES = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA")


def cpu_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    """The CPU's feature flags, as Linux lists them in `/proc/cpuinfo`.

    Args:
        path: The file to read; for tests.

    Returns:
        The flags of the first processor (e.g. `"avx2"`, `"avx512_bf16"`,
        `"amx_bf16"`), or an empty frozenset where the file is missing or
        unreadable (not Linux) or has no `flags` line (not x86).

    Example:

    >>> "avx2" in keras_vit.training.hardware.cpu_flags()
    True
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "flags":
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def _cap(env: Mapping[str, str]) -> tuple[str, str, str | None] | None:
    """`(variable, value, class or None)` of the oneDNN cap, or None if unset."""
    for variable in _CAP_VARIABLES:
        value = env.get(variable, "").strip()
        if value:
            if value.upper() not in _CAPS:
                raise ValueError(
                    f"Unknown {variable}={value!r}. oneDNN knows {', '.join(_CAPS)}."
                )
            return variable, value, _CAPS[value.upper()]
    return None


def _native_isa(flags: frozenset[str]) -> str:
    isa = "baseline"
    for name, needs in _NEEDS:
        if not needs <= flags:
            break
        isa = name
    return isa


def vector_isa(
    flags: frozenset[str] | None = None, env: Mapping[str, str] | None = None
) -> str:
    """The widest vector ISA class oneDNN's kernels may use on this CPU.

    Args:
        flags: The CPU's flags; defaults to `cpu_flags()`.
        env: The environment whose `ONEDNN_MAX_CPU_ISA` (or
            `DNNL_MAX_CPU_ISA`) caps the class; defaults to `os.environ`.
            Pass `{}` for the CPU's own class.

    Returns:
        One of `ISA_CLASSES`: `"AMX"`, `"AVX-512+BF16"`, `"AVX-512"`,
        `"AVX2"`, `"AVX"` or `"baseline"`.

    Raises:
        ValueError: The cap variable holds a value oneDNN does not know.

    Example:

    >>> zen3 = frozenset({"avx", "avx2", "fma"})
    >>> keras_vit.training.hardware.vector_isa(zen3, env={})
    'AVX2'
    """
    flags = cpu_flags() if flags is None else frozenset(flags)
    env = os.environ if env is None else env
    isa = _native_isa(flags)
    cap = _cap(env)
    if cap is not None and cap[2] is not None:
        isa = min(isa, cap[2], key=ISA_CLASSES.index)
    return isa


def native_bfloat16(
    flags: frozenset[str] | None = None, env: Mapping[str, str] | None = None
) -> bool:
    """Whether the CPU computes bfloat16 matmuls natively (AVX512_BF16 or AMX).

    Where it does not, `"mixed_bfloat16"` is slower than float32 (the
    values are converted to float32 and back around each matmul). Arguments
    as for `vector_isa`, whose `ONEDNN_MAX_CPU_ISA` cap applies.

    Example:

    >>> sapphire_rapids = {"avx", "avx2", "avx512f", "avx512bw", "avx512vl",
    ...     "avx512dq", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16"}
    >>> keras_vit.training.hardware.native_bfloat16(sapphire_rapids, env={})
    True
    """
    return vector_isa(flags, env) in ("AMX", "AVX-512+BF16")


def describe_cpu(
    flags: frozenset[str] | None = None, env: Mapping[str, str] | None = None
) -> str:
    """A one-line description of the CPU's vector ISA class, and its cap.

    Arguments as for `vector_isa`.

    Returns:
        E.g. `"AVX2"`, `"AVX-512+BF16 (capped from AMX by
        ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16)"`, or `"baseline (no CPU
        flags read)"` where there are no `/proc/cpuinfo` flags.

    Example:

    >>> keras_vit.training.hardware.describe_cpu(env={"ONEDNN_MAX_CPU_ISA": "AVX2"})
    'AVX2 (capped from AVX-512+BF16 by ONEDNN_MAX_CPU_ISA=AVX2)'
    """
    flags = cpu_flags() if flags is None else frozenset(flags)
    env = os.environ if env is None else env
    isa = vector_isa(flags, env)
    if not flags:
        return f"{isa} (no CPU flags read)"
    native = _native_isa(flags)
    if isa == native:
        return isa
    variable, value, _ = _cap(env)
    return f"{isa} (capped from {native} by {variable}={value})"
