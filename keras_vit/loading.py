"""A model to work on, as the commands load it: a checked `.keras` file or a ViT.

`load_model(path)` loads a saved `.keras` file (checked first as keras_vit
checks every Keras file: a zip archive, no data from outside it, no claim
past its budget; any file it cannot read is a one-line `ValueError`);
`load_model(variant=..., weights=...)` builds a `keras_vit.ViT`, with
pretrained weights. The commands (`keras-vit predict`, `export`,
`fewshot`, ...) and the training recipe's `init_from` messages use it.

Example:

```python
model = load_model("runs/digits/final.keras")
features = load_model(variant="test/4", num_classes=0, image_size=16)
```
"""

from __future__ import annotations

import os
import zipfile

import keras

from keras_vit import paths
from keras_vit import plugins
from keras_vit.models.resize import with_image_size
from keras_vit.models.vit import ViT
from keras_vit.weights.formats import keras_h5
from keras_vit.weights.registry import list_weights


def load_model(
    path: str | None = None,
    *,
    variant: str | None = None,
    weights: str | None = None,
    num_classes: int = 1000,
    image_size: int | tuple[int, int] | None = None,
    channels: int = 3,
    representation_size: int | None = None,
):
    """The model a command works on: a saved `.keras` file or a new ViT.

    Args:
        path: A `.keras` file written by `model.save` (a classifier, an
            encoder, a masked-patch pre-training model). Loaded with
            `compile=False`: no command needs the optimizer.
        variant: Without `path`: the variant to build, e.g. `"B/16"`.
        weights: For `variant`: a `keras_vit.weights` tag, a checkpoint
            name (`hf://org/repo`, a timm name) or a checkpoint file
            (`.npz`, `.safetensors`, `.keras`, `.weights.h5`).
        num_classes: For `variant`: the head's classes; 0 builds no head
            (`include_top=False`, the pooled features). Defaults to 1000.
        image_size: For `variant`, the size to build (default 224); for a
            file, a size other than its own rebuilds it with resampled
            position embeddings.
        channels: For `variant`. Defaults to 3.
        representation_size: `pre_logits` width for `variant`; by default
            the weights tag's, if it has one.

    Raises:
        ValueError: a missing or unreadable file (truncated, damaged, not a
            model), weights that do not fit or cannot be found (an unknown
            name; a tag or name that is neither cached nor downloadable),
            or neither `path` nor `variant`.

    Example:

    ```python
    model = load_model("runs/digits/final.keras", image_size=32)  # resized
    encoder = load_model(variant="S/16", weights="imagenet21k", num_classes=0)
    ```
    """
    if not path and not variant:
        raise ValueError("pass --model FILE.keras, or --variant (and --weights)")
    if path and weights:
        raise ValueError("--weights goes with --variant, not --model")
    if path:  # A local path, or a URL (gs://...).
        if not paths.isfile(path):
            raise ValueError(f"no model file at {path!r}")
        model = _load_file(path)
        if image_size is not None:
            size = _pair(image_size)
            if tuple(model.input_shape[1:3]) != size:
                model = with_image_size(model, size)
        return model
    if representation_size is None and weights:
        known = [w for w in list_weights(variant) if w.tag == weights]
        representation_size = known[0].representation_size if known else None
    try:
        model = ViT(
            variant,
            num_classes=max(num_classes, 1),
            include_top=num_classes > 0,
            image_size=_pair(image_size or 224),
            channels=channels,
            representation_size=representation_size,
            weights=weights or None,
        )
    except FileNotFoundError as error:  # No such file; a name not found.
        raise ValueError(f"--weights {weights!r}: {error}") from error
    return model


def _load_file(path: str):
    """`keras.saving.load_model(path)`; a file it cannot read is a one-line
    `ValueError` (Keras says "File not found" for a truncated `.keras`).
    A local file is first checked as keras_vit checks every Keras file
    (`keras_h5.check_keras_file`: no data from outside it, no claim past
    its budget), a `CheckpointError` (a `ValueError`) otherwise."""
    if path.endswith(".keras") and not _is_zip(path):
        raise ValueError(
            f"{path!r} is not a readable .keras file: not a zip archive "
            "(truncated, or another format)"
        )
    if os.path.isfile(path) and path.endswith(keras_h5.READABLE_SUFFIXES):
        keras_h5.check_keras_file(path)
    plugins.load_plugins()  # A plug-in's model names its Keras classes.
    try:
        return keras.saving.load_model(path, compile=False)
    except (zipfile.BadZipFile, OSError, EOFError, KeyError, TypeError) as error:
        detail = str(error).strip() or type(error).__name__
        raise ValueError(f"cannot load {path!r} (damaged?): {detail}") from error


def _is_zip(path: str) -> bool:
    """`zipfile.is_zipfile` for a local path or a URL."""
    try:
        with paths.open_file(path, "rb") as file:
            return zipfile.is_zipfile(file)
    except OSError:
        return False


def _pair(size) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else tuple(size)
