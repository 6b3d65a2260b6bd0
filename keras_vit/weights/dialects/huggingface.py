"""Hugging Face transformers' ViT, DINOv2 and SigLIP keys, as rules.

- `ViTModel` / `ViTForImageClassification`: the hub layout
  (`encoder.layer.{i}.attention.attention.query`, `intermediate.dense`,
  `pooler.dense`, `classifier`) and transformers 5's in-memory names
  (`layers.{i}.attention.q_proj`, `o_proj`).
- `Dinov2Model` / `Dinov2WithRegistersModel`: `norm1`,
  `layer_scale1.lambda1`, `mlp.fc1` or the SwiGLU `mlp.weights_in`; its
  position table has a class-token row, folded into the class token
  (`fold_class_position`: the family here has a table of the patches only).
- `SiglipVisionModel`: `encoder.layers.{i}`, `self_attn.q_proj`, a position
  table without batch axis, and the attention-pooling `head` with torch's
  packed `in_proj_weight`; a whole `SiglipModel`'s text tower and loss
  scale are left out.

Keys may start with the model's prefix (`vit.`, `model.`, `dinov2.`,
`vision_model.`).

Example:

```python
params, left = translate(read_safetensors("model.safetensors"), DIALECT, heads=12)
```
"""

from __future__ import annotations

from keras_vit.weights import keys
from keras_vit.weights.dialects.convert import add_batch_axis
from keras_vit.weights.dialects.convert import bias_to_heads
from keras_vit.weights.dialects.convert import conv_to_hwio
from keras_vit.weights.dialects.convert import dense_to_heads
from keras_vit.weights.dialects.convert import fold_class_position
from keras_vit.weights.dialects.convert import out_to_heads
from keras_vit.weights.dialects.convert import split
from keras_vit.weights.dialects.layers import torch_linear
from keras_vit.weights.dialects.layers import torch_norm
from keras_vit.weights.dialects.rules import Dialect
from keras_vit.weights.dialects.rules import Rule

_L = r"(?:encoder\.layers?|layers)\.(?P<i>\d+)\."
_OUT = r"(?:attention\.(?:output\.dense|o_proj)|self_attn\.out_proj)"
_FC1 = r"(?:intermediate\.dense|mlp\.fc1|mlp\.weights_in)"
_FC2 = r"(?:output\.dense|mlp\.fc2|mlp\.weights_out)"
_HEAD = r"head\."


def _projection(name: str) -> str:
    """`attention.attention.query` (hub) or `{attention,self_attn}.q_proj`."""
    return rf"(?:attention\.attention\.{name}|(?:attention|self_attn)\.{name[0]}_proj)"


RULES = (
    Rule(r"embeddings\.cls_token", keys.CLS_KEY),
    Rule(r"embeddings\.position_embeddings", keys.POSEMB_KEY),
    *torch_linear(r"embeddings\.patch_embeddings\.projection", keys.EMBEDDING,
                  conv_to_hwio),
    *torch_linear(r"embeddings\.patch_embedding", keys.EMBEDDING, conv_to_hwio),
    Rule(r"embeddings\.position_embedding\.weight", keys.POSEMB_KEY, add_batch_axis),
    Rule(r"embeddings\.register_tokens", keys.REG_KEY),
    Rule(r"embeddings\.mask_token", None),  # pre-training only
    # A whole `SiglipModel`: its text tower and the loss's scale and bias.
    Rule(r"text_model\..+|logit_(?:scale|bias)", None),
    *torch_norm(_L + r"(?:layernorm_before|norm1|layer_norm1)", keys.NORM_1),
    *torch_norm(_L + r"(?:layernorm_after|norm2|layer_norm2)", keys.NORM_2),
    *(
        rule
        for name in keys.QKV
        for rule in torch_linear(_L + _projection(name), f"{keys.ATTENTION}/{name}",
                                 dense_to_heads, bias_to_heads)
    ),
    *torch_linear(_L + _OUT, keys.ATTENTION + "/out", out_to_heads),
    Rule(_L + r"layer_scale1\.lambda1", keys.LAYER_SCALE_1),
    Rule(_L + r"layer_scale2\.lambda1", keys.LAYER_SCALE_2),
    *torch_linear(_L + _FC1, keys.MLP_1),
    *torch_linear(_L + _FC2, keys.MLP_2),
    *torch_norm(r"(?:layernorm|post_layernorm)", keys.ENCODER_NORM),
    # SigLIP's `SiglipMultiheadAttentionPoolingHead` -> big_vision's `MAPHead`.
    Rule(_HEAD + r"probe", keys.MAP_PROBE_KEY),
    Rule(_HEAD + r"attention\.in_proj_weight", keys.MAP_QKV_KERNELS,
         split(3, dense_to_heads)),
    Rule(_HEAD + r"attention\.in_proj_bias", keys.MAP_QKV_BIASES,
         split(3, bias_to_heads)),
    *torch_linear(_HEAD + r"attention\.out_proj", keys.MAP_ATTENTION + "/out",
                  out_to_heads),
    *torch_norm(_HEAD + r"layernorm", keys.MAP_NORM),
    *torch_linear(_HEAD + r"mlp\.fc1", keys.MAP_MLP_1),
    *torch_linear(_HEAD + r"mlp\.fc2", keys.MAP_MLP_2),
    *torch_linear(r"pooler\.dense", keys.PRE_LOGITS),
    *torch_linear(r"classifier", keys.HEAD),
)  # fmt: skip


def recognizes(names) -> bool:
    """Whether a key set is Hugging Face's (`embeddings.patch_embedding*`)."""
    return any("embeddings.patch_embedding" in k for k in names)


def _finish(params: dict, source_keys) -> None:
    """DINOv2 (the one with LayerScale): fold the class-token position row."""
    if any("layer_scale1.lambda1" in k for k in source_keys):
        fold_class_position(params)


DIALECT = Dialect(
    "Hugging Face",
    RULES,
    recognizes,
    prefix=r"(?:vit\.|model\.|dinov2\.|vision_model\.)?",
    finish=_finish,
    example="vit.embeddings.patch_embeddings...",
    records_heads=False,  # fused (D, D) projections
)
