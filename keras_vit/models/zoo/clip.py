"""CLIP image towers (Radford et al., 2021; OpenCLIP, DataComp, DFN, MetaCLIP).

timm's `vit_*_clip_*` checkpoints (`.openai`, `.laion2b`, `.datacompxl`,
`.dfn2b`, `.metaclip_2pt5b`, their ImageNet fine-tunes, ...): a plain ViT
with a LayerNorm on the embedded tokens before the first block (`pre_norm`)
and LayerNorm epsilon 1e-5 throughout, OpenAI CLIP's mean and standard
deviation, bicubic resizing. The image-text towers' head is the projection
into the joint embedding (512 to 1280 wide); the fine-tunes' is a
classifier. Each checkpoint's own contract is timm's `pretrained_cfg`
(`keras_vit.weights.list_weights(family="clip")`).

keras_vit computes what timm computes for these names, with GELU. The
OpenAI and MetaCLIP towers were trained with QuickGELU, which timm's
`vit_*_clip_quickgelu_*` architectures use (timm hosts no file under those
names) and keras_vit does not build: under the GELU names their features
are timm's, not the original CLIP's.

Example:

```python
model = keras_vit.models.CLIP_B16(num_classes=512)
tower = keras_vit.from_pretrained("vit_base_patch16_clip_224.laion2b")
```
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.zoo.registry import Family
from keras_vit.models.zoo.registry import TimmNames
from keras_vit.models.zoo.registry import register

# timm's CLIP configs: OpenAI CLIP's mean and std, bicubic, no crop margin.
_CONTRACT = Preprocessing(
    mean=(0.48145466, 0.4578275, 0.40821073),
    std=(0.26862954, 0.26130258, 0.27577711),
    interpolation="bicubic", crop_fraction=1.0, crop_mode="center",
    antialias=True, source="CLIP (OpenAI CLIP mean/std)",
)  # fmt: skip

CLIP = register(
    Family(
        name="clip",
        title="CLIP image tower",
        options=EncoderOptions(pre_norm=True, layer_norm_epsilon=1e-5),
        preprocessing=_CONTRACT,
        models={
            "CLIP_B32": "B/32",
            "CLIP_B16": "B/16",
            "CLIP_L14": "L/14",
            "CLIP_H14": "H/14",
        },
        timm=TimmNames(
            architectures=("vit_*_clip_*",),
            writer="vit_base_patch16_clip_224",
            writes_for=dict(pre_norm=True, layer_norm_epsilon=1e-5),
        ),
    )
)

CLIP_B32 = CLIP.constructor("CLIP_B32")
CLIP_B16 = CLIP.constructor("CLIP_B16")
CLIP_L14 = CLIP.constructor("CLIP_L14")
CLIP_H14 = CLIP.constructor("CLIP_H14")
