"""The original `.npz` checkpoint layout and how it maps onto our models.

The reference implementation (google-research/vision_transformer) saves its
parameters as a plain `numpy.savez` archive whose keys are `/`-joined Flax
parameter paths: `embedding/kernel`, `cls`,
`Transformer/encoderblock_0/MultiHeadDotProductAttention_1/query/kernel`, ...
That layout is the common language of `keras_vit.weights`: the safetensors
readers translate timm and Hugging Face checkpoints into it, and one rename
table (`RENAMES`) maps it onto the variables of a `keras_vit` model. Because
Keras kernels use the same axis order as Flax, every weight is a copy; the
only reshaping is the stacking of the separate `query`/`key`/`value` kernels
into the fused `qkv_kernel` of `MultiHeadSelfAttention`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import zipfile

import keras
import numpy as np

from keras_vit.models import layout as names
from keras_vit.weights.errors import CheckpointError

_BLOCK = "Transformer/encoderblock_{i}"
_MHA = _BLOCK + "/MultiHeadDotProductAttention_1"
_MLP = _BLOCK + "/MlpBlock_3"
_OURS = names.BLOCK_PREFIX + "{i}"
_EMBEDDING = names.EMBEDDING
_POSEMB = names.POSEMB
_NORM = names.ENCODER_NORM
_PRE_LOGITS = names.PRE_LOGITS
_HEAD = names.HEAD
_MAP = "MAPHead_0"
_MAP_MHA = _MAP + "/MultiHeadDotProductAttention_0"
_POOL = names.POOL

# One row per weight: (checkpoint key template, variable path template, part).
# `part` is None for a one-to-one copy, or `(axis, index)` when several
# checkpoint arrays are stacked along `axis` of one variable. Placeholders:
# {i} block index, {s}/{u} ResNet stage/unit, {conv}/{gn} unit sub-layer.
RENAMES = (
    ("embedding/kernel", _EMBEDDING + "/kernel", None),
    ("embedding/bias", _EMBEDDING + "/bias", None),
    ("cls", names.CLASS_TOKEN + "/token", None),
    ("dist", names.DIST_TOKEN + "/token", None),
    ("reg", names.REGISTER_TOKENS + "/tokens", None),
    ("Transformer/posembed_input/pos_embedding", _POSEMB + "/embedding", None),
    (_BLOCK + "/LayerNorm_0/scale", _OURS + "/norm_1/gamma", None),
    (_BLOCK + "/LayerNorm_0/bias", _OURS + "/norm_1/beta", None),
    (_MHA + "/query/kernel", _OURS + "/attention/qkv_kernel", (1, 0)),
    (_MHA + "/key/kernel", _OURS + "/attention/qkv_kernel", (1, 1)),
    (_MHA + "/value/kernel", _OURS + "/attention/qkv_kernel", (1, 2)),
    (_MHA + "/query/bias", _OURS + "/attention/qkv_bias", (0, 0)),
    (_MHA + "/key/bias", _OURS + "/attention/qkv_bias", (0, 1)),
    (_MHA + "/value/bias", _OURS + "/attention/qkv_bias", (0, 2)),
    (_MHA + "/out/kernel", _OURS + "/attention/out_kernel", None),
    (_MHA + "/out/bias", _OURS + "/attention/out_bias", None),
    (_MHA + "/query_norm/scale", _OURS + "/attention/query_norm/gamma", None),
    (_MHA + "/query_norm/bias", _OURS + "/attention/query_norm/beta", None),
    (_MHA + "/key_norm/scale", _OURS + "/attention/key_norm/gamma", None),
    (_MHA + "/key_norm/bias", _OURS + "/attention/key_norm/beta", None),
    (_BLOCK + "/LayerScale_0/scale", _OURS + "/layer_scale_1/gamma", None),
    (_BLOCK + "/LayerScale_1/scale", _OURS + "/layer_scale_2/gamma", None),
    (_BLOCK + "/LayerNorm_2/scale", _OURS + "/norm_2/gamma", None),
    (_BLOCK + "/LayerNorm_2/bias", _OURS + "/norm_2/beta", None),
    (_MLP + "/Dense_0/kernel", _OURS + "/mlp_dense_1/kernel", None),
    (_MLP + "/Dense_0/bias", _OURS + "/mlp_dense_1/bias", None),
    (_MLP + "/Dense_1/kernel", _OURS + "/mlp_dense_2/kernel", None),
    (_MLP + "/Dense_1/bias", _OURS + "/mlp_dense_2/bias", None),
    ("Transformer/encoder_norm/scale", _NORM + "/gamma", None),
    ("Transformer/encoder_norm/bias", _NORM + "/beta", None),
    ("pre_logits/kernel", _PRE_LOGITS + "/kernel", None),
    ("pre_logits/bias", _PRE_LOGITS + "/bias", None),
    ("head/kernel", _HEAD + "/kernel", None),
    ("head/bias", _HEAD + "/bias", None),
    # Newer families: timm's `fc_norm`, DeiT's distillation head, and the
    # attention-pooling head (big_vision's `MAPHead` keys).
    ("fc_norm/scale", names.FC_NORM + "/gamma", None),
    ("fc_norm/bias", names.FC_NORM + "/beta", None),
    ("head_dist/kernel", names.HEAD_DIST + "/kernel", None),
    ("head_dist/bias", names.HEAD_DIST + "/bias", None),
    (_MAP + "/probe", _POOL + "/probe", None),
    (_MAP_MHA + "/query/kernel", _POOL + "/query_kernel", None),
    (_MAP_MHA + "/query/bias", _POOL + "/query_bias", None),
    (_MAP_MHA + "/key/kernel", _POOL + "/kv_kernel", (1, 0)),
    (_MAP_MHA + "/value/kernel", _POOL + "/kv_kernel", (1, 1)),
    (_MAP_MHA + "/key/bias", _POOL + "/kv_bias", (0, 0)),
    (_MAP_MHA + "/value/bias", _POOL + "/kv_bias", (0, 1)),
    (_MAP_MHA + "/out/kernel", _POOL + "/out_kernel", None),
    (_MAP_MHA + "/out/bias", _POOL + "/out_bias", None),
    (_MAP + "/LayerNorm_0/scale", _POOL + "/norm/gamma", None),
    (_MAP + "/LayerNorm_0/bias", _POOL + "/norm/beta", None),
    (_MAP + "/MlpBlock_0/Dense_0/kernel", _POOL + "/mlp_dense_1/kernel", None),
    (_MAP + "/MlpBlock_0/Dense_0/bias", _POOL + "/mlp_dense_1/bias", None),
    (_MAP + "/MlpBlock_0/Dense_1/kernel", _POOL + "/mlp_dense_2/kernel", None),
    (_MAP + "/MlpBlock_0/Dense_1/bias", _POOL + "/mlp_dense_2/bias", None),
    # The BiT ResNet of the hybrids: `block1/unit1/conv1` -> `block1_unit1_conv1`.
    ("conv_root/kernel", "conv_root/kernel", None),
    ("gn_root/scale", "gn_root/gamma", None),
    ("gn_root/bias", "gn_root/beta", None),
    ("block{s}/unit{u}/{conv}/kernel", "block{s}_unit{u}_{conv}/kernel", None),
    ("block{s}/unit{u}/{gn}/scale", "block{s}_unit{u}_{gn}/gamma", None),
    ("block{s}/unit{u}/{gn}/bias", "block{s}_unit{u}_{gn}/beta", None),
)

_PLACEHOLDERS = {
    "i": r"\d+",
    "s": r"\d+",
    "u": r"\d+",
    "conv": r"conv(?:1|2|3|_proj)",
    "gn": r"gn(?:1|2|3|_proj)",
}

POSEMB_KEY = "Transformer/posembed_input/pos_embedding"
EMBEDDING_KEY = "embedding/kernel"
HEAD_KEYS = ("head/kernel", "head/bias")
DIST_HEAD_KEYS = ("head_dist/kernel", "head_dist/bias")
PRE_LOGITS_KEYS = ("pre_logits/kernel", "pre_logits/bias")


def _compile(template: str) -> re.Pattern:
    pattern = re.escape(template)
    for name, regex in _PLACEHOLDERS.items():
        pattern = pattern.replace(re.escape("{" + name + "}"), f"(?P<{name}>{regex})")
    return re.compile(f"^{pattern}$")


_RULES = tuple(
    (_compile(key), key, _compile(path), path, part) for key, path, part in RENAMES
)


@dataclasses.dataclass(frozen=True)
class Target:
    """Where one checkpoint array goes in a model.

    Attributes:
        path: The variable's path, e.g. `"encoderblock_0/attention/qkv_kernel"`.
        part: `None`, or `(axis, index)` when the array is one slice of the
            variable along `axis` (the stacked query/key/value).
        shape: The shape the checkpoint array must have.
    """

    path: str
    part: tuple[int, int] | None
    shape: tuple[int, ...]


def checkpoint_layout(model: keras.Model) -> tuple[dict[str, Target], list[str]]:
    """The checkpoint keys (original `.npz` names) that `model` expects.

    Args:
        model: A model built by `keras_vit.ViT`.

    Returns:
        `(layout, unmapped)`: `layout` maps each expected checkpoint key to its
        `Target`; `unmapped` lists model variable paths that no checkpoint key
        can fill (layers `keras_vit` did not create).
    """
    layout, unmapped = {}, []
    for variable in model.weights:
        shape = tuple(int(d) for d in variable.shape)
        found = False
        for _, key_template, path_regex, _, part in _RULES:
            match = path_regex.match(variable.path)
            if match is None:
                continue
            found = True
            key = key_template.format(**match.groupdict())
            key_shape = shape
            if part is not None:
                axis, _ = part
                key_shape = shape[:axis] + shape[axis + 1 :]
            layout[key] = Target(variable.path, part, key_shape)
        if not found:
            unmapped.append(variable.path)
    return layout, unmapped


def to_checkpoint(
    values: dict[str, np.ndarray],
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Model variable values -> checkpoint arrays: the inverse of `RENAMES`.

    Args:
        values: `{variable path: array}`, e.g. `{"encoder_norm/gamma": ...}`.

    Returns:
        `(params, unmapped)`: `params` in the original `.npz` layout (the
        fused query/key/value variables split into their three keys);
        `unmapped` lists the paths no rule maps.
    """
    params, unmapped = {}, []
    for path, value in values.items():
        value = np.asarray(value)
        found = False
        for _, key_template, path_regex, _, part in _RULES:
            match = path_regex.match(path)
            if match is None:
                continue
            found = True
            key = key_template.format(**match.groupdict())
            if part is not None:
                axis, index = part
                if value.ndim <= axis or value.shape[axis] <= index:
                    unmapped.append(path)  # cannot be split: reported
                    break
                value_part = np.take(value, index, axis=axis)
            else:
                value_part = value
            params[key] = value_part
        if not found:
            unmapped.append(path)
    return params, unmapped


def variable_path(key: str) -> str | None:
    """The model variable path a checkpoint key maps to, or `None`."""
    for key_regex, _, _, path_template, _ in _RULES:
        match = key_regex.match(key)
        if match is not None:
            return path_template.format(**match.groupdict())
    return None


def read_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Reads an original-layout `.npz` checkpoint, never unpickling.

    Args:
        path: The `.npz` file.

    Returns:
        `{key: array}`, with legacy `(1, 1, 1, C)` GroupNorm parameters
        flattened to `(C,)` (see `normalize`).

    Raises:
        CheckpointError: if the file is not a readable `.npz` archive, or an
            array in it is stored as pickled Python objects.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic.startswith((b"\x80", b"\x93NUMPY")):
        raise CheckpointError(
            f"{path!r} holds {_npy_contents(path)}, not an .npz archive of "
            "named arrays. "
            "Checkpoints are loaded with allow_pickle=False, so that opening a "
            "file cannot run code; save one with `np.savez(path, **arrays)`."
        )
    if not magic.startswith(b"PK"):
        raise CheckpointError(
            f"{path!r} is not an .npz archive (it does not start as a zip "
            "file); it may be corrupt or another format."
        )
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as error:
        raise CheckpointError(
            f"{path!r} is not a readable .npz archive ({error}). The file may "
            "be truncated or corrupt; download it again."
        ) from error
    params = {}
    with archive:
        for key in archive.files:
            try:
                params[key] = archive[key]
            except ValueError as error:
                raise CheckpointError(
                    f"The array {key!r} in {path!r} is a pickled object array; "
                    "it is refused (allow_pickle=False)."
                ) from error
            except (OSError, EOFError, zipfile.BadZipFile) as error:
                raise CheckpointError(
                    f"The array {key!r} in {path!r} cannot be read ({error}); "
                    "the file is corrupt."
                ) from error
    return normalize(params)


def _npy_contents(path: str) -> str:
    """What a pickle or `.npy` file holds, found out without unpickling."""
    with open(path, "rb") as f:
        if f.read(1) == b"\x80":
            return "pickled data"
    try:
        np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError:  # an object array: its payload is a pickle
        return "pickled data"
    return "a single .npy array"


def normalize(params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Brings older variants of the original layout to the current one.

    Flax before 0.3.6 stored GroupNorm `scale`/`bias` as `(1, 1, 1, C)`; they
    are flattened to `(C,)`. Keys and all other arrays are unchanged.

    Args:
        params: `{key: array}` in the original layout.

    Returns:
        A new dict.
    """
    out = {}
    for key, value in params.items():
        value = np.asarray(value)
        leaf = key.split("/")
        if (
            len(leaf) >= 2
            and leaf[-2].startswith("gn")
            and leaf[-1] in ("scale", "bias")
            and value.ndim == 4
            and value.shape[:3] == (1, 1, 1)
        ):
            value = value.reshape(-1)
        out[key] = value
    return out
