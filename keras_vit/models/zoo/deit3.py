"""DeiT III (Touvron et al., 2022): LayerScale and a patch-only position table.

timm's `deit3_*_patch16_224` files, trained on ImageNet-1k (`fb_in1k`) or
pre-trained on ImageNet-21k and fine-tuned on ImageNet-1k
(`fb_in22k_ft_in1k`), with ImageNet mean/std inputs.

Example:

```python
model = keras_vit.models.DeiT3_S16(weights="deit3_in21k_ft_in1k")
```
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.models.preprocessing import IMAGENET
from keras_vit.models.zoo.registry import Family
from keras_vit.models.zoo.registry import TimmNames
from keras_vit.models.zoo.registry import TimmWeights
from keras_vit.models.zoo.registry import register

_SIZES = {"S": "small", "B": "base", "L": "large"}

DEIT3 = register(
    Family(
        name="deit3",
        exported=("keras_vit",),
        title="DeiT III",
        options=EncoderOptions(layer_scale_init=1e-6, no_embed_class=True),
        preprocessing=IMAGENET,
        models={f"DeiT3_{s}16": f"{s}/16" for s in _SIZES},
        checkpoints=(
            *(
                TimmWeights(
                    "deit3_in1k",
                    f"{s}/16",
                    f"deit3_{w}_patch16_224.fb_in1k",
                    224,
                    1000,
                    crop_fraction=0.9,
                )
                for s, w in _SIZES.items()
            ),
            *(
                TimmWeights(
                    "deit3_in21k_ft_in1k",
                    f"{s}/16",
                    f"deit3_{w}_patch16_224.fb_in22k_ft_in1k",
                    224,
                    1000,
                )
                for s, w in _SIZES.items()
            ),
        ),  # fmt: skip
        timm=TimmNames(
            architectures=("deit3_*",),
            writer="deit3_base_patch16_224",
            writes_for=dict(layer_scale_init=1e-6, no_embed_class=True),
            size_words={"medium": 8},
        ),
    )
)

DeiT3_S16 = DEIT3.constructor("DeiT3_S16")
DeiT3_B16 = DEIT3.constructor("DeiT3_B16")
DeiT3_L16 = DEIT3.constructor("DeiT3_L16")
