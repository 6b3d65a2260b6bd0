"""Files written whole or not at all: temporary file, fsync, `os.replace`.

A process killed while it writes (a pre-empted machine, `kill -9`, a full
disk) must never leave a torn file where a reader expects a complete one.
Every writer here writes a hidden temporary file in the target's own
directory (same file system, so the rename is atomic), flushes it to disk,
renames it over the target and syncs the directory. A reader sees the old
file or the new one, never a mix.

Example:

```python
from keras_vit.training import atomic

atomic.write_json("runs/x/results.json", {"accuracy": 0.98})
atomic.save_model(model, "runs/x/final.keras")
```
"""

from __future__ import annotations

import contextlib
import json
import os

# Temporary files start with this; `remove_partials` cleans what a killed
# writer left behind. The target's suffix is kept (`.keras`, `.weights.h5`),
# since Keras checks it.
PARTIAL_PREFIX = ".partial-"


def atomic_write(path: str, write) -> str:
    """Calls `write(temporary_path)`, then moves the result to `path`.

    Args:
        path: The file to create or replace.
        write: A function writing the whole file at the path it is given.

    Returns:
        `path`. On any error (or interruption) the temporary file is removed
        and `path` is left as it was.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    partial = os.path.join(
        directory, f"{PARTIAL_PREFIX}{os.getpid()}-{os.path.basename(path)}"
    )
    try:
        write(partial)
        _fsync(partial)
        os.replace(partial, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.remove(partial)
        raise
    _fsync(directory)
    return path


def write_text(path: str, text: str) -> str:
    """Writes `text` (UTF-8) to `path` atomically."""

    def write(partial):
        with open(partial, "w", encoding="utf-8") as f:
            f.write(text)

    return atomic_write(path, write)


def write_json(path: str, value) -> str:
    """Writes `value` as strict JSON (no bare NaN or Infinity) atomically.

    Raises:
        ValueError: `value` holds a non-finite float; nothing is written.
    """
    return write_text(path, json.dumps(value, indent=2, allow_nan=False) + "\n")


def save_model(model, path: str) -> str:
    """`model.save(path)` (a `.keras` file), atomically."""
    return atomic_write(path, model.save)


def save_weights(model, path: str) -> str:
    """`model.save_weights(path)` (a `.weights.h5` file), atomically."""
    return atomic_write(path, model.save_weights)


def remove_partials(directory: str) -> list[str]:
    """Deletes temporary files a killed writer left in `directory`."""
    removed = []
    if not os.path.isdir(directory):
        return removed
    for name in os.listdir(directory):
        if name.startswith(PARTIAL_PREFIX):
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(directory, name))
                removed.append(name)
    return removed


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
