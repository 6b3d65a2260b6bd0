"""Every weight source, read into one `Checkpoint` in the original layout.

The original `.npz` key layout (`Transformer/encoderblock_0/...`) is the
common language of `keras_vit.weights`. Each source becomes a `Checkpoint`
in that layout, and one strict plan-then-assign step
(`keras_vit.weights.checks`) loads it, whatever it came from:

- a pretrained tag (downloaded into the Keras cache) or an original `.npz`;
- a timm or Hugging Face `.safetensors` file;
- a Keras `.keras` archive or `.weights.h5` file written by a keras_vit
  model, read from its HDF5 weights by layer name (nothing is assigned, and
  no model is built, until every key has been checked);
- a model in memory (any keras_vit model: a classifier, an encoder, a
  masked-patch pre-training model);
- a dict of arrays in the original layout.
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import zipfile
from collections.abc import Mapping

import keras
import numpy as np

from keras_vit import keras_internals
from keras_vit.models import layout as names
from keras_vit.models.layout import ViTLayout
from keras_vit.models.variants import parse_variant
from keras_vit.weights import architecture
from keras_vit.weights import checks
from keras_vit.weights import npz
from keras_vit.weights import registry
from keras_vit.weights import safetensors
from keras_vit.weights import torch_file
from keras_vit.weights.errors import CheckpointError

KERAS_SUFFIXES = (".keras", ".weights.h5", ".h5")

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


@dataclasses.dataclass
class Checkpoint:
    """Weights in the original `.npz` layout, whatever their source.

    Attributes:
        params: `{key: array}`, e.g. `{"embedding/kernel": ..., "cls": ...}`.
        grid_size: The patch grid `(h, w)` of the position embedding, when
            the source says (a square table's grid is inferred otherwise).
        source: What it was read from, for messages.
        notes: What reading it involved (e.g. pre-training layers left out).
    """

    params: dict[str, np.ndarray]
    grid_size: tuple[int, int] | None = None
    source: str = "weights"
    notes: list[str] = dataclasses.field(default_factory=list)


def read_checkpoint(
    weights,
    model: keras.Model,
    layout: dict,
    *,
    cache_dir: str | os.PathLike | None = None,
    tag_variant: str | None = None,
) -> Checkpoint:
    """Reads any weight source into a `Checkpoint` for `model`.

    Args:
        weights: A tag, a file path, a `keras.Model`, a `Checkpoint` or
            `{key: array}` in the original layout.
        model: The model the weights are for (a Keras weights file is read
            by its layer names; a tag is looked up for its variant).
        layout: `npz.checkpoint_layout(model)[0]`, computed once by the
            caller.
        cache_dir: Root of the download cache for tags.
        tag_variant: The variant to look a tag up for (default: the model's).

    Returns:
        A `Checkpoint`.
    """
    if isinstance(weights, Checkpoint):
        return weights
    if isinstance(weights, keras.Model):
        return from_model(weights)
    if isinstance(weights, Mapping):
        return Checkpoint(npz.normalize(dict(weights)), source="a dict of arrays")
    path = os.fspath(weights)
    if registry.is_tag(path) and not os.path.exists(path):
        return _from_tag(path, layout, cache_dir, tag_variant)
    if not os.path.exists(path):
        if os.sep in path or "." in os.path.basename(path):
            raise FileNotFoundError(f"No checkpoint file at {path!r}.")
        registry.find(path, None)  # raises: unknown tag, listing the known ones
    if os.path.isdir(path):
        raise CheckpointError(_directory_message(path))
    if path.endswith(KERAS_SUFFIXES):
        return from_keras_file(path, model)
    if torch_file.is_torch_file(path):
        return Checkpoint(npz.normalize(_from_torch(path, layout)), source=path)
    if _sniff(path) == "npz":
        return Checkpoint(_from_npz(path, layout), source=path)
    params = _from_safetensors(path, layout)
    return Checkpoint(npz.normalize(params), source=path)


# What a directory may hold that `weights=` reads, for the error's hint.
_FILE_SUFFIXES = (".npz", ".safetensors", ".keras", ".weights.h5")


def _directory_message(path: str) -> str:
    """One sentence on why a directory is refused, and what to pass instead."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        names = []
    if any(n in ("saved_model.pb", "saved_model.pbtxt") for n in names):
        return (
            f"{path!r} is a TensorFlow SavedModel directory, which keras_vit does "
            "not load weights from (an export for serving): pass the .keras, "
            ".weights.h5 or checkpoint file the model was built from."
        )
    files = [os.path.join(path, n) for n in names if n.endswith(_FILE_SUFFIXES)]
    hint = f", e.g. {files[0]!r}" if files else ""
    return (
        f"{path!r} is a directory; `weights=` takes a checkpoint file (.npz, "
        f".safetensors, .keras or .weights.h5){hint}, or a known tag."
    )


def _from_safetensors(path: str, layout: dict) -> dict:
    """A timm or Hugging Face `.safetensors` file in the original layout."""
    tensors = safetensors.read_safetensors(path)
    checks.check_finite(tensors, path)  # named by the file's own keys
    return safetensors.to_original_layout(tensors, _heads(layout))


def _from_torch(path: str, layout: dict) -> dict:
    """A timm state dict in a `torch.save` file, in the original layout."""
    tensors = torch_file.read_state_dict(path)
    checks.check_finite(tensors, path)  # named by the file's own keys
    return safetensors.to_original_layout(tensors, _heads(layout))


def _from_npz(path: str, layout: dict) -> dict:
    """An original or big_vision (`params/img/...`) `.npz` in the original layout."""
    params = npz.read_npz(path)
    checks.check_finite(params, path)  # named by the file's own keys
    if safetensors.is_big_vision(params):
        params = npz.normalize(safetensors.to_original_layout(params, _heads(layout)))
    return params


def _heads(layout: dict) -> int | None:
    return next(
        (t.shape[1] for k, t in layout.items() if k.endswith("/query/kernel")), None
    )


def _from_tag(tag: str, layout: dict, cache_dir, variant=None) -> Checkpoint:
    if variant is None:
        variant = architecture.describe({k: t.shape for k, t in layout.items()}).variant
    entry = registry.find(tag, variant)
    stride = parse_variant(entry.variant).total_stride
    file = registry.fetch(entry, cache_dir)
    if _sniff(file) == "safetensors":
        params = npz.normalize(_from_safetensors(file, layout))
    else:
        params = _from_npz(file, layout)
    return Checkpoint(
        params,
        grid_size=(entry.image_size // stride,) * 2,  # the files' grids are square
        source=file,
        notes=[f"Loaded {entry.tag!r} from {file}."],
    )


def from_model(model: keras.Model) -> Checkpoint:
    """The weights of a keras_vit model in memory, as a `Checkpoint`.

    Pre-training layers (the masked-patch head, the [mask] token) are left
    out with a note; the encoder, `pre_logits` and `head` are kept for the
    loading rules to decide.

    Example:

    ```python
    pretrained = keras_vit.models.masked_patch_model("test/4", image_size=16)
    checkpoint = keras_vit.weights.from_model(pretrained)
    ```
    """
    vit = _find_vit(model)
    values = {variable.path: variable.numpy() for variable in vit.weights}
    return _checkpoint_from_paths(values, ViTLayout.of(vit).grid_size, vit.name)


def _find_vit(model: keras.Model) -> keras.Model:
    """`model`, or the one keras_vit model nested in it."""
    if ViTLayout.describes(model):
        return model
    nested = [layer for layer in _nested_models(model) if ViTLayout.describes(layer)]
    if len(nested) != 1:
        raise CheckpointError(
            f"{model.name!r} is not a keras_vit model and holds "
            f"{len(nested)} of them; pass the keras_vit model itself."
        )
    return nested[0]


def _nested_models(model: keras.Model):
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield layer
            yield from _nested_models(layer)


def from_keras_file(path: str, model: keras.Model) -> Checkpoint:
    """A `.keras` archive or `.weights.h5` file, read by layer name.

    The file's layers are matched to `model`'s by name (at any nesting
    depth); their variables are named after `model`'s layer of the same name
    (Keras numbers them in saving order), so that the checkpoint can be
    checked key by key before anything is assigned. Layers of the file
    that `model` lacks are named when they are keras_vit layers (`head`,
    `pre_logits`, the class token, the pre-training layers); any other is
    reported.

    Args:
        path: A `.keras` or `.weights.h5` file written by Keras.
        model: The model the weights are for.
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
    checks.check_finite(values, path)  # named by the model's variable paths
    return _checkpoint_from_paths(values, grid, path)


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


def _checkpoint_from_paths(values, grid, source) -> Checkpoint:
    """`{variable path: array}` -> a `Checkpoint`, pre-training layers left out."""
    params, unmapped = npz.to_checkpoint(values)
    notes = []
    left_out = sorted(
        {
            p.split("/")[0]
            for p in unmapped
            if p.split("/")[0] in names.PRETRAINING_LAYERS
        }
    )
    if left_out:
        notes.append(f"Left out the pre-training layers {left_out} of {source}.")
    for path in unmapped:
        if path.split("/")[0] not in names.PRETRAINING_LAYERS:
            params[path] = np.asarray(values[path])  # reported as unexpected
    return Checkpoint(npz.normalize(params), grid_size=grid, source=source, notes=notes)


def _sniff(path: str) -> str:
    """`"npz"` or `"safetensors"`, by suffix and then by the first bytes."""
    if path.endswith(".npz"):
        return "npz"
    if path.endswith(".safetensors"):
        return "safetensors"
    with open(path, "rb") as f:
        head = f.read(9)
    if head.startswith((b"PK", b"\x80", b"\x93NUMPY")):  # zip, pickle, .npy
        return "npz"  # the .npz reader explains what it refuses
    if len(head) == 9 and head[8:9] == b"{":
        return "safetensors"
    raise CheckpointError(
        f"{path!r} is not a checkpoint keras_vit can read: expected an .npz "
        "archive, a .safetensors file, or a Keras .keras/.weights.h5 file."
    )
