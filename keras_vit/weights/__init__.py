"""Pretrained checkpoints: the original `.npz`, timm and Hugging Face files.

`load_weights(model, weights)` loads a known tag (downloaded into the Keras
cache), an original google-research/vision_transformer `.npz` file, a timm or
Hugging Face `.safetensors` file, or a Keras weights file into a model built
by `keras_vit.ViT`, checking every key first. NumPy only: neither torch nor
the `safetensors` package is needed.

Example:

```python
import keras_vit

model = keras_vit.ViT_B16(num_classes=10, image_size=384)
keras_vit.weights.load_weights(model, "augreg_in21k")
# or, equivalently:
model = keras_vit.ViT_B16(num_classes=10, image_size=384, weights="augreg_in21k")
```
"""

from keras_vit.weights.architecture import Architecture
from keras_vit.weights.architecture import describe
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.errors import VariantMismatchError
from keras_vit.weights.errors import WeightsNotFoundError
from keras_vit.weights.loader import load_weights
from keras_vit.weights.npz import RENAMES
from keras_vit.weights.npz import read_npz
from keras_vit.weights.registry import PRETRAINED_WEIGHTS
from keras_vit.weights.registry import PretrainedWeights
from keras_vit.weights.registry import cache_directory
from keras_vit.weights.registry import list_weights
from keras_vit.weights.safetensors import read_safetensors
from keras_vit.weights.safetensors import to_original_layout

__all__ = [
    "PRETRAINED_WEIGHTS",
    "RENAMES",
    "Architecture",
    "CheckpointError",
    "PretrainedWeights",
    "VariantMismatchError",
    "WeightsNotFoundError",
    "cache_directory",
    "describe",
    "list_weights",
    "load_weights",
    "read_npz",
    "read_safetensors",
    "to_original_layout",
]
