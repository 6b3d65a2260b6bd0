"""FlexiViT (Beyer et al., 2023): one model for every patch size.

Trained with randomly resized patch embeddings, so that one set of weights
runs at any patch size: build a model with `patch_size=` and the checkpoint's
16x16 patch embedding is resized to it (pseudo-inverse resize,
`keras_vit.resample_patch_embedding`). A patch-only position table, 240-px
inputs in `[-1, 1]` (timm's `flexivit_*.1200ep_in1k`, ...).

Example:

```python
model = keras_vit.models.FlexiViT_B(weights="flexivit_1200ep_in1k", patch_size=30)
```
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.models.preprocessing import INCEPTION_MEAN
from keras_vit.models.preprocessing import INCEPTION_STD
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.zoo.registry import IMAGENET1K_CLASSES as IN1K
from keras_vit.models.zoo.registry import IMAGENET21K_CLASSES as IN21K
from keras_vit.models.zoo.registry import Family
from keras_vit.models.zoo.registry import TimmNames
from keras_vit.models.zoo.registry import TimmWeights
from keras_vit.models.zoo.registry import register

# timm's FlexiViT configs: [-1, 1], bicubic, crop_pct 0.95.
_CONTRACT = Preprocessing(
    mean=INCEPTION_MEAN, std=INCEPTION_STD, interpolation="bicubic",
    crop_fraction=0.95, crop_mode="center", antialias=True, source="FlexiViT",
)  # fmt: skip
_SIZES = {"S": "small", "B": "base", "L": "large"}
# keras_vit tag -> timm's pretrained tag, sizes, classes.
_RELEASES = (
    ("flexivit_300ep_in1k", "300ep_in1k", "SBL", IN1K),
    ("flexivit_600ep_in1k", "600ep_in1k", "SBL", IN1K),
    ("flexivit_1200ep_in1k", "1200ep_in1k", "SBL", IN1K),
    ("flexivit_300ep_in21k", "300ep_in21k", "B", IN21K),
    ("flexivit_1000ep_in21k", "1000ep_in21k", "B", IN21K),
)

FLEXIVIT = register(
    Family(
        name="flexivit",
        exported=("keras_vit",),
        title="FlexiViT",
        options=EncoderOptions(no_embed_class=True),
        preprocessing=_CONTRACT,
        defaults={"image_size": 240},
        models={f"FlexiViT_{s}": f"{s}/16" for s in _SIZES},
        checkpoints=tuple(
            TimmWeights(tag, f"{s}/16", f"flexivit_{_SIZES[s]}.{release}", 240, classes)
            for tag, release, sizes, classes in _RELEASES
            for s in sizes
        ),  # fmt: skip
        timm=TimmNames(architectures=("flexivit_*",)),
    )
)

FlexiViT_S = FLEXIVIT.constructor("FlexiViT_S")
FlexiViT_B = FLEXIVIT.constructor("FlexiViT_B")
FlexiViT_L = FLEXIVIT.constructor("FlexiViT_L")
