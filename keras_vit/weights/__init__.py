"""Pretrained checkpoints: the original `.npz`, timm, Hugging Face, big_vision.

`load_weights(model, weights)` is the one way weights move into a keras_vit
model: a known tag (downloaded into the Keras cache), an original
google-research/vision_transformer `.npz` file, a timm or Hugging Face
`.safetensors` file (ViT, DINOv2, SigLIP), big_vision's SigLIP `.npz`, a
Keras `.keras`/`.weights.h5` file, or another model in memory is read into
one `Checkpoint` (the original `.npz` layout) and loaded by one strict
plan-then-assign step, checking every key first (a keras-hub model becomes
one with `keras_vit.interop.keras_hub_checkpoint`).

`keras_vit.with_image_size` and encoder transfer for fine-tuning are calls
to it. NumPy only: neither torch nor the `safetensors` package is needed.

The package is cut along two axes: file formats (`formats`: `.npz`,
`.safetensors`, Keras's `.keras`/`.weights.h5`) and key dialects
(`dialects`: keras_vit's own variables, timm, Hugging Face, big_vision,
keras-hub), each dialect a table of rules for one engine. The original
layout's keys are spelled once, in `keys`.

Example:

```python
import keras_vit

model = keras_vit.ViT_B16(num_classes=10, image_size=384)
keras_vit.weights.load_weights(model, "augreg_in21k")
# or, equivalently:
model = keras_vit.ViT_B16(num_classes=10, image_size=384, weights="augreg_in21k")
```
"""

from keras_vit import _imports
from keras_vit.weights import _moved

_EXPORTS = {
    "Architecture": "keras_vit.weights.architecture",
    "cache_directory": "keras_vit.weights.registry",
    "Checkpoint": "keras_vit.weights.checkpoint",
    "CheckpointError": "keras_vit.weights.errors",
    "describe": "keras_vit.weights.architecture",
    "from_keras_file": "keras_vit.weights.checkpoint",
    "from_model": "keras_vit.weights.checkpoint",
    "list_weights": "keras_vit.weights.registry",
    "load_weights": "keras_vit.weights.loader",
    "PRETRAINED_WEIGHTS": "keras_vit.weights.registry",
    "PretrainedWeights": "keras_vit.weights.registry",
    "read_checkpoint": "keras_vit.weights.checkpoint",
    "read_npz": "keras_vit.weights.formats.npz",
    "read_safetensors": "keras_vit.weights.formats.safetensors",
    "to_original_layout": "keras_vit.weights.checkpoint",
    "VariantMismatchError": "keras_vit.weights.errors",
    "WeightsNotFoundError": "keras_vit.weights.errors",
}

__all__ = sorted(_EXPORTS)
_GONE = {"RENAMES": _moved.REMOVED["keras_vit.weights.formats.npz"]["RENAMES"]}

__getattr__, __dir__ = _imports.lazy_exports(__name__, _EXPORTS, _GONE)
