"""Exporting ViTs for serving: SavedModel (TF Serving), LiteRT and ONNX.

Not imported by `import keras_vit` (it needs TensorFlow): use
`from keras_vit.export import export`.

Example:

```python
from keras_vit.export import export

export(model, "saved_models/vit_b16/1", class_names=names)
```
"""

from keras_vit import _imports

_EXPORTS = {
    "export": "keras_vit.export.savedmodel",
    "export_onnx": "keras_vit.export.onnx",
    "export_tflite": "keras_vit.export.tflite",
    "FEATURES": "keras_vit.export.signatures",
    "SERVING_BYTES": "keras_vit.export.signatures",
    "SERVING_DEFAULT": "keras_vit.export.signatures",
    "SERVING_FLOAT": "keras_vit.export.signatures",
    "SIGNATURE_NAMES": "keras_vit.export.signatures",
    "WARMUP_FILE": "keras_vit.export.warmup",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _imports.lazy_exports(__name__, _EXPORTS)
