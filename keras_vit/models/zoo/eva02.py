"""EVA-02 (Fang et al., 2024): masked-image-modelling ViTs with rotary positions.

A position table with a class row and rotary embeddings over it (integer
positions rescaled to a 16x16 grid, base 10000), query and value biases
(the key's is zero), a SwiGLU MLP (with a LayerNorm over its hidden units
from B on), LayerNorm epsilon 1e-6, OpenAI CLIP mean/std. The MIM and
ImageNet-fine-tuned models pool the mean of the patch tokens and normalise
it (`fc_norm`); the EVA-02-CLIP image towers pool the class token, add a
LayerNorm over the attention's merged heads and end with the CLIP
projection as their head (timm's `eva02_*` files).

Example:

```python
model = keras_vit.models.EVA02_S14(weights="eva02_mim_in22k")
```
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.models.options import RotaryOptions
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.zoo.registry import Family
from keras_vit.models.zoo.registry import ModelEntry
from keras_vit.models.zoo.registry import TimmNames
from keras_vit.models.zoo.registry import TimmWeights
from keras_vit.models.zoo.registry import register

# timm's EVA-02 configs: OpenAI CLIP's mean and std, bicubic, crop_pct 0.9.
CLIP = Preprocessing(
    mean=(0.48145466, 0.4578275, 0.40821073),
    std=(0.26862954, 0.26130258, 0.27577711),
    interpolation="bicubic", crop_fraction=0.9, crop_mode="center",
    antialias=True, source="EVA-02 (OpenAI CLIP mean/std)",
)  # fmt: skip
_OPTIONS = EncoderOptions(
    rope=RotaryOptions("axial", reference_grid=(16, 16)),
    qkv_bias="qv",
    mlp="swiglu",
    pooling="gap",
    fc_norm=True,
)
_NORM = {"mlp_norm": True}
_TINY, _SMALL = "192x12x512x3/14", "384x12x1024x6/14"
_BASE, _LARGE = "768x12x2048x12/14", "1024x24x2730x16/14"
_IN1K, _SQUASH = {"crop_fraction": 1.0}, {"crop_fraction": 1.0, "crop_mode": "squash"}

EVA02 = register(
    Family(
        name="eva02",
        title="EVA-02",
        exported=("keras_vit",),
        options=_OPTIONS,
        preprocessing=CLIP,
        defaults={"image_size": 224, "include_top": False},
        models={
            "EVA02_Ti14": _TINY,
            "EVA02_S14": _SMALL,
            "EVA02_B14": ModelEntry(_BASE, _NORM),
            "EVA02_L14": ModelEntry(_LARGE, _NORM),
        },
        checkpoints=(
            TimmWeights(
                "eva02_mim_in22k", _TINY, "eva02_tiny_patch14_224.mim_in22k", 224, 0
            ),
            TimmWeights(
                "eva02_mim_in22k", _SMALL, "eva02_small_patch14_224.mim_in22k", 224, 0
            ),
            TimmWeights(
                "eva02_mim_in22k", _BASE, "eva02_base_patch14_224.mim_in22k", 224, 0
            ),
            TimmWeights(
                "eva02_mim_in22k", _LARGE, "eva02_large_patch14_224.mim_in22k", 224, 0
            ),
            TimmWeights(
                "eva02_mim_m38m", _LARGE, "eva02_large_patch14_224.mim_m38m", 224, 0
            ),
            TimmWeights(
                "eva02_mim_in22k_ft_in1k",
                _TINY,
                "eva02_tiny_patch14_336.mim_in22k_ft_in1k",
                336,
                1000,
                contract=_IN1K,
            ),
            TimmWeights(
                "eva02_mim_in22k_ft_in1k",
                _SMALL,
                "eva02_small_patch14_336.mim_in22k_ft_in1k",
                336,
                1000,
                contract=_IN1K,
            ),
            *(
                TimmWeights(
                    f"eva02_mim_{data}_ft_{target}",
                    variant,
                    f"eva02_{size}_patch14_448.mim_{data}_ft_{target}",
                    448,
                    21841 if target == "in22k" else 1000,
                    contract=_IN1K if target == "in1k" else _SQUASH,
                )
                for size, variant in (("base", _BASE), ("large", _LARGE))
                for data in ("in22k", "m38m")
                if size == "large" or data == "in22k"
                for target in ("in1k", "in22k", "in22k_in1k")
            ),
        ),  # fmt: skip
        license="mit",
        timm=TimmNames(
            model_class="Eva",
            architectures=(
                "eva02_*_patch14_224",
                "eva02_*_patch14_336",
                "eva02_*_patch14_448",
            ),  # fmt: skip
            writer="eva02_small_patch14_224",
            writes_for=dict(rope=RotaryOptions("axial", reference_grid=(16, 16))),
        ),
    )
)

EVA02_CLIP = register(
    Family(
        name="eva02_clip",
        title="EVA-02-CLIP",
        exported=("keras_vit",),
        options=_OPTIONS.replace(
            pooling="token", fc_norm=False, attention_norm=True, mlp_norm=True
        ),
        preprocessing=CLIP.replace(source="EVA-02-CLIP (OpenAI CLIP mean/std)"),
        defaults={"image_size": 224, "num_classes": 768},
        models={
            "EVA02_CLIP_B16": ModelEntry("768x12x2048x12/16", {"num_classes": 512}),
            "EVA02_CLIP_L14": _LARGE,
        },
        checkpoints=(
            TimmWeights(
                "eva02_clip_merged2b",
                "768x12x2048x12/16",
                "eva02_base_patch16_clip_224.merged2b",
                224,
                512,
            ),
            TimmWeights(
                "eva02_clip_merged2b",
                _LARGE,
                "eva02_large_patch14_clip_224.merged2b",
                224,
                768,
            ),
            TimmWeights(
                "eva02_clip_merged2b_336",
                _LARGE,
                "eva02_large_patch14_clip_336.merged2b",
                336,
                768,
                contract=_IN1K,
            ),
        ),  # fmt: skip
        license="mit",
        timm=TimmNames(
            model_class="Eva",
            architectures=("eva02_*_clip_224", "eva02_*_clip_336"),
            writer="eva02_base_patch16_clip_224",
            writes_for=dict(
                rope=RotaryOptions("axial", reference_grid=(16, 16)),
                attention_norm=True,
            ),
        ),
    )
)

EVA02_Ti14 = EVA02.constructor("EVA02_Ti14")
EVA02_S14 = EVA02.constructor("EVA02_S14")
EVA02_B14 = EVA02.constructor("EVA02_B14")
EVA02_L14 = EVA02.constructor("EVA02_L14")
EVA02_CLIP_B16 = EVA02_CLIP.constructor("EVA02_CLIP_B16")
EVA02_CLIP_L14 = EVA02_CLIP.constructor("EVA02_CLIP_L14")
