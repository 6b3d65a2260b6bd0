"""File formats: how a checkpoint file's bytes become `{key: array}`.

A format says nothing about what its keys mean (that is a dialect's job,
`keras_vit.weights.dialects`). `FORMATS` lists the checkpoint files
`weights=` reads (built in: `.npz` and `.safetensors`; a plug-in adds
more with `register_format`), one row each: the suffixes that name it, a test of its
first bytes (or of the file) for a file without them, its reader, and
whether a file in it may hold the original layout itself (an `.npz` may; a
`.safetensors` or a `torch.save` file comes from PyTorch). A new format is
one module and one row. Keras's own files (`keras_h5`) are read against a
model, by layer name, and are picked by suffix before this table.

Example:

```python
fmt = format_of("model.safetensors")
tensors = fmt.read("model.safetensors")
```
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable

import numpy as np

from keras_vit import plugins
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.formats import npz
from keras_vit.weights.formats import safetensors

_HEAD_BYTES = 16


@dataclasses.dataclass(frozen=True)
class Format:
    """One checkpoint file format.

    Attributes:
        name: For messages, e.g. `"safetensors"`.
        suffixes: File name endings that name the format.
        looks_like: `first bytes -> bool`, for a file without a suffix.
        read: `(path, *, budget=None) -> {key: array}`; raises
            `CheckpointError` for a corrupt file, or for a claim past the
            `limits.ReadBudget` (the default cap when `None`) before
            allocating it.
        original_layout: Whether a file whose keys no dialect recognises is
            taken as the original layout (otherwise it is refused).
        recognizes: `path -> bool`, a test of the file itself, asked before
            any `looks_like` (a `torch.save` zip and an `.npz` share their
            first bytes).
    """

    name: str
    suffixes: tuple[str, ...]
    looks_like: Callable[[bytes], bool]
    read: Callable[[str], dict[str, np.ndarray]]
    original_layout: bool = False
    recognizes: Callable[[str], bool] | None = None


# Built in: NumPy and safetensors files. A plug-in adds its own with
# `register_format` (the Park & Kim wing adds PyTorch's `torch.save` files);
# `format_of` loads the installed plug-ins (`keras_vit.plugins`) before it
# reads a file no built-in suffix names.
FORMATS: list[Format] = [
    Format("npz", npz.SUFFIXES, npz.looks_like, npz.read_npz, original_layout=True),
    Format("safetensors", safetensors.SUFFIXES, safetensors.looks_like,
           safetensors.read_safetensors),
]  # fmt: skip


def register_format(fmt: Format) -> None:
    """Adds a file format that `weights=` reads.

    Formats are asked in the order they were registered; a suffix belongs to
    one format only.

    Raises:
        ValueError: another format already claims one of its suffixes.

    Example:

    ```python
    register_format(Format("torch.save", (".pth",), lambda head: False, read))
    ```
    """
    taken = {s: f.name for f in FORMATS if f.name != fmt.name for s in f.suffixes}
    clash = sorted(s for s in fmt.suffixes if s in taken)
    if clash:
        raise ValueError(
            f"Format {fmt.name!r}: the suffixes {clash} already belong to "
            f"{sorted({taken[s] for s in clash})}."
        )
    FORMATS[:] = [f for f in FORMATS if f.name != fmt.name] + [fmt]


def format_of(path: str | os.PathLike) -> Format:
    """The `Format` of a file: by its suffix, then by its first bytes.

    Raises:
        CheckpointError: no format claims the file.
    """
    path = os.fspath(path)
    for fmt in FORMATS:
        if path.endswith(fmt.suffixes):
            return fmt
    if plugins.load_plugins():  # A plug-in's format may claim it (`.pth`).
        for fmt in FORMATS:
            if path.endswith(fmt.suffixes):
                return fmt
    for fmt in FORMATS:
        if fmt.recognizes is not None and fmt.recognizes(path):
            return fmt
    with open(path, "rb") as f:
        head = f.read(_HEAD_BYTES)
    for fmt in FORMATS:
        if fmt.looks_like(head):
            return fmt
    known = " or ".join(s for fmt in FORMATS for s in fmt.suffixes)
    raise CheckpointError(
        f"{path!r} is not a checkpoint keras_vit can read: expected a {known} "
        "file, or a Keras .keras/.weights.h5 file."
    )
