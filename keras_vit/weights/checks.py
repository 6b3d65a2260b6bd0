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

from keras_vit.models.variants import BACKBONES
from keras_vit.models.variants import VARIANTS
from keras_vit.resample import resample_position_embedding
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.errors import VariantMismatchError
from keras_vit.weights.npz import HEAD_KEYS
from keras_vit.weights.npz import POSEMB_KEY
from keras_vit.weights.npz import PRE_LOGITS_KEYS
from keras_vit.weights.npz import checkpoint_layout

logger = logging.getLogger("keras_vit.weights")

_MAX_LISTED = 10
_BLOCK = re.compile(r"^Transformer/encoderblock_(\d+)/")
_UNIT = re.compile(r"^block(\d+)/unit(\d+)/")
# NumPy-extension float types (ml_dtypes) a checkpoint may hold.
_LOW_FLOATS = ("bfloat16", "float8_e4m3fn", "float8_e5m2")


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What a set of checkpoint shapes says about the model that made it.

    Attributes:
        hidden_dim: Token width `D`.
        depth: Number of encoder blocks.
        num_heads: Attention heads.
        mlp_dim: Hidden width of the MLP blocks.
        patch_size: `(height, width)` of the patch embedding.
        backbone: `(units per stage, stem width)` of a hybrid's ResNet, or
            `None` for a plain ViT.
    """

    hidden_dim: int | None
    depth: int
    num_heads: int | None
    mlp_dim: int | None
    patch_size: tuple[int, int] | None
    backbone: tuple[tuple[int, ...], int] | None

    @property
    def name(self) -> str:
        """A readable name such as `"ViT-B/16"` or `"R50+ViT-B/16"`."""
        size = next(
            (
                name
                for name, v in VARIANTS.items()
                if (v.hidden_dim, v.depth, v.mlp_dim, v.num_heads)
                == (self.hidden_dim, self.depth, self.mlp_dim, self.num_heads)
            ),
            None,
        )
        patch = self.patch_size[0] if self.patch_size else None
        if size is None:
            return (
                f"ViT(hidden_dim={self.hidden_dim}, depth={self.depth}, "
                f"num_heads={self.num_heads}, mlp_dim={self.mlp_dim}, "
                f"patch_size={self.patch_size}, backbone={self.backbone})"
            )
        if self.backbone is None:
            return f"ViT-{size}/{patch}"
        layers, width = self.backbone
        stride = 4 * 2 ** max(len(layers) - 1, 0) * (patch or 1)
        prefix = next(
            (
                name
                for (name, _), spec in BACKBONES.items()
                if (spec.layers, spec.width) == (layers, width)
            ),
            f"ResNet{layers}x{width}",
        )
        return f"{prefix}+ViT-{size}/{stride}"

    @property
    def variant(self) -> str | None:
        """The `keras_vit.ViT` variant string (`"R50+B/16"`), if it has one."""
        name = self.name
        if not name.startswith(("ViT-", "R")) or "(" in name:
            return None
        return name.replace("ViT-", "")


def describe(shapes: Mapping[str, tuple[int, ...]]) -> Architecture:
    """Reads the architecture off checkpoint keys and shapes.

    Every field is read from the first key that determines it, so that one
    missing key is reported as missing rather than as another architecture.

    Args:
        shapes: `{key: shape}` in the original `.npz` layout.

    Returns:
        An `Architecture`; fields the keys do not determine are `None`.
    """

    def first(candidates):
        for pattern, axis in candidates:
            for key, shape in shapes.items():
                if re.fullmatch(pattern, key) and len(shape) > abs(axis):
                    return int(shape[axis])
        return None

    block = r"Transformer/encoderblock_\d+"
    mha = rf"{block}/MultiHeadDotProductAttention_1"
    blocks = {int(m.group(1)) for k in shapes if (m := _BLOCK.match(k))}
    kernel = shapes.get("embedding/kernel")
    patch = tuple(int(d) for d in kernel[:2]) if kernel and len(kernel) == 4 else None
    backbone = None
    units = {}
    for key in shapes:
        match = _UNIT.match(key)
        if match:
            stage, unit = int(match.group(1)), int(match.group(2))
            units[stage] = max(units.get(stage, 0), unit)
    if units or any(k.startswith(("conv_root/", "gn_root/")) for k in shapes):
        layers = tuple(units.get(s, 0) for s in range(1, max(units, default=0) + 1))
        width = first([("conv_root/kernel", -1), ("gn_root/scale", 0)])
        backbone = (layers, width)
    return Architecture(
        hidden_dim=first(
            [("embedding/kernel", -1), ("Transformer/encoder_norm/scale", 0),
             ("cls", -1), (rf"{mha}/(query|key|value)/kernel", 0)]
        ),
        depth=len(blocks),
        num_heads=first(
            [(rf"{mha}/(query|key|value)/kernel", 1),
             (rf"{mha}/(query|key|value)/bias", 0), (rf"{mha}/out/kernel", 0)]
        ),
        mlp_dim=first(
            [(rf"{block}/MlpBlock_3/Dense_0/kernel", -1),
             (rf"{block}/MlpBlock_3/Dense_0/bias", 0),
             (rf"{block}/MlpBlock_3/Dense_1/kernel", 0)]
        ),
        patch_size=patch,
        backbone=backbone,
    )  # fmt: skip


def differences(model: Architecture, checkpoint: Architecture) -> list[str]:
    """Fields on which two architectures differ, where both are known."""
    out = []
    for field in ("hidden_dim", "depth", "num_heads", "mlp_dim", "patch_size"):
        a, b = getattr(model, field), getattr(checkpoint, field)
        if a is not None and b is not None and a != b:
            out.append(field)
    a, b = model.backbone, checkpoint.backbone
    if (a is None) != (b is None):
        out.append("backbone")
    elif a is not None and (
        a[0] != b[0] or (a[1] is not None and b[1] is not None and a[1] != b[1])
    ):
        out.append("backbone")
    return out


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
    return "(" + ", ".join(str(int(d)) for d in shape) + (",)" if len(shape) == 1 else ")")


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


def _posemb(params, target, model, method, align_corners, grid_size, notes):
    """The checkpoint's position embedding, resampled to the model's grid."""
    table = params[POSEMB_KEY]
    if tuple(table.shape) == target.shape:
        return table
    layer = model.get_layer(target.path.split("/")[0])
    prefix = layer.num_prefix_tokens
    if (
        table.ndim != 3
        or table.shape[0] != 1
        or table.shape[2] != target.shape[2]
        or table.shape[1] < prefix
    ):
        return None  # reported as mis-shaped
    num_patches = table.shape[1] - prefix
    if grid_size is None:
        side = math.isqrt(num_patches)
        if side * side != num_patches:
            raise CheckpointError(
                f"{POSEMB_KEY!r} has shape {_shape(table.shape)} and the model "
                f"needs {_shape(target.shape)}, but {num_patches} positions do "
                "not form a square grid: pass `checkpoint_grid_size=(h, w)`.",
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
    align_corners: bool = True,
    keep_pre_logits: bool | None = None,
    checkpoint_grid_size: tuple[int, int] | None = None,
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

    Returns:
        A `LoadPlan`; nothing has been assigned yet.

    Raises:
        VariantMismatchError: the checkpoint is another architecture.
        CheckpointError: missing, unexpected or mis-shaped keys, listed with
            both shapes.
    """
    layout, unmapped = checkpoint_layout(model)
    if unmapped:
        raise CheckpointError(
            f"The model {model.name!r} has weights that no checkpoint key maps "
            f"to (is it a keras_vit.ViT model?):\n{_listing(unmapped)}"
        )
    params = {key: np.asarray(value) for key, value in params.items()}
    for key, value in params.items():
        if not (
            np.issubdtype(value.dtype, np.floating) or value.dtype.name in _LOW_FLOATS
        ):
            raise CheckpointError(
                f"{key!r} has dtype {value.dtype}; checkpoint weights must be "
                "floating point."
            )
    model_arch = describe({k: t.shape for k, t in layout.items()})
    ckpt_arch = describe({k: tuple(v.shape) for k, v in params.items()})
    _check_variant(model_arch, ckpt_arch, layout, params)

    notes, skip, zero = [], set(), set()
    model_pre, ckpt_pre = PRE_LOGITS_KEYS[0] in layout, PRE_LOGITS_KEYS[0] in params
    head_trained_on_pre_logits = False
    if keep_pre_logits and not model_pre:
        raise ValueError(
            "keep_pre_logits=True, but the model has no `pre_logits` layer. "
            "Build it with `representation_size=` set to the checkpoint's "
            "pre-logits width."
        )
    if keep_pre_logits is False and model_pre:
        raise ValueError(
            "keep_pre_logits=False, but the model has a `pre_logits` layer. "
            "Build it with `representation_size=None` to drop the layer."
        )
    if ckpt_pre and not model_pre:
        skip.update(k for k in PRE_LOGITS_KEYS if k in params)
        head_trained_on_pre_logits = True
        width = params[PRE_LOGITS_KEYS[0]].shape[-1]
        message = (
            f"The checkpoint has a `pre_logits` layer (width {width}) and the "
            "model has none: it is dropped (the paper's fine-tuning rule). "
            f"Build the model with `representation_size={width}` to keep it."
        )
        if keep_pre_logits is None:
            warnings.warn(message, stacklevel=3)
        notes.append(message)

    model_head, ckpt_head = HEAD_KEYS[0] in layout, HEAD_KEYS[0] in params
    if ckpt_head and not model_head:
        skip.update(k for k in HEAD_KEYS if k in params)
        notes.append("The model has no head: the checkpoint's head is dropped.")
    elif model_head:
        model_classes = layout[HEAD_KEYS[0]].shape[-1]
        reason = None
        if not ckpt_head:
            reason = "the checkpoint has no head"
        elif head_trained_on_pre_logits:
            reason = "the checkpoint's head was trained on the dropped pre_logits"
        elif params[HEAD_KEYS[0]].shape[-1] != model_classes:
            reason = (
                f"the checkpoint's head has {params[HEAD_KEYS[0]].shape[-1]} "
                f"classes and the model's {model_classes}"
            )
        if reason is not None:
            skip.update(k for k in HEAD_KEYS if k in params)
            zero.update(HEAD_KEYS)
            message = f"The head is zero-initialised: {reason}."
            logger.info(message)
            notes.append(message)

    posemb = None
    if POSEMB_KEY in layout and POSEMB_KEY in params:
        posemb = _posemb(
            params,
            layout[POSEMB_KEY],
            model,
            resample_method,
            align_corners,
            checkpoint_grid_size,
            notes,
        )
        if posemb is not None:
            params[POSEMB_KEY] = posemb

    missing, mismatched = [], {}
    for key, target in layout.items():
        if key in zero:
            continue
        if key not in params:
            missing.append(key)
        elif tuple(params[key].shape) != target.shape:
            mismatched[key] = (tuple(params[key].shape), target.shape)
    unexpected = [key for key in params if key not in layout and key not in skip]
    if missing or unexpected or mismatched:
        parts = []
        if missing:
            hint = ""
            if model_pre and not ckpt_pre:
                hint = (
                    " (the model has a `pre_logits` layer but the checkpoint "
                    "has none: build it with `representation_size=None`)"
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
            f"The checkpoint does not fit the model {model.name!r} "
            f"({model_arch.name}); no weight was changed.\n" + "\n".join(parts),
            missing=missing,
            unexpected=unexpected,
            mismatched=mismatched,
        )
    return LoadPlan(_assemble(layout, params, zero), notes)


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
