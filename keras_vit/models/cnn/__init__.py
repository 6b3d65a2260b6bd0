"""The convolutional family of Park & Kim's comparison: post- and
pre-activation ResNets and AlterNet, one stem, one layout.

- `builder.py`: `build_cnn` (pre-activation networks), the stem and the
  argument checks all share;
- `variants.py`: the rows (`RESNETS`, `PREACT_RESNETS`, `ALTERNETS`,
  `CNNVariant`);
- `layout.py`: the layer names and `CNNLayout`;
- `resnet.py`, `preact_resnet.py`, `alternet.py`: the named constructors.
"""

from keras_vit import _imports

_EXPORTS = {
    "ALTERNETS": "keras_vit.models.cnn.variants",
    "AlterNet": "keras_vit.models.cnn.alternet",
    "AlterNet18": "keras_vit.models.cnn.alternet",
    "AlterNet50": "keras_vit.models.cnn.alternet",
    "build_cnn": "keras_vit.models.cnn.builder",
    "CNNLayout": "keras_vit.models.cnn.layout",
    "CNNVariant": "keras_vit.models.cnn.variants",
    "PREACT_RESNETS": "keras_vit.models.cnn.variants",
    "PreActResNet": "keras_vit.models.cnn.preact_resnet",
    "PreActResNet18": "keras_vit.models.cnn.preact_resnet",
    "PreActResNet50": "keras_vit.models.cnn.preact_resnet",
    "ResNet": "keras_vit.models.cnn.resnet",
    "ResNet18": "keras_vit.models.cnn.resnet",
    "ResNet50": "keras_vit.models.cnn.resnet",
    "RESNETS": "keras_vit.models.cnn.variants",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _imports.lazy_exports(__name__, _EXPORTS)
