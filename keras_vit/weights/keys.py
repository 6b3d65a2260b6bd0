"""The original checkpoint layout's vocabulary: every key spelled once.

google-research/vision_transformer saves a ViT as a `numpy.savez` archive
whose keys are `/`-joined Flax parameter paths (`embedding/kernel`, `cls`,
`Transformer/encoderblock_0/MlpBlock_3/Dense_0/bias`, ...). That layout is
the common language of `keras_vit.weights`: every dialect's rules
(`keras_vit.weights.dialects`) translate into it, the strict check compares
in it, and `architecture.describe` reads a model off it. This module names
each of its layers and keys once.

A layer's parameters are its path plus Flax's leaf name: `kernel`/`bias` for
a dense or convolution layer, `scale`/`bias` for a norm. Templates hold
placeholders: `{i}` the block index (from 0), `{s}`/`{u}` a ResNet stage
and unit (from 1), `{n}` a unit's sub-layer (`1`, `2`, `3` or `_proj`);
`template_pattern` turns a template into a regular expression.

Example:

```python
from keras_vit.weights import keys

keys.ATTENTION.format(i=3) + "/query/kernel"
# 'Transformer/encoderblock_3/MultiHeadDotProductAttention_1/query/kernel'
keys.projections(keys.ATTENTION, keys.QKV, "bias")  # three templates
```
"""

from __future__ import annotations

import re

# The embedding: the patch projection (and its norm, AIMv2's), the prefix
# tokens, the position table.
EMBEDDING = "embedding"
EMBEDDING_NORM = "embedding_norm"
CLS_KEY = "cls"
DIST_KEY = "dist"
REG_KEY = "reg"
POSEMB_KEY = "Transformer/posembed_input/pos_embedding"

# One encoder block (pre-norm): norm, attention, LayerScale, norm, MLP,
# LayerScale.
BLOCK = "Transformer/encoderblock_{i}"
NORM_1 = BLOCK + "/LayerNorm_0"
ATTENTION = BLOCK + "/MultiHeadDotProductAttention_1"
QUERY_NORM = ATTENTION + "/query_norm"
KEY_NORM = ATTENTION + "/key_norm"
# The attention's norm over the merged heads (EVA-02-CLIP), and the learned
# rotary frequencies of a mixed RoPE `(2, heads, D / heads / 2)`.
ATTENTION_NORM = ATTENTION + "/norm"
ROPE_FREQS = ATTENTION + "/rope_freqs"
LAYER_SCALE_1 = BLOCK + "/LayerScale_0/scale"
LAYER_SCALE_2 = BLOCK + "/LayerScale_1/scale"
NORM_2 = BLOCK + "/LayerNorm_2"
MLP = BLOCK + "/MlpBlock_3"
MLP_1 = MLP + "/Dense_0"
MLP_2 = MLP + "/Dense_1"
# The MLP's norm over its hidden units (EVA-02's `scale_mlp`).
MLP_NORM = MLP + "/norm"
# The norm before the blocks (Perception Encoder's `norm_pre`).
PRE_NORM = "Transformer/pre_norm"

# An attention layer's projections (per head: `query/kernel` is
# `(D, heads, D / heads)`, `out/kernel` is `(heads, D / heads, D)`).
QKV = ("query", "key", "value")
KV = ("key", "value")
OUT = "out"

# After the blocks: the encoder norm, timm's `fc_norm`, the attention-pooling
# head (big_vision's `MAPHead`), `pre_logits` and the heads.
ENCODER_NORM = "Transformer/encoder_norm"
FC_NORM = "fc_norm"
MAP = "MAPHead_0"
MAP_PROBE_KEY = MAP + "/probe"
MAP_ATTENTION = MAP + "/MultiHeadDotProductAttention_0"
MAP_NORM = MAP + "/LayerNorm_0"
MAP_MLP_1 = MAP + "/MlpBlock_0/Dense_0"
MAP_MLP_2 = MAP + "/MlpBlock_0/Dense_1"
PRE_LOGITS = "pre_logits"
HEAD = "head"
HEAD_DIST = "head_dist"

# The BiT ResNet of the hybrids (R50+ViT): a root, then stages of units.
ROOT_CONV = "conv_root"
ROOT_NORM = "gn_root"
UNIT = "block{s}/unit{u}"
UNIT_CONV = UNIT + "/conv{n}"
UNIT_NORM = UNIT + "/gn{n}"
UNIT_CONV_PROJ = UNIT + "/conv_proj"  # the shortcut's projection
UNIT_NORM_PROJ = UNIT + "/gn_proj"

# Single keys the loading rules look at.
EMBEDDING_KEY = EMBEDDING + "/kernel"
HEAD_KEYS = (HEAD + "/kernel", HEAD + "/bias")
DIST_HEAD_KEYS = (HEAD_DIST + "/kernel", HEAD_DIST + "/bias")
PRE_LOGITS_KEYS = (PRE_LOGITS + "/kernel", PRE_LOGITS + "/bias")

# What each placeholder of a template stands for.
PLACEHOLDERS = {"i": r"\d+", "s": r"\d+", "u": r"\d+", "n": r"[123]|_proj"}


def projections(layer: str, names: tuple[str, ...], leaf: str) -> tuple[str, ...]:
    """`layer/<name>/<leaf>` for each projection name, e.g. query, key, value."""
    return tuple(f"{layer}/{name}/{leaf}" for name in names)


# The separate projections a fused attention kernel (and bias) holds: the
# blocks' query/key/value, the attention pool's key/value (timm's `kv`), and
# the pool's query/key/value (Hugging Face's `in_proj`).
QKV_KERNELS = projections(ATTENTION, QKV, "kernel")
QKV_BIASES = projections(ATTENTION, QKV, "bias")
# EVA's attention biases the queries and values only.
QV_BIASES = projections(ATTENTION, ("query", "value"), "bias")
KV_KERNELS = projections(MAP_ATTENTION, KV, "kernel")
KV_BIASES = projections(MAP_ATTENTION, KV, "bias")
MAP_QKV_KERNELS = projections(MAP_ATTENTION, QKV, "kernel")
MAP_QKV_BIASES = projections(MAP_ATTENTION, QKV, "bias")


def template_pattern(template: str) -> str:
    """A template as a regular expression with one named group a placeholder.

    Args:
        template: A key or variable-path template, e.g. `keys.BLOCK`.

    Returns:
        The pattern (unanchored); the rest of the template is literal.

    Example:

    ```python
    re.fullmatch(template_pattern(BLOCK), "Transformer/encoderblock_7")["i"]
    # '7'
    ```
    """
    pattern = re.escape(template)
    for name, regex in PLACEHOLDERS.items():
        pattern = pattern.replace(re.escape("{" + name + "}"), f"(?P<{name}>{regex})")
    return pattern
