"""The ViT in the registry of model architectures (imports no framework).

A run config names its architecture (`TrainConfig.architecture`, `"vit"`
by default) and is checked against this record (its variants, the fields a
ViT run takes: all of them) when it is made, which `--help` does for every
shipped config: so the record is read without Keras. The model code
(`keras_vit.models.vit`, `keras_vit.models.layout`) is imported when a model
is built or read.

Example:

```python
from keras_vit.models import architectures

vit = architectures.named("vit")
vit.check_variant("S/16")  # True
model = vit.build(config, num_classes=10)  # the ViT of a TrainConfig
```
"""

from __future__ import annotations

from keras_vit.models import architectures
from keras_vit.models.variants import parse_variant


def _build(config, num_classes: int):
    """`keras_vit.models.vit.build_for_run` (imports Keras)."""
    from keras_vit.models.vit import build_for_run

    return build_for_run(config, num_classes)


def _check_variant(variant: str) -> bool | str:
    try:
        parse_variant(variant)
    except ValueError as error:
        return str(error).splitlines()[0]
    return True


class _ViTLayoutWhenUsed:
    """`keras_vit.models.ViTLayout`'s two class methods the registry calls,
    importing it (and Keras) only when a model is read: the record itself is
    read before Keras is. (Hand-written: the registry takes a class.)"""

    @staticmethod
    def describes(model) -> bool:
        from keras_vit.models.layout import ViTLayout

        return ViTLayout.describes(model)

    @staticmethod
    def of(model):
        from keras_vit.models.layout import ViTLayout

        return ViTLayout.of(model)


VIT = architectures.register(
    architectures.ModelArchitecture(
        name="vit",
        title="ViT",
        layout=_ViTLayoutWhenUsed,
        build=_build,
        check_variant=_check_variant,
        example="S/16",
        run_fields=None,  # Every field of a TrainConfig.
    )
)
