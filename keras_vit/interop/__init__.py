"""Conversions between keras_vit models and other Keras model libraries.

`keras_vit.interop.keras_hub`: keras-hub's `ViTBackbone`,
`ViTImageClassifier` and `DINOV2Backbone` to keras_vit models and back
(keras-hub is optional: `pip install "keras-hub>=0.32"`; it is imported
when a conversion runs, not by `import keras_vit`).

Example:

```python
model = keras_vit.interop.from_keras_hub(backbone)  # a keras_hub ViTBackbone
back = keras_vit.interop.to_keras_hub(model)
```
"""

from keras_vit.interop.keras_hub import from_keras_hub
from keras_vit.interop.keras_hub import keras_hub_checkpoint
from keras_vit.interop.keras_hub import to_keras_hub

__all__ = [
    "from_keras_hub",
    "keras_hub_checkpoint",
    "to_keras_hub",
]
