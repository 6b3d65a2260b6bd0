"""DINOv3 (Siméoni et al., 2025): self-supervised ViTs with rotary positions.

Backbones without a classifier: a class token and four register (storage)
tokens, no position table (DINOv3's rotary embeddings: patch centres
normalised to `[-1, 1]`, base 100, the two halves of a head rotated against
each other), LayerScale, LayerNorm epsilon 1e-5, ImageNet mean/std at
256 px (timm's `vit_*_patch16_dinov3.lvd1689m`, and the satellite
`sat493m` and EUPE re-trainings). The models take any image size at run
time (`dynamic_image_size=True`, as timm registers them) and pool by the
mean of the patch tokens, as timm's `forward_head` does; upstream DINOv3's
image embedding is the class token: pass `pooling="token"`. The `_qkvb`
files (`qkv_bias="qv"`) hold query and value biases of zero, so they compute
what the plain files do.

Example:

```python
model = keras_vit.models.DINOv3_S16(weights="dinov3_lvd1689m")
maps = keras_vit.feature_extractor(model, spatial=True)  # patch features
```
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.models.options import RotaryOptions
from keras_vit.models.preprocessing import IMAGENET
from keras_vit.models.zoo.registry import Family
from keras_vit.models.zoo.registry import ModelEntry
from keras_vit.models.zoo.registry import TimmNames
from keras_vit.models.zoo.registry import TimmWeights
from keras_vit.models.zoo.registry import register

_SWIGLU = {"mlp": "swiglu"}
_QKVB = {"qkv_bias": "qv"}
# The satellite-imagery files' input statistics (timm's `sat493m` configs).
_SATELLITE = {"mean": (0.43, 0.411, 0.296), "std": (0.213, 0.156, 0.143)}
_EUPE_LICENSE = "fair-noncommercial-research-license"
# timm name -> (variant, the model's own options).
_SIZES = {
    "vit_tiny_patch16_dinov3": ("Ti/16", {}),
    "vit_small_patch16_dinov3": ("S/16", {}),
    "vit_small_plus_patch16_dinov3": ("S/16", _SWIGLU),
    "vit_base_patch16_dinov3": ("B/16", {}),
    "vit_large_patch16_dinov3": ("L/16", {}),
    "vit_huge_plus_patch16_dinov3": ("1280x32x5120x20/16", _SWIGLU),
    "vit_7b_patch16_dinov3": ("4096x40x8192x32/16", _SWIGLU),
}


def _weights(tag: str, name: str, release: str, **kwargs) -> TimmWeights:
    """A timm DINOv3 file: `<name>[_qkvb].<release>` at 256 px, no head."""
    architecture = name.removesuffix("_qkvb")
    variant, options = _SIZES[architecture]
    if name.endswith("_qkvb"):
        options = {**options, **_QKVB}
    return TimmWeights(tag, variant, f"{name}.{release}", 256, 0, options=options,
                       **kwargs)  # fmt: skip


DINOV3 = register(
    Family(
        name="dinov3",
        title="DINOv3",
        exported=("keras_vit",),
        options=EncoderOptions(
            num_registers=4,
            position_embedding=False,
            rope=RotaryOptions("dinov3", temperature=100.0, rotate_half=True),
            layer_scale_init=1e-5,
            layer_norm_epsilon=1e-5,
            qkv_bias=False,
            pooling="gap",
        ),
        preprocessing=IMAGENET.replace(source="DINOv3"),
        defaults={"image_size": 256, "include_top": False, "dynamic_image_size": True},
        models={
            "DINOv3_S16": "S/16",
            "DINOv3_SPlus16": ModelEntry("S/16", _SWIGLU),
            "DINOv3_B16": "B/16",
            "DINOv3_L16": "L/16",
            "DINOv3_HPlus16": ModelEntry("1280x32x5120x20/16", _SWIGLU),
            "DINOv3_7B16": ModelEntry("4096x40x8192x32/16", _SWIGLU),
        },
        checkpoints=(
            *(
                _weights("dinov3_lvd1689m", name, "lvd1689m")
                for name in _SIZES
                if "tiny" not in name
            ),
            *(
                _weights("dinov3_qkvb_lvd1689m", f"{name}_qkvb", "lvd1689m")
                for name in _SIZES
                if "tiny" not in name and "7b" not in name
            ),
            *(
                _weights("dinov3_sat493m", name, "sat493m", contract=_SATELLITE)
                for name in ("vit_large_patch16_dinov3", "vit_7b_patch16_dinov3")
            ),
            _weights(
                "dinov3_qkvb_sat493m",
                "vit_large_patch16_dinov3_qkvb",
                "sat493m",
                contract=_SATELLITE,
            ),
            *(
                _weights(
                    "dinov3_eupe_lvd1689m",
                    f"{name}_qkvb",
                    "eupe_lvd1689m",
                    license=_EUPE_LICENSE,
                )
                for name in (
                    "vit_tiny_patch16_dinov3",
                    "vit_small_patch16_dinov3",
                    "vit_base_patch16_dinov3",
                )
            ),
        ),  # fmt: skip
        license="dinov3-license",
        timm=TimmNames(
            model_class="Eva",
            architectures=("vit_*_patch16_dinov3", "vit_*_patch16_dinov3_qkvb"),
            writer="vit_small_patch16_dinov3",
            writes_for=dict(
                rope=RotaryOptions("dinov3", temperature=100.0, rotate_half=True)
            ),
            size_words={"small_plus": 6, "huge_plus": 20, "7b": 32},
        ),
    )
)

DINOv3_S16 = DINOV3.constructor("DINOv3_S16")
DINOv3_SPlus16 = DINOV3.constructor("DINOv3_SPlus16")
DINOv3_B16 = DINOV3.constructor("DINOv3_B16")
DINOv3_L16 = DINOV3.constructor("DINOv3_L16")
DINOv3_HPlus16 = DINOV3.constructor("DINOv3_HPlus16")
DINOv3_7B16 = DINOV3.constructor("DINOv3_7B16")
