"""Perception Encoder (Bolya et al., 2025): PE-Core, PE-Lang, PE-Spatial.

Meta's contrastive image encoders, with a position table and rotary
embeddings over it (integer positions plus one when there is a class token,
columns first, rescaled to the training grid; base 10000), a LayerNorm
before the blocks and a patch embedding without bias, full query/key/value
biases, LayerNorm epsilon 1e-5, `[-1, 1]` inputs. PE-Core pools with an
8-head attention head over every token and ends with its CLIP projection
as the head; PE-Lang (aligned to a language model) and PE-Spatial (dense
features) have no final norm and pool the mean of the patch tokens (timm's
`vit_pe_*.fb`). The gigantic models have no class token and LayerScale
(Lang, Spatial).

Example:

```python
model = keras_vit.models.PE_Core_B16(weights="pe_core_fb")
```
"""

from __future__ import annotations

from keras_vit.models.options import EncoderOptions
from keras_vit.models.options import RotaryOptions
from keras_vit.models.preprocessing import INCEPTION_MEAN
from keras_vit.models.preprocessing import INCEPTION_STD
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.zoo.registry import Family
from keras_vit.models.zoo.registry import ModelEntry
from keras_vit.models.zoo.registry import TimmNames
from keras_vit.models.zoo.registry import TimmWeights
from keras_vit.models.zoo.registry import register

# timm's PE configs: [-1, 1], bicubic, the whole image.
_CONTRACT = Preprocessing(
    mean=INCEPTION_MEAN, std=INCEPTION_STD, interpolation="bicubic",
    crop_fraction=1.0, crop_mode="center", antialias=True, source="PE",
)  # fmt: skip
_BASE_OPTIONS = EncoderOptions(
    rope=RotaryOptions("axial", grid_offset=1.0, grid_indexing="xy"),
    pre_norm=True,
    layer_norm_epsilon=1e-5,
)


def _model(variant: str, image_size: int, class_token: bool = True, **own):
    """A PE model: its size, its training resolution (its rotary reference
    grid), and its own options (the gigantic one: no class token, so no
    position offset either)."""
    patch = int(variant.split("/")[-1])
    grid = image_size // patch
    rope = RotaryOptions(
        "axial",
        grid_offset=1.0 if class_token else 0.0,
        grid_indexing="xy",
        reference_grid=(grid, grid),
    )
    return ModelEntry(
        variant,
        {"image_size": image_size, "rope": rope, "class_token": class_token, **own},
    )


_G = {"class_token": False}
_GIGANTIC = "1536x50x8960x16/14"
# constructor -> (model, projection width)
_CORE = {
    "PE_Core_T16": (_model("Ti/16", 384), 512),
    "PE_Core_S16": (_model("S/16", 384), 512),
    "PE_Core_B16": (_model("B/16", 224), 1024),
    "PE_Core_L14": (_model("L/14", 336), 1024),
    "PE_Core_G14": (_model(_GIGANTIC, 448, map_mlp_dim=6144, **_G), 1280),
}
_CORE_NAMES = {
    "PE_Core_T16": "vit_pe_core_tiny_patch16_384",
    "PE_Core_S16": "vit_pe_core_small_patch16_384",
    "PE_Core_B16": "vit_pe_core_base_patch16_224",
    "PE_Core_L14": "vit_pe_core_large_patch14_336",
    "PE_Core_G14": "vit_pe_core_gigantic_patch14_448",
}

PE_CORE = register(
    Family(
        name="pe_core",
        title="PE-Core",
        exported=("keras_vit",),
        options=_BASE_OPTIONS.replace(
            pooling="map", map_heads=8, pool_include_prefix=True
        ),
        preprocessing=_CONTRACT.replace(source="PE-Core"),
        models={
            name: ModelEntry(entry.variant, {**entry.arguments, "num_classes": width})
            for name, (entry, width) in _CORE.items()
        },
        checkpoints=tuple(
            TimmWeights(
                "pe_core_fb",
                entry.variant,
                f"{_CORE_NAMES[name]}.fb",
                entry.arguments["image_size"],
                width,
            )
            for name, (entry, width) in _CORE.items()
        ),  # fmt: skip
        timm=TimmNames(
            model_class="Eva",
            architectures=("vit_pe_core_*",),
            writer="vit_pe_core_base_patch16_224",
            writes_for=dict(pre_norm=True, pooling="map"),
            size_words={"gigantic": 16},
        ),
    )
)

_LANG_SPATIAL = _BASE_OPTIONS.replace(pooling="gap", encoder_norm=False)
_LS = {"layer_scale_init": 0.1}
_LANG = {
    "PE_Lang_L14": (_model("1024x23x4096x16/14", 448, **_LS),
                    "vit_pe_lang_large_patch14_448"),
    "PE_Lang_G14": (_model("1536x47x8960x16/14", 448, **_LS, **_G),
                    "vit_pe_lang_gigantic_patch14_448"),
}  # fmt: skip
_SPATIAL = {
    "PE_Spatial_T16": (_model("Ti/16", 512), "vit_pe_spatial_tiny_patch16_512"),
    "PE_Spatial_S16": (_model("S/16", 512), "vit_pe_spatial_small_patch16_512"),
    "PE_Spatial_B16": (_model("B/16", 512), "vit_pe_spatial_base_patch16_512"),
    "PE_Spatial_L14": (_model("L/14", 448), "vit_pe_spatial_large_patch14_448"),
    "PE_Spatial_G14": (_model(_GIGANTIC, 448, **_LS, **_G),
                       "vit_pe_spatial_gigantic_patch14_448"),
}  # fmt: skip

PE_LANG = register(
    Family(
        name="pe_lang",
        title="PE-Lang",
        exported=("keras_vit",),
        options=_LANG_SPATIAL,
        preprocessing=_CONTRACT.replace(source="PE-Lang"),
        defaults={"include_top": False},
        models={name: entry for name, (entry, _) in _LANG.items()},
        checkpoints=tuple(
            TimmWeights(
                f"pe_lang_{release}", entry.variant, f"{timm}.{release}", 448, 0
            )
            for entry, timm in _LANG.values()
            for release in ("fb", "fb_tiling")
        ),  # fmt: skip
        timm=TimmNames(architectures=("vit_pe_lang_*",), model_class="Eva"),
    )
)

PE_SPATIAL = register(
    Family(
        name="pe_spatial",
        title="PE-Spatial",
        exported=("keras_vit",),
        options=_LANG_SPATIAL,
        preprocessing=_CONTRACT.replace(source="PE-Spatial"),
        defaults={"include_top": False},
        models={name: entry for name, (entry, _) in _SPATIAL.items()},
        checkpoints=tuple(
            TimmWeights(
                "pe_spatial_fb",
                entry.variant,
                f"{timm}.fb",
                entry.arguments["image_size"],
                0,
            )
            for entry, timm in _SPATIAL.values()
        ),  # fmt: skip
        timm=TimmNames(
            model_class="Eva",
            architectures=("vit_pe_spatial_*",),
            writer="vit_pe_spatial_base_patch16_512",
            writes_for=dict(pre_norm=True, encoder_norm=False),
        ),
    )
)

PE_Core_T16 = PE_CORE.constructor("PE_Core_T16")
PE_Core_S16 = PE_CORE.constructor("PE_Core_S16")
PE_Core_B16 = PE_CORE.constructor("PE_Core_B16")
PE_Core_L14 = PE_CORE.constructor("PE_Core_L14")
PE_Core_G14 = PE_CORE.constructor("PE_Core_G14")
PE_Lang_L14 = PE_LANG.constructor("PE_Lang_L14")
PE_Lang_G14 = PE_LANG.constructor("PE_Lang_G14")
PE_Spatial_T16 = PE_SPATIAL.constructor("PE_Spatial_T16")
PE_Spatial_S16 = PE_SPATIAL.constructor("PE_Spatial_S16")
PE_Spatial_B16 = PE_SPATIAL.constructor("PE_Spatial_B16")
PE_Spatial_L14 = PE_SPATIAL.constructor("PE_Spatial_L14")
PE_Spatial_G14 = PE_SPATIAL.constructor("PE_Spatial_G14")
