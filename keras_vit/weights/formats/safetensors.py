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
import math
import os

import numpy as np

from keras_vit.weights.errors import CheckpointError

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


def read_safetensors(
    path: str | os.PathLike, *, float32: bool = True
) -> dict[str, np.ndarray]:
    """Reads every tensor of a `.safetensors` file into NumPy.

    Args:
        path: The file.
        float32: Convert floating-point tensors (including bfloat16 and
            float8) to float32. Defaults to `True`.

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
        try:
            header = json.loads(f.read(header_size).decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as error:
            raise CheckpointError(
                f"{path!r} is not a valid safetensors file: unreadable header "
                f"({error})."
            ) from error
    if not isinstance(header, dict):
        raise CheckpointError(f"{path!r}: the safetensors header is not a JSON object.")
    header.pop("__metadata__", None)
    data = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_size)
    dtypes = _dtypes()
    tensors = {}
    for name, info in header.items():
        try:
            dtype = dtypes[info["dtype"]]
            shape = tuple(int(d) for d in info["shape"])
            begin, end = (int(o) for o in info["data_offsets"])
        except (KeyError, TypeError, ValueError) as error:
            raise CheckpointError(
                f"{path!r}: the header entry of {name!r} is malformed or has an "
                f"unsupported dtype ({info!r})."
            ) from error
        nbytes = math.prod(shape) * dtype.itemsize
        if not 0 <= begin <= end <= data.size or end - begin != nbytes:
            raise CheckpointError(
                f"{path!r}: tensor {name!r} {shape} {info['dtype']} needs {nbytes} "
                f"bytes at [{begin}, {end}) but the data section has "
                f"{data.size}; the file is truncated or corrupt."
            )
        array = np.frombuffer(data[begin:end], dtype=dtype).reshape(shape)
        if float32 and array.dtype.kind not in "iub":
            array = array.astype(np.float32)
        else:
            array = array.copy()
        tensors[name] = array
    del data
    return tensors


# The dtypes `write_safetensors` writes, by their safetensors names.
_WRITTEN = {np.dtype("float32"): "F32", np.dtype("float16"): "F16"}


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
