"""The one rule engine: a dialect's keys into the original layout.

A `Rule` matches one key of a source (a regular expression, matched in
full) and names what it becomes in the original layout
(`keras_vit.weights.keys`):

- a template filled from the pattern's named groups
  (`"Transformer/encoderblock_{i}/LayerNorm_0/scale"`);
- a tuple of templates, when one array becomes several (timm's fused `qkv`);
- `None`, for a part left out on purpose (a text tower, a mask token).

Its `convert` is a plain callable `(array, heads) -> array` (a tuple of
arrays for a tuple of templates), from `keras_vit.weights.dialects.convert`;
it returns `None` for an array it cannot convert, whose source key is then
kept for the strict check to report. A `Dialect` is a table of rules plus
how to recognise its keys and any whole-checkpoint step before or after.

The engine is driven by the keys a source has: an optional part a model was
built without (a bias, LayerScale) is simply absent, and the strict check
(`keras_vit.weights.checks.plan_load`) compares the result with the keys the
model expects. It imports no table: `keras_vit.weights.checkpoint` (or
`keras_vit.interop.keras_hub`) picks a dialect and hands it over.

Example:

```python
rule = Rule(r"blocks\\.(?P<i>\\d+)\\.ls1", keys.LAYER_SCALE_1)
dialect = Dialect("toy", rules=(rule,))
params, left = translate({"blocks.0.ls1": gamma, "x": x}, dialect)
# params == {"Transformer/encoderblock_0/LayerScale_0/scale": gamma, "x": x}
# left == ["x"]
```
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Callable
from collections.abc import Collection
from collections.abc import Mapping

import numpy as np

Convert = Callable[[np.ndarray, "int | None"], object]


def same(value: np.ndarray, heads: int | None = None) -> np.ndarray:
    """The array as it is (the default conversion)."""
    return value


@dataclasses.dataclass(frozen=True)
class Rule:
    """One source key (a pattern) and what it becomes in the original layout.

    Attributes:
        pattern: A regular expression matched against the whole key; its
            named groups fill `key`.
        key: An original-layout template, a tuple of them (one per array
            `convert` returns), or `None` to leave the array out.
        convert: `(array, heads) -> array` (or a tuple of arrays); `None`
            when the array cannot be converted.
    """

    pattern: str
    key: str | tuple[str, ...] | None
    convert: Convert = same


def _nothing_before(tensors: dict) -> dict:
    return tensors


def _nothing_after(params: dict, source_keys: Collection[str]) -> None:
    """No whole-checkpoint step."""


def _recognizes_nothing(keys: Collection[str]) -> bool:
    return False


@dataclasses.dataclass(frozen=True)
class Dialect:
    """A key layout: its rules and its whole-checkpoint steps.

    Attributes:
        name: For messages, e.g. `"timm"`.
        rules: The table, tried in order; the first match wins.
        recognizes: `keys -> bool`: whether a key set is in this dialect.
        prefix: A pattern every key may start with (Hugging Face's `vit.`).
        shift: `{group: offset}` added to numbered groups before they fill
            a template, where the dialect counts from another base (timm's
            ResNet stages from 0, the original's from 1: `{"s": 1, "u": 1}`).
        prepare: `tensors -> tensors`, before the rules (e.g. big_vision's
            unstacking of a scanned encoder).
        finish: `(params, source keys) -> None`, after the rules, in place
            (e.g. folding Hugging Face DINOv2's class-token position row).
        example: A key of the dialect, for messages (`"pos_embed"`).
        records_heads: Whether the attention weights are stored per head
            (`(D, heads, D / heads)`), so that the number of heads can be
            read off their shapes. `False` for PyTorch's fused `(D, D)`
            projections (timm, Hugging Face), which `translate` splits by
            the target model's heads: such a file does not say how many
            heads it was trained with.
    """

    name: str
    rules: tuple[Rule, ...]
    recognizes: Callable[[Collection[str]], bool] = _recognizes_nothing
    prefix: str = ""
    shift: Mapping[str, int] = dataclasses.field(default_factory=dict)
    prepare: Callable[[dict], dict] = _nothing_before
    finish: Callable[[dict, Collection[str]], None] = _nothing_after
    example: str = ""
    records_heads: bool = True

    @functools.cached_property
    def _compiled(self) -> tuple[tuple[Rule, re.Pattern], ...]:
        return tuple((r, re.compile(self.prefix + r.pattern)) for r in self.rules)


@dataclasses.dataclass(frozen=True)
class Match:
    """The rule a key matched, and its original-layout key(s) filled in.

    Attributes:
        rule: The `Rule`.
        key: The filled template, a tuple of them, or `None` (left out).
    """

    rule: Rule
    key: str | tuple[str, ...] | None


def find(name: str, dialect: Dialect) -> Match | None:
    """The first rule of `dialect` that matches `name`, or `None`."""
    for rule, regex in dialect._compiled:
        match = regex.fullmatch(name)
        if match is None:
            continue
        if rule.key is None:
            return Match(rule, None)
        fields = {k: v for k, v in match.groupdict().items() if v is not None}
        for field, offset in dialect.shift.items():
            if field in fields:
                fields[field] = str(int(fields[field]) + offset)
        if isinstance(rule.key, tuple):
            return Match(rule, tuple(t.format(**fields) for t in rule.key))
        return Match(rule, rule.key.format(**fields))
    return None


def heads_for(heads: int | Mapping | None, key) -> int | None:
    """The attention heads to split `key`'s projection by: `heads` itself,
    or, for a mapping `{original-layout layer prefix: heads}` (an attention
    pool with its own heads beside the blocks'), the longest prefix of
    `key`'s, else the mapping's `None` entry."""
    if not isinstance(heads, Mapping):
        return heads
    first = key[0] if isinstance(key, tuple) else key
    prefixes = [p for p in heads if p is not None and first.startswith(p + "/")]
    return heads[max(prefixes, key=len)] if prefixes else heads.get(None)


def translate(
    tensors: Mapping[str, np.ndarray],
    dialect: Dialect,
    heads: int | Mapping | None = None,
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Translates a source's arrays into the original layout.

    Args:
        tensors: `{source key: array}`.
        dialect: The source's `Dialect`.
        heads: Attention heads of the target model, for converters that
            split projections per head (`None`: left unsplit, and reported
            as mis-shaped by the strict check); or a mapping
            `{original-layout attention layer: heads, None: the rest}` for a
            model whose attention pool has other heads than its blocks.

    Returns:
        `(params, left)`: `params` holds the original-layout arrays and, in
        their place, the source keys no rule matched or converted, unchanged
        (for the strict check to report); `left` lists those keys. Keys a
        rule leaves out are in neither.
    """
    tensors = dialect.prepare(dict(tensors))
    params, left = {}, []
    for name, value in tensors.items():
        match = find(name, dialect)
        if match is not None and match.key is None:
            continue  # left out on purpose
        if match is not None:
            converted = match.rule.convert(value, heads_for(heads, match.key))
            if not isinstance(match.key, tuple) and converted is not None:
                params[match.key] = converted
                continue
            if isinstance(converted, tuple) and len(converted) == len(match.key):
                params.update(zip(match.key, converted, strict=True))
                continue
        params[name] = value  # no rule, or not convertible: reported
        left.append(name)
    dialect.finish(params, tensors.keys())
    return params, left
