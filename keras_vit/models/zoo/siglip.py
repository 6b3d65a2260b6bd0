"""SigLIP (Zhai et al., 2023) and SigLIP 2 image towers.

Backbones without a classifier, pooled by a multi-head attention head
(`pooling="map"`) instead of a class token, with `[-1, 1]` inputs resized
bicubically (timm's `vit_*_siglip_224.webli` and `.v2_webli`).

Example:

```python
model = keras_vit.models.SigLIP_B16(weights="siglip_webli")
```
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.models.preprocessing import SIGLIP as _SIGLIP
from keras_vit.models.zoo.registry import Family
from keras_vit.models.zoo.registry import TimmNames
from keras_vit.models.zoo.registry import TimmWeights
from keras_vit.models.zoo.registry import register

_MODELS = {"SigLIP_B16": ("B/16", "base_patch16"),
           "SigLIP_So400m14": ("So400m/14", "so400m_patch14")}  # fmt: skip

SIGLIP = register(
    Family(
        name="siglip",
        exported=("keras_vit",),
        title="SigLIP",
        options=EncoderOptions(class_token=False, pooling="map", no_embed_class=True),
        preprocessing=_SIGLIP,
        defaults={"include_top": False},
        models={name: variant for name, (variant, _) in _MODELS.items()},
        checkpoints=tuple(
            TimmWeights(tag, variant, f"vit_{words}_siglip_224.{release}", 224, 0)
            for tag, release in (
                ("siglip_webli", "webli"),
                ("siglip_v2_webli", "v2_webli"),
            )
            for variant, words in _MODELS.values()
        ),  # fmt: skip
        timm=TimmNames(
            architectures=("vit_*_siglip_*",),
            writer="vit_base_patch16_siglip_224",
            writes_for=dict(pooling="map", class_token=False),
            size_words={"so150m": 16, "so400m": 16},
        ),
    )
)

SigLIP_B16 = SIGLIP.constructor("SigLIP_B16")
SigLIP_So400m14 = SIGLIP.constructor("SigLIP_So400m14")
