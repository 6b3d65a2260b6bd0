"""The convolutional family of Park & Kim's comparison: pre-activation
ResNets and AlterNet, one builder, one layout.

- `builder.py`: `build_cnn`, the functional builder both share;
- `variants.py`: the rows (`PREACT_RESNETS`, `ALTERNETS`, `CNNVariant`);
- `layout.py`: the layer names and `CNNLayout`;
- `preact_resnet.py`, `alternet.py`: the named constructors.
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
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _imports.lazy_exports(__name__, _EXPORTS)
