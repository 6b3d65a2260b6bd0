"""DeiT (Touvron et al., 2021): data-efficient ViTs, plain and distilled.

The plain DeiT models are the paper's ViT trained on ImageNet-1k alone, with
ImageNet mean/std inputs; the distilled ones add a distillation token and a
second head (`head_dist`) that learned from a CNN teacher, and average the
two heads' logits in inference (timm's `VisionTransformerDistilled`). Both
are timm's files (`deit_*_patch16_224.fb_in1k`,
`deit_*_distilled_patch16_224.fb_in1k`).

Example:

```python
model = keras_vit.models.DeiTDistilled_S16(weights="deit_distilled_in1k")
```
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.models.preprocessing import IMAGENET
from keras_vit.models.zoo.registry import Family
from keras_vit.models.zoo.registry import TimmNames
from keras_vit.models.zoo.registry import TimmWeights
from keras_vit.models.zoo.registry import register

# timm's DeiT configs: bicubic, ImageNet mean/std, crop_pct 0.9 (1.0 at 384).
_DEIT = IMAGENET.replace(crop_fraction=0.9, source="DeiT")
_SIZES = {"Ti": "tiny", "S": "small", "B": "base"}

DEIT = register(
    Family(
        name="deit",
        exported=("keras_vit",),
        title="DeiT",
        preprocessing=_DEIT,
        models={f"DeiT_{s}16": f"{s}/16" for s in _SIZES},
        checkpoints=(
            *(
                TimmWeights(
                    "deit_in1k", f"{s}/16", f"deit_{w}_patch16_224.fb_in1k", 224, 1000
                )
                for s, w in _SIZES.items()
            ),
            TimmWeights(
                "deit_in1k_384",
                "B/16",
                "deit_base_patch16_384.fb_in1k",
                384,
                1000,
                crop_fraction=1.0,
            ),
        ),  # fmt: skip
        timm=TimmNames(
            architectures=tuple(f"deit_{w}_patch16_*" for w in _SIZES.values())
        ),
    )
)

DEIT_DISTILLED = register(
    Family(
        name="deit_distilled",
        exported=("keras_vit",),
        title="DeiT (distilled)",
        options=EncoderOptions(distillation=True),
        preprocessing=_DEIT,
        models={f"DeiTDistilled_{s}16": f"{s}/16" for s in _SIZES},
        checkpoints=(
            *(
                TimmWeights(
                    "deit_distilled_in1k",
                    f"{s}/16",
                    f"deit_{w}_distilled_patch16_224.fb_in1k",
                    224,
                    1000,
                )
                for s, w in _SIZES.items()
            ),
            TimmWeights(
                "deit_distilled_in1k_384",
                "B/16",
                "deit_base_distilled_patch16_384.fb_in1k",
                384,
                1000,
                crop_fraction=1.0,
            ),
        ),  # fmt: skip
        timm=TimmNames(
            architectures=("deit_*_distilled_*",),
            writer="deit_base_distilled_patch16_224",
            writes_for=dict(distillation=True),
        ),
    )
)

DeiT_Ti16 = DEIT.constructor("DeiT_Ti16")
DeiT_S16 = DEIT.constructor("DeiT_S16")
DeiT_B16 = DEIT.constructor("DeiT_B16")
DeiTDistilled_Ti16 = DEIT_DISTILLED.constructor("DeiTDistilled_Ti16")
DeiTDistilled_S16 = DEIT_DISTILLED.constructor("DeiTDistilled_S16")
DeiTDistilled_B16 = DEIT_DISTILLED.constructor("DeiTDistilled_B16")
