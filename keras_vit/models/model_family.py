"""Model families: the kinds of model keras_vit builds, trains and loads.

A family says how to build a model from a variant name (and its own frozen
options object), which `ModelLayout` recognises and reads a built one, and,
when its checkpoints are not the ViT's, how weights load into it. The ViT
core registers `"vit"`; a wing registers its own families (the Park & Kim
wing, `keras_vit.parkkim`, registers `"resnet"`, `"preact_resnet"` and
`"alternet"`), and the core asks this table instead of importing the wing:
`recipes.train` builds `TrainConfig.architecture` through it and
`keras_vit.load_weights` hands a model of another family to that family's
loader.

Example:

```python
import keras_vit
from keras_vit.models import model_family

model = keras_vit.ViT("test/4", num_classes=3, image_size=16)
model_family.family_of(model).name  # 'vit'
model_family.named("vit").check_variant("Q/16")  # the reason it is not one
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import keras

from keras_vit.models.layout import LayoutError
from keras_vit.models.layout import ModelLayout


@dataclasses.dataclass(frozen=True)
class ModelFamily:
    """One kind of model.

    Attributes:
        name: What `TrainConfig.architecture` names, e.g. `"vit"`.
        title: For messages and reports, e.g. `"ViT"`.
        layout: The `ModelLayout` subclass that recognises a built model
            of the family (`describes`) and reads it (`of`).
        build: `(config, num_classes) -> keras.Model`: the family's model
            for a run config (a `TrainConfig`: `variant`, `image_size`,
            `channels` and the options the family reads).
        check_variant: `variant -> True`, or a short reason it is not one
            of the family's variants.
        recognizes: `model -> bool`: a built model of this family. Defaults
            to `layout.describes`; families that share a layout (the CNNs)
            tell their models apart here.
        load_weights: `(model, weights, progress) -> notes` for a family
            whose checkpoints the ViT loader does not read; `None` (the
            ViT) takes `keras_vit.load_weights`'s own path.
    """

    name: str
    title: str
    layout: type[ModelLayout]
    build: Callable[..., keras.Model]
    check_variant: Callable[[str], bool | str]
    recognizes: Callable[[keras.Model], bool] | None = None
    load_weights: Callable | None = None

    def describes(self, model: keras.Model) -> bool:
        """Whether `model` is a built model of this family."""
        test = self.recognizes or self.layout.describes
        return bool(test(model))


# Every registered family, by name, in registration order.
_FAMILIES: dict[str, ModelFamily] = {}


def register(family: ModelFamily) -> ModelFamily:
    """Adds `family` (or replaces the one of its name); returns it."""
    _FAMILIES[family.name] = family
    return family


def names() -> tuple[str, ...]:
    """The registered families' names, e.g. `("vit", "resnet", ...)`."""
    return tuple(_FAMILIES)


def families() -> tuple[ModelFamily, ...]:
    """The registered families, in registration order."""
    return tuple(_FAMILIES.values())


def named(name: str) -> ModelFamily:
    """The family called `name`.

    Raises:
        ValueError: no family has that name; the message lists those that do.
    """
    if name not in _FAMILIES:
        raise ValueError(
            f"Unknown model family {name!r}; known: {', '.join(_FAMILIES)}."
        )
    return _FAMILIES[name]


def family_of(model: keras.Model) -> ModelFamily:
    """The family of a built model: the first registered that describes it.

    Raises:
        LayoutError: no registered family built `model`.
    """
    for family in families():
        if family.describes(model):
            return family
    raise LayoutError(
        f"Model {model.name!r} was built by none of keras_vit's model "
        f"families ({', '.join(_FAMILIES)})."
    )
