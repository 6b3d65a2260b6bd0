"""The `.safetensors` file format, read with NumPy only.

The format is an 8-byte little-endian header length, a JSON header
`{name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__":
{...}}`, then the raw little-endian tensor bytes. `read_safetensors` parses
it without the `safetensors` package (bfloat16 and float8 through
`ml_dtypes`, which Keras already depends on). Which key dialect the file
speaks (timm, Hugging Face, ...) is decided elsewhere
(`keras_vit.weights.checkpoint`).

Example:

```python
tensors = read_safetensors("model.safetensors")
tensors["cls_token"].shape  # (1, 1, 768)
```
"""

from __future__ import annotations

import json
import os

import numpy as np

from keras_vit._export import export
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.errors import TruncatedFileError
from keras_vit.weights.formats import limits

SUFFIXES = (".safetensors",)


def looks_like(head: bytes) -> bool:
    """Whether a file's first bytes are a header length and a JSON object."""
    return len(head) >= 9 and head[8:9] == b"{"


_MAX_HEADER_BYTES = 100 * 2**20


def _dtypes() -> dict[str, np.dtype]:
    import ml_dtypes

    return {
        "F64": np.dtype("<f8"),
        "F32": np.dtype("<f4"),
        "F16": np.dtype("<f2"),
        "BF16": np.dtype(ml_dtypes.bfloat16),
        "F8_E4M3": np.dtype(ml_dtypes.float8_e4m3fn),
        "F8_E5M2": np.dtype(ml_dtypes.float8_e5m2),
        "I64": np.dtype("<i8"),
        "I32": np.dtype("<i4"),
        "I16": np.dtype("<i2"),
        "I8": np.dtype("i1"),
        "U8": np.dtype("u1"),
        "BOOL": np.dtype("?"),
    }


@export("keras_vit.weights.read_safetensors")
def read_safetensors(
    path: str | os.PathLike,
    *,
    float32: bool = True,
    budget: limits.ReadBudget | None = None,
) -> dict[str, np.ndarray]:
    """Reads every tensor of a `.safetensors` file into NumPy.

    The header is checked whole before any tensor is read: strict JSON
    (no `Infinity` or `NaN`, no nesting deeper than Python can parse),
    each entry's dtype, shape and offsets, and the offsets tiling the data
    section exactly, as the format requires (no overlap, no gap, nothing
    after). Each tensor is then charged to `budget` before it is copied
    (see `keras_vit.weights.formats.limits`).

    Args:
        path: The file.
        float32: Convert floating-point tensors (including bfloat16 and
            float8) to float32. Defaults to `True`.
        budget: What reading may allocate. Defaults to the cap without a
            model (`limits.ReadBudget.default`).

    Returns:
        `{name: array}`, in the file's order.

    Raises:
        CheckpointError: for a truncated or malformed file, naming the
            tensor at fault where there is one.

    Example:

    ```python
    tensors = read_safetensors("model.safetensors")
    tensors["cls_token"].shape  # (1, 1, 768)
    ```
    """
    path = os.fspath(path)
    size = os.path.getsize(path)
    budget = limits.budget_for(budget, path)
    with open(path, "rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise CheckpointError(f"{path!r} is too short to be a safetensors file.")
        header_size = int.from_bytes(prefix, "little")
        if header_size > min(size - 8, _MAX_HEADER_BYTES):
            raise CheckpointError(
                f"{path!r} is not a valid safetensors file: its header claims "
                f"{header_size} bytes but the file has {size}."
            )
        # Parsed JSON takes many times its text (an empty list, 3 bytes, is
        # a 56-byte object and a pointer): charged at that rate while the
        # header is parsed and checked, and given back once it is dropped.
        header_cost = header_size * _JSON_COST
        budget.take(header_cost, path, f"the safetensors header of {header_size} bytes")
        header = limits.parse_json(f.read(header_size), path, "header")
    if not isinstance(header, dict):
        raise CheckpointError(f"{path!r}: the safetensors header is not a JSON object.")
    header.pop("__metadata__", None)
    entries = _checked_entries(header, path, size - 8 - header_size)
    del header
    budget.release(header_cost)
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_size)
    tensors = {}
    for name, (dtype, shape, begin, end) in entries.items():
        try:
            array = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape)
        except ValueError as error:  # NumPy's limit: 64 dimensions
            raise CheckpointError(
                f"{path!r}: tensor {name!r} of shape {shape!r:.200} is not an "
                f"array NumPy can hold ({error}); the file is corrupt."
            ) from None
        widen = float32 and array.dtype.kind not in "iub"
        out_dtype = np.dtype(np.float32) if widen else array.dtype
        budget.take(
            limits.array_bytes(shape, out_dtype.itemsize),
            path,
            f"the tensor {name!r} of shape {shape} {_name_of(dtype)}",
        )
        tensors[name] = array.astype(out_dtype) if widen else array.copy()
    del data
    return tensors


# The bytes of Python objects one byte of JSON text may become, at most.
_JSON_COST = 32


def _name_of(dtype: np.dtype) -> str:
    """The safetensors name of a dtype `_dtypes` maps, for messages."""
    return next(name for name, d in _dtypes().items() if d == dtype)


def _checked_entries(header: dict, path: str, data_size: int) -> dict:
    """`{name: (dtype, shape, begin, end)}`, every entry checked.

    The format requires the tensors' byte ranges to tile the data section:
    sorted by offset, each begins where the one before ends, and the last
    ends at the end of the file. Without that, overlapping ranges let a few
    bytes of file be copied into any number of tensors.
    """
    dtypes = _dtypes()
    entries = {}
    for name, info in header.items():
        try:
            dtype = dtypes[info["dtype"]]
            shape = tuple(_index(d) for d in info["shape"])
            begin, end = (_index(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(
                f"{path!r}: the header entry of {name!r} is malformed or has an "
                f"unsupported dtype ({info!r:.200})."
            ) from error
        nbytes = limits.array_bytes(shape, dtype.itemsize)
        if not begin <= end <= data_size or end - begin != nbytes:
            raise TruncatedFileError(
                f"{path!r}: tensor {name!r} {shape} {info['dtype']} needs {nbytes} "
                f"bytes at [{begin}, {end}) but the data section has "
                f"{data_size}; the file is truncated or corrupt."
            )
        entries[name] = (dtype, shape, begin, end)
    covered = 0
    previous = None
    for name, (_, _, begin, end) in sorted(
        entries.items(), key=lambda item: (item[1][2], item[1][3])
    ):
        if begin != covered:
            what = (
                f"overlaps {previous!r} (which ends at byte {covered})"
                if begin < covered
                else f"leaves bytes [{covered}, {begin}) unused"
            )
            raise CheckpointError(
                f"{path!r}: tensor {name!r} at bytes [{begin}, {end}) {what}; "
                "the tensors of a safetensors file tile its data section, so "
                "the file is corrupt."
            )
        covered, previous = end, name
    if covered != data_size:
        raise CheckpointError(
            f"{path!r}: the tensors end at byte {covered} of a data section of "
            f"{data_size} bytes; the file is corrupt."
        )
    return entries


def _index(value) -> int:
    """A JSON size or offset: a non-negative int (not a bool or float)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r:.40} is not a non-negative integer")
    return value


# The dtypes `write_safetensors` writes, by their safetensors names.
_WRITTEN = {np.dtype("float32"): "F32", np.dtype("float16"): "F16"}


@export("keras_vit.weights.write_safetensors")
def write_safetensors(
    path: str | os.PathLike,
    tensors: dict[str, np.ndarray],
    metadata: dict[str, str] | None = None,
) -> None:
    """Writes `tensors` as a `.safetensors` file, with NumPy only.

    The layout `read_safetensors` reads (and the `safetensors` package
    writes): keys sorted, the JSON header padded with spaces to a multiple
    of 8 bytes, tensors little-endian and C-ordered. Written by hand, as the
    reader is, so that saving needs no other package. The file is written
    in place: callers that need it whole or absent write to a temporary
    name first (as `keras_vit.save_pretrained` does).

    Args:
        path: The file to write.
        tensors: `{name: array}`, float32 or float16.
        metadata: Optional string-to-string `__metadata__`.

    Raises:
        ValueError: an array of another dtype (named).
    """
    header, offset, chunks = {}, 0, []
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for key in sorted(tensors):
        array = np.asarray(tensors[key])
        if array.dtype not in _WRITTEN:
            raise ValueError(
                f"Cannot write {key!r} of dtype {array.dtype} to safetensors; "
                f"expected one of {[str(d) for d in _WRITTEN]}."
            )
        data = np.ascontiguousarray(
            array, dtype=array.dtype.newbyteorder("<")
        ).tobytes()
        header[key] = {
            "dtype": _WRITTEN[array.dtype],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        offset += len(data)
        chunks.append(data)
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)
    with open(path, "wb") as f:
        f.write(len(encoded).to_bytes(8, "little"))
        f.write(encoded)
        for chunk in chunks:
            f.write(chunk)
