"""Named constructors of the newer ViT families: DeiT III, DINOv2, SigLIP.

Each is `keras_vit.ViT(variant, options=<the family's EncoderOptions>,
**kwargs)` with the family of `keras_vit.models.options.FAMILIES`; every
argument of `keras_vit.ViT` but `options` (encoder options included, one by
one) is accepted and overrides the family's.
"""

from __future__ import annotations

import keras

from keras_vit.models.options import FAMILIES
from keras_vit.models.options import FAMILY_MODELS
from keras_vit.models.vit import ViT


def family_model(variant: str, family: str, **kwargs) -> keras.Model:
    """Builds `variant` with the options of `family` (`FAMILIES`).

    Args:
        variant: e.g. `"S/14"`.
        family: A key of `keras_vit.models.options.FAMILIES`, e.g.
            `"dinov2"`.
        **kwargs: Any `keras_vit.ViT` argument but `options`, single
            encoder options included; overrides the family's.

    Raises:
        TypeError: `options=` is passed: it would replace the family's
            options whole.

    Example:

    ```python
    model = keras_vit.models.family_model("test/4", "dinov2", image_size=16)
    ```
    """
    if family not in FAMILIES:
        raise ValueError(f"Unknown family {family!r}. Known: {sorted(FAMILIES)}.")
    if "options" in kwargs:
        raise TypeError(
            f"The {FAMILIES[family].title} models take single encoder options as "
            "keywords (e.g. qk_norm=True), not `options=`, which would replace "
            "the family's; use keras_vit.ViT(variant, options=...) for that."
        )
    arguments = {"options": FAMILIES[family].options, **FAMILIES[family].defaults}
    arguments.update(kwargs)
    if "preprocessing" not in kwargs:
        # A checkpoint's own contract first (a tag or Hub name), else the
        # family's. Here, not at the top: the weights package reads layouts.
        from keras_vit.weights.sources import resolve_weights

        contract = None
        if arguments.get("weights") is not None:  # a name is resolved once
            arguments["weights"], contract = resolve_weights(
                arguments["weights"], variant
            )
        arguments["preprocessing"] = contract or FAMILIES[family].preprocessing
    arguments.setdefault("name", _default_name(variant, family))
    return ViT(variant, **arguments)


def _default_name(variant, family: str) -> str:
    """E.g. `"dinov2_s14"`; a `ModelSpec` gives its own name (`"vit_s14"`)."""
    prefix = family.split("_")[0]
    if not isinstance(variant, str):  # a ModelSpec
        return f"{prefix}_{variant.name.removeprefix('vit_')}"
    size, patch = variant.split("/")
    return f"{prefix}_{size.lower()}{patch}"


_DOC = """Builds {title} {variant}: `keras_vit.ViT("{variant}", ...)` with {options}.

    Every keyword argument of `keras_vit.ViT` but `options` is accepted and
    overrides the family's options.

    Example:

    ```python
    model = keras_vit.models.{name}()
    ```
    """


def _constructor(name: str, variant: str, family: str):
    def build(**kwargs) -> keras.Model:
        return family_model(variant, family, **kwargs)

    options = ", ".join(f"{k}={v!r}" for k, v in FAMILIES[family].arguments().items())
    build.__name__ = build.__qualname__ = name
    build.__doc__ = _DOC.format(
        title=FAMILIES[family].title, variant=variant, options=options, name=name
    )
    return build


DeiT3_S16 = _constructor("DeiT3_S16", *FAMILY_MODELS["DeiT3_S16"])
DeiT3_B16 = _constructor("DeiT3_B16", *FAMILY_MODELS["DeiT3_B16"])
DeiT3_L16 = _constructor("DeiT3_L16", *FAMILY_MODELS["DeiT3_L16"])
DINOv2_S14 = _constructor("DINOv2_S14", *FAMILY_MODELS["DINOv2_S14"])
DINOv2_B14 = _constructor("DINOv2_B14", *FAMILY_MODELS["DINOv2_B14"])
DINOv2_L14 = _constructor("DINOv2_L14", *FAMILY_MODELS["DINOv2_L14"])
DINOv2_g14 = _constructor("DINOv2_g14", *FAMILY_MODELS["DINOv2_g14"])
SigLIP_B16 = _constructor("SigLIP_B16", *FAMILY_MODELS["SigLIP_B16"])
SigLIP_So400m14 = _constructor("SigLIP_So400m14", *FAMILY_MODELS["SigLIP_So400m14"])
