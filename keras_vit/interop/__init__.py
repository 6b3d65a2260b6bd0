"""Conversions between keras_vit models and other Keras model libraries.

`keras_vit.interop.keras_hub`: keras-hub's `ViTBackbone`,
`ViTImageClassifier` and `DINOV2Backbone` to keras_vit models and back
(keras-hub is optional: `pip install "keras_vit[keras_hub]"`).
"""

from keras_vit.interop.keras_hub import from_keras_hub
from keras_vit.interop.keras_hub import keras_hub_checkpoint
from keras_vit.interop.keras_hub import to_keras_hub

__all__ = ["from_keras_hub", "keras_hub_checkpoint", "to_keras_hub"]
