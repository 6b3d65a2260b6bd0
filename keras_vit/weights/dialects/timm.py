"""timm's `VisionTransformer` keys (and its ResNetV2 hybrids), as rules.

timm (`timm/models/vision_transformer.py`) names a ViT's parameters after
its PyTorch modules: `cls_token`, `pos_embed`, `patch_embed.proj`,
`blocks.{i}.norm1`, the fused `blocks.{i}.attn.qkv`, `attn.proj`,
`ls1.gamma` (LayerScale), `mlp.fc1`, `norm`, `fc_norm`, `head`; the
attention pool of `global_pool="map"` (`AttentionPoolLatent`) as `attn_pool.*`
with a fused `kv`; a hybrid's `HybridEmbed` ResNet as
`patch_embed.backbone.stem`/`stages.{s}.blocks.{u}` (counted from 0; the
original counts from 1).

Example:

```python
params, left = translate(read_safetensors("model.safetensors"), DIALECT, heads=12)
```
"""

from __future__ import annotations

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
    example="blocks.0.attn.qkv.weight",
    records_heads=False,  # fused (D, D) projections
)
