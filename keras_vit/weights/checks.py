"""Strict checking of a checkpoint against a model, before anything changes.

`plan_load` compares a checkpoint (original `.npz` key layout) with the
layout the model expects, decides what happens to the parts that may
legitimately differ (position-embedding grid, head, `pre_logits`), and
returns the complete set of new variable values. Only when every key has
passed does `apply_plan` assign them, so a failed load leaves the model's
weights exactly as they were.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import re
import warnings
from collections.abc import Mapping

import keras
import numpy as np

from keras_vit.resample import METHODS
from keras_vit.resample import resample_patch_embedding
from keras_vit.resample import resample_position_embedding
from keras_vit.resample import resolve_patch_method
from keras_vit.weights.architecture import describe
from keras_vit.weights.architecture import differences
from keras_vit.weights.dialects.ours import checkpoint_layout
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.errors import VariantMismatchError
from keras_vit.weights.keys import CLS_KEY
from keras_vit.weights.keys import DIST_HEAD_KEYS
from keras_vit.weights.keys import DIST_KEY
from keras_vit.weights.keys import EMBEDDING_KEY
from keras_vit.weights.keys import HEAD_KEYS
from keras_vit.weights.keys import POSEMB_KEY
from keras_vit.weights.keys import PRE_LOGITS_KEYS

logger = logging.getLogger("keras_vit.weights")

_MAX_LISTED = 10
# Variables that adapt a model's weights: LoRA adapters (Keras's `Dense` and
# keras_vit's attention) and the scales of a quantized kernel.
_LORA = re.compile(r"(?:^|/|_)lora_kernel_[ab]$")
_QUANTIZED = re.compile(r"(?:^|/|_)(?:kernel_scale|inputs_scale|[a-z_]*amax_history)$")
# NumPy-extension float types (ml_dtypes) a checkpoint may hold.
_LOW_FLOATS = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


@dataclasses.dataclass
class LoadPlan:
    """The validated result of matching a checkpoint to a model.

    Attributes:
        values: `{variable path: new value}` for every variable to assign.
        notes: What was adapted (resampled, dropped, re-initialised).
    """

    values: dict[str, np.ndarray]
    notes: list[str]


def _shape(shape) -> str:
    return str(tuple(int(d) for d in shape))


def _listing(items: list[str]) -> str:
    shown = "\n".join(f"  {item}" for item in items[:_MAX_LISTED])
    more = len(items) - _MAX_LISTED
    return shown + (f"\n  ... and {more} more" if more > 0 else "")


def _check_variant(model_arch, ckpt_arch, layout, params):
    differ = differences(model_arch, ckpt_arch)
    if not differ:
        return
    details = ", ".join(
        f"{f}: checkpoint {getattr(ckpt_arch, f)} vs model {getattr(model_arch, f)}"
        for f in differ
    )
    example = next(
        (
            f"For example {key!r} has shape {_shape(params[key].shape)} in the "
            f"checkpoint but {_shape(target.shape)} in the model."
            for key, target in layout.items()
            if key in params and tuple(params[key].shape) != target.shape
        ),
        "",
    )
    raise VariantMismatchError(
        f"The checkpoint is a {ckpt_arch.name} but the model is a "
        f"{model_arch.name} ({details}). {example} Build the model with the "
        "checkpoint's variant; no weight was changed.",
        mismatched={
            key: (tuple(params[key].shape), target.shape)
            for key, target in layout.items()
            if key in params and tuple(params[key].shape) != target.shape
        },
    )


def _posemb(params, layout, model, method, align_corners, grid_size, notes):
    """The checkpoint's position embedding, resampled to the model's grid."""
    table, target = params[POSEMB_KEY], layout[POSEMB_KEY]
    if tuple(table.shape) == target.shape:
        return table
    layer = model.get_layer(target.path.split("/")[0])
    prefix = layer.num_prefix_tokens  # table rows before the grid
    if (
        any((t in params) != (t in layout) for t in (CLS_KEY, DIST_KEY))  # reported
        or table.ndim != 3
        or table.shape[0] != 1
        or table.shape[2] != target.shape[2]
        or table.shape[1] < prefix
    ):
        return None  # reported as mis-shaped
    num_patches = table.shape[1] - prefix
    if grid_size is None:
        side = math.isqrt(num_patches)
        if side * side != num_patches:
            hint = "pass `checkpoint_grid_size=(h, w)`"
            if prefix and math.isqrt(table.shape[1]) ** 2 == table.shape[1]:
                hint += (
                    ", or, for a table without a class-token row (DeiT III, "
                    "DINOv2, SigLIP), build the model with `no_embed_class=True`"
                )
            raise CheckpointError(
                f"{POSEMB_KEY!r} has shape {_shape(table.shape)} and the model "
                f"needs {_shape(target.shape)}, but {num_patches} positions do "
                f"not form a square grid: {hint}.",
                mismatched={POSEMB_KEY: (tuple(table.shape), target.shape)},
            )
        grid_size = (side, side)
    if grid_size[0] * grid_size[1] != num_patches:
        raise CheckpointError(
            f"checkpoint_grid_size={tuple(grid_size)} has "
            f"{grid_size[0] * grid_size[1]} positions but {POSEMB_KEY!r} has "
            f"{num_patches} (shape {_shape(table.shape)})."
        )
    notes.append(
        f"Resampled the position embedding from a {grid_size[0]}x{grid_size[1]} "
        f"to a {layer.grid_size[0]}x{layer.grid_size[1]} grid ({method})."
    )
    return resample_position_embedding(
        table,
        layer.grid_size,
        old_grid_size=tuple(grid_size),
        num_prefix_tokens=prefix,
        method=method,
        align_corners=align_corners,
    )


def plan_load(
    model: keras.Model,
    params: Mapping[str, np.ndarray],
    *,
    resample_method: str = "bilinear",
    align_corners: bool | None = None,
    keep_pre_logits: bool | None = None,
    checkpoint_grid_size: tuple[int, int] | None = None,
    resample_patch: bool | str = False,
    layout: tuple[dict, list[str]] | None = None,
    source: str = "The checkpoint",
    heads_recorded: bool = True,
) -> LoadPlan:
    """Validates `params` against `model` and computes every new value.

    Args:
        model: A model built by `keras_vit.ViT`.
        params: The checkpoint, `{key: array}` in the original `.npz` layout.
        resample_method: `"bilinear"` or `"bicubic"`, for a position
            embedding on another grid.
        align_corners: Corner alignment of the resampling (`True`
            reproduces `scipy.ndimage.zoom(order=1)`).
        keep_pre_logits: `None` loads `pre_logits` when the model has that
            layer and drops it with a warning when it has not; `True`
            requires the model to have it; `False` drops it silently and
            requires the model not to have it.
        checkpoint_grid_size: The checkpoint's patch grid, when its position
            embedding is not square.
        resample_patch: Resize a patch embedding of another patch size to
            the model's (FlexiViT) instead of reporting another variant:
            `True` or `"flexivit"` (big_vision's bilinear resize), `"timm"`
            (timm's bicubic), or a method of
            `keras_vit.resample.resample_patch_embedding`.
        layout: `checkpoint_layout(model)`, when the caller has it already.
        source: What the checkpoint was read from, for messages.
        heads_recorded: Whether `params`' attention shapes are the source's
            own; `False` (a timm or Hugging Face file, split by the model's
            heads) keeps messages from naming a head count.

    Returns:
        A `LoadPlan`; nothing has been assigned yet.

    Raises:
        VariantMismatchError: the checkpoint is another architecture.
        CheckpointError: missing, unexpected or mis-shaped keys, listed with
            both shapes.
    """
    layout, unmapped = layout if layout is not None else checkpoint_layout(model)
    check_not_adapted(unmapped, model.name, source=False)
    if unmapped:
        raise CheckpointError(
            f"The model {model.name!r} has weights that no checkpoint key maps "
            f"to (is it a keras_vit.ViT model?):\n{_listing(unmapped)}"
        )
    params = {key: np.asarray(value) for key, value in params.items()}
    if not params:
        raise CheckpointError(f"{_source(source)} holds no weights.")
    _check_dtypes(params)
    if not any(key in layout for key in params):
        raise CheckpointError(
            f"{_source(source)} has none of the keys a keras_vit model expects; "
            "it is not a ViT checkpoint keras_vit can read. Its keys:\n"
            + _listing(sorted(params))
        )
    model_arch = describe({k: t.shape for k, t in layout.items()})
    shapes = {k: tuple(v.shape) for k, v in params.items()}
    ckpt_arch = describe(shapes, heads_recorded=heads_recorded)
    patch_method = patch_resize_method(resample_patch)
    patch_notes = []
    if patch_method and EMBEDDING_KEY in params and EMBEDDING_KEY in layout:
        patch_notes = _resize_patch(params, layout[EMBEDDING_KEY].shape, patch_method)
        shapes = {k: tuple(v.shape) for k, v in params.items()}
        ckpt_arch = describe(shapes, heads_recorded=heads_recorded)
    _check_variant(model_arch, ckpt_arch, layout, params)

    warn, pre_logits_notes = _pre_logits_rule(layout, params, keep_pre_logits)
    pre_logits_dropped = bool(pre_logits_notes)
    skip = {k for k in PRE_LOGITS_KEYS if pre_logits_dropped and k in params}
    zero, head_notes = _head_rule(layout, params, pre_logits_dropped)
    notes = patch_notes + pre_logits_notes + head_notes
    if zero:  # a distilled model's second head follows the first
        zero.update(k for k in DIST_HEAD_KEYS if k in layout)
    if zero or HEAD_KEYS[0] not in layout:
        skip.update(k for k in HEAD_KEYS + DIST_HEAD_KEYS if k in params)
    if POSEMB_KEY in layout and POSEMB_KEY in params:
        table = _posemb(
            params,
            layout,
            model,
            resample_method,
            align_corners,
            checkpoint_grid_size,
            notes,
        )
        if table is not None:
            params[POSEMB_KEY] = table

    missing = [k for k in layout if k not in params and k not in zero]
    unexpected = [k for k in params if k not in layout and k not in skip]
    mismatched = {
        key: (tuple(params[key].shape), target.shape)
        for key, target in layout.items()
        if key in params
        and key not in zero
        and tuple(params[key].shape) != target.shape
    }
    if missing or unexpected or mismatched:
        _raise_misfit(
            model, model_arch, params, missing, unexpected, mismatched, source
        )
    check_finite(
        {k: params[k] for k in layout if k in params and k not in zero}, source
    )
    values = _assemble(layout, params, zero)
    # Only a load that will happen is announced.
    if warn:
        warnings.warn(pre_logits_notes[0], stacklevel=3)
    for note in notes:
        logger.info(note)
    return LoadPlan(values, notes)


def check_not_adapted(paths, model_name: str, *, source: bool) -> None:
    """Refuses, in one line, a model with LoRA adapters or quantized kernels.

    Args:
        paths: The model's variable paths (or those no rule maps).
        model_name: For the message.
        source: Whether the model is read from (a checkpoint) rather than
            loaded into.

    Raises:
        CheckpointError: naming the first adapter or scale variable, and
            the order of steps that works.
    """
    lora = next((p for p in paths if _LORA.search(p)), None)
    if lora is not None:
        fix = (
            "pass keras_vit.finetune.merge_lora(model) instead"
            if source
            else "merge_lora() first, or load weights before enable_lora"
        )
        raise CheckpointError(
            f"The model {model_name!r} has unmerged LoRA adapters ({lora!r}): {fix}."
        )
    scale = next((p for p in paths if _QUANTIZED.search(p)), None)
    if scale is not None:
        step = "read the model" if source else "load weights"
        raise CheckpointError(
            f"The model {model_name!r} is quantized ({scale!r}): {step} before "
            "quantize."
        )


def patch_resize_method(resample_patch: bool | str | None) -> str | None:
    """`load_weights`' `resample_patch=` as a patch-resize method, or `None`.

    `False`/`None`: another patch size is another variant. `True`: the
    default, `"flexivit"`. A string is checked against
    `keras_vit.resample.resolve_patch_method`.
    """
    if resample_patch is None or resample_patch is False:
        return None
    if resample_patch is True:
        return "flexivit"
    try:
        resolve_patch_method(resample_patch)
    except ValueError:
        raise ValueError(
            "`resample_patch` must be True, False, 'flexivit', 'timm' or one of "
            f"{METHODS}. Received: resample_patch={resample_patch!r}"
        ) from None
    return resample_patch


def _resize_patch(params, target_shape, method) -> list[str]:
    """Resizes the checkpoint's patch kernel to the model's (FlexiViT)."""
    kernel = params[EMBEDDING_KEY]
    if kernel.ndim != 4 or tuple(kernel.shape[:2]) == tuple(target_shape[:2]):
        return []
    params[EMBEDDING_KEY] = resample_patch_embedding(kernel, target_shape[:2], method)
    return [
        f"Resized the patch embedding from {tuple(kernel.shape[:2])} to "
        f"{tuple(target_shape[:2])} patches (FlexiViT pseudo-inverse, "
        f"resample_patch={method!r})."
    ]


def check_finite(arrays: Mapping[str, np.ndarray], source: str) -> None:
    """Refuses arrays with NaN or infinite values, naming each key.

    Args:
        arrays: `{key: array}`, keyed as the source names them (a file's own
            keys, so that the message points into the file).
        source: What the arrays were read from, for the message.

    Raises:
        CheckpointError: listing every key with NaN or inf values, with
            their counts.
    """
    bad = []
    for key, value in arrays.items():
        value = np.asarray(value)
        if value.dtype.kind not in "fc" and value.dtype.name not in _LOW_FLOATS:
            continue
        if np.isfinite(np.sum(value, dtype=np.float64)):
            continue  # one pass; a NaN or inf anywhere makes the sum so
        nan = int(np.count_nonzero(np.isnan(value)))
        inf = int(np.count_nonzero(np.isinf(value)))
        if nan or inf:
            counts = " and ".join(
                f"{n} {kind}" for n, kind in ((nan, "NaN"), (inf, "inf")) if n
            )
            bad.append(f"{key} {_shape(value.shape)}: {counts} of {value.size}")
    if bad:
        raise CheckpointError(
            f"{_source(source)} holds NaN or infinite values (a corrupt file, or "
            "weights saved from a diverged run); no weight was changed:\n"
            + _listing(bad)
        )


def _check_dtypes(params):
    for key, value in params.items():
        floating = np.issubdtype(value.dtype, np.floating)
        if not (floating or value.dtype.name in _LOW_FLOATS):
            raise CheckpointError(
                f"{key!r} has dtype {value.dtype}; checkpoint weights must be "
                "floating point."
            )


def _pre_logits_rule(layout, params, keep_pre_logits):
    """Returns `(warn, notes)`; a note when the checkpoint's layer is dropped."""
    in_model, in_checkpoint = PRE_LOGITS_KEYS[0] in layout, PRE_LOGITS_KEYS[0] in params
    if keep_pre_logits and not in_model:
        raise ValueError(
            "keep_pre_logits=True, but the model has no `pre_logits` layer. "
            "Build it with `representation_size=` set to the checkpoint's "
            "pre-logits width."
        )
    if keep_pre_logits is False and in_model:
        raise ValueError(
            "keep_pre_logits=False, but the model has a `pre_logits` layer. "
            "Build it with `representation_size=None` to drop the layer."
        )
    if not in_checkpoint or in_model:
        return False, []  # loaded, or reported as missing
    width = params[PRE_LOGITS_KEYS[0]].shape[-1]
    note = (
        f"The checkpoint has a `pre_logits` layer (width {width}) and the "
        "model has none: it is dropped (the paper's fine-tuning rule). "
        f"Build the model with `representation_size={width}` to keep it."
    )
    return keep_pre_logits is None, [note]


def _head_rule(layout, params, pre_logits_dropped):
    """Returns `(keys to zero, notes)`: the paper's fine-tuning rule."""
    in_model, in_checkpoint = HEAD_KEYS[0] in layout, HEAD_KEYS[0] in params
    if not in_model:
        if in_checkpoint:
            return set(), ["The model has no head: the checkpoint's head is dropped."]
        return set(), []
    classes = layout[HEAD_KEYS[0]].shape[-1]
    if not in_checkpoint:
        reason = "the checkpoint has no head"
    elif pre_logits_dropped:
        reason = "the checkpoint's head was trained on the dropped pre_logits"
    elif params[HEAD_KEYS[0]].shape[-1] != classes:
        reason = (
            f"the checkpoint's head has {params[HEAD_KEYS[0]].shape[-1]} "
            f"classes and the model's {classes}"
        )
    else:
        return set(), []
    return set(HEAD_KEYS), [f"The head is zero-initialised: {reason}."]


def _raise_misfit(model, model_arch, params, missing, unexpected, mismatched, source):
    parts = []
    if missing:
        hint = ""
        if PRE_LOGITS_KEYS[0] in missing:
            hint = (
                " (the model has a `pre_logits` layer but the checkpoint has "
                "none: build it with `representation_size=None`)"
            )
        parts.append(f"Missing keys{hint}:\n{_listing(missing)}")
    if unexpected:
        listed = [f"{k} {_shape(params[k].shape)}" for k in unexpected]
        parts.append(f"Unexpected keys:\n{_listing(listed)}")
    if mismatched:
        listed = [
            f"{k}: checkpoint {_shape(c)} vs model {_shape(m)}"
            for k, (c, m) in mismatched.items()
        ]
        parts.append(f"Mis-shaped keys:\n{_listing(listed)}")
    raise CheckpointError(
        f"{_source(source)} does not fit the model {model.name!r} "
        f"({model_arch.name}); no weight was changed.\n" + "\n".join(parts),
        missing=missing,
        unexpected=unexpected,
        mismatched=mismatched,
    )


def _source(source: str) -> str:
    return "The checkpoint" if source == "The checkpoint" else f"{source!r}"


def _assemble(layout, params, zero) -> dict[str, np.ndarray]:
    """Builds each variable's full value, stacking query/key/value parts."""
    values, parts = {}, {}
    for key, target in layout.items():
        if key in zero:
            values[target.path] = np.zeros(target.shape, np.float32)
            continue
        array = np.asarray(params[key], np.float32)
        if target.part is None:
            values[target.path] = array
        else:
            axis, index = target.part
            parts.setdefault(target.path, (axis, {}))[1][index] = array
    for path, (axis, pieces) in parts.items():
        values[path] = np.stack([pieces[i] for i in sorted(pieces)], axis=axis)
    return values


def apply_plan(model: keras.Model, plan: LoadPlan, progress=None) -> None:
    """Assigns the values of a validated `LoadPlan` to `model`.

    Args:
        model: The model `plan` was made for.
        plan: The result of `plan_load`.
        progress: An optional `keras.utils.Progbar`, advanced once per
            assigned variable.
    """
    variables = {variable.path: variable for variable in model.weights}
    for step, (path, value) in enumerate(plan.values.items(), start=1):
        variable = variables[path]
        variable.assign(value.astype(keras.backend.standardize_dtype(variable.dtype)))
        if progress is not None:
            progress.update(step)
