"""The `.npz` file format: `numpy.savez` archives of named arrays.

google-research/vision_transformer and big_vision save their parameters as
plain `numpy.savez` archives. `read_npz` reads one into `{key: array}`
without ever unpickling (a pickle, a single `.npy` or an object array is
refused in one sentence), and without allocating any array before its
claimed shape is checked against its record and the read's budget
(`keras_vit.weights.formats.limits`). `normalize` brings the array shapes of older
files up to date: Flax before 0.3.6 stored GroupNorm parameters as
`(1, 1, 1, C)`. Which key dialect the file speaks is decided elsewhere
(`keras_vit.weights.checkpoint`).

Example:

```python
params = read_npz("ViT-B_16.npz")
params["cls"].shape  # (1, 1, 768)
```
"""

from __future__ import annotations

import io
import math
import os
import zipfile

import numpy as np

from keras_vit._export import export
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.errors import TruncatedFileError
from keras_vit.weights.formats import limits

SUFFIXES = (".npz",)


def looks_like(head: bytes) -> bool:
    """Whether a file's first bytes are a zip archive, a pickle or a `.npy`.

    The last two are claimed so that `read_npz` explains why it refuses them.
    """
    return head.startswith((b"PK", b"\x80", b"\x93NUMPY"))


@export("keras_vit.weights.read_npz")
def read_npz(
    path: str | os.PathLike, *, budget: limits.ReadBudget | None = None
) -> dict[str, np.ndarray]:
    """Reads an original-layout `.npz` checkpoint, never unpickling.

    Each array's `.npy` header is read first, and its claimed shape checked
    against the bytes its zip record declares and against `budget`, before
    the array is allocated (see `keras_vit.weights.formats.limits`).

    Args:
        path: The `.npz` file.
        budget: What reading may allocate. Defaults to the cap without a
            model (`limits.ReadBudget.default`).

    Returns:
        `{key: array}`, with legacy `(1, 1, 1, C)` GroupNorm parameters
        flattened to `(C,)` (see `normalize`).

    Raises:
        CheckpointError: if the file is not a readable `.npz` archive, an
            array in it is stored as pickled Python objects, or an array
            claims more bytes than its record holds or the budget allows.
    """
    return normalize(read_arrays(path, budget=budget))


def read_arrays(
    path: str | os.PathLike,
    keys=None,
    *,
    budget: limits.ReadBudget | None = None,
) -> dict[str, np.ndarray]:
    """The arrays of an `.npz` file, as saved, each claim checked first.

    Args:
        path: The `.npz` file.
        keys: The keys to read (others are not inflated), or `None` for all.
            A key the file lacks is left out.
        budget: What reading may allocate (see `read_npz`).

    Returns:
        `{key: array}` in the archive's order.

    Raises:
        CheckpointError: see `read_npz`.

    Example:

    ```python
    arrays = read_arrays("digits.npz", keys=("images", "labels"))
    ```
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
    budget = limits.budget_for(budget, path)
    try:
        archive = zipfile.ZipFile(path)
    except (OSError, EOFError, ValueError, zipfile.BadZipFile) as error:
        raise TruncatedFileError(
            f"{path!r} is not a readable .npz archive ({error}). The file may "
            "be truncated or corrupt; download it again."
        ) from error
    arrays = {}
    with archive:
        members = archive.infolist()
        seen = set()
        for info in members:
            if info.filename in seen:
                raise CheckpointError(
                    f"{path!r} holds two records named {info.filename!r}; the "
                    "file is corrupt."
                )
            seen.add(info.filename)
        for info in members:
            key = info.filename.removesuffix(".npy")
            if keys is not None and key not in keys:
                continue
            if info.filename.endswith(".npy"):
                arrays[key] = _read_member_array(archive, info, path, key, budget)
            else:  # As `numpy.load` gives it: the record's bytes.
                data = limits.read_member(archive, info, path, budget)
                arrays[key] = np.asarray(bytes(data))
    return arrays


# NumPy's own limit on a `.npy` header (`numpy.lib.format`'s default).
_MAX_NPY_HEADER = 10000


def _read_member_array(archive, info, path: str, key: str, budget) -> np.ndarray:
    """One `.npy` record: its header parsed, its claim checked, then its data.

    Hand-written rather than `numpy.load`, which allocates the shape the
    header claims before reading any data (a few hundred bytes can claim
    terabytes); the header itself is parsed by NumPy's
    `read_array_header_1_0`/`_2_0`, after its length is checked here.
    """
    with limits.open_member(archive, info, path) as stream:
        head = _read_exactly(stream, 8, path, info.filename)  # magic, version
        if head[:6] != b"\x93NUMPY" or head[6:8] not in (b"\x01\x00", b"\x02\x00"):
            raise CheckpointError(
                f"{path!r}: the array {key!r} is not a .npy array of format 1.0 "
                f"or 2.0 (its record starts {bytes(head)!r}); the file is corrupt."
            )
        length_size = 2 if head[6] == 1 else 4
        length_field = _read_exactly(stream, length_size, path, info.filename)
        header_length = int.from_bytes(length_field, "little")
        if header_length > _MAX_NPY_HEADER:
            raise CheckpointError(
                f"{path!r}: the array {key!r} has a .npy header of {header_length} "
                f"bytes, more than NumPy's {_MAX_NPY_HEADER}; the file is corrupt."
            )
        header = _read_exactly(stream, header_length, path, info.filename)
        read_header = (
            np.lib.format.read_array_header_1_0
            if length_size == 2
            else np.lib.format.read_array_header_2_0
        )
        try:
            shape, fortran_order, dtype = read_header(
                io.BytesIO(bytes(length_field + header))
            )
        except (ValueError, SyntaxError, RecursionError, MemoryError) as error:
            raise CheckpointError(
                f"{path!r}: the .npy header of the array {key!r} is unreadable "
                f"({' '.join(str(error).split())[:200]}); the file is corrupt."
            ) from None
        if dtype.hasobject:
            raise CheckpointError(
                f"The array {key!r} in {path!r} is a pickled object array; "
                "it is refused (allow_pickle=False)."
            )
        claim = f"the array {key!r} of shape {shape} {dtype}"
        if any(d < 0 for d in shape):
            raise CheckpointError(
                f"{path!r}: {claim} has a negative size; the file is corrupt."
            )
        nbytes = limits.array_bytes(shape, dtype.itemsize)
        stored = info.file_size - (8 + length_size + header_length)
        if nbytes > stored:
            raise TruncatedFileError(
                f"{path!r}: {claim} needs {nbytes} bytes but its record holds "
                f"{max(stored, 0)}; the file is truncated or corrupt."
            )
        budget.take(nbytes, path, claim)
        array = np.empty(math.prod(shape), dtype=dtype)
        raw = array.view(np.uint8) if nbytes else np.empty(0, np.uint8)
        filled = limits.read_into(stream, memoryview(raw), path, info.filename)
    if filled != nbytes:
        raise TruncatedFileError(
            f"{path!r}: {claim} needs {nbytes} bytes but its record ends after "
            f"{filled}; the file is truncated or corrupt."
        )
    try:
        if fortran_order:
            return array.reshape(shape[::-1]).transpose()
        return array.reshape(shape)
    except ValueError as error:  # NumPy's limit: 64 dimensions
        raise CheckpointError(
            f"{path!r}: {claim:.300} is not an array NumPy can hold ({error}); "
            "the file is corrupt."
        ) from None


def _read_exactly(stream, count: int, path: str, name: str) -> bytearray:
    """`count` bytes of a zip record, or one line saying it ends first."""
    data = bytearray(count)
    if limits.read_into(stream, memoryview(data), path, name) != count:
        raise TruncatedFileError(
            f"{path!r}: the record {name!r} ends inside its .npy header; the file "
            "is truncated or corrupt."
        )
    return data


def _npy_contents(path: str) -> str:
    """What a pickle or `.npy` file holds, found out without unpickling."""
    with open(path, "rb") as f:
        if f.read(1) == b"\x80":
            return "pickled data"
        f.seek(0)
        try:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                dtype = np.lib.format.read_array_header_1_0(f)[2]
            else:
                dtype = np.lib.format.read_array_header_2_0(f)[2]
        except (ValueError, SyntaxError, RecursionError, MemoryError):
            return "a corrupt .npy array"
    return "pickled data" if dtype.hasobject else "a single .npy array"


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
