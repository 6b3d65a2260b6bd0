"""Keras weights files (`.keras`, `.weights.h5`), read by layer name.

A Keras 3 weights file stores each layer's variables by index under the
layer's name (in a `.keras` zip archive, in `model.weights.h5`).
`read_keras_file` matches the file's layers to a model's by name, at any
nesting depth, and names each array after the model's variable, so that
the checkpoint can be checked key by key before anything is assigned; no
model is built from the file. The arrays it returns are keyed by keras_vit
variable paths (the `ours` dialect). Legacy Keras 2 HDF5 files are refused
in one sentence.

Only data stored inside the file itself is read. HDF5 can take a dataset's
bytes from elsewhere: raw bytes of another file (external storage), a
dataset of another file (an external link, a virtual dataset), another
place in the file (a soft link); every one of these is refused, in one
line naming the dataset, before any data is read, as are datasets whose
storage lies past the end of the file. The file is opened as a Python file
object, so that HDF5 resolves any other file a link or a virtual dataset
names to this same file rather than opening it (even before the refusal).

Nothing is allocated on a claim's word alone: every dataset's shape is
checked against the model's variable of the same name, and all of them
together are charged to `limits.ReadBudget.for_model(model)` (the file's
size plus the model's parameter bytes) before the first is read. In a
`.keras` archive, `config.json` is read within 8 MiB, and
`model.weights.h5` (stored, as Keras writes it) is read in place; a
compressed record is inflated first, its declared size checked against
the same budget (plus 64 MiB for its metadata) and never trusted alone,
and its arrays are then read as from a `.weights.h5` file of that size.

Example:

```python
values, grid = read_keras_file("model.keras", model)
values["encoder_norm/gamma"].shape  # (768,)
```
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import struct
import zipfile

import h5py
import keras
import numpy as np

from keras_vit import keras_internals
from keras_vit.models import layout as names
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.errors import TruncatedFileError
from keras_vit.weights.formats import limits

# The files read; a plain `.h5` (a legacy whole-model file) is recognised
# to be refused in one line.
READABLE_SUFFIXES = (".keras", ".weights.h5")
SUFFIXES = (*READABLE_SUFFIXES, ".h5")

# The first bytes of an HDF5 file, and the records of a `.keras` archive.
HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
WEIGHTS_RECORD = "model.weights.h5"
CONFIG_RECORD = "config.json"

# A Keras config is a few hundred kilobytes even for large models, and
# nests a few dozen levels (a model, its layers, each layer's config, ...).
_MAX_CONFIG_BYTES = 8 << 20
_MAX_CONFIG_DEPTH = 200
# Keras 3.15's own loader refuses a dataset that declares more than 4 GiB
# and more than 1000 times the bytes it stores (a shape or decompression
# bomb; learned from keras/src/saving/saving_lib.py). The same rule is kept
# here, beside the stricter budget, for models whose budget passes 4 GiB.
_BOMB_FLOOR_BYTES = 1 << 32
_BOMB_EXPANSION = 1000
# A chunked dataset is inflated a whole chunk at a time, so a chunk larger
# than the dataset costs more than its shape says. h5py's own chunking
# stays within 1 MiB; anything larger must fit the dataset.
_CHUNK_SLACK_BYTES = 1 << 20
# The local file header of a zip record (PKWARE's APPNOTE.TXT, 4.3.7):
# 30 fixed bytes, the last four being the name's and the extra field's
# lengths; the record's data follows them.
_LOCAL_HEADER = struct.Struct("<4s22xHH")
_LOCAL_SIGNATURE = b"PK\x03\x04"

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
        CheckpointError: a corrupt, legacy (Keras 2) or empty file, layers
            that do not fit `model`'s, a dataset whose data is not stored
            inside the file, or arrays past the read budget. One line;
            nothing of the refused data has been read.

    Example:

    ```python
    values, grid = read_keras_file("model.weights.h5", model)
    ```
    """
    budget = limits.budget_for(limits.ReadBudget.for_model(model), path)
    with _opened(path, budget) as (weights, store):
        if _is_legacy_hdf5(store):
            raise CheckpointError(
                f"{path!r} is a legacy Keras HDF5 file (Keras 2, or Keras 3's "
                "`model.save('x.h5')`), which is not supported: save the model "
                "with `model.save('x.keras')` or `model.save_weights('x.weights.h5')`."
            )
        for array in keras_internals.stored_datasets(store):
            _refuse_outside(array, weights.size, path)
        saved = keras_internals.read_saved_layers(store)
        stored, targets = _name_all(saved, model, path)
        _charge(stored, targets, weights.budget, path)
        values = {key: _read(array) for key, array in stored.items()}
    return values, weights.grid


def check_keras_file(path: str) -> None:
    """Refuses a `.keras` or `.weights.h5` file that Keras should not load.

    The checks of `read_keras_file`, for a file that Keras's own loader
    (`keras.saving.load_model`) is about to read, with no model to measure
    it against: every link and dataset of the file (data stored inside it,
    a number type), the archive's records and `config.json`, and the
    arrays' declared bytes together within `limits.ReadBudget.default()`
    (4 times the file's size plus 64 MiB). Nothing is allocated for them.

    Args:
        path: A `.keras` archive or a `.weights.h5` file.

    Raises:
        CheckpointError: one line, naming the file and the dataset.

    Example:

    ```python
    check_keras_file("model.keras")
    model = keras.saving.load_model("model.keras")
    ```
    """
    budget = limits.budget_for(limits.ReadBudget.default(), path)
    with _opened(path, budget) as (weights, store):
        for array in keras_internals.stored_datasets(store):
            _refuse_outside(array, weights.size, path)
            _charge_one(array, "", weights.budget, path)


@contextlib.contextmanager
def _opened(path: str, budget: limits.ReadBudget):
    """Yields `(_Weights, h5py.File)`; each failure becomes one line."""
    try:
        with (
            _open_weights(path, budget) as weights,
            h5py.File(weights.file, "r") as store,
        ):
            yield weights, store
    except CheckpointError:
        raise
    except keras_internals.StoredLayoutError as error:
        raise CheckpointError(
            f"{path!r} is refused: {error}; keras_vit reads only data stored "
            "inside the file itself, as Keras writes it."
        ) from None
    except (OSError, RuntimeError, KeyError) as error:  # h5py's and HDF5's
        text = " ".join(str(error).split())[:200] or type(error).__name__
        raise TruncatedFileError(
            f"{path!r} is not a readable Keras weights file ({text}). It may be "
            "truncated or corrupt."
        ) from None


def is_keras_archive(path: str | os.PathLike) -> bool:
    """Whether `path` is a `.keras` archive: a zip holding a Keras config
    and weights (`config.json`, `model.weights.h5`), whatever its name."""
    try:
        with zipfile.ZipFile(path) as archive:
            return {CONFIG_RECORD, WEIGHTS_RECORD} <= set(archive.namelist())
    except (zipfile.BadZipFile, OSError, EOFError, ValueError):
        return False


def is_hdf5(path: str | os.PathLike) -> bool:
    """Whether `path` starts as an HDF5 file (a `.weights.h5` or `.h5`)."""
    try:
        with open(path, "rb") as f:
            return f.read(len(HDF5_SIGNATURE)) == HDF5_SIGNATURE
    except OSError:
        return False


def is_legacy_file(path: str | os.PathLike) -> bool:
    """Whether an HDF5 file is in Keras 2's format (see `_is_legacy_hdf5`).

    Opened as a Python file object, and only the root's links and
    attributes are looked at: nothing in the file is followed.
    """
    try:
        with open(path, "rb") as file, h5py.File(file, "r") as store:
            return _is_legacy_hdf5(store)
    except (OSError, RuntimeError, KeyError):
        return False


@dataclasses.dataclass
class _Weights:
    """The HDF5 weights of a file, opened for h5py.

    Attributes:
        file: A seekable binary file object holding the HDF5 file.
        size: Its size in bytes.
        grid: The position grid a `.keras` config records, or `None`.
        budget: What reading its arrays may allocate.
    """

    file: object
    size: int
    grid: tuple | None
    budget: limits.ReadBudget


@contextlib.contextmanager
def _open_weights(path: str, budget: limits.ReadBudget):
    """Yields the `_Weights` of a `.weights.h5` file or a `.keras` archive.

    A stored `model.weights.h5` record (as Keras writes it) is read in
    place, its CRC checked by reading it through once, a chunk at a time,
    and its arrays are read within `budget`. A compressed one is inflated
    into memory within `_record_budget(budget)`, its declared size checked
    first; its arrays are then read within the same rule with the inflated
    record as the file.
    """
    if not path.endswith(".keras"):
        # A file object, not a path: any other file that a link or a virtual
        # dataset names then resolves to this one, and is never opened.
        with open(path, "rb") as file:
            yield _Weights(file, os.fstat(file.fileno()).st_size, None, budget)
        return
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as error:
        raise TruncatedFileError(
            f"{path!r} is not a readable .keras archive ({error}). It may be "
            "truncated or corrupt."
        ) from None
    with archive:
        grid = _position_grid(_read_config(archive, path), path)
        info = _record(archive, WEIGHTS_RECORD, path)
        if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 1:
            data = limits.read_member(archive, info, path, _record_budget(budget))
            # The inflated record is the file its arrays are read from.
            arrays = limits.ReadBudget(
                budget.allowance, budget.basis, growth=budget.growth
            )
            arrays.file_bytes[f"{path}:{WEIGHTS_RECORD}"] = len(data)
            yield _Weights(
                _Slice(memoryview(data), 0, len(data)), len(data), grid, arrays
            )
            return
        _check_crc(archive, info, path)
        with open(path, "rb") as raw:
            start = _record_start(raw, info, path)
            yield _Weights(
                _Slice(raw, start, info.file_size), info.file_size, grid, budget
            )


def _record_budget(budget: limits.ReadBudget) -> limits.ReadBudget:
    """What a compressed `model.weights.h5` record may inflate to: the
    archive's budget plus `limits.DEFAULT_SLACK_BYTES`. HDF5's metadata (a
    few hundred bytes per variable) compresses well, so that a small model's
    record may inflate past its archive's and its parameters' bytes."""
    slack = limits.DEFAULT_SLACK_BYTES
    record = limits.ReadBudget(
        budget.allowance + slack,
        f"{budget.basis}, and {slack >> 20} MiB for a compressed record's metadata",
        growth=budget.growth,
    )
    record.file_bytes.update(budget.file_bytes)
    return record


def _record(archive: zipfile.ZipFile, name: str, path: str) -> zipfile.ZipInfo:
    try:
        return archive.getinfo(name)
    except KeyError:
        held = archive.namelist()
        raise CheckpointError(
            f"{path!r} is not a Keras archive: it holds no {name!r} (it holds "
            f"{held[:6]}{' ...' if len(held) > 6 else ''})."
        ) from None


def _read_config(archive: zipfile.ZipFile, path: str):
    """The archive's `config.json`: its declared size checked against
    `_MAX_CONFIG_BYTES` before it is inflated, read within it, parsed with
    every failure (deep nesting included) one line."""
    info = _record(archive, CONFIG_RECORD, path)
    if info.file_size > _MAX_CONFIG_BYTES:
        raise CheckpointError(
            f"{path!r}: its {CONFIG_RECORD} declares {info.file_size} bytes, more "
            f"than the {_MAX_CONFIG_BYTES >> 20} MiB a Keras config may take; the "
            "file is corrupt or not a Keras model."
        )
    cap = limits.ReadBudget(_MAX_CONFIG_BYTES, "the cap on a Keras config")
    data = limits.read_member(archive, info, path, cap)
    return limits.parse_json(bytes(data), path, CONFIG_RECORD, constants=True)


def _position_grid(config, path: str) -> tuple[int, int] | None:
    """The position embedding's grid a Keras config records, if exactly one.

    The config is walked with a list, not recursion, and refused past
    `_MAX_CONFIG_DEPTH` levels: its depth is the file's to choose, and
    Keras's own loader, which may read it next, recurses.
    """
    grids, pending = [], [(config, 0)]
    while pending:
        node, depth = pending.pop()
        if depth > _MAX_CONFIG_DEPTH:
            raise CheckpointError(
                f"{path!r}: its {CONFIG_RECORD} nests deeper than "
                f"{_MAX_CONFIG_DEPTH} levels; Keras writes a few dozen. The file "
                "is corrupt or not a Keras model."
            )
        if isinstance(node, dict):
            inner = node.get("config")
            if isinstance(inner, dict) and inner.get("name") == names.POSEMB:
                grids.append(_grid(inner.get("grid_size"), path))
            pending.extend((value, depth + 1) for value in node.values())
        elif isinstance(node, list):
            pending.extend((value, depth + 1) for value in node)
    return grids[0] if len(grids) == 1 else None


def _grid(value, path: str) -> tuple[int, int]:
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(type(g) is int and g > 0 for g in value)
    ):
        return tuple(value)
    raise CheckpointError(
        f"{path!r}: its {CONFIG_RECORD} gives the position embedding the "
        f"grid_size {str(value)[:80]}, not two positive integers; the file is "
        "corrupt."
    )


def _check_crc(archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: str) -> None:
    """Reads a stored record through once, a chunk at a time: `zipfile`
    checks its CRC at the end (the in-place reads below do not)."""
    chunk = memoryview(bytearray(1 << 20))
    with limits.open_member(archive, info, path) as stream:
        while limits.read_into(stream, chunk, path, info.filename) == len(chunk):
            pass


def _record_start(raw, info: zipfile.ZipInfo, path: str) -> int:
    """Where a stored record's data begins in the archive file."""
    raw.seek(info.header_offset)
    header = raw.read(_LOCAL_HEADER.size)
    if len(header) < _LOCAL_HEADER.size or header[:4] != _LOCAL_SIGNATURE:
        raise TruncatedFileError(
            f"{path!r}: the zip record {info.filename!r} has no local header at "
            f"offset {info.header_offset}; the file is truncated or corrupt."
        )
    _, name_length, extra_length = _LOCAL_HEADER.unpack(header)
    start = info.header_offset + _LOCAL_HEADER.size + name_length + extra_length
    end = raw.seek(0, io.SEEK_END)
    if info.compress_size != info.file_size or start + info.file_size > end:
        raise TruncatedFileError(
            f"{path!r}: the stored zip record {info.filename!r} claims "
            f"{info.file_size} bytes at offset {start}, past the end of the "
            f"{end}-byte file; the file is truncated or corrupt."
        )
    return start


class _Slice(io.RawIOBase):
    """`size` bytes at `start` of a binary file or a buffer, as a read-only,
    seekable file: what h5py reads a file object through.

    Hand-written because `zipfile`'s own record reader restarts the record
    at every backward seek on Python 3.11, and HDF5 seeks back often; and
    so that a stored record is read in place, never copied into memory.

    Example:

    ```python
    h5py.File(_Slice(open("model.keras", "rb"), start, size), "r")
    ```
    """

    def __init__(self, source, start: int, size: int):
        super().__init__()
        self._source, self._start, self._size = source, start, size
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._position, io.SEEK_END: self._size}
        position = base[whence] + offset
        if position < 0:
            raise OSError(f"negative seek position {position}")
        self._position = position
        return position

    def readinto(self, buffer) -> int:
        count = max(0, min(len(buffer), self._size - self._position))
        target = memoryview(buffer).cast("B")[:count]
        begin = self._start + self._position
        if isinstance(self._source, memoryview):
            target[:] = self._source[begin : begin + count]
        else:
            self._source.seek(begin)
            count = self._source.readinto(target) or 0
        self._position += count
        return count


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


def _name_all(saved: dict, model: keras.Model, path: str) -> tuple[dict, dict]:
    """`({key: StoredArray}, {key: model variable})` for every saved array.

    Keys are the model's variable paths; an array for a layer the model
    lacks is keyed as `read_keras_file` says, and has no variable.
    """
    if not any(_has_values(e) for entries in saved.values() for e in entries):
        raise CheckpointError(
            f"{path!r} holds no layer weights in the Keras 3 format; save the "
            "model with `model.save('x.keras')` or "
            "`model.save_weights('x.weights.h5')`."
        )
    stored, targets = {}, {}
    layers = {layer.name: layer for layer in model.layers}
    for name, entries in saved.items():
        entries = [e for e in entries if _has_values(e)]
        if not entries:
            continue
        if len(entries) > 1:
            raise CheckpointError(
                f"{path!r} has {len(entries)} layers named {name!r}; cannot tell "
                "which to use."
            )
        if name in layers:
            _name_saved(entries[0], layers[name], stored, targets, path)
        elif name in _OWN_VARIABLES and len(entries[0].values) == len(
            _OWN_VARIABLES[name]
        ):
            for variable, value in zip(
                _OWN_VARIABLES[name], entries[0].values, strict=True
            ):
                stored[f"{name}/{variable}"] = value
        else:
            for index, value in enumerate(entries[0].values):
                stored[f"{name}/{index}"] = value
    return stored, targets


def _name_saved(saved, layer, stored: dict, targets: dict, path: str) -> None:
    """Names `saved`'s arrays after `layer`'s variables, recursively."""
    own = keras_internals.own_variables(layer)
    if len(own) != len(saved.values):
        raise CheckpointError(
            f"Layer {layer.name!r} has {len(own)} weights in the model and "
            f"{len(saved.values)} in {path!r}; the file is another architecture."
        )
    for variable, value in zip(own, saved.values, strict=True):
        stored[variable.path] = value
        targets[variable.path] = variable
    for attribute, child in saved.children.items():
        sublayer = getattr(layer, attribute, None)
        if not isinstance(sublayer, keras.layers.Layer):
            if _has_values(child):
                raise CheckpointError(
                    f"Layer {layer.name!r} in {path!r} has weights for a "
                    f"sublayer {attribute!r} that the model's layer lacks."
                )
            continue
        _name_saved(child, sublayer, stored, targets, path)


def _refuse_outside(array, file_size: int, path: str) -> None:
    """Refuses the file if a dataset's data is not stored inside it."""
    problem = _storage_problem(array, file_size)
    if problem:
        raise CheckpointError(
            f"{path!r} is refused: the dataset '{array.path}' {problem}; "
            "keras_vit reads only data stored inside the file itself."
        )


def _charge(stored: dict, targets: dict, budget: limits.ReadBudget, path: str) -> None:
    """Charges every array's declared bytes to `budget` before any is read.

    Arrays whose shape is their model variable's go first, so that a
    refusal names one that does not fit, with the model's shape.
    """

    def fits(key):
        variable = targets.get(key)
        return variable is not None and stored[key].dataset.shape == tuple(
            variable.shape
        )

    for key in sorted(stored, key=lambda k: not fits(k)):
        variable = targets.get(key)
        if variable is not None:
            model_has = f" (the model's {key!r} is {tuple(variable.shape)})"
        else:
            model_has = " (a layer the model lacks)"
        _charge_one(stored[key], model_has, budget, path)


def _charge_one(array, model_has: str, budget: limits.ReadBudget, path: str) -> None:
    """Charges one array's declared bytes; Keras's own bomb rule (more than
    4 GiB declared, more than 1000 times the bytes stored) is kept too, for
    budgets past 4 GiB."""
    shape = array.dataset.shape
    what = f"the dataset '{array.path}' of shape {shape} {array.dtype}{model_has}"
    declared = limits.array_bytes(shape, array.dtype.itemsize)
    budget.take(declared, path, what)
    held = array.dataset.id.get_storage_size()
    if declared > _BOMB_FLOOR_BYTES and declared > _BOMB_EXPANSION * held:
        raise CheckpointError(
            f"{path!r}: {what} declares {declared} bytes but stores only {held}; "
            "the file is corrupt or not a checkpoint of this model."
        )


def _storage_problem(array: keras_internals.StoredArray, file_size: int) -> str | None:
    """Why a dataset cannot be read as it claims, or `None`.

    Refused: data outside the file (external storage, a virtual dataset),
    storage past the end of the file, chunks larger than the dataset and a
    type that is not a number.
    """
    dataset = array.dataset
    if dataset.external:
        files = [os.fsdecode(name) for name, *_ in dataset.external]
        return f"stores its data in the external file(s) {files}"
    if dataset.is_virtual:
        plist = dataset.id.get_create_plist()
        files = [
            plist.get_virtual_filename(i) for i in range(plist.get_virtual_count())
        ]
        return f"is a virtual dataset, its data read from the file(s) {files}"
    if dataset.shape is None:
        return "has no dataspace"
    dtype = array.dtype
    if dtype.kind not in "biuf" and dtype.name != "bfloat16":
        return f"has the type {dataset.dtype}, not a number type"
    declared = limits.array_bytes(dataset.shape, dtype.itemsize)
    held = dataset.id.get_storage_size()
    layout = dataset.id.get_create_plist().get_layout()
    if layout == h5py.h5d.CONTIGUOUS:
        offset = dataset.id.get_offset()
        if offset is not None and offset + held > file_size:
            return (
                f"claims {held} bytes at offset {offset}, past the end of the "
                f"{file_size}-byte file"
            )
    elif layout == h5py.h5d.CHUNKED:
        chunk = limits.array_bytes(dataset.chunks, dtype.itemsize)
        if chunk > max(declared, _CHUNK_SLACK_BYTES):
            return (
                f"is stored in chunks of {dataset.chunks} ({chunk} bytes), larger "
                f"than its shape {dataset.shape} ({declared} bytes)"
            )
        if held > file_size:
            return f"claims {held} stored bytes, more than the {file_size}-byte file"
    elif layout != h5py.h5d.COMPACT:
        return f"has the storage layout {layout}, which Keras does not write"
    return None


def _read(array: keras_internals.StoredArray) -> np.ndarray:
    value = np.asarray(array.dataset[()])
    return value if value.dtype == array.dtype else value.view(array.dtype)
