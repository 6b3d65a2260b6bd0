"""Small checkpoint files whose claims would cost gigabytes, built on disk.

Each builder writes one file of a few hundred bytes to a few megabytes that
a reader trusting its claims would turn into about a gigabyte or more (or a
traceback). Used by `test_hostile_checkpoints.py`.

Example:

```python
npz_claiming_terabytes(tmp_path / "x.npz")
```
"""

from __future__ import annotations

import io
import json
import struct
import zipfile

import numpy as np

GIB = 1 << 30
# The one-line refusals of a checkpoint: `CheckpointError`, or its subclass
# for a file that ends before the data it declares.
CHECKPOINT_ERRORS = ("CheckpointError", "TruncatedFileError")
_ZEROS = bytes(1 << 20)


def _npy_header(shape, descr="<f4") -> bytes:
    """The `.npy` header of an array of `shape`, without its data."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": descr, "fortran_order": False, "shape": shape}
    )
    return header.getvalue()


def _deflating(path) -> zipfile.ZipFile:
    """A zip archive written deflated at zlib's fastest level (1.6 s a GiB of
    zeros here; they shrink about 230-fold)."""
    return zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1)


def _deflated_zeros(archive: zipfile.ZipFile, name: str, head: bytes, zeros: int):
    """A record of `head`, then `zeros` zero bytes, written a MiB at a time."""
    with archive.open(name, "w", force_zip64=True) as record:
        record.write(head)
        for _ in range(zeros // len(_ZEROS)):
            record.write(_ZEROS)


def npz_claiming_terabytes(path, key: str = "cls") -> None:
    """A 240-byte `.npz` whose array `key` claims (10**6, 10**6) float32."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{key}.npy", _npy_header((10**6, 10**6)))


def npz_bomb(path, nbytes: int = GIB, key: str = "cls") -> None:
    """A ~5 MB `.npz` whose deflated array `key` inflates to `nbytes` of zeros.

    Its header is honest: the record holds exactly what it claims.
    """
    with _deflating(path) as archive:
        header = _npy_header((nbytes // 4,))
        _deflated_zeros(archive, f"{key}.npy", header, nbytes)


def _safetensors(path, header: bytes, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(len(header).to_bytes(8, "little") + header + data)


def safetensors_overlapping(path, count: int = 256, nbytes: int = 4 << 20) -> None:
    """A ~4 MB `.safetensors` whose `count` tensors all view its one range."""
    header = {
        f"blocks.{i}.mlp.fc1.weight": {
            "dtype": "F32",
            "shape": [nbytes // 4],
            "data_offsets": [0, nbytes],
        }
        for i in range(count)
    }
    _safetensors(path, json.dumps(header).encode(), bytes(nbytes))


def safetensors_infinite_offset(path) -> None:
    """A `.safetensors` header with `Infinity` as an offset."""
    header = (
        b'{"cls_token":{"dtype":"F32","shape":[1,1,32],"data_offsets":[0,Infinity]}}'
    )
    _safetensors(path, header, bytes(128))


def safetensors_deeply_nested(path, depth: int = 100_000) -> None:
    """A `.safetensors` header nested `depth` lists deep."""
    header = (
        b'{"cls_token":{"dtype":"F32","shape":'
        + b"[" * depth
        + b"]" * depth
        + b',"data_offsets":[0,128]}}'
    )
    _safetensors(path, header, bytes(128))


# Pickle opcodes, written by hand (the reader allows only these names).
def _text(value: str) -> bytes:
    data = value.encode()
    return b"X" + struct.pack("<I", len(data)) + data  # BINUNICODE


def _int(value: int) -> bytes:
    if value < 1 << 31:
        return b"J" + struct.pack("<i", value)  # BININT
    data = value.to_bytes((value.bit_length() + 8) // 8, "little", signed=True)
    return b"\x8a" + bytes([len(data)]) + data  # LONG1


def _torch_pickle(numel: int, count: int) -> bytes:
    """`OrderedDict(w0=t, ..., w{count-1}=t)`: `count` full views of one
    float32 storage "0" of `numel` elements, each rebuilt as a tensor.

    The global, the storage and the hook table are memoised (BINPUT /
    BINGET), as `torch.save` writes a storage shared by many tensors.
    """
    rebuild = b"ctorch._utils\n_rebuild_tensor_v2\nq\x01"
    storage = (
        b"(" + _text("storage") + b"ctorch\nFloatStorage\n" + _text("0")
        + _text("cpu") + _int(numel) + b"tQq\x02"
    )  # fmt: skip
    hooks = b"ccollections\nOrderedDict\nq\x03)R"
    items = []
    for i in range(count):
        tensor = (
            (rebuild if i == 0 else b"h\x01")
            + b"("
            + (storage if i == 0 else b"h\x02")
            + _int(0)
            + _int(numel) + b"\x85"
            + _int(1) + b"\x85"
            + b"\x89"
            + (hooks if i == 0 else b"h\x03)R")
            + b"tR"
        )  # fmt: skip
        items.append(_text(f"w{i}") + tensor)
    state = b"ccollections\nOrderedDict\n)R(" + b"".join(items) + b"u"
    return b"\x80\x02" + state + b"."


def pth_repeated_views(path, numel: int = 1 << 14, count: int = 1 << 14) -> None:
    """A ~0.7 MB `torch.save` zip: `count` tensors, each a full view of one
    stored 64 KiB storage (1 GiB if each is copied)."""
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", _torch_pickle(numel, count))
        archive.writestr("archive/data/0", bytes(4 * numel))
        archive.writestr("archive/version", "3\n")


def pth_bomb(path, nbytes: int = GIB) -> None:
    """A ~5 MB `torch.save` zip whose one storage is a deflated record of
    `nbytes` zeros, viewed by one tensor `w0`."""
    with _deflating(path) as archive:
        archive.writestr("archive/data.pkl", _torch_pickle(nbytes // 4, 1))
        _deflated_zeros(archive, "archive/data/0", b"", nbytes)
        archive.writestr("archive/version", "3\n")
