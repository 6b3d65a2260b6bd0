"""The paper's ResNet+ViT hybrids (§3.1): a BiT ResNet, then a ViT.

The R50+ViT-B/16 of the paper, and the AugReg R26+S/32 and R50+L/32 runs:
original `.npz` files of the `vit_models` bucket, with the paper's
`[-1, 1]` input contract.

Example:

```python
model = keras_vit.R50_ViT_B16(weights="imagenet21k")
```
"""

from __future__ import annotations

from keras_vit.models.preprocessing import PAPER
from keras_vit.models.zoo.registry import IMAGENET1K_CLASSES as IN1K
from keras_vit.models.zoo.registry import IMAGENET21K_CLASSES as IN21K
from keras_vit.models.zoo.registry import Family
from keras_vit.models.zoo.registry import register
from keras_vit.models.zoo.vit import _I1K
from keras_vit.models.zoo.vit import augreg
from keras_vit.models.zoo.vit import original

_R26 = "R26_S_32-i21k-300ep-lr_0.001"
_R50L = "R50_L_32-i21k-300ep-lr_0.001-aug_medium1-wd_0.1-do_0.1-sd_0.1"

HYBRID = register(
    Family(
        name="hybrid",
        title="ResNet+ViT hybrid",
        preprocessing=PAPER,
        paper=True,
        exported=("keras_vit",),
        models={
            "R26_ViT_S32": "R26+S/32",
            "R26_ViT_B32": "R26+B/32",
            "R50_ViT_B16": "R50+B/16",
            "R50_ViT_L32": "R50+L/32",
        },  # fmt: skip
        checkpoints=(
            *original("R50+B/16", "R50+ViT-B_16", 768),
            augreg(
                "augreg_in21k",
                "R26+S/32",
                f"{_R26}-aug_light1-wd_0.1-do_0.0-sd_0.0",
                224,
                IN21K,
            ),
            augreg(
                "augreg_in21k_ft_in1k",
                "R26+S/32",
                f"{_R26}-aug_light0-wd_0.03-do_0.1-sd_0.1{_I1K}-lr_0.03-res_224",
                224,
                IN1K,
            ),
            augreg(
                "augreg_in21k_ft_in1k_384",
                "R26+S/32",
                f"{_R26}-aug_light1-wd_0.1-do_0.0-sd_0.0{_I1K}-lr_0.01-res_384",
                384,
                IN1K,
            ),
            augreg("augreg_in21k", "R50+L/32", _R50L, 224, IN21K),
            augreg(
                "augreg_in21k_ft_in1k",
                "R50+L/32",
                f"{_R50L}{_I1K}-lr_0.01-res_224",
                224,
                IN1K,
            ),
            augreg(
                "augreg_in21k_ft_in1k_384",
                "R50+L/32",
                f"{_R50L}{_I1K}-lr_0.01-res_384",
                384,
                IN1K,
            ),
        ),  # fmt: skip
    )
)

R26_ViT_S32 = HYBRID.constructor("R26_ViT_S32")
R26_ViT_B32 = HYBRID.constructor("R26_ViT_B32")
R50_ViT_B16 = HYBRID.constructor("R50_ViT_B16")
R50_ViT_L32 = HYBRID.constructor("R50_ViT_L32")
