"""Initialising a model from our own `.keras` / `.weights.h5` files, by layer name.

Fine-tuning starts from an encoder trained by another recipe (supervised
pre-training, or masked patch prediction) whose head, and sometimes
resolution, differ. Layers are matched by name (`embedding`, `class_token`,
`posembed_input`, `encoderblock_{i}`, `encoder_norm`, ...), wherever they sit
in the saved model (nested sub-models included); the head is skipped so it
stays zero-initialised, and a position-embedding table saved for another
patch grid is resampled (`keras_vit.resample_position_embedding`, the
operation `keras_vit.with_image_size` applies).

Weights are read from the HDF5 file itself (a `.keras` archive holds one),
so the saved model's own custom layers need not be importable.
"""

from __future__ import annotations

import dataclasses
import io
import json
import zipfile

import keras
import numpy as np

from keras_vit.layers import AddPositionEmbedding
from keras_vit.resample import resample_position_embedding

# The paper replaces the whole pre-training head (pre-logits included) with
# a zero-initialised linear layer when fine-tuning.
HEAD_LAYERS = ("head", "pre_logits")


@dataclasses.dataclass
class TransferReport:
    """What `load_encoder_weights` did, layer by layer.

    Attributes:
        loaded: Layers whose weights were copied.
        resampled: Position-embedding layers resampled to the new grid.
        skipped: Layers left as initialised on purpose (`skip`).
        missing: Layers with weights that the file does not have.
    """

    loaded: list[str] = dataclasses.field(default_factory=list)
    resampled: list[str] = dataclasses.field(default_factory=list)
    skipped: list[str] = dataclasses.field(default_factory=list)
    missing: list[str] = dataclasses.field(default_factory=list)


def load_encoder_weights(
    model: keras.Model,
    path: str,
    skip: tuple[str, ...] = HEAD_LAYERS,
    strict: bool = True,
) -> TransferReport:
    """Copies weights from a saved Keras model into `model`, matching layer names.

    Args:
        model: The model to initialise, e.g. a fresh `keras_vit.ViT` with a
            new number of classes and a new image size.
        path: A `.keras` archive or a `.weights.h5` file written by Keras
            (`model.save`, `model.save_weights`, `ModelCheckpoint`).
        skip: Layer names to leave as they are. Defaults to the head
            (`"head"`, `"pre_logits"`).
        strict: Raise when a layer of `model` (other than `skip`) has no
            counterpart in the file. Defaults to `True`.

    Returns:
        A `TransferReport`.

    Raises:
        ValueError: for a missing layer (when `strict`), a name found twice
            in the file, or weights whose shapes do not fit.

    Example:

    ```python
    model = keras_vit.ViT("B/16", num_classes=10, image_size=384)
    report = load_encoder_weights(model, "runs/pretrain/final.keras")
    ```
    """
    import h5py

    weights_file, grid_sizes = _open_weights(path)
    report = TransferReport()
    with h5py.File(weights_file, "r") as store:
        groups = _layer_groups(store)
        # Check everything before changing anything.
        matches = []
        for layer in model.layers:
            if not layer.weights:
                continue
            if layer.name in skip:
                report.skipped.append(layer.name)
            elif not groups.get(layer.name):
                report.missing.append(layer.name)
            elif len(groups[layer.name]) > 1:
                found = ", ".join(g.name for g in groups[layer.name])
                raise ValueError(
                    f"{path!r} has several layers named {layer.name!r} ({found}); "
                    "cannot tell which to use."
                )
            else:
                matches.append((layer, groups[layer.name][0]))
        if strict and report.missing:
            raise ValueError(
                f"{path!r} has no weights for the layers {report.missing} of "
                f"{model.name!r}. Pass them in `skip` to keep their initial values."
            )
        if not matches:
            raise ValueError(f"No layer of {model.name!r} matches a layer in {path!r}.")
        for layer, group in matches:
            if isinstance(layer, AddPositionEmbedding):
                if _load_position_embedding(layer, group, grid_sizes.get(layer.name)):
                    report.resampled.append(layer.name)
            else:
                _load_group(layer, group, path)
            report.loaded.append(layer.name)
    return report


def _open_weights(path: str):
    """The HDF5 weights of `path` and the grid sizes in its config, if any."""
    if path.endswith(".weights.h5"):
        return path, {}
    if not path.endswith(".keras"):
        raise ValueError(
            f"Expected a '.keras' or '.weights.h5' file. Received: {path!r}. "
            "For original checkpoints use `keras_vit.ViT(..., weights=...)`."
        )
    with zipfile.ZipFile(path) as archive:
        weights = io.BytesIO(archive.read("model.weights.h5"))
        config = json.loads(archive.read("config.json"))
    grid_sizes = {}

    def visit(node):
        if isinstance(node, dict):
            inner = node.get("config")
            if node.get("class_name") == "AddPositionEmbedding" and isinstance(
                inner, dict
            ):
                grid_sizes[inner.get("name")] = tuple(inner["grid_size"])
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(config)
    return weights, grid_sizes


def _layer_groups(store) -> dict[str, list]:
    """Maps each saved layer's name to its HDF5 group(s), at any depth.

    Keras stores a model's layers as `layers/<key>/vars` (the key is not the
    layer name; the `vars` group's `name` attribute is); sublayers of a layer
    are nested groups named after the attribute that holds them.
    """
    groups: dict[str, list] = {}

    def visit(group):
        for key, child in group.items():
            if not hasattr(child, "items"):
                continue
            if key == "layers":
                for layer_group in child.values():
                    vars_group = layer_group.get("vars")
                    if vars_group is not None and "name" in vars_group.attrs:
                        name = vars_group.attrs["name"]
                        name = name.decode() if isinstance(name, bytes) else str(name)
                        groups.setdefault(name, []).append(layer_group)
                    visit(layer_group)
            elif key not in ("vars", "optimizer"):
                visit(child)

    visit(store)
    return groups


def _load_group(layer: keras.layers.Layer, group, path: str) -> None:
    """Loads `layer`'s own variables and, recursively, its sublayers'."""
    values = _group_values(group)
    try:
        layer.load_own_variables(values)
    except ValueError as error:
        raise ValueError(f"Layer {layer.name!r} of {path!r}: {error}") from error
    for key, child_group in group.items():
        if key == "vars" or not hasattr(child_group, "items"):
            continue
        child = getattr(layer, key, None)
        if isinstance(child, keras.layers.Layer):
            _load_group(child, child_group, path)


def _load_position_embedding(layer: AddPositionEmbedding, group, saved_grid) -> bool:
    """Loads (resampling if needed) a position embedding; True if resampled."""
    table = _group_values(group)["0"]  # (1, tokens, dim)
    expected = tuple(layer.embedding.shape)
    if table.shape == expected:
        layer.embedding.assign(table)
        return False
    if table.shape[-1] != expected[-1]:
        raise ValueError(
            f"Position embedding {layer.name!r}: saved width {table.shape[-1]} "
            f"!= model width {expected[-1]}."
        )
    resampled = resample_position_embedding(
        table,
        layer.grid_size,
        old_grid_size=saved_grid,
        num_prefix_tokens=layer.num_prefix_tokens,
    )
    layer.embedding.assign(resampled)
    return True


def _group_values(group) -> dict[str, np.ndarray]:
    vars_group = group.get("vars")
    if vars_group is None:
        return {}
    return {key: np.asarray(vars_group[key]) for key in vars_group}
