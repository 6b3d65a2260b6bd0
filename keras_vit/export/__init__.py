"""Exporting ViTs for serving: SavedModel (TF Serving), LiteRT and ONNX.

`keras_vit.export.export` (or `from keras_vit.export import export`).

Example:

```python
from keras_vit.export import export

export(model, "saved_models/vit_b16/1", class_names=names)
```
"""

from keras_vit.export.onnx import export_onnx
from keras_vit.export.savedmodel import export
from keras_vit.export.signatures import FEATURES
from keras_vit.export.signatures import SERVING_BYTES
from keras_vit.export.signatures import SERVING_DEFAULT
from keras_vit.export.signatures import SERVING_FLOAT
from keras_vit.export.signatures import SIGNATURE_NAMES
from keras_vit.export.tflite import export_tflite
from keras_vit.export.warmup import WARMUP_FILE

__all__ = [
    "FEATURES",
    "SERVING_BYTES",
    "SERVING_DEFAULT",
    "SERVING_FLOAT",
    "SIGNATURE_NAMES",
    "WARMUP_FILE",
    "export",
    "export_onnx",
    "export_tflite",
]
