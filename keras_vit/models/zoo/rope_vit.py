"""RoPE-ViT (Heo et al., 2024): DeiT-III-style ViTs with rotary positions.

Naver's ImageNet-1k classifiers: LayerScale, a class token, token pooling,
ImageNet mean/std (timm's `vit_*_patch16_rope*_224.naver_in1k`), in four
kinds: `rope` (axial rotary embeddings, columns first, base 100, no
position table), `rope_mixed` (frequencies learned per block and head,
mixing both axes), and either with a patch-only position table (`_ape`).

Example:

```python
model = keras_vit.models.RoPEViT_B16(weights="rope_vit_naver_in1k")
```
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.models.options import RotaryOptions
from keras_vit.models.preprocessing import IMAGENET
from keras_vit.models.zoo.registry import Family
from keras_vit.models.zoo.registry import TimmNames
from keras_vit.models.zoo.registry import TimmWeights
from keras_vit.models.zoo.registry import register

_CONTRACT = IMAGENET.replace(crop_fraction=0.9, source="RoPE-ViT")
_SIZES = {"S": "small", "B": "base", "L": "large"}
_AXIAL = RotaryOptions("axial", temperature=100.0, grid_indexing="xy")
_MIXED = RotaryOptions("mixed", temperature=10.0, grid_indexing="xy")
_BASE = EncoderOptions(layer_scale_init=1e-5, position_embedding=False, rope=_AXIAL)
# family name -> (title, options, timm kind, constructor prefix)
_KINDS = {
    "rope_vit": ("RoPE-ViT", _BASE, "rope", "RoPEViT"),
    "rope_vit_mixed": ("RoPE-ViT (mixed)", _BASE.replace(rope=_MIXED),
                       "rope_mixed", "RoPEViTMixed"),
    "rope_vit_ape": ("RoPE-ViT (+ position table)",
                     _BASE.replace(position_embedding=True, no_embed_class=True),
                     "rope_ape", "RoPEViTAPE"),
    "rope_vit_mixed_ape": ("RoPE-ViT (mixed, + position table)",
                           _BASE.replace(rope=_MIXED, position_embedding=True,
                                         no_embed_class=True),
                           "rope_mixed_ape", "RoPEViTMixedAPE"),
}  # fmt: skip


def _family(name: str) -> Family:
    title, options, kind, prefix = _KINDS[name]
    return register(
        Family(
            name=name,
            title=title,
            exported=("keras_vit",),
            options=options,
            preprocessing=_CONTRACT,
            models={f"{prefix}_{s}16": f"{s}/16" for s in _SIZES},
            checkpoints=tuple(
                TimmWeights(
                    f"{name}_naver_in1k",
                    f"{s}/16",
                    f"vit_{w}_patch16_{kind}_224.naver_in1k",
                    224,
                    1000,
                )
                for s, w in _SIZES.items()
            ),  # fmt: skip
            timm=TimmNames(
                model_class="Eva",
                architectures=tuple(
                    f"vit_{w}_patch16_{kind}_224" for w in _SIZES.values()
                ),
                writer=f"vit_base_patch16_{kind}_224",
                writes_for=dict(
                    rope=options.rope, position_embedding=options.position_embedding
                ),
            ),
        )
    )


ROPE_VIT = _family("rope_vit")
ROPE_VIT_MIXED = _family("rope_vit_mixed")
ROPE_VIT_APE = _family("rope_vit_ape")
ROPE_VIT_MIXED_APE = _family("rope_vit_mixed_ape")

RoPEViT_S16 = ROPE_VIT.constructor("RoPEViT_S16")
RoPEViT_B16 = ROPE_VIT.constructor("RoPEViT_B16")
RoPEViT_L16 = ROPE_VIT.constructor("RoPEViT_L16")
RoPEViTMixed_S16 = ROPE_VIT_MIXED.constructor("RoPEViTMixed_S16")
RoPEViTMixed_B16 = ROPE_VIT_MIXED.constructor("RoPEViTMixed_B16")
RoPEViTMixed_L16 = ROPE_VIT_MIXED.constructor("RoPEViTMixed_L16")
RoPEViTAPE_S16 = ROPE_VIT_APE.constructor("RoPEViTAPE_S16")
RoPEViTAPE_B16 = ROPE_VIT_APE.constructor("RoPEViTAPE_B16")
RoPEViTAPE_L16 = ROPE_VIT_APE.constructor("RoPEViTAPE_L16")
RoPEViTMixedAPE_S16 = ROPE_VIT_MIXED_APE.constructor("RoPEViTMixedAPE_S16")
RoPEViTMixedAPE_B16 = ROPE_VIT_MIXED_APE.constructor("RoPEViTMixedAPE_B16")
RoPEViTMixedAPE_L16 = ROPE_VIT_MIXED_APE.constructor("RoPEViTMixedAPE_L16")
