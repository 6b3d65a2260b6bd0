"""Model architectures: the kinds of model keras_vit builds, trains and loads.

An architecture says how to build a model from a variant name (and its own
frozen options object), which `ModelLayout` reads a built one, and, when its
checkpoints are not the ViT's, how weights load into it. The ViT core
registers `"vit"`; a wing registers its own (the Park & Kim wing,
`keras_vit.parkkim`, registers `"resnet"`, `"preact_resnet"` and
`"alternet"`), and the core asks this table instead of importing the wing:
`TrainConfig.architecture` names one, the recipes build it through it,
`keras_vit.load_weights` hands a model of another architecture to that
architecture's loader, and `ModelLayout.of` reads a model with the layout of
the architecture that built it. (A *family*, `keras_vit.models.zoo`, is a
published recipe of the ViT architecture: DeiT III, DINOv2, ...)

Example:

```python
import keras_vit
from keras_vit.models import architectures

model = keras_vit.ViT("test/4", num_classes=3, image_size=16)
architectures.architecture_of(model).name  # 'vit'
architectures.named("vit").check_variant("Q/16")  # the reason it is not one
```
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING

from keras_vit import plugins
from keras_vit._export import export

if TYPE_CHECKING:  # Annotations only: the command line reads this table light.
    import keras


@export("keras_vit.models.LayoutError")
class LayoutError(ValueError):
    """A model is not a keras_vit model (or lacks a part a caller needs)."""


@dataclasses.dataclass(frozen=True)
class ModelArchitecture:
    """One kind of model.

    Attributes:
        name: What `TrainConfig.architecture` names, e.g. `"vit"`.
        title: For messages and reports, e.g. `"ViT"`.
        layout: The `keras_vit.models.ModelLayout` subclass that recognises a
            built model of the architecture (`describes`) and reads it (`of`).
        build: `(config, num_classes) -> keras.Model`: the model of a run
            config (a `TrainConfig`: `variant`, `image_size`, `channels` and
            the options the architecture reads).
        check_variant: `variant -> True`, or a short reason it is not one
            of the architecture's variants.
        recognizes: `model -> bool`: a built model of this architecture.
            Defaults to `layout.describes`; architectures that share a layout
            (the CNNs) tell their models apart here.
        load_weights: `(model, weights, progress) -> notes` for an
            architecture whose checkpoints the ViT loader does not read;
            `None` (the ViT) takes `keras_vit.load_weights`'s own path.
        has_attention: Whether every block attends (attention maps, rollout
            and attention distance apply to the whole model).
        example: A variant, for messages (`"S/16"`).
        run_fields: The model fields of a run config that apply to it,
            beyond `variant`, `image_size` and `channels` (e.g. `"init_from"`,
            `"lora_rank"`; an encoder option as `"encoder.drop_path_rate"`):
            a config that sets another away from its default is refused.
            `None`: every one (the ViT's).
    """

    name: str
    title: str
    layout: type
    build: Callable[..., keras.Model]
    check_variant: Callable[[str], bool | str]
    recognizes: Callable[[keras.Model], bool] | None = None
    load_weights: Callable | None = None
    has_attention: bool = True
    example: str = ""
    run_fields: frozenset[str] | None = frozenset()

    def describes(self, model: keras.Model) -> bool:
        """Whether `model` is a built model of this architecture."""
        test = self.recognizes or self.layout.describes
        return bool(test(model))


# Every registered architecture, by name, in registration order.
_ARCHITECTURES: dict[str, ModelArchitecture] = {}


def register(architecture: ModelArchitecture) -> ModelArchitecture:
    """Adds `architecture` (or replaces the one of its name); returns it."""
    _ARCHITECTURES[architecture.name] = architecture
    return architecture


# The core's own architectures, by name -> the module whose import registers
# it: a config names one (`"vit"`, the default) and is checked against it
# before the model code, and TensorFlow with it, is imported; `named` and
# `architectures` import it (a module that imports no framework).
_BUILT_IN = {"vit": "keras_vit.models.vit_architecture"}


def _import_built_in() -> None:
    for name, module in _BUILT_IN.items():
        if name not in _ARCHITECTURES:
            importlib.import_module(module)


def names() -> tuple[str, ...]:
    """The registered architectures' names, e.g. `("vit", "resnet", ...)`:
    the core's first, then those registered since."""
    return tuple(dict.fromkeys([*_BUILT_IN, *_ARCHITECTURES]))


def architectures() -> tuple[ModelArchitecture, ...]:
    """The registered architectures, the core's first, then in registration
    order."""
    _import_built_in()
    ordered = dict.fromkeys(_BUILT_IN)
    ordered.update(_ARCHITECTURES)
    return tuple(ordered.values())


def named(name: str) -> ModelArchitecture:
    """The architecture called `name`.

    A name not registered yet loads the installed plug-ins first
    (`keras_vit.plugins.load_plugins`): it may be one of theirs.

    Raises:
        ValueError: none has that name; the message lists those that do.
    """
    if name not in _ARCHITECTURES:
        _import_built_in()
    if name not in _ARCHITECTURES:
        plugins.load_plugins()
    if name not in _ARCHITECTURES:
        raise ValueError(
            f"Unknown model architecture {name!r}; known: "
            f"{', '.join(names())}.{plugins.failure_note()}"
        )
    return _ARCHITECTURES[name]


def architecture_of(model: keras.Model) -> ModelArchitecture:
    """The architecture of a built model: the first registered that
    describes it.

    A model none of them describes loads the installed plug-ins first
    (`keras_vit.plugins.load_plugins`): e.g. a loaded `.keras` file of a
    plug-in's architecture.

    Raises:
        LayoutError: no registered architecture built `model`.
    """
    for attempt in range(2):
        if attempt and not plugins.load_plugins():
            break
        for architecture in architectures():
            if architecture.describes(model):
                return architecture
    raise LayoutError(
        f"Model {model.name!r} was not built by keras_vit: none of its model "
        f"architectures ({', '.join(_ARCHITECTURES)}) describes it."
    )
