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

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
