"""`load_weights`: the one way weights move into a keras_vit model."""

from __future__ import annotations

import os
from collections.abc import Mapping

import keras
import numpy as np

from keras_vit._export import export
from keras_vit.models import architectures
from keras_vit.models import layout as names_
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.preprocessing import preprocessing_of
from keras_vit.models.preprocessing_layer import preprocessing_layer
from keras_vit.weights import checks
from keras_vit.weights import qkv_bias
from keras_vit.weights.checkpoint import Checkpoint
from keras_vit.weights.checkpoint import read_checkpoint
from keras_vit.weights.dialects.ours import checkpoint_layout


@export("keras_vit.load_weights", "keras_vit.weights.load_weights")
def load_weights(
    model: keras.Model,
    weights: str | os.PathLike | keras.Model | Checkpoint | Mapping[str, np.ndarray],
    *,
    resample_method: str = "bilinear",
    align_corners: bool | None = None,
    keep_pre_logits: bool | None = None,
    checkpoint_grid_size: tuple[int, int] | None = None,
    resample_patch: bool | str = False,
    tag_variant: str | None = None,
    cache_dir: str | os.PathLike | None = None,
    progress: keras.utils.Progbar | None = None,
) -> list[str]:
    """Loads weights into a keras_vit model, strictly, from any source.

    `weights` may be a known tag (`"imagenet21k"`, `"augreg_in21k_ft_in1k"`,
    ... see `keras_vit.weights.list_weights()`), a path to an original `.npz`
    checkpoint, a big_vision SigLIP `.npz` (`params/img/...`), a timm or
    Hugging Face `.safetensors` file (ViT, DINOv2, SigLIP), a `torch.save`
    file of a timm ViT (`.pth`, `.pth.tar`; read without running its
    pickle), a Keras `.keras`/`.weights.h5` file written by a keras_vit model
    (matched by layer name), another keras_vit model in memory (a
    classifier, an encoder or a masked-patch pre-training model), or a dict
    of arrays in the original `.npz` layout. Every source is read into one
    `keras_vit.weights.Checkpoint` and loaded by the same rules. A
    model of another registered architecture with its own loader
    (`keras_vit.models.architectures`) is handed to it: Park & Kim's
    post-activation `keras_vit.parkkim.cnn.ResNet` takes the state dict of
    their PyTorch ResNet (`keras_vit.parkkim.torch_resnet`).

    Every key is checked before any weight changes: a checkpoint of another
    variant raises `VariantMismatchError`, and missing, unexpected or
    mis-shaped keys raise `CheckpointError` naming each key with both shapes;
    the model is then exactly as it was. What may legitimately differ is
    adapted:

    - Position embeddings on another grid (another `image_size`, square or
      not) are resampled with `keras_vit.resample_position_embedding`; the
      class-token row is kept.
    - The head is loaded when its class count matches the model's; otherwise
      (or when the source has none) the model gets a zero head (the paper's
      fine-tuning rule).
    - `pre_logits` is loaded when the model has that layer, and dropped with
      a warning when it has not (the head is then zeroed as well: it was
      trained on the dropped layer's output).
    - Pre-training layers (the masked-patch head, the [mask] token) are left
      out.

    Args:
        model: A model built by `keras_vit.ViT` (or loaded from one).
        weights: A tag, a checkpoint name (a timm name, `hf://org/repo`, a
            saved folder) or its resolved `keras_vit.weights.Source`, a file
            path, a model, a `Checkpoint` or `{key: array}`.
        resample_method: How position embeddings on another grid are
            resampled: `"bilinear"` (default, the reference), `"bicubic"`,
            `"bicubic_antialias"`, or a named mode, `"timm"` or
            `"huggingface"` (see `keras_vit.resample`).
        align_corners: Defaults to the method's convention (`True` for
            `"bilinear"`: the reference's `scipy.ndimage.zoom(order=1)`).
        keep_pre_logits: `None` (default): keep `pre_logits` when the model has
            the layer, drop it with a warning otherwise. `True`: the model must
            have the layer. `False`: drop it without a warning (the model must
            not have the layer).
        checkpoint_grid_size: The checkpoint's patch grid `(h, w)`, needed only
            for a non-square position embedding on another grid that the
            source does not record.
        resample_patch: Allow a checkpoint of another patch size: its patch
            embedding kernel is resized to the model's by the pseudo-inverse
            of a patch resize (`keras_vit.resample_patch_embedding`,
            FlexiViT). `True` or `"flexivit"`: big_vision's bilinear resize
            (half-pixel, no antialiasing); `"timm"`: timm's
            `resample_patch_embed` (bicubic, antialiased); or another method
            of that function. Defaults to `False` (another patch size is
            another variant).
        tag_variant: The variant a tag is looked up for, when it is not the
            model's (e.g. `"B/16"` weights for a model built at patch 8).
        cache_dir: Root of the download cache for tags (files go to
            `cache_dir/keras_vit/`). Defaults to `$KERAS_HOME` or `~/.keras`.
        progress: An optional `keras.utils.Progbar` advanced per assigned
            weight.

    Returns:
        Notes on what was adapted (resampling, dropped or zeroed layers).

    Raises:
        VariantMismatchError: the checkpoint is another architecture.
        CheckpointError: a bad checkpoint (see above); an unreadable,
            pickled or corrupt file; NaN or infinite values (each key
            named); a legacy Keras HDF5 file; a directory.
        WeightsNotFoundError: a tag whose file is neither cached nor
            downloadable.
        FileNotFoundError: a path that does not exist.

    Example:

    ```python
    model = keras_vit.ViT_B16(num_classes=10, image_size=384)
    keras_vit.weights.load_weights(model, "augreg_in21k")
    ```
    """
    other = _other_architecture(model)
    if other is not None:  # E.g. Park & Kim's CNNs (keras_vit.parkkim).
        _check_other_architecture_options(
            model,
            other,
            resample_method=(resample_method, "bilinear"),
            align_corners=(align_corners, None),
            keep_pre_logits=(keep_pre_logits, None),
            checkpoint_grid_size=(checkpoint_grid_size, None),
            resample_patch=(resample_patch, False),
            tag_variant=(tag_variant, None),
        )
        return other.load_weights(model, weights, progress)
    checks.patch_resize_method(resample_patch)  # before any file is read
    layout, unmapped = checkpoint_layout(model)
    checkpoint = read_checkpoint(
        weights, model, layout, cache_dir=cache_dir, tag_variant=tag_variant
    )
    qkv_bias.check_qkv_bias(layout, checkpoint.params, model.name)
    plan = checks.plan_load(
        model,
        checkpoint.params,
        resample_method=resample_method,
        align_corners=align_corners,
        keep_pre_logits=keep_pre_logits,
        checkpoint_grid_size=checkpoint_grid_size or checkpoint.grid_size,
        resample_patch=resample_patch,
        layout=(layout, unmapped),
        source=checkpoint.source,
        heads_recorded=checkpoint.heads_recorded,
    )
    checks.apply_plan(model, plan, progress)
    notes = checkpoint.notes + plan.notes
    if checkpoint.preprocessing is not None:
        notes += adopt_preprocessing(model, checkpoint.preprocessing)
    names = checkpoint.class_names
    head = model.get_layer(names_.HEAD) if _has(model, names_.HEAD) else None
    if names and head is not None and int(head.units) == len(names):
        if hasattr(type(model), "class_names"):
            model.class_names = names
    return notes


def _has(model, name: str) -> bool:
    return any(layer.name == name for layer in model.layers)


def adopt_preprocessing(model: keras.Model, preprocessing: Preprocessing) -> list[str]:
    """Gives `model` the input contract of the weights loaded into it.

    `model.preprocessing` becomes `preprocessing`, and a model built with
    `include_preprocessing=True` has its rescaling layer set to the same
    mean and std, so that it keeps taking `[0, 255]` pixels.

    Returns:
        A note when the contract changed, else nothing.
    """
    before = preprocessing_of(model)
    if hasattr(type(model), "preprocessing"):
        model.preprocessing = preprocessing
    if _has(model, names_.PREPROCESSING):
        layer = model.get_layer(names_.PREPROCESSING)
        fresh = preprocessing_layer(preprocessing)
        layer.scale, layer.offset = fresh.scale, fresh.offset
        model.predict_function = None  # a traced one holds the old constants
    if before == preprocessing:
        return []
    return [f"Inputs are now prepared as the weights were: {preprocessing.describe()}."]


def _other_architecture(model):
    """The registered architecture of `model` when it loads weights its own
    way (`ModelArchitecture.load_weights`), else `None` (a ViT: the path
    below)."""
    return next(
        (
            a
            for a in architectures.architectures()
            if a.load_weights and a.describes(model)
        ),
        None,
    )


def _check_other_architecture_options(model, architecture, **given) -> None:
    """Refuses the ViT-only options of `load_weights` for a model of another
    architecture, in one line."""
    used = sorted(k for k, (value, default) in given.items() if value != default)
    if used:
        raise TypeError(
            f"load_weights: {', '.join(used)} only apply to a ViT; "
            f"{model.name!r} is a {architecture.title}, which loads its checkpoint "
            "as it is."
        )
