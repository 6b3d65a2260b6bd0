"""Reads PyTorch `.pth` / `.pth.tar` files with NumPy, never running their code.

`torch.save` writes a pickle; unpickling an arbitrary pickle can run any
code it names. This reader unpickles with an allow-list: the pickle may
name only what a state dict is made of, and anything else is refused by
name before it is called:

- `torch._utils._rebuild_tensor_v2` (how every tensor is pickled), answered
  by a NumPy view of the storage's bytes;
- the typed storage classes `torch.FloatStorage`, `torch.LongStorage`, ...
  (only as the dtype of a storage reference);
- `collections.OrderedDict` (a state dict, a tensor's empty hook table).

Dicts, lists, tuples, strings, numbers, booleans and `None` need no name.
A BUILD instruction (which sets an object's state) is refused on the
reader's tensor and storage records, and on an `OrderedDict` for any name
its class already has; PyTorch uses it only for a state dict's `_metadata`.
A tensor's offset, size and stride are checked before its storage is read:
every element must lie inside the storage, and a view that repeats its
storage's elements (a zero or overlapping stride) is expanded only up to a
small total. Every zip record (its declared size, before it is inflated),
every storage and every tensor the reader copies is charged to one budget
for the whole file (`keras_vit.weights.formats.limits`: the file's size
plus the model's parameter bytes, or a stated cap), so a few bytes of file
never become gigabytes of arrays, however many tensors view one storage.
Both of PyTorch's formats are read: the zip archive of `torch.save` since
PyTorch 1.6 (`<archive>/data.pkl` plus one `<archive>/data/<key>` record per
storage) and the older "legacy" stream (a magic number, a protocol version,
the system info, the pickle, the storage keys, then each storage as an
int64 element count and its bytes). Tensors are rebuilt only for the part of
the file that is asked for (`read_state_dict` leaves an optimizer state
alone).

The format as PyTorch's `torch/serialization.py` and `torch/_utils.py`
write it (read at v2.13.0); learned from, not copied.

Example:

```python
state = read_state_dict("resnet_50_cifar100_691cc9a9e4.pth.tar")
state["layer0.0.weight"].shape  # (64, 3, 3, 3)
```
"""

from __future__ import annotations

import collections
import dataclasses
import io
import os
import pickle
import struct
import zipfile
from collections.abc import Mapping

import numpy as np

from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.formats import limits

# torch.save's legacy stream starts with this pickled int (protocol 2).
LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
LEGACY_PROTOCOL = 1001
_LEGACY_PREFIX = b"\x80\x02\x8a\x0a" + LEGACY_MAGIC.to_bytes(10, "little")
# The file names `torch.save` files go by.
SUFFIXES = (".pth", ".pth.tar", ".pt")


def _storage_dtypes() -> dict[str, np.dtype]:
    import ml_dtypes

    return {
        "DoubleStorage": np.dtype("<f8"),
        "FloatStorage": np.dtype("<f4"),
        "HalfStorage": np.dtype("<f2"),
        "BFloat16Storage": np.dtype(ml_dtypes.bfloat16),
        "LongStorage": np.dtype("<i8"),
        "IntStorage": np.dtype("<i4"),
        "ShortStorage": np.dtype("<i2"),
        "CharStorage": np.dtype("i1"),
        "ByteStorage": np.dtype("u1"),
        "BoolStorage": np.dtype("?"),
        "ComplexFloatStorage": np.dtype("<c8"),
        "ComplexDoubleStorage": np.dtype("<c16"),
    }


class _Record:
    """A record the unpickler makes; the pickle may not set its state.

    A pickle's BUILD instruction sets the state of the object before it:
    without a `__setstate__`, the unpickler writes straight into the
    instance's `__dict__`, past a frozen dataclass's checks (a tensor's
    stride reset to a negative number would then read outside its storage).
    A file `torch.save` wrote never does that to a tensor or a storage.
    """

    def __setstate__(self, state):
        raise _RefusedBuild(_RECORD_NAMES.get(type(self).__name__, "a record"))


@dataclasses.dataclass(frozen=True)
class _StorageType(_Record):
    """What an allowed `torch.<Type>Storage` global unpickles to."""

    name: str
    dtype: np.dtype


@dataclasses.dataclass(frozen=True)
class _StorageRef(_Record):
    """A storage the pickle refers to: its record key, dtype and size."""

    key: str
    dtype: np.dtype
    numel: int
    view: tuple[int, int] | None = None  # legacy views: (offset, numel)


@dataclasses.dataclass(frozen=True)
class _TensorRef(_Record):
    """A tensor of the pickle, rebuilt into an array only when asked for."""

    storage: _StorageRef
    offset: int
    size: tuple[int, ...]
    stride: tuple[int, ...]


_RECORD_NAMES = {
    "_StorageType": "a storage type",
    "_StorageRef": "a storage",
    "_TensorRef": "a tensor",
}


class _OrderedDict(collections.OrderedDict):
    """`collections.OrderedDict` as the pickle may build it.

    PyTorch pickles a state dict's `_metadata` attribute as the state of
    its `OrderedDict` (a BUILD instruction). Only such plain attributes are
    set: a name the class already has (`items`, `get`, ...) is refused, so
    that the pickle cannot replace a method the reader calls.
    """

    def __setstate__(self, state):
        if not isinstance(state, dict) or not all(
            isinstance(name, str) and not hasattr(collections.OrderedDict, name)
            for name in state
        ):
            names = list(state)[:4] if isinstance(state, dict) else state
            raise _RefusedBuild(f"an OrderedDict ({names!r:.80}: not plain attributes)")
        self.__dict__.update(state)


# PyTorch's sizes, strides and offsets are int64.
_INT64_END = 1 << 63
# A view that reads some storage elements more than once (a zero stride on a
# dimension longer than 1, as `expand` makes, or overlapping strides) is
# expanded into an array holding every repeat, which can be any number of
# times the bytes of the file. Each view that holds no more elements than
# its storage, as every tensor a model's state dict holds does (an `expand`ed
# buffer such as `position_ids` repeats along a dimension of size 1 only),
# costs at most the storage's bytes and is always read. Views that hold more
# share this allowance per file: enough for any broadcast buffer a model
# registers, far below what exhausts a machine's memory.
_REPEAT_BYTES = 64 << 20


def _layout_problem(offset, size, stride) -> str | None:
    """What is wrong with a tensor's offset, size and stride, or `None`.

    Each must be an int in `[0, 2**63)` (a tuple of them for `size` and
    `stride`, of one length): then the tensor's elements lie between index
    `offset` and `offset + sum((n - 1) * s)` of its storage.
    """
    if not isinstance(size, tuple) or not isinstance(stride, tuple):
        return "a size or stride that is not a tuple"
    values = (offset, *size, *stride)
    if len(size) != len(stride) or not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v < _INT64_END
        for v in values
    ):
        return f"offset {offset!r:.40}, size {size!r:.80} and stride {stride!r:.80}"
    return None


def _rebuild_tensor_v2(storage, storage_offset, size, stride, *rest):
    """Stands in for `torch._utils._rebuild_tensor_v2`: records, runs nothing.

    The layout is checked where the storage is read (`_tensor`), which knows
    the tensor's key.
    """
    if not isinstance(storage, _StorageRef):
        raise pickle.UnpicklingError("a tensor whose storage is not a storage")
    if not isinstance(size, (tuple, list)) or not isinstance(stride, (tuple, list)):
        raise pickle.UnpicklingError("a tensor whose size or stride is not a tuple")
    return _TensorRef(storage, storage_offset, tuple(size), tuple(stride))


class _RestrictedUnpickler(pickle.Unpickler):
    """A pickle reader that calls nothing outside the allow-list."""

    def __init__(self, file, dtypes):
        super().__init__(file)
        self._dtypes = dtypes
        self.storages: dict[str, _StorageRef] = {}

    def find_class(self, module, name):
        if (module, name) == ("torch._utils", "_rebuild_tensor_v2"):
            return _rebuild_tensor_v2
        if (module, name) == ("collections", "OrderedDict"):
            return _OrderedDict
        if module == "torch" and name in self._dtypes:
            return _StorageType(name, self._dtypes[name])
        raise _Refused(f"{module}.{name}")

    def persistent_load(self, pid):
        # zip: ('storage', type, key, location, numel)
        # legacy: ('storage', type, root key, location, numel, view metadata)
        if (
            not isinstance(pid, tuple)
            or len(pid) not in (5, 6)
            or pid[0] != "storage"
            or not isinstance(pid[1], _StorageType)
            or not isinstance(pid[2], str)
            or not isinstance(pid[4], int)
            or pid[4] < 0
        ):
            raise pickle.UnpicklingError(f"an unknown persistent id {pid!r:.120}")
        view = None
        if len(pid) == 6 and pid[5] is not None:
            view_metadata = pid[5]
            if (
                not isinstance(view_metadata, tuple)
                or len(view_metadata) != 3
                or not all(isinstance(v, int) for v in view_metadata[1:])
            ):
                raise pickle.UnpicklingError(
                    f"an unknown storage view {view_metadata!r:.120}"
                )
            view = (view_metadata[1], view_metadata[2])
        ref = _StorageRef(pid[2], pid[1].dtype, pid[4], view)
        self.storages.setdefault(ref.key, ref)
        return ref


class _Refused(pickle.UnpicklingError):
    """A global outside the allow-list; its name is the message."""


class _RefusedBuild(pickle.UnpicklingError):
    """A BUILD instruction on a record; what it targets is the message."""


def _unpickle(data: bytes | io.BufferedIOBase, path: str, dtypes):
    stream = io.BytesIO(data) if isinstance(data, bytes) else data
    return _load(_RestrictedUnpickler(stream, dtypes), path)


def _load(unpickler: _RestrictedUnpickler, path: str):
    """Runs `unpickler`; every failure becomes one `CheckpointError` line."""
    try:
        return unpickler.load()
    except _Refused as refused:
        raise CheckpointError(
            f"{path!r} asks to load {refused} while unpickling; a PyTorch weights "
            "file may hold only tensors and plain containers (dict, list, "
            "OrderedDict, numbers, strings), so it was refused and nothing in "
            "it was run."
        ) from None
    except _RefusedBuild as refused:
        raise CheckpointError(
            f"{path!r} asks to set the state of {refused} (a pickle BUILD "
            "instruction), which a file torch.save wrote never does; it was "
            "refused and nothing in it was run."
        ) from None
    except MemoryError:
        # A length field (BINBYTES8, ...) claiming more than can be allocated:
        # the unpickler asks for it before reading, and nothing is held.
        raise CheckpointError(
            f"{path!r} is not a readable PyTorch file: its pickle claims an "
            "object larger than memory can hold; the file is corrupt."
        ) from None
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, KeyError,
            IndexError, AttributeError, struct.error, OverflowError,
            RecursionError) as error:  # fmt: skip
        raise CheckpointError(
            f"{path!r} is not a readable PyTorch file: its pickle is truncated or "
            f"corrupt ({type(error).__name__}: {_one_line(error)})."
        ) from None


def _one_line(error) -> str:
    return " ".join(str(error).split())[:200]


def is_torch_file(path: str | os.PathLike) -> bool:
    """Whether `path` is a file `torch.save` wrote (zip or legacy format).

    Reads the first bytes (and, for a zip, its list of names) only.
    """
    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            head = f.read(len(_LEGACY_PREFIX))
    except OSError:
        return False
    if head == _LEGACY_PREFIX:
        return True
    if not head.startswith(b"PK"):
        return False
    try:
        with zipfile.ZipFile(path) as archive:
            return _data_pickle(archive.namelist()) is not None
    except (zipfile.BadZipFile, OSError):
        return path.endswith((".pth", ".pth.tar", ".pt"))  # reported by the reader


def _data_pickle(names) -> str | None:
    """The archive's `<prefix>/data.pkl`, or `None`."""
    found = [n for n in names if n.count("/") == 1 and n.endswith("/data.pkl")]
    return found[0] if len(found) == 1 else None


class _ZipStorages:
    """Storage bytes of a zip-format file, read record by record."""

    def __init__(
        self,
        archive: zipfile.ZipFile,
        prefix: str,
        path: str,
        budget: limits.ReadBudget,
    ):
        self.archive, self.prefix, self.path = archive, prefix, path
        self.budget = budget
        order = "little"
        info = _member(archive, f"{prefix}byteorder")
        if info is not None:
            order = limits.read_member(archive, info, path, budget)
            order = bytes(order).decode("ascii", "replace").strip()
        self.big_endian = order == "big"

    def read(self, ref: _StorageRef) -> np.ndarray:
        name = f"{self.prefix}data/{ref.key}"
        info = _member(self.archive, name)
        if info is None:
            raise CheckpointError(
                f"{self.path!r} refers to the storage {ref.key!r}, which the "
                "archive lacks; the file is truncated or corrupt."
            )
        _check_storage(ref, self.path)
        need = ref.numel * ref.dtype.itemsize
        if info.file_size < need:  # before anything is inflated
            raise CheckpointError(
                f"{self.path!r}: storage {ref.key!r} needs {need} bytes ({ref.numel} "
                f"x {ref.dtype}) but its record declares {info.file_size}; the "
                "file is truncated or corrupt."
            )
        data = limits.read_member(self.archive, info, self.path, self.budget)
        return _as_storage(data, ref, self.big_endian, self.path)


def _member(archive: zipfile.ZipFile, name: str) -> zipfile.ZipInfo | None:
    try:
        return archive.getinfo(name)
    except KeyError:
        return None


def _check_storage(ref: _StorageRef, path: str) -> None:
    if (
        not isinstance(ref.dtype, np.dtype)
        or not isinstance(ref.numel, int)
        or isinstance(ref.numel, bool)
        or ref.numel < 0
    ):
        raise CheckpointError(
            f"{path!r}: storage {ref.key!r} has dtype {ref.dtype!r:.40} and "
            f"{ref.numel!r:.40} elements; the file is corrupt."
        )


def _as_storage(data, ref: _StorageRef, big_endian: bool, path: str):
    _check_storage(ref, path)
    dtype = ref.dtype.newbyteorder(">") if big_endian else ref.dtype
    need = ref.numel * dtype.itemsize
    if len(data) < need:
        raise CheckpointError(
            f"{path!r}: storage {ref.key!r} needs {need} bytes ({ref.numel} x "
            f"{ref.dtype}) but has {len(data)}; the file is truncated or corrupt."
        )
    return np.frombuffer(data, dtype=dtype, count=ref.numel)


def _legacy_storages(stream, keys, refs, size, path, budget):
    """The storages after the pickles of a legacy file, in `keys` order."""
    out = {}
    for key in keys:
        ref = refs.get(key)
        head = stream.read(8)
        if ref is None or len(head) < 8:
            raise CheckpointError(
                f"{path!r}: storage {key!r} is missing or the file ends before "
                "it; the file is truncated or corrupt."
            )
        numel = int.from_bytes(head, "little", signed=True)
        if numel < 0 or stream.tell() + numel * ref.dtype.itemsize > size:
            raise CheckpointError(
                f"{path!r}: storage {key!r} claims {numel} elements, more than "
                "the rest of the file holds; the file is truncated or corrupt."
            )
        budget.take(numel * ref.dtype.itemsize, path, f"storage {key!r}")
        data = stream.read(numel * ref.dtype.itemsize)
        out[key] = _as_storage(data, dataclasses.replace(ref, numel=numel), False, path)
    return out


class _RepeatAllowance:
    """The bytes that one read's element-repeating views may still take."""

    def __init__(self, limit: int = _REPEAT_BYTES):
        self.left = limit


def _tensor(
    ref: _TensorRef,
    base: np.ndarray,
    path: str,
    key: str,
    allowance: _RepeatAllowance | None = None,
    budget: limits.ReadBudget | None = None,
) -> np.ndarray:
    """The array of the tensor `key`, its layout checked before any read.

    Every element the strided view reads, from index `offset` to the last,
    must lie inside the storage (or its legacy view), a view holding more
    elements than its storage draws on `allowance` (see `_REPEAT_BYTES`),
    and every copy is charged to `budget` (the whole file's, whatever
    storage it views).
    """
    storage = ref.storage
    if storage.view is not None:
        start, count = storage.view
        if (
            not all(
                isinstance(v, int) and not isinstance(v, bool) for v in (start, count)
            )
            or start < 0
            or count < 0
            or start + count > base.size
        ):
            raise CheckpointError(
                f"{path!r}: a storage view of {count!r:.40} elements at "
                f"{start!r:.40} does not fit its storage of {base.size} elements; "
                "the file is corrupt."
            )
        base = base[start : start + count]
    problem = _layout_problem(ref.offset, ref.size, ref.stride)
    if problem is not None:
        raise CheckpointError(
            f"{path!r}: tensor {key!r:.100} has {problem}, not ints in [0, 2**63) "
            "with one stride per dimension; the file is corrupt."
        )
    layout = (
        f"tensor {key!r:.100} of size {ref.size!r:.80}, stride {ref.stride!r:.80} "
        f"and offset {ref.offset}"
    )
    dims = tuple(zip(ref.size, ref.stride, strict=True))
    elements = 1
    for n, _ in dims:
        elements *= n
    # Every stride is >= 0: the first element read is at `offset`, the last
    # at `offset + sum((n - 1) * s)`.
    first = ref.offset
    last = first + sum((n - 1) * s for n, s in dims)
    if elements and last >= base.size:
        raise CheckpointError(
            f"{path!r}: {layout} reads elements {first} to {last} of a storage "
            f"of {base.size} elements; the file is truncated or corrupt."
        )
    nbytes = elements * base.dtype.itemsize
    if elements > base.size:
        allowance = allowance or _RepeatAllowance()
        if nbytes > allowance.left:
            raise CheckpointError(
                f"{path!r}: {layout} repeats the elements of a storage of "
                f"{base.size} elements into {elements} ({nbytes} bytes), past the "
                f"{_REPEAT_BYTES >> 20} MiB that a file's repeating views (zero or "
                "overlapping strides) may hold in all; the file is corrupt."
            )
        allowance.left -= nbytes
    if budget is not None:
        budget.take(nbytes, path, layout)
    dtype = base.dtype.newbyteorder("=")
    item = base.dtype.itemsize
    try:
        if not elements:
            return np.zeros(ref.size, dtype=dtype)
        view = np.lib.stride_tricks.as_strided(
            base[first:],
            shape=ref.size,
            # A dimension of size 1 is never stepped along, whatever its stride.
            strides=tuple(s * item if n > 1 else 0 for n, s in dims),
            writeable=False,
        )
        return np.array(view, dtype=dtype)
    except ValueError as error:  # NumPy's limits: 64 dimensions, 2**63 bytes.
        raise CheckpointError(
            f"{path!r}: {layout} is not an array NumPy can hold "
            f"({_one_line(error)}); the file is corrupt."
        ) from None


def _materialize(node, storage_of, key: str = ""):
    """`node` with every tensor reference replaced by its array.

    `key` names `node` in errors: its keys and indices from the top, joined
    by "/" (`"state_dict/fc.weight"`).
    """

    def inner(k):
        return f"{key}/{k}" if key else str(k)

    if isinstance(node, _TensorRef):
        return storage_of(node, key)
    if isinstance(node, collections.OrderedDict):
        return collections.OrderedDict(
            (k, _materialize(v, storage_of, inner(k))) for k, v in node.items()
        )
    if isinstance(node, dict):
        return {k: _materialize(v, storage_of, inner(k)) for k, v in node.items()}
    if isinstance(node, list):
        return [_materialize(v, storage_of, inner(i)) for i, v in enumerate(node)]
    if isinstance(node, tuple):
        return tuple(_materialize(v, storage_of, inner(i)) for i, v in enumerate(node))
    if isinstance(node, (_StorageRef, _StorageType)):
        raise CheckpointError("A bare storage outside a tensor is not supported.")
    return node


def _open(path: str, budget: limits.ReadBudget | None):
    """`(object tree with tensor references, tensor resolver, closer)`.

    The resolver takes a tensor reference and its key; everything read is
    charged to `budget` (the default cap when `None`).
    """
    budget = limits.budget_for(budget, path)
    dtypes = _storage_dtypes()
    with open(path, "rb") as f:
        head = f.read(len(_LEGACY_PREFIX))
    if head.startswith(b"PK"):
        try:
            archive = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as error:
            raise CheckpointError(
                f"{path!r} is not a readable PyTorch zip archive "
                f"({_one_line(error)}); it may be truncated or corrupt."
            ) from None
        try:
            name = _data_pickle(archive.namelist())
            if name is None:
                raise CheckpointError(
                    f"{path!r} is a zip archive without a '<name>/data.pkl' "
                    "record: not a file torch.save wrote."
                )
            data = limits.read_member(archive, archive.getinfo(name), path, budget)
            tree = _unpickle(bytes(data), path, dtypes)
            del data
            storages = _ZipStorages(archive, name[: -len("data.pkl")], path, budget)
        except BaseException:
            archive.close()
            raise
        cache = {}
        allowance = _RepeatAllowance()

        def resolve(ref: _TensorRef, name: str) -> np.ndarray:
            key = ref.storage.key
            if key not in cache:
                cache[key] = storages.read(ref.storage)
            return _tensor(ref, cache[key], path, name, allowance, budget)

        return tree, resolve, archive.close
    if head != _LEGACY_PREFIX:
        raise CheckpointError(
            f"{path!r} is not a file torch.save wrote: it is neither a zip "
            "archive nor a legacy torch stream (a tar archive from PyTorch "
            "before 0.4 is not supported)."
        )
    with open(path, "rb") as stream:
        if _unpickle(stream, path, dtypes) != LEGACY_MAGIC:
            raise CheckpointError(f"{path!r}: bad legacy torch magic number.")
        protocol = _unpickle(stream, path, dtypes)
        if protocol != LEGACY_PROTOCOL:
            raise CheckpointError(
                f"{path!r}: legacy torch protocol {protocol!r} is not supported "
                f"(expected {LEGACY_PROTOCOL})."
            )
        info = _unpickle(stream, path, dtypes)
        if isinstance(info, Mapping) and not info.get("little_endian", True):
            raise CheckpointError(f"{path!r} was saved on a big-endian machine.")
        unpickler = _RestrictedUnpickler(stream, dtypes)
        tree = _load(unpickler, path)
        keys = _unpickle(stream, path, dtypes)
        if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
            raise CheckpointError(f"{path!r}: the legacy storage key list is corrupt.")
        bases = _legacy_storages(
            stream, keys, unpickler.storages, os.path.getsize(path), path, budget
        )

    allowance = _RepeatAllowance()

    def resolve(ref: _TensorRef, name: str) -> np.ndarray:
        if ref.storage.key not in bases:
            raise CheckpointError(
                f"{path!r} refers to the storage {ref.storage.key!r}, which the "
                "file lacks; it is truncated or corrupt."
            )
        return _tensor(ref, bases[ref.storage.key], path, name, allowance, budget)

    return tree, resolve, lambda: None


def read_torch_file(
    path: str | os.PathLike, *, budget: limits.ReadBudget | None = None
):
    """Reads everything a `torch.save` file holds, tensors as NumPy arrays.

    Args:
        path: A `.pth`, `.pth.tar` or `.pt` file (zip or legacy format).
        budget: What reading may allocate (`limits.ReadBudget`). Defaults to
            the cap without a model.

    Returns:
        The saved object: dicts, lists, tuples, numbers and strings as
        Python objects, tensors as arrays of their dtype (bfloat16 through
        `ml_dtypes`).

    Raises:
        CheckpointError: the pickle names anything but a tensor, a storage
            type or `OrderedDict` (nothing is run; the message names it), or
            the file is truncated or corrupt. One line either way.
        FileNotFoundError: there is no file at `path`.
    """
    path = os.fspath(path)
    tree, resolve, close = _open(path, budget)
    try:
        return _materialize(tree, resolve)
    except RecursionError:
        raise CheckpointError(
            f"{path!r}: its containers are nested deeper than can be read; the "
            "file is corrupt."
        ) from None
    finally:
        close()


def read_state_dict(
    path: str | os.PathLike,
    key: str = "state_dict",
    *,
    budget: limits.ReadBudget | None = None,
) -> dict[str, np.ndarray]:
    """Reads a model's weights from a `torch.save` file.

    The file may hold the state dict itself (`torch.save(model.state_dict())`)
    or a dict with the state dict under `key` and anything else beside it
    (an optimizer's state, an epoch, a name: the training checkpoints of
    timm and of Park & Kim's code); only the state dict's tensors are
    rebuilt. A `module.` prefix (`torch.nn.DataParallel`) is removed.

    Args:
        path: A `.pth`, `.pth.tar` or `.pt` file.
        key: The entry holding the state dict. Defaults to `"state_dict"`.
        budget: What reading may allocate (`limits.ReadBudget`). Defaults to
            the cap without a model.

    Returns:
        `{parameter or buffer name: array}`, in the file's order.

    Raises:
        CheckpointError: see `read_torch_file`; also for a file that holds
            neither a state dict nor a dict with one under `key`.
    """
    path = os.fspath(path)
    tree, resolve, close = _open(path, budget)
    try:
        if isinstance(tree, Mapping) and isinstance(tree.get(key), Mapping):
            tree = tree[key]
        if (
            not isinstance(tree, Mapping)
            or not tree
            or not all(
                isinstance(k, str) and isinstance(v, _TensorRef)
                for k, v in tree.items()
            )
        ):
            found = list(tree)[:8] if isinstance(tree, Mapping) else type(tree).__name__
            raise CheckpointError(
                f"{path!r} holds no state dict: expected a dict of tensors, or a "
                f"dict with one under {key!r}; found {found}."
            )
        state = {name: resolve(ref, name) for name, ref in tree.items()}
    finally:
        close()
    if all(name.startswith("module.") for name in state):
        state = {name[len("module.") :]: value for name, value in state.items()}
    return state
