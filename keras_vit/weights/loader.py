"""`load_weights`: one entry point for tags, files and arrays."""

from __future__ import annotations

import os
from collections.abc import Mapping

import keras
import numpy as np

from keras_vit.models.variants import parse_variant
from keras_vit.weights import architecture
from keras_vit.weights import checks
from keras_vit.weights import npz
from keras_vit.weights import registry
from keras_vit.weights import safetensors
from keras_vit.weights.errors import CheckpointError

KERAS_SUFFIXES = (".keras", ".weights.h5", ".h5")


def load_weights(
    model: keras.Model,
    weights: str | os.PathLike | Mapping[str, np.ndarray],
    *,
    resample_method: str = "bilinear",
    align_corners: bool = True,
    keep_pre_logits: bool | None = None,
    checkpoint_grid_size: tuple[int, int] | None = None,
    cache_dir: str | os.PathLike | None = None,
    progress: keras.utils.Progbar | None = None,
) -> list[str]:
    """Loads pretrained weights into a `keras_vit` model, strictly.

    `weights` may be a known tag (`"imagenet21k"`, `"augreg_in21k_ft_in1k"`,
    ... see `keras_vit.weights.list_weights()`), a path to an original `.npz`
    checkpoint, a timm or Hugging Face `.safetensors` file, a Keras
    `.keras`/`.weights.h5` file (loaded by `model.load_weights`), or a dict
    of arrays in the original `.npz` layout.

    Every key is checked before any weight changes: a checkpoint of another
    variant raises `VariantMismatchError`, and missing, unexpected or
    mis-shaped keys raise `CheckpointError` naming each key with both shapes.
    What may legitimately differ is adapted:

    - Position embeddings on another grid (another `image_size`, square or
      not) are resampled with `keras_vit.resample_position_embedding`; the
      class-token row is kept.
    - The head is loaded when its class count matches the model's; otherwise
      the model gets a zero head (the paper's fine-tuning rule).
    - `pre_logits` is loaded when the model has that layer, and dropped with
      a warning when it has not (the head is then zeroed as well: it was
      trained on the dropped layer's output).

    Args:
        model: A model built by `keras_vit.ViT` (or loaded from one).
        weights: A tag, a file path, or `{key: array}`.
        resample_method: `"bilinear"` (default, the reference) or
            `"bicubic"`, for position embeddings on another grid.
        align_corners: Defaults to `True`, which reproduces the reference's
            `scipy.ndimage.zoom(order=1)`.
        keep_pre_logits: `None` (default): keep `pre_logits` when the model has
            the layer, drop it with a warning otherwise. `True`: the model must
            have the layer. `False`: drop it without a warning (the model must
            not have the layer).
        checkpoint_grid_size: The checkpoint's patch grid `(h, w)`, needed only
            for a non-square position embedding on another grid.
        cache_dir: Root of the download cache for tags (files go to
            `cache_dir/keras_vit/`). Defaults to `$KERAS_HOME` or `~/.keras`.
        progress: An optional `keras.utils.Progbar` advanced per assigned
            weight.

    Returns:
        Notes on what was adapted (resampling, dropped or zeroed layers).

    Raises:
        VariantMismatchError: the checkpoint is another architecture.
        CheckpointError: a bad checkpoint (see above), or an unreadable,
            pickled or corrupt file.
        WeightsNotFoundError: a tag whose file is neither cached nor
            downloadable.
        FileNotFoundError: a path that does not exist.

    Example:

    ```python
    model = keras_vit.ViT_B16(num_classes=10, image_size=384)
    keras_vit.weights.load_weights(model, "augreg_in21k")
    ```
    """
    notes = []
    if isinstance(weights, Mapping):
        params = npz.normalize(dict(weights))
    else:
        params, notes, grid = _read(model, weights, cache_dir)
        if params is None:  # a Keras file, loaded by Keras
            return notes
        checkpoint_grid_size = checkpoint_grid_size or grid
    plan = checks.plan_load(
        model,
        params,
        resample_method=resample_method,
        align_corners=align_corners,
        keep_pre_logits=keep_pre_logits,
        checkpoint_grid_size=checkpoint_grid_size,
    )
    checks.apply_plan(model, plan, progress)
    return notes + plan.notes


def _read(model, weights, cache_dir):
    """Returns `(params or None, notes, checkpoint grid or None)`."""
    path = os.fspath(weights)
    if registry.is_tag(path) and not os.path.exists(path):
        layout, _ = npz.checkpoint_layout(model)
        arch = architecture.describe({k: t.shape for k, t in layout.items()})
        entry = registry.find(path, arch.variant)
        stride = parse_variant(entry.variant).total_stride
        grid = (entry.image_size // stride,) * 2  # the files' grids are square
        file = registry.fetch(entry, cache_dir)
        return npz.read_npz(file), [f"Loaded {entry.tag!r} from {file}."], grid
    if not os.path.exists(path):
        if os.sep in path or "." in os.path.basename(path):
            raise FileNotFoundError(f"No checkpoint file at {path!r}.")
        registry.find(path, None)  # raises: unknown tag, listing the known ones
    if path.endswith(KERAS_SUFFIXES):
        model.load_weights(path)
        return None, [f"Loaded Keras weights from {path}."], None
    kind = _sniff(path)
    if kind == "npz":
        return npz.read_npz(path), [], None
    tensors = safetensors.read_safetensors(path)
    layout, _ = npz.checkpoint_layout(model)
    num_heads = next(
        (t.shape[1] for k, t in layout.items() if k.endswith("/query/kernel")), None
    )
    params = safetensors.to_original_layout(tensors, num_heads)
    return npz.normalize(params), [], None


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
