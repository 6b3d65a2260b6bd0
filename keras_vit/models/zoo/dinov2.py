"""DINOv2 with registers (Oquab et al., 2024; Darcet et al., 2024).

Self-supervised backbones without a classifier: LayerScale, four register
tokens, a patch-only position table, ImageNet mean/std inputs at 518 px
(timm's `vit_*_patch14_reg4_dinov2.lvd142m`). The giant model's MLP is a
packed SwiGLU (`dinov2_swiglu`).

Example:

```python
model = keras_vit.models.DINOv2_S14(weights="dinov2_lvd142m")
```
"""

from __future__ import annotations

import dataclasses

from keras_vit.models.options import EncoderOptions
from keras_vit.models.preprocessing import IMAGENET
from keras_vit.models.zoo.registry import Family
from keras_vit.models.zoo.registry import TimmNames
from keras_vit.models.zoo.registry import TimmWeights
from keras_vit.models.zoo.registry import register

_OPTIONS = EncoderOptions(layer_scale_init=1e-5, num_registers=4, no_embed_class=True)
_DEFAULTS = {"image_size": 518, "include_top": False}
_SIZES = {"S": "small", "B": "base", "L": "large"}

DINOV2 = register(
    Family(
        name="dinov2",
        exported=("keras_vit",),
        title="DINOv2 with registers",
        options=_OPTIONS,
        preprocessing=IMAGENET,
        defaults=_DEFAULTS,
        models={f"DINOv2_{s}14": f"{s}/14" for s in _SIZES},
        checkpoints=tuple(
            TimmWeights(
                "dinov2_lvd142m",
                f"{s}/14",
                f"vit_{w}_patch14_reg4_dinov2.lvd142m",
                518,
                0,
            )
            for s, w in _SIZES.items()
        ),  # fmt: skip
        timm=TimmNames(
            architectures=tuple(f"vit_{w}_*_dinov2" for w in _SIZES.values()),
            writer="vit_small_patch14_reg4_dinov2",
            writes_for=dict(
                layer_scale_init=1e-5, num_registers=4, no_embed_class=True, mlp="gelu"
            ),  # fmt: skip
        ),
    )
)

DINOV2_SWIGLU = register(
    Family(
        name="dinov2_swiglu",
        exported=("keras_vit",),
        title="DINOv2 with registers",
        options=dataclasses.replace(_OPTIONS, mlp="swiglu"),
        preprocessing=IMAGENET,
        defaults=_DEFAULTS,
        models={"DINOv2_g14": "g/14"},
        checkpoints=(
            TimmWeights(
                "dinov2_lvd142m",
                "g/14",
                "vit_giant_patch14_reg4_dinov2.lvd142m",
                518,
                0,
            ),
        ),  # fmt: skip
        timm=TimmNames(
            architectures=("vit_giant_*_dinov2",),
            # timm builds the packed SwiGLU MLP through this architecture only.
            writer="vit_giant_patch14_reg4_dinov2",
            writes_for=dict(mlp="swiglu"),
            size_words={"giant": 24},
        ),
    )
)

DINOv2_S14 = DINOV2.constructor("DINOv2_S14")
DINOv2_B14 = DINOV2.constructor("DINOv2_B14")
DINOv2_L14 = DINOV2.constructor("DINOv2_L14")
DINOv2_g14 = DINOV2_SWIGLU.constructor("DINOv2_g14")
