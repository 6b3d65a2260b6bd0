"""Keras weights files (`.keras`, `.weights.h5`), read by layer name.

A Keras 3 weights file stores each layer's variables by index under the
layer's name (in a `.keras` zip archive, in `model.weights.h5`).
`read_keras_file` matches the file's layers to a model's by name, at any
nesting depth, and names each array after the model's variable, so that
the checkpoint can be checked key by key before anything is assigned; no
model is built from the file. The arrays it returns are keyed by keras_vit
variable paths (the `ours` dialect). Legacy Keras 2 HDF5 files are refused
in one sentence.

Example:

```python
values, grid = read_keras_file("model.keras", model)
values["encoder_norm/gamma"].shape  # (768,)
```
"""

from __future__ import annotations

import io
import json
import zipfile

import keras

from keras_vit import keras_internals
from keras_vit.models import layout as names
from keras_vit.weights.errors import CheckpointError

# The files read; a plain `.h5` (a legacy whole-model file) is recognised
# to be refused in one line.
READABLE_SUFFIXES = (".keras", ".weights.h5")
SUFFIXES = (*READABLE_SUFFIXES, ".h5")

# Variables of keras_vit layers a Keras weights file may hold for a layer the
# target model does not have, in saving order (the file stores them by index).
_OWN_VARIABLES = {
    names.CLASS_TOKEN: ("token",),
    names.PRE_LOGITS: ("kernel", "bias"),
    names.HEAD: ("kernel", "bias"),
    names.HEAD_DIST: ("kernel", "bias"),
    names.MASKED_PATCH_HEAD: ("kernel", "bias"),
    names.PATCH_CORRUPTION: ("mask_token",),
}


def read_keras_file(path: str, model: keras.Model) -> tuple[dict, tuple | None]:
    """A Keras weights file's arrays, named after `model`'s variables.

    A layer of the file that `model` lacks keeps its arrays under
    `layer/variable` when it is a keras_vit layer (`_OWN_VARIABLES`), under
    `layer/index` otherwise (reported as unexpected by the strict check).

    Args:
        path: A `.keras` or `.weights.h5` file written by Keras.
        model: The model the weights are for.

    Returns:
        `(values, grid)`: `{variable path: array}`, and the position
        embedding's grid that a `.keras` file's config records (or `None`).

    Raises:
        CheckpointError: a corrupt, legacy (Keras 2) or empty file, or
            layers that do not fit `model`'s.
    """
    import h5py

    weights_file, grid = _open_keras_file(path)
    try:
        with h5py.File(weights_file, "r") as store:
            legacy = _is_legacy_hdf5(store)
            saved = {} if legacy else keras_internals.read_saved_layers(store)
    except OSError as error:
        raise CheckpointError(
            f"{path!r} is not a readable Keras weights file ({error}). It may "
            "be truncated or corrupt."
        ) from error
    if legacy:
        raise CheckpointError(
            f"{path!r} is a legacy Keras HDF5 file (Keras 2, or Keras 3's "
            "`model.save('x.h5')`), which is not supported: save the model with "
            "`model.save('x.keras')` or `model.save_weights('x.weights.h5')`."
        )
    if not any(_has_values(e) for entries in saved.values() for e in entries):
        raise CheckpointError(
            f"{path!r} holds no layer weights in the Keras 3 format; save the "
            "model with `model.save('x.keras')` or "
            "`model.save_weights('x.weights.h5')`."
        )
    values = {}
    targets = {layer.name: layer for layer in model.layers}
    for name, entries in saved.items():
        entries = [e for e in entries if _has_values(e)]
        if not entries:
            continue
        if len(entries) > 1:
            raise CheckpointError(
                f"{path!r} has {len(entries)} layers named {name!r}; cannot tell "
                "which to use."
            )
        if name in targets:
            _name_saved(entries[0], targets[name], values, path)
        elif name in _OWN_VARIABLES and len(entries[0].values) == len(
            _OWN_VARIABLES[name]
        ):
            for variable, value in zip(
                _OWN_VARIABLES[name], entries[0].values, strict=True
            ):
                values[f"{name}/{variable}"] = value
        else:
            for index, value in enumerate(entries[0].values):
                values[f"{name}/{index}"] = value
    return values, grid


def _is_legacy_hdf5(store) -> bool:
    """Whether an open HDF5 file is Keras 2's format (whole model or weights).

    A whole model (`model.save("x.h5")`) has a `model_weights` group and a
    `model_config` attribute; a weights file (Keras 2's `save_weights`) lists
    its layers in a `layer_names` attribute. Keras 3 files have neither.
    """
    return (
        "model_weights" in store
        or "model_config" in store.attrs
        or "layer_names" in store.attrs
    )


def _has_values(saved: keras_internals.SavedLayer) -> bool:
    return bool(saved.values) or any(_has_values(c) for c in saved.children.values())


def _name_saved(saved, layer, values: dict, path: str) -> None:
    """Names `saved`'s arrays after `layer`'s variables, recursively."""
    own = keras_internals.own_variables(layer)
    if len(own) != len(saved.values):
        raise CheckpointError(
            f"Layer {layer.name!r} has {len(own)} weights in the model and "
            f"{len(saved.values)} in {path!r}; the file is another architecture."
        )
    for variable, value in zip(own, saved.values, strict=True):
        values[variable.path] = value
    for attribute, child in saved.children.items():
        sublayer = getattr(layer, attribute, None)
        if not isinstance(sublayer, keras.layers.Layer):
            if _has_values(child):
                raise CheckpointError(
                    f"Layer {layer.name!r} in {path!r} has weights for a "
                    f"sublayer {attribute!r} that the model's layer lacks."
                )
            continue
        _name_saved(child, sublayer, values, path)


def _open_keras_file(path: str):
    """The HDF5 weights of `path` and, for a `.keras`, its position grid."""
    if not path.endswith(".keras"):
        return path, None
    try:
        with zipfile.ZipFile(path) as archive:
            weights = io.BytesIO(archive.read("model.weights.h5"))
            config = json.loads(archive.read("config.json"))
    except (zipfile.BadZipFile, KeyError, OSError, ValueError) as error:
        raise CheckpointError(
            f"{path!r} is not a readable .keras archive ({error}). It may be "
            "truncated or corrupt."
        ) from error
    grids = []

    def visit(node):
        if isinstance(node, dict):
            inner = node.get("config")
            if isinstance(inner, dict) and inner.get("name") == names.POSEMB:
                grids.append(tuple(int(g) for g in inner["grid_size"]))
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(config)
    return weights, grids[0] if len(grids) == 1 else None
