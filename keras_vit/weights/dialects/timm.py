"""timm's `VisionTransformer` and `Eva` keys (and its ResNetV2 hybrids), as rules.

timm (`timm/models/vision_transformer.py`) names a ViT's parameters after
its PyTorch modules: `cls_token`, `pos_embed`, `patch_embed.proj`,
`blocks.{i}.norm1`, the fused `blocks.{i}.attn.qkv`, `attn.proj`,
`ls1.gamma` (LayerScale), `mlp.fc1`, `norm`, `fc_norm`, `head`; the
attention pool of `global_pool="map"` (`AttentionPoolLatent`) as `attn_pool.*`
with a fused `kv`; the norm inside the patch embedding (`embed_norm_layer`,
AIMv2) as `patch_embed.norm`; an RmsNorm (AIMv2) as a `weight` without a
`bias`; a `SwiGLU` MLP (`mlp_layer=SwiGLU`, AIMv2) as `mlp.fc1_g`/`mlp.fc1_x`,
joined as Eva's below; a hybrid's `HybridEmbed` ResNet as
`patch_embed.backbone.stem`/`stages.{s}.blocks.{u}` (counted from 0; the
original counts from 1).

timm's `Eva` (`timm/models/eva.py`: DINOv3, EVA-02, PE, RoPE-ViT) shares
most of them and adds: LayerScale as `gamma_1`/`gamma_2`; the query and
value biases of a fused `qkv` as `attn.q_bias`/`attn.v_bias` (the key's is
a constant zero: a model with `qkv_bias="qv"` takes them), or separate
`attn.q_proj`/`k_proj`/`v_proj`; `attn.norm` (EVA-02-CLIP); a SwiGLU MLP's
gate and value layers `mlp.fc1_g`/`mlp.fc1_x` (joined into one packed
`fc1`, gate first, by `_prepare`) and its `mlp.norm`; `norm_pre` (PE); and
the mixed RoPE's learned frequencies `rope.freqs` `(2, depth, heads, D_h /
2)`, split per block by `_prepare`.

Example:

```python
params, left = translate(read_safetensors("model.safetensors"), DIALECT, heads=12)
```
"""

from __future__ import annotations

import re

import numpy as np

from keras_vit.weights import keys
from keras_vit.weights.dialects.convert import bias_to_heads
from keras_vit.weights.dialects.convert import conv_to_hwio
from keras_vit.weights.dialects.convert import dense_to_heads
from keras_vit.weights.dialects.convert import out_to_heads
from keras_vit.weights.dialects.convert import split
from keras_vit.weights.dialects.layers import torch_linear
from keras_vit.weights.dialects.layers import torch_norm
from keras_vit.weights.dialects.rules import Dialect
from keras_vit.weights.dialects.rules import Rule

_B = r"blocks\.(?P<i>\d+)\."
_POOL = r"attn_pool\."
_RESNET = r"patch_embed\.backbone\."
_UNIT = _RESNET + r"stages\.(?P<s>\d+)\.blocks\.(?P<u>\d+)\."

RULES = (
    Rule(r"cls_token", keys.CLS_KEY),
    Rule(r"dist_token", keys.DIST_KEY),
    Rule(r"reg_token", keys.REG_KEY),
    Rule(r"pos_embed", keys.POSEMB_KEY),
    *torch_linear(r"patch_embed\.proj", keys.EMBEDDING, conv_to_hwio),
    *torch_norm(r"patch_embed\.norm", keys.EMBEDDING_NORM),
    *torch_norm(_B + r"norm1", keys.NORM_1),
    *torch_norm(_B + r"norm2", keys.NORM_2),
    Rule(_B + r"attn\.qkv\.weight", keys.QKV_KERNELS, split(3, dense_to_heads)),
    Rule(_B + r"attn\.qkv\.bias", keys.QKV_BIASES, split(3, bias_to_heads)),
    *torch_linear(_B + r"attn\.proj", keys.ATTENTION + "/out", out_to_heads),
    *torch_norm(_B + r"attn\.q_norm", keys.QUERY_NORM),
    *torch_norm(_B + r"attn\.k_norm", keys.KEY_NORM),
    Rule(_B + r"ls1\.gamma", keys.LAYER_SCALE_1),
    Rule(_B + r"ls2\.gamma", keys.LAYER_SCALE_2),
    *torch_linear(_B + r"mlp\.fc1", keys.MLP_1),
    *torch_linear(_B + r"mlp\.fc2", keys.MLP_2),
    # Eva's names (DINOv3, EVA-02, PE, RoPE-ViT).
    Rule(_B + r"gamma_1", keys.LAYER_SCALE_1),
    Rule(_B + r"gamma_2", keys.LAYER_SCALE_2),
    Rule(_B + r"attn\.q_bias", keys.ATTENTION + "/query/bias", bias_to_heads),
    Rule(_B + r"attn\.v_bias", keys.ATTENTION + "/value/bias", bias_to_heads),
    *torch_linear(_B + r"attn\.q_proj", keys.ATTENTION + "/query", dense_to_heads,
                  bias_to_heads),
    *torch_linear(_B + r"attn\.k_proj", keys.ATTENTION + "/key", dense_to_heads,
                  bias_to_heads),
    *torch_linear(_B + r"attn\.v_proj", keys.ATTENTION + "/value", dense_to_heads,
                  bias_to_heads),
    *torch_norm(_B + r"attn\.norm", keys.ATTENTION_NORM),
    *torch_norm(_B + r"mlp\.norm", keys.MLP_NORM),
    Rule(_B + r"attn\.rope_freqs", keys.ROPE_FREQS),
    *torch_norm(r"norm_pre", keys.PRE_NORM),
    *torch_norm(r"norm", keys.ENCODER_NORM),
    *torch_linear(r"head", keys.HEAD),
    *torch_norm(r"fc_norm", keys.FC_NORM),
    *torch_linear(r"head_dist", keys.HEAD_DIST),
    # `AttentionPoolLatent` (global_pool="map") -> big_vision's `MAPHead`.
    Rule(_POOL + r"latent", keys.MAP_PROBE_KEY),
    *torch_linear(_POOL + r"q", keys.MAP_ATTENTION + "/query", dense_to_heads,
                  bias_to_heads),
    Rule(_POOL + r"kv\.weight", keys.KV_KERNELS, split(2, dense_to_heads)),
    Rule(_POOL + r"kv\.bias", keys.KV_BIASES, split(2, bias_to_heads)),
    *torch_linear(_POOL + r"proj", keys.MAP_ATTENTION + "/out", out_to_heads),
    *torch_norm(_POOL + r"norm", keys.MAP_NORM),
    *torch_linear(_POOL + r"mlp\.fc1", keys.MAP_MLP_1),
    *torch_linear(_POOL + r"mlp\.fc2", keys.MAP_MLP_2),
    # The hybrid's ResNetV2 (stages and units from 0 here; `shift` below).
    Rule(_RESNET + r"stem\.conv\.weight", keys.ROOT_CONV + "/kernel", conv_to_hwio),
    *torch_norm(_RESNET + r"stem\.norm", keys.ROOT_NORM),
    Rule(_UNIT + r"conv(?P<n>\d)\.weight", keys.UNIT_CONV + "/kernel", conv_to_hwio),
    *torch_norm(_UNIT + r"norm(?P<n>\d)", keys.UNIT_NORM),
    Rule(_UNIT + r"downsample\.conv\.weight", keys.UNIT_CONV_PROJ + "/kernel",
         conv_to_hwio),
    *torch_norm(_UNIT + r"downsample\.norm", keys.UNIT_NORM_PROJ),
)  # fmt: skip


_GATE = re.compile(r"(blocks\.\d+\.mlp\.)fc1_g\.(weight|bias)")


def _prepare(tensors: dict) -> dict:
    """Eva's parts that are not one key each, made so: a SwiGLU's gate and
    value layers into one packed `fc1` (`[gate; value]`, the order keras_vit's
    and timm's packed SwiGLU split), and the mixed RoPE's frequencies
    `(2, depth, heads, D_h / 2)` into one `(2, heads, D_h / 2)` per block."""
    out = {}
    for name, value in tensors.items():
        gate = _GATE.fullmatch(name)
        if gate is not None:
            other = f"{gate[1]}fc1_x.{gate[2]}"
            if other in tensors:
                out[f"{gate[1]}fc1.{gate[2]}"] = np.concatenate(
                    [value, tensors[other]], axis=0
                )
                continue
        if name.endswith(".fc1_x.weight") or name.endswith(".fc1_x.bias"):
            partner = name.replace(".fc1_x.", ".fc1_g.")
            if partner in tensors:
                continue  # joined with its gate above
        if name == "rope.freqs" and value.ndim == 4:
            for i in range(value.shape[1]):
                out[f"blocks.{i}.attn.rope_freqs"] = value[:, i]
            continue
        out[name] = value
    return out


def recognizes(names) -> bool:
    """Whether a key set is timm's (`pos_embed`, `blocks.*`, `patch_embed.*`)."""
    return any(
        k == "pos_embed" or k.startswith(("blocks.", "patch_embed.")) for k in names
    )


DIALECT = Dialect(
    "timm",
    RULES,
    recognizes,
    shift={"s": 1, "u": 1},
    prepare=_prepare,
    example="blocks.0.attn.qkv.weight",
    records_heads=False,  # fused (D, D) projections
)
