"""What machine the benchmark runs on, and its theoretical peak FLOP/s.

The peak is derived from `lscpu` (no vendor tables are downloaded):

    peak = cores x frequency x FLOP per cycle per core

    fp32 FLOP/cycle/core = FMA units x fp32 lanes per unit x 2 (multiply + add)
    bf16 FLOP/cycle/core = 2 x the fp32 figure with AVX512_BF16 (`vdpbf16ps`
                           multiplies pairs of bf16 into each fp32 lane), or
                           2048 with AMX-BF16 (1024 bf16 MACs per cycle)

FMA units and their width are not in the flags, so they are inferred from the
vendor and family:

- Intel with AVX-512: two 512-bit FMA units (Xeon Scalable Gold/Platinum and
  later; some lower SKUs have one, then the fractions are halved).
- AMD family 0x19 (Zen 3/Zen 4): two 256-bit FMA pipes; Zen 4 runs AVX-512 on
  them in two halves, so 16 fp32 FLOP per pipe per cycle.
- AMD family 0x1A (Zen 5): two 512-bit FMA pipes.
- Anything else with AVX2+FMA: two 256-bit units; SSE only: two 128-bit.

The vector ISA the kernels may use is `keras_vit.training.hardware.vector_isa`:
the widest class of the flags, capped by `ONEDNN_MAX_CPU_ISA` when the
benchmark emulates a smaller machine (`--max-isa`); the peak is then the
capped class's (an AVX2 cap on an AVX-512 CPU counts 8 fp32 lanes and no
native bfloat16).

Frequency, in order of preference: `--cpu-ghz` (the caller's override),
`CPU max MHz` from lscpu, the `@ x.xxGHz` of the model name, then BogoMIPS / 2
(the TSC rate, which is the nominal clock). Cores turbo above the nominal
clock, so measured fractions can exceed 100%; the header also prints a
measured SGEMM ceiling for comparison.
"""

from __future__ import annotations

import os
import platform
import re
import subprocess
import time
from dataclasses import dataclass


@dataclass(frozen=True)
class Machine:
    """The CPU facts the benchmark needs, and the peaks derived from them."""

    model_name: str
    vendor: str
    family: int
    cores: int
    threads: int
    ghz: float
    ghz_source: str
    flags: frozenset
    memory_gib: float
    isa_cap: str | None = None  # ONEDNN_MAX_CPU_ISA given to the workers

    @property
    def native_isa(self) -> str:
        """The CPU's own vector ISA class, e.g. `"AVX-512+BF16"`."""
        return _keras_vit_hardware().vector_isa(self.flags, env={})

    @property
    def isa(self) -> str:
        """The class the benchmark's oneDNN and PyTorch kernels may use."""
        env = {"ONEDNN_MAX_CPU_ISA": self.isa_cap} if self.isa_cap else {}
        return _keras_vit_hardware().vector_isa(self.flags, env=env)

    def isa_text(self) -> str:
        """`"AVX2"`, or `"AVX2 (capped from AVX-512+BF16 ...)"` when emulated."""
        if self.isa == self.native_isa:
            return self.isa
        return (
            f"{self.isa} (emulated: ONEDNN_MAX_CPU_ISA={self.isa_cap} on an "
            f"{self.native_isa} CPU)"
        )

    def _units_and_lanes(self) -> tuple[int, int]:
        return _fma_units_and_fp32_lanes(self.vendor, self.family, self.isa)

    @property
    def fp32_flop_per_cycle(self) -> int:
        units, lanes = self._units_and_lanes()
        return units * lanes * 2

    @property
    def bf16_flop_per_cycle(self) -> int:
        if self.isa == "AMX":
            return 2048
        if self.isa == "AVX-512+BF16":
            return 2 * self.fp32_flop_per_cycle
        return self.fp32_flop_per_cycle  # bf16 is converted to fp32 and back

    @property
    def bf16_unit(self) -> str:
        if self.isa == "AMX":
            return "AMX-BF16"
        if self.isa == "AVX-512+BF16":
            return "AVX512_BF16"
        return "fp32 FMA"

    def peak_gflops(self, precision: str) -> float:
        per_cycle = (
            self.bf16_flop_per_cycle
            if precision == "bfloat16"
            else self.fp32_flop_per_cycle
        )
        return self.cores * self.ghz * per_cycle

    def describe(self) -> str:
        units, lanes = self._units_and_lanes()
        return (
            f"{self.model_name} ({self.vendor} family {self.family:#x}), "
            f"vector ISA {self.isa_text()}, "
            f"{self.cores} cores / {self.threads} threads, {self.ghz:.2f} GHz "
            f"({self.ghz_source}), {self.memory_gib:.0f} GiB RAM; "
            f"fp32 peak {self.peak_gflops('float32'):.0f} GFLOP/s "
            f"({units} FMA x {lanes} fp32 lanes x 2 x {self.cores} cores x "
            f"{self.ghz:.2f} GHz), bf16 peak {self.peak_gflops('bfloat16'):.0f} "
            f"GFLOP/s ({self.bf16_unit})"
        )


def _keras_vit_hardware():
    """`keras_vit/training/hardware.py`, loaded from its file alone.

    The benchmark's process must stay small: Linux reports a child's peak
    RSS (`ru_maxrss`) as at least the parent's RSS when it was forked, so a
    parent holding TensorFlow (0.7 GB) would inflate every case's memory
    figures. `import keras_vit` imports TensorFlow; this module of it needs
    only the standard library, so it is loaded by path, without its package.
    """
    global _HARDWARE
    if _HARDWARE is None:
        import importlib.util

        # Finding the package runs none of it (its `__init__` included).
        package = importlib.util.find_spec("keras_vit").submodule_search_locations
        path = os.path.join(package[0], "training", "hardware.py")
        spec = importlib.util.spec_from_file_location("_keras_vit_hardware", path)
        _HARDWARE = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(_HARDWARE)
    return _HARDWARE


_HARDWARE = None


def _fma_units_and_fp32_lanes(vendor: str, family: int, isa: str) -> tuple[int, int]:
    if isa in ("AMX", "AVX-512+BF16", "AVX-512"):
        if vendor == "AuthenticAMD" and family < 0x1A:
            return 2, 8  # Zen 4: AVX-512 double-pumped on two 256-bit pipes
        return 2, 16
    if isa == "AVX2":
        return 2, 8
    return 2, 4


def _lscpu() -> dict[str, str]:
    try:
        text = subprocess.run(
            ["lscpu"], capture_output=True, text=True, check=True, env={"LC_ALL": "C"}
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    fields = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip()] = value.strip()
    return fields


def _frequency(fields: dict[str, str], override: float | None) -> tuple[float, str]:
    if override:
        return float(override), "given with --cpu-ghz"
    if fields.get("CPU max MHz"):
        return float(fields["CPU max MHz"]) / 1000, "lscpu CPU max MHz"
    match = re.search(r"@\s*([\d.]+)\s*GHz", fields.get("Model name", ""))
    if match:
        return float(match.group(1)), "model name"
    if fields.get("BogoMIPS"):
        return float(fields["BogoMIPS"]) / 2000, "BogoMIPS / 2 (TSC rate)"
    return 2.0, "unknown, assumed"


def detect_machine(cpu_ghz: float | None = None, isa_cap: str | None = None) -> Machine:
    """Reads `lscpu` and `/proc/meminfo` into a `Machine`.

    Args:
        cpu_ghz: Override of the clock used for the peak, in GHz.
        isa_cap: The `ONEDNN_MAX_CPU_ISA` value the workers run under, if any.

    Returns:
        A `Machine`.
    """
    fields = _lscpu()
    threads = int(fields.get("CPU(s)", os.cpu_count() or 1))
    per_core = int(fields.get("Thread(s) per core", 1) or 1)
    cores = max(threads // per_core, 1)
    ghz, source = _frequency(fields, cpu_ghz)
    memory = 0.0
    try:
        with open("/proc/meminfo") as f:
            memory = int(f.readline().split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    return Machine(
        model_name=fields.get("Model name", platform.processor() or "unknown CPU"),
        vendor=fields.get("Vendor ID", "unknown"),
        family=int(fields.get("CPU family", 0) or 0),
        cores=cores,
        threads=threads,
        ghz=ghz,
        ghz_source=source,
        flags=frozenset(fields.get("Flags", "").split()),
        memory_gib=memory,
        isa_cap=isa_cap,
    )


def load_average() -> float:
    """The 1-minute load average (0 where the OS does not report one)."""
    try:
        return os.getloadavg()[0]
    except OSError:
        return 0.0


def sgemm_probe(size: int = 1024, repeats: int = 5) -> float:
    """Measured float32 GEMM rate of NumPy's BLAS on all cores, in GFLOP/s.

    Returns the best of `repeats` multiplications of two `size`-square
    matrices: the attainable matmul ceiling of the machine right now.
    """
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        a @ b
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best / 1e9
