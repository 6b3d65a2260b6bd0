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

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
