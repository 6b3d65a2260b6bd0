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
