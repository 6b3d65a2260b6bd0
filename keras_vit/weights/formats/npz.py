"""The `.npz` file format: `numpy.savez` archives of named arrays.

google-research/vision_transformer and big_vision save their parameters as
plain `numpy.savez` archives. `read_npz` reads one into `{key: array}`
without ever unpickling (a pickle, a single `.npy` or an object array is
refused in one sentence). `normalize` brings the array shapes of older
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

import os
import zipfile

import numpy as np

from keras_vit.weights.errors import CheckpointError

SUFFIXES = (".npz",)


def looks_like(head: bytes) -> bool:
    """Whether a file's first bytes are a zip archive, a pickle or a `.npy`.

    The last two are claimed so that `read_npz` explains why it refuses them.
    """
    return head.startswith((b"PK", b"\x80", b"\x93NUMPY"))


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
