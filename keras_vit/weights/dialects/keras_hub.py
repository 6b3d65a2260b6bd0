"""keras-hub's `ViTBackbone` and `DINOV2Backbone` variable paths, as rules.

keras-hub's ViT is the paper's ViT under other layer names: separate
`query`/`key`/`value` projections in a `keras.layers.MultiHeadAttention`
(already per head, as in the original layout), blocks counted from 1
(`transformer_block_1`), and a position table `(N, D)` without batch axis.
Its `DINOV2Backbone` counts blocks from 0 (a backbone built with a `name`
prefixes its three top layers with it), adds the position table of its
image size (`interpolated_position_embeddings`, the one it uses) and keeps a
class-token row in it, folded into the class token as for Hugging Face's
DINOv2; its source table `position_embeddings` and the `mask_token` of
masked pre-training are left out. Keras kernels use Flax's axis order: no
transposition.

`keras_vit.interop.keras_hub` builds the models and hands these tables to
the engine, in both directions.

Example:

```python
params, left = translate({v.path: v.numpy() for v in backbone.weights}, VIT)
```
"""

from __future__ import annotations

from keras_vit.weights import keys
from keras_vit.weights.dialects.convert import add_batch_axis
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
