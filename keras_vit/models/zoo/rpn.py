"""ViT with res-post-norm blocks: each residual branch normalised at its output.

timm's `vit_base_patch16_rpn_224` (Ross Wightman's ImageNet-1k run,
`.sw_in1k`): its blocks are timm's `ResPostBlock`, `x + LN(MSA(x))` then
`x + LN(MLP(x))` (the res-post-norm of Swin Transformer V2, Liu et al.,
2022), with the norms' scales starting at 1e-5 (timm's `init_values`);
no class token, no query/key/value biases, the mean of the patch tokens
normalised by `fc_norm` as the image representation. Inception mean and
std (`[-1, 1]` inputs), bicubic resizing, crop 0.9 (timm 1.0.31's
`vit_base_patch16_rpn_224` and its `default_cfgs` entry).

Example:

```python
model = keras_vit.models.ResPostViT_B16(weights="rpn_sw_in1k")
model = keras_vit.from_pretrained("vit_base_patch16_rpn_224.sw_in1k")
```
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.models.preprocessing import PAPER
from keras_vit.models.zoo.registry import Family
from keras_vit.models.zoo.registry import TimmNames
from keras_vit.models.zoo.registry import TimmWeights
from keras_vit.models.zoo.registry import register

# What sets the family apart from the paper's ViT in timm's architecture.
_OWN = dict(res_post_norm=True)

RPN = register(
    Family(
        name="rpn",
        title="ViT with res-post-norm blocks (timm's rpn)",
        options=EncoderOptions(
            class_token=False,
            qkv_bias=False,
            layer_scale_init=1e-5,
            pooling="gap",
            fc_norm=True,
            **_OWN,
        ),
        preprocessing=PAPER.replace(
            interpolation="bicubic",
            crop_fraction=0.9,
            crop_mode="center",
            antialias=True,
            source="timm's vit_base_patch16_rpn_224 (Inception mean/std)",
        ),
        models={"ResPostViT_B16": "B/16"},
        checkpoints=(
            TimmWeights(
                "rpn_sw_in1k", "B/16", "vit_base_patch16_rpn_224.sw_in1k", 224, 1000
            ),
        ),  # fmt: skip
        timm=TimmNames(
            architectures=("vit_*_rpn_*",),
            writer="vit_base_patch16_rpn_224",
            writes_for=_OWN,
        ),
    )
)

ResPostViT_B16 = RPN.constructor("ResPostViT_B16")
