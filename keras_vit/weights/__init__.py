"""Pretrained checkpoints: the original `.npz`, timm, Hugging Face, big_vision.

`load_weights(model, weights)` is the one way weights move into a keras_vit
model: a known tag (downloaded into the Keras cache), an original
google-research/vision_transformer `.npz` file, a timm or Hugging Face
`.safetensors` file (ViT, DINOv2, SigLIP), big_vision's SigLIP `.npz`, a
Keras `.keras`/`.weights.h5` file, or another model in memory is read into
one `Checkpoint` (the original `.npz` layout) and loaded by one strict
plan-then-assign step, checking every key first (a keras-hub model becomes
one with `keras_vit.interop.keras_hub_checkpoint`).

A checkpoint may also be named (`sources.resolve`): a timm name, an
`hf://org/repo` Hub repository (through `huggingface_hub`'s cache, `hub`), a
folder `keras_vit.save_pretrained` wrote; `blueprint` reads what model it
needs off its config and keys (`keras_vit.from_pretrained` builds it).

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

from keras_vit.weights.architecture import Architecture
from keras_vit.weights.architecture import describe
from keras_vit.weights.checkpoint import Checkpoint
from keras_vit.weights.checkpoint import from_keras_file
from keras_vit.weights.checkpoint import from_model
from keras_vit.weights.checkpoint import read_checkpoint
from keras_vit.weights.checkpoint import to_original_layout
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.errors import VariantMismatchError
from keras_vit.weights.errors import WeightsNotFoundError
from keras_vit.weights.formats.npz import read_npz
from keras_vit.weights.formats.safetensors import read_safetensors
from keras_vit.weights.formats.safetensors import write_safetensors
from keras_vit.weights.hub import HubOptions
from keras_vit.weights.loader import load_weights
from keras_vit.weights.registry import PRETRAINED_WEIGHTS
from keras_vit.weights.registry import PretrainedWeights
from keras_vit.weights.registry import cache_directory
from keras_vit.weights.registry import list_weights
from keras_vit.weights.sources import Source
from keras_vit.weights.sources import resolve

__all__ = [
    "Architecture",
    "Checkpoint",
    "CheckpointError",
    "HubOptions",
    "PRETRAINED_WEIGHTS",
    "PretrainedWeights",
    "Source",
    "VariantMismatchError",
    "WeightsNotFoundError",
    "cache_directory",
    "describe",
    "from_keras_file",
    "from_model",
    "list_weights",
    "load_weights",
    "read_checkpoint",
    "read_npz",
    "read_safetensors",
    "resolve",
    "to_original_layout",
    "write_safetensors",
]
