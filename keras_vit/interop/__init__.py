"""Conversions between keras_vit models and other Keras model libraries.

`keras_vit.interop.keras_hub`: keras-hub's `ViTBackbone`,
`ViTImageClassifier` and `DINOV2Backbone` to keras_vit models and back
(keras-hub is optional: `pip install "keras_vit[keras_hub]"`).
"""

from keras_vit import _imports

_EXPORTS = {
    "from_keras_hub": "keras_vit.interop.keras_hub",
    "keras_hub_checkpoint": "keras_vit.interop.keras_hub",
    "to_keras_hub": "keras_vit.interop.keras_hub",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _imports.lazy_exports(__name__, _EXPORTS)
