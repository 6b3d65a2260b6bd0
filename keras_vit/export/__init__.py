"""Exporting ViTs for serving: SavedModel (TF Serving), LiteRT and ONNX.

`keras_vit.export.export` (or `from keras_vit.export import export`).

Example:

```python
from keras_vit.export import export

export(model, "saved_models/vit_b16/1", class_names=names)
```
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
