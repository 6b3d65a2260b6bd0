"""AIMv2 (Fini et al., 2025): Apple's autoregressively pre-trained image encoders.

timm's `aimv2_*` checkpoints (`.apple_pt`, `.apple_pt_dist`) are plain ViTs
with RMSNorm (epsilon 1e-5) for every norm, one more RMSNorm over the patch
embeddings before the position table (timm's `embed_norm_layer`), no class
token, no biases but the patch projection's (timm's `qkv_bias=False` and
`proj_bias=False`: the attention's projections and the SwiGLU MLP have
none), a SwiGLU MLP (timm's `SwiGLU`, gate and value layers apart), and the
mean of the normalised patch tokens as the image representation. OpenAI
CLIP's mean and standard deviation, bicubic resizing, no crop margin; the
checkpoints have no head (timm's `aimv2_*` functions, 1.0.31).

Example:

```python
model = keras_vit.models.AIMv2_L14()
encoder = keras_vit.from_pretrained("aimv2_large_patch14_224.apple_pt")
```
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.zoo.registry import Family
from keras_vit.models.zoo.registry import TimmNames
from keras_vit.models.zoo.registry import TimmWeights
from keras_vit.models.zoo.registry import register

# timm's AIMv2 configs: OpenAI CLIP's mean and std, bicubic, crop_pct 1.0.
_CONTRACT = Preprocessing(
    mean=(0.48145466, 0.4578275, 0.40821073),
    std=(0.26862954, 0.26130258, 0.27577711),
    interpolation="bicubic", crop_fraction=1.0, crop_mode="center",
    antialias=True, source="AIMv2 (OpenAI CLIP mean/std)",
)  # fmt: skip
# What sets AIMv2 apart: the options timm builds only through its `aimv2_*`
# architectures (its RmsNorm, `embed_norm_layer`, `proj_bias=False` and
# `mlp_layer=SwiGLU`).
_OWN = dict(
    norm="rms",
    embedding_norm=True,
    proj_bias=False,
    mlp="swiglu",
    layer_norm_epsilon=1e-5,
)
# timm's `mlp_ratio` 2.75 (L, 1B) and 2.6667 (H, 3B): the widths it builds.
_LARGE, _HUGE = "1024x24x2816x8/14", "1536x24x4096x12/14"
_1B, _3B = "2048x24x5632x16/14", "3072x24x8192x24/14"
_SIZES = {"large": _LARGE, "huge": _HUGE, "1b": _1B, "3b": _3B}

AIMV2 = register(
    Family(
        name="aimv2",
        title="AIMv2",
        options=EncoderOptions(
            class_token=False, qkv_bias=False, pooling="gap", **_OWN
        ),
        preprocessing=_CONTRACT,
        defaults={"image_size": 224, "include_top": False},
        models={
            "AIMv2_L14": _LARGE,
            "AIMv2_H14": _HUGE,
            "AIMv2_1B14": _1B,
            "AIMv2_3B14": _3B,
        },
        checkpoints=(
            *(
                TimmWeights(
                    f"aimv2_apple_pt{'' if size == 224 else f'_{size}'}",
                    variant,
                    f"aimv2_{word}_patch14_{size}.apple_pt",
                    size,
                    0,
                )
                for size in (224, 336, 448)
                for word, variant in _SIZES.items()
            ),
            *(
                TimmWeights(
                    f"aimv2_apple_pt_dist{'' if size == 224 else f'_{size}'}",
                    _LARGE,
                    f"aimv2_large_patch14_{size}.apple_pt_dist",
                    size,
                    0,
                )
                for size in (224, 336)
            ),
        ),
        license="apple-ascl",
        timm=TimmNames(
            architectures=("aimv2_*",),
            writer="aimv2_large_patch14_224",
            writes_for=_OWN,
            separate_swiglu=True,
        ),
    )
)

AIMv2_L14 = AIMV2.constructor("AIMv2_L14")
AIMv2_H14 = AIMV2.constructor("AIMv2_H14")
AIMv2_1B14 = AIMV2.constructor("AIMv2_1B14")
AIMv2_3B14 = AIMV2.constructor("AIMv2_3B14")
