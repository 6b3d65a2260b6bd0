"""The CNNs as architectures of the core's table (`keras_vit.models.architectures`).

`"resnet"`, `"preact_resnet"` and `"alternet"` share one layout
(`CNNLayout`); a built model's kind is read off it: MSA blocks make an
AlterNet, a `head_relu` layer a pre-activation network, neither the
post-activation ResNet. Only the post-activation ResNet has the authors'
PyTorch checkpoints (`keras_vit.parkkim.torch_resnet`); every CNN loads its
weights through that loader, which refuses the others with their reason.

Example:

```python
from keras_vit.models import architectures

architectures.named("alternet").title  # 'AlterNet'
```
"""

from __future__ import annotations

import keras

from keras_vit.models import architectures
from keras_vit.parkkim import torch_resnet
from keras_vit.parkkim.cnn.alternet import AlterNet
from keras_vit.parkkim.cnn.layout import HEAD_RELU
from keras_vit.parkkim.cnn.layout import CNNLayout
from keras_vit.parkkim.cnn.options import CNNOptions
from keras_vit.parkkim.cnn.preact_resnet import PreActResNet
from keras_vit.parkkim.cnn.resnet import ResNet
from keras_vit.parkkim.cnn.variants import ALTERNETS
from keras_vit.parkkim.cnn.variants import PREACT_RESNETS
from keras_vit.parkkim.cnn.variants import RESNETS


def cnn_kind(model: keras.Model) -> str | None:
    """`"resnet"`, `"preact_resnet"` or `"alternet"`; `None` for a model
    that is not one of the CNNs."""
    if not CNNLayout.describes(model):
        return None
    layout = CNNLayout.of(model)
    if layout.msa_names:
        return "alternet"
    return "preact_resnet" if layout.has(HEAD_RELU) else "resnet"


def _architecture(
    name: str, title: str, constructor, rows
) -> architectures.ModelArchitecture:
    def build(config, num_classes: int) -> keras.Model:
        # The recipe's stochastic depth is one setting for every model: the
        # run config's `encoder.drop_path_rate`.
        return constructor(
            config.variant,
            num_classes=num_classes,
            image_size=config.image_size,
            channels=config.channels,
            options=CNNOptions(drop_path_rate=config.encoder.drop_path_rate),
        )

    def check_variant(variant: str) -> bool | str:
        return variant in rows or f"must be a row of {name}: {', '.join(rows)}"

    return architectures.ModelArchitecture(
        name=name,
        title=title,
        layout=CNNLayout,
        build=build,
        check_variant=check_variant,
        recognizes=lambda model: cnn_kind(model) == name,
        load_weights=torch_resnet.load_torch_resnet,
        has_attention=False,  # no attention in every block: no attention maps
        example=rows[0] if isinstance(rows, tuple) else next(iter(rows)),
        run_fields=frozenset({"encoder.drop_path_rate"}),  # what `build` reads
    )


RESNET = architectures.register(_architecture("resnet", "ResNet", ResNet, RESNETS))
PREACT_RESNET = architectures.register(
    _architecture("preact_resnet", "PreActResNet", PreActResNet, PREACT_RESNETS)
)
ALTERNET = architectures.register(
    _architecture("alternet", "AlterNet", AlterNet, ALTERNETS)
)
