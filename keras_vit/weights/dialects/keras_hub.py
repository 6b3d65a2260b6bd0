"""keras-hub's `ViTBackbone`, `DINOV2Backbone` and `DINOV3Backbone` variable
paths, as rules.

keras-hub's ViT is the paper's ViT under other layer names: separate
`query`/`key`/`value` projections in a `keras.layers.MultiHeadAttention`
(already per head, as in the original layout), blocks counted from 1
(`transformer_block_1`), and a position table `(N, D)` without batch axis.
Its `DINOV2Backbone` counts blocks from 0 (a backbone built with a `name`
prefixes its three top layers with it), adds the position table of its
image size (`interpolated_position_embeddings`, the one it uses) and keeps a
class-token row in it, folded into the class token as for Hugging Face's
DINOv2; its source table `position_embeddings` and the `mask_token` of
masked pre-training are left out. Its `DINOV3Backbone` has no position
table (rotary embeddings), `Dense` query/key/value/output projections whose
`(D, D)` kernels are the per-head ones reshaped, and a gated MLP's gate and
value layers apart (`gate_proj`, `up_proj`), packed here into keras_vit's
`[gate; value]` first layer; its `mask_token` is left out too. Keras kernels
use Flax's axis order: no transposition.

`keras_vit.interop.keras_hub` builds the models and hands these tables to
the engine, in both directions.

Example:

```python
params, left = translate({v.path: v.numpy() for v in backbone.weights}, VIT)
```
"""

from __future__ import annotations

import re

import numpy as np

from keras_vit.weights import keys
from keras_vit.weights.dialects.convert import add_batch_axis
from keras_vit.weights.dialects.convert import bias_to_heads
from keras_vit.weights.dialects.convert import fold_class_position
from keras_vit.weights.dialects.layers import keras_dense
from keras_vit.weights.dialects.layers import keras_norm
from keras_vit.weights.dialects.rules import Dialect
from keras_vit.weights.dialects.rules import Rule

# `ViTBackbone` / `ViTImageClassifier`.
_E = "vit_patching_and_embedding/"
_T = r"vit_encoder/transformer_block_(?P<i>\d+)/"
_PROJECTIONS = r"(?P<leaf>(?:query|key|value)/(?:kernel|bias))"

VIT_RULES = (
    Rule(_E + r"class_token", keys.CLS_KEY),
    *keras_dense(_E + r"patch_embedding", keys.EMBEDDING),
    Rule(_E + r"position_embedding/embeddings", keys.POSEMB_KEY, add_batch_axis),
    *keras_norm(_T + r"ln_1", keys.NORM_1),
    Rule(_T + r"mha/" + _PROJECTIONS, keys.ATTENTION + "/{leaf}"),
    *keras_dense(_T + r"mha/attention_output", keys.ATTENTION + "/out"),
    *keras_norm(_T + r"ln_2", keys.NORM_2),
    *keras_dense(_T + r"mlp/dense_1", keys.MLP_1),
    *keras_dense(_T + r"mlp/dense_2", keys.MLP_2),
    *keras_norm(r"vit_encoder/ln", keys.ENCODER_NORM),
    *keras_dense(r"pre_logits", keys.PRE_LOGITS),
    *keras_dense(r"predictions", keys.HEAD),
)

VIT = Dialect("keras-hub ViT", VIT_RULES, shift={"i": -1})  # blocks from 1

# `DINOV2Backbone`.
_DE = r"(?:[^/]+_)?embeddings/"
_DL = r"(?:[^/]+_)?encoder/layers_(?P<i>\d+)/"
_DA = _DL + r"attention/attention/"

DINOV2_RULES = (
    Rule(_DE + r"cls_token", keys.CLS_KEY),
    Rule(_DE + r"register_tokens", keys.REG_KEY),
    Rule(_DE + r"interpolated_position_embeddings", keys.POSEMB_KEY, add_batch_axis),
    Rule(_DE + r"position_embeddings", None),
    Rule(_DE + r"mask_token", None),
    *keras_dense(_DE + r"patch_embeddings/projection", keys.EMBEDDING),
    *keras_norm(_DL + r"norm1", keys.NORM_1),
    Rule(_DA + _PROJECTIONS, keys.ATTENTION + "/{leaf}"),
    *keras_dense(_DA + r"attention_output", keys.ATTENTION + "/out"),
    Rule(_DL + r"layer_scale1/lambda1", keys.LAYER_SCALE_1),
    Rule(_DL + r"layer_scale2/lambda1", keys.LAYER_SCALE_2),
    *keras_norm(_DL + r"norm2", keys.NORM_2),
    *keras_dense(_DL + r"mlp/(?:fc1|weights_in)", keys.MLP_1),
    *keras_dense(_DL + r"mlp/(?:fc2|weights_out)", keys.MLP_2),
    *keras_norm(r"(?:[^/]+_)?layernorm", keys.ENCODER_NORM),
)


def _fold(params: dict, source_keys) -> None:
    fold_class_position(params)  # the family's table has no class row


DINOV2 = Dialect("keras-hub DINOv2", DINOV2_RULES, finish=_fold)


# `DINOV3Backbone`: `Dense` projections `(D, D)` (the heads flattened, as
# keras-hub reshapes them), a gated MLP's `gate_proj` and `up_proj` apart.
# Its top layers and blocks are named as `DINOV2Backbone`'s (`_DE`, `_DL`).
_D3A = _DL + r"attention/"
# The packed name `_join_gated` gives a gated MLP's gate and value layers.
GATED_MLP_IN = "gate_up_proj"
_GATE = re.compile(r"(.*/mlp/)gate_proj/(kernel|bias)")


def dense_kernel_to_heads(value, heads):
    """A Keras query/key/value kernel: `(D, D)` -> `(D, H, D / H)`."""
    if heads is None or value.ndim != 2 or value.shape[1] % heads:
        return value  # left 2-D: reported as mis-shaped
    return value.reshape(value.shape[0], heads, -1)


def dense_out_to_heads(value, heads):
    """A Keras attention output kernel: `(D, D)` -> `(H, D / H, D)`."""
    if heads is None or value.ndim != 2 or value.shape[0] % heads:
        return value
    return value.reshape(heads, -1, value.shape[1])


def _projection_rules(short: str, name: str) -> tuple[Rule, Rule]:
    layer = f"{_D3A}{short}_proj/"
    return (
        Rule(
            layer + "kernel", f"{keys.ATTENTION}/{name}/kernel", dense_kernel_to_heads
        ),
        Rule(layer + "bias", f"{keys.ATTENTION}/{name}/bias", bias_to_heads),
    )


DINOV3_RULES = (
    Rule(_DE + r"cls_token", keys.CLS_KEY),
    Rule(_DE + r"register_tokens", keys.REG_KEY),
    Rule(_DE + r"mask_token", None),
    *keras_dense(_DE + r"patch_embeddings/projection", keys.EMBEDDING),
    *keras_norm(_DL + r"norm1", keys.NORM_1),
    *_projection_rules("q", "query"),
    *_projection_rules("k", "key"),
    *_projection_rules("v", "value"),
    Rule(_D3A + r"o_proj/kernel", keys.ATTENTION + "/out/kernel", dense_out_to_heads),
    Rule(_D3A + r"o_proj/bias", keys.ATTENTION + "/out/bias"),
    Rule(_DL + r"layer_scale1/lambda1", keys.LAYER_SCALE_1),
    Rule(_DL + r"layer_scale2/lambda1", keys.LAYER_SCALE_2),
    *keras_norm(_DL + r"norm2", keys.NORM_2),
    *keras_dense(_DL + rf"mlp/(?:up_proj|{GATED_MLP_IN})", keys.MLP_1),
    *keras_dense(_DL + r"mlp/down_proj", keys.MLP_2),
    *keras_norm(r"(?:[^/]+_)?layernorm", keys.ENCODER_NORM),
)


def _join_gated(tensors: dict) -> dict:
    """A gated MLP's `gate_proj` and `up_proj` as one packed layer
    `gate_up_proj` (`[gate; value]` on the output axis: the order keras_vit's
    SwiGLU splits its first layer in). A gate without its partner is kept,
    for the strict check to report."""
    out = dict(tensors)
    for name, gate in tensors.items():
        match = _GATE.fullmatch(name)
        value_name = None if match is None else f"{match[1]}up_proj/{match[2]}"
        if value_name not in tensors:
            continue
        del out[name], out[value_name]
        packed = np.concatenate([gate, tensors[value_name]], axis=-1)
        out[f"{match[1]}{GATED_MLP_IN}/{match[2]}"] = packed
    return out


DINOV3 = Dialect(
    "keras-hub DINOv3", DINOV3_RULES, prepare=_join_gated, records_heads=False
)
