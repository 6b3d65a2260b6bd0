"""The original layout written back in timm's keys: the timm dialect inverted.

`to_timm` turns original-layout params (`from_model(model).params`) into
the state dict of timm's `VisionTransformer` (or `VisionTransformerDistilled`,
or a ResNetV2 hybrid's `HybridEmbed`) of the same configuration: the keys,
shapes and float32 values timm's `load_state_dict` takes. With `eva=True`
it writes timm's `Eva` instead (DINOv3, EVA-02, PE, RoPE-ViT), built with a
fused `qkv` (`qkv_fused=True`): LayerScale as `gamma_1`/`gamma_2`, query and
value biases as `attn.q_bias`/`attn.v_bias` when the key has none, a SwiGLU
with an MLP norm as separate `fc1_g`/`fc1_x` (timm's `SwiGLU`; without the
norm, the packed `fc1` of its `GluMlp`), and the mixed RoPE's frequencies
stacked into `rope.freqs`. With `separate_swiglu=True` a `VisionTransformer`'s
SwiGLU is written as timm's `SwiGLU` too (`fc1_g`/`fc1_x`: AIMv2's
`mlp_layer=SwiGLU`), not as the packed `fc1` of its `SwiGLUPacked`.

Nothing here spells a timm key: the inverse is derived from the reading
table (`keras_vit.weights.dialects.timm.RULES`). Each rule's original-layout
template(s) are matched against a key; the named groups fill the rule's
timm pattern into a name (minus the dialect's `shift`); the rule's array
converter is inverted (`_INVERSE`: a transpose back, per-head arrays
flattened, a `split` concatenated). Every name written is read back through
the table (`rules.find`) and must give the very key(s) it came from, so that
reading what is written is exact by construction. Whatever no rule inverts
(`pre_logits`, which timm's `VisionTransformer` has no layer for; a query
without its key and value) raises one `ValueError` naming every such key:
no weight is dropped.

Example:

```python
params = keras_vit.weights.from_model(model).params
state_dict = to_timm(params, num_heads=12)  # {"blocks.0.attn.qkv.weight": ...}
```
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from collections.abc import Mapping

import numpy as np

from keras_vit.weights import keys
from keras_vit.weights.dialects import convert
from keras_vit.weights.dialects import timm
from keras_vit.weights.dialects.convert import Split
from keras_vit.weights.dialects.rules import Rule
from keras_vit.weights.dialects.rules import find
from keras_vit.weights.dialects.rules import heads_for
from keras_vit.weights.dialects.rules import same

# One array in the original layout -> the timm array (before any `Split`
# concatenation). Each undoes the converter of `convert` it is keyed by.
Inverse = Callable[[np.ndarray], np.ndarray]


def _heads_to_dense(value: np.ndarray) -> np.ndarray:
    """`(D_in, H, D_out / H)` -> `(D_out, D_in)` (undoes `dense_to_heads`)."""
    return value.reshape(value.shape[0], -1).T


def _heads_to_out(value: np.ndarray) -> np.ndarray:
    """`(H, D_in / H, D_out)` -> `(D_out, D_in)` (undoes `out_to_heads`)."""
    return value.reshape(-1, value.shape[-1]).T


_INVERSE: dict[object, tuple[Inverse, int | None]] = {
    # converter: (its inverse, the rank the original-layout array must have)
    same: (lambda v: v, None),
    convert.transpose: (np.transpose, 2),
    convert.conv_to_hwio: (lambda v: np.transpose(v, (3, 2, 0, 1)), 4),
    convert.dense_to_heads: (_heads_to_dense, 3),
    convert.bias_to_heads: (lambda v: v.reshape(-1), 2),
    convert.out_to_heads: (_heads_to_out, 3),
}

# Original-layout keys timm's `VisionTransformer` has no parameter for, and why.
_NO_TIMM_LAYER = {
    keys.PRE_LOGITS: (
        "the representation layer (`pre_logits`, `representation_size=`) has no "
        "timm key: timm's VisionTransformer has no pre-logits layer (only older "
        "timm versions had `pre_logits.fc`, which the timm reader does not read)"
    ),
}


@dataclasses.dataclass(frozen=True)
class _Inverted:
    """One reading rule, read backwards.

    Attributes:
        rule: The timm rule.
        templates: Its original-layout template(s), as a tuple.
        patterns: Each template as a compiled full-match pattern.
        inverse: The inverse of the rule's converter (of each part for a
            `Split`), and the rank each original array must have.
        parts: How many original arrays make one timm array (a `Split`'s).
    """

    rule: Rule
    templates: tuple[str, ...]
    patterns: tuple[re.Pattern, ...]
    inverse: tuple[Inverse, int | None]
    parts: int


# Rules of the reading table that name the same parameters another way:
# `VisionTransformer`'s LayerScale, `Eva`'s, and `Eva`'s separate
# projections (written fused, so never).
_VIT_ONLY = (r"ls1\.gamma", r"ls2\.gamma")
_EVA_ONLY = (r"gamma_1", r"gamma_2", r"attn\.q_bias", r"attn\.v_bias")
_NEVER = (r"attn\.q_proj", r"attn\.k_proj", r"attn\.v_proj")


@functools.cache
def _inverted_rules(
    eva: bool = False,
) -> tuple[tuple[_Inverted, ...], tuple[Rule, ...]]:
    """The timm table read backwards, for timm's `VisionTransformer` or its
    `Eva`, and the rules that cannot be inverted."""
    skip = _NEVER + (_VIT_ONLY if eva else _EVA_ONLY)
    inverted, left = [], []
    for rule in timm.DIALECT.rules:
        if any(part in rule.pattern for part in skip):
            continue
        if rule.key is None:
            continue  # nothing of the original layout comes from it
        templates = rule.key if isinstance(rule.key, tuple) else (rule.key,)
        each = rule.convert.each if isinstance(rule.convert, Split) else rule.convert
        parts = rule.convert.parts if isinstance(rule.convert, Split) else 1
        if each not in _INVERSE or parts != len(templates):
            left.append(rule)
            continue
        patterns = tuple(re.compile(keys.template_pattern(t)) for t in templates)
        inverted.append(_Inverted(rule, templates, patterns, _INVERSE[each], parts))
    return tuple(inverted), tuple(left)


# A named group of a rule's pattern, e.g. `(?P<i>\d+)`.
_GROUP = re.compile(r"\(\?P<(\w+)>(?:[^()\\]|\\.)*\)")


def _timm_name(rule: Rule, fields: Mapping[str, str]) -> str | None:
    """The timm key `rule` reads into the template filled with `fields`.

    The pattern's named groups are filled in (the dialect's `shift` taken
    off) and its escapes undone; `None` when the result is not a key the
    pattern matches (a pattern with other regular-expression syntax).
    """
    values = dict(fields)
    for field, offset in timm.DIALECT.shift.items():
        if field in values:
            number = int(values[field]) - offset
            if number < 0:
                return None
            values[field] = str(number)
    try:
        name = _GROUP.sub(lambda m: values[m[1]], rule.pattern)
    except KeyError:  # a group the template does not fill
        return None
    name = re.sub(r"\\(.)", r"\1", name)
    return name if re.fullmatch(rule.pattern, name) else None


def _locate(
    key: str, params: Mapping, eva: bool = False
) -> tuple[_Inverted, str, tuple[str, ...]] | None:
    """The inverted rule a key belongs to, its timm name and all its keys.

    The first rule (in the table's order) whose template matches `key`,
    whose timm name the table reads back into exactly the same keys, and
    whose other keys `params` has (Eva's query bias goes to `attn.q_bias`
    when there is no key bias for a fused `qkv.bias`); else the first that
    matches, for the message.
    """
    first = None
    for inv in _inverted_rules(eva)[0]:
        for pattern in inv.patterns:
            match = pattern.fullmatch(key)
            if match is None:
                continue
            fields = {k: v for k, v in match.groupdict().items() if v is not None}
            name = _timm_name(inv.rule, fields)
            if name is None:
                continue
            back = find(name, timm.DIALECT)
            wanted = tuple(t.format(**fields) for t in inv.templates)
            if back is None or back.rule is not inv.rule:
                continue
            got = back.key if isinstance(back.key, tuple) else (back.key,)
            if got != wanted:
                continue
            if all(k in params for k in wanted):
                return inv, name, wanted
            first = first or (inv, name, wanted)
    return first


def _reason(key: str) -> str:
    layer = key.rsplit("/", 1)[0]
    for prefix, why in _NO_TIMM_LAYER.items():
        if layer == prefix:
            return why
    return "no timm key"


def to_timm(
    params: Mapping[str, np.ndarray],
    *,
    num_heads: int | Mapping,
    eva: bool = False,
    separate_swiglu: bool = False,
) -> dict[str, np.ndarray]:
    """Original-layout params as the state dict of timm's `VisionTransformer`.

    The inverse of `to_original_layout` on timm files: for a timm state
    dict `t`, `to_timm(to_original_layout(t, heads), num_heads=heads)` gives
    `t` back (in float32). Supported: the class, distillation and register
    tokens, the position table (with or without prefix rows), the patch
    projection, the fused `qkv` (with or without bias), QK-norm, LayerScale,
    the MLP (GELU or timm's `SwiGLUPacked` `mlp.fc1`), `norm`, `fc_norm`,
    the attention-pooling head (`attn_pool.*`), `head`, `head_dist`, and a
    hybrid's ResNetV2 (`patch_embed.backbone.*`).

    Args:
        params: `{original-layout key: array}`, e.g.
            `keras_vit.weights.from_model(model).params`.
        num_heads: The model's attention heads; the per-head arrays must
            have this many. A mapping `{attention layer: heads, None: the
            blocks'}` for an attention pool with heads of its own (PE).
        eva: Write timm's `Eva` layout instead of `VisionTransformer`'s.
        separate_swiglu: Write a `VisionTransformer`'s SwiGLU MLP as separate
            gate and value layers, `mlp.fc1_g`/`mlp.fc1_x` (timm's `SwiGLU`,
            the architecture's `mlp_layer`), not one packed `mlp.fc1`
            (`SwiGLUPacked`). `Eva` decides by its MLP norm.

    Returns:
        `{timm key: float32 C-contiguous array}`.

    Raises:
        ValueError: naming every key no timm key holds (`pre_logits`, a
            projection whose partners are missing, a key of no rule) or
            whose array has the wrong rank or number of heads; and for a
            model with both the encoder norm and `fc_norm` (timm has one
            of them).
    """
    counts = num_heads.values() if isinstance(num_heads, Mapping) else [num_heads]
    if any(h is None or int(h) < 1 for h in counts):
        raise ValueError(f"num_heads must be a positive integer, got {num_heads!r}.")
    norm, fc_norm = keys.ENCODER_NORM + "/scale", keys.FC_NORM + "/scale"
    if norm in params and fc_norm in params and not eva:
        raise ValueError(
            f"The params have both the encoder norm ({norm!r}) and `fc_norm` "
            f"({fc_norm!r}); timm's VisionTransformer has one or the other "
            "(`fc_norm=True` replaces `norm`), so these weights have no timm layout."
        )
    groups: dict[str, tuple[_Inverted, tuple[str, ...]]] = {}
    problems: dict[str, str] = {}
    for key in params:
        found = _locate(key, params, eva)
        if found is None:
            problems[key] = _reason(key)
            continue
        inv, name, wanted = found
        groups[name] = (inv, wanted)
    tensors = {}
    for name, (inv, wanted) in groups.items():
        missing = [k for k in wanted if k not in params]
        if missing:
            for k in wanted:
                if k in params:
                    problems[k] = (
                        f"timm's {name!r} holds it with {missing} (missing here)"
                    )
            continue
        arrays = [np.asarray(params[k]) for k in wanted]
        inverse, rank = inv.inverse
        bad = [
            k
            for k, a in zip(wanted, arrays, strict=True)
            if not _fits(a, rank, inv.rule.convert, heads_for(num_heads, k))
        ]
        if bad:
            for k, a in zip(wanted, arrays, strict=True):
                if k in bad:
                    problems[k] = (
                        f"shape {a.shape} is not the per-head layout of "
                        f"{heads_for(num_heads, k)} heads that {name!r} is written "
                        "from"
                    )
            continue
        parts = [inverse(a) for a in arrays]
        value = parts[0] if inv.parts == 1 else np.concatenate(parts, axis=0)
        tensors[name] = np.ascontiguousarray(value, dtype=np.float32)
    if problems:
        lines = "\n".join(f"  {k}: {why}" for k, why in problems.items())
        raise ValueError(
            f"{len(problems)} original-layout key(s) cannot be written in timm's "
            f"layout (nothing was written):\n{lines}"
        )
    if eva:
        return _eva_modules(tensors)
    return _separate_swiglu(tensors) if separate_swiglu else tensors


_PACKED = re.compile(r"(blocks\.\d+\.mlp\.)fc1\.(weight|bias)")
_FREQS = re.compile(r"blocks\.(\d+)\.attn\.rope_freqs")


def _split_gate(packed: re.Match, value: np.ndarray) -> dict:
    """A packed SwiGLU `fc1` (`[gate; value]` on the output axis) as timm's
    `SwiGLU` holds it: `fc1_g` and `fc1_x`."""
    gate, linear = np.split(value, 2, axis=0)
    return {
        f"{packed[1]}fc1_g.{packed[2]}": np.ascontiguousarray(gate),
        f"{packed[1]}fc1_x.{packed[2]}": np.ascontiguousarray(linear),
    }


def _separate_swiglu(tensors: dict) -> dict:
    """Every block's packed SwiGLU `fc1` as `fc1_g`/`fc1_x` (a GELU MLP's
    `fc1`, whose `fc2` takes its whole width, is left as it is)."""
    out = {}
    for name, value in tensors.items():
        packed = _PACKED.fullmatch(name)
        second = None if packed is None else tensors.get(f"{packed[1]}fc2.weight")
        if second is not None and value.shape[0] == 2 * second.shape[1]:
            out.update(_split_gate(packed, value))
            continue
        out[name] = value
    return out


def _eva_modules(tensors: dict) -> dict:
    """Eva's module layout: a SwiGLU with an MLP norm keeps its gate and value
    layers apart (`fc1_g`, `fc1_x`: timm's `SwiGLU`), and the mixed RoPE's
    per-block frequencies are one `rope.freqs` `(2, depth, heads, D_h/2)`."""
    out, freqs = {}, {}
    for name, value in tensors.items():
        packed = _PACKED.fullmatch(name)
        if packed is not None and f"{packed[1]}norm.weight" in tensors:
            out.update(_split_gate(packed, value))
            continue
        block = _FREQS.fullmatch(name)
        if block is not None:
            freqs[int(block[1])] = value
            continue
        out[name] = value
    if freqs:
        stacked = np.stack([freqs[i] for i in sorted(freqs)], axis=1)
        out["rope.freqs"] = np.ascontiguousarray(stacked, dtype=np.float32)
    return out


def _fits(value: np.ndarray, rank: int | None, rule_convert, num_heads: int) -> bool:
    """Whether an array has the rank (and heads) its inverse expects."""
    if rank is not None and value.ndim != rank:
        return False
    each = rule_convert.each if isinstance(rule_convert, Split) else rule_convert
    if each in (convert.dense_to_heads, convert.bias_to_heads):
        return value.shape[-2] == num_heads
    if each is convert.out_to_heads:
        return value.shape[0] == num_heads
    return True
