"""Atomic writes: an export is either absent or complete, never half-written."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile


def check_target(path: pathlib.Path, overwrite: bool, is_dir: bool):
    """Raises `FileExistsError` if `path` exists and may not be replaced."""
    if not path.exists():
        return
    if not overwrite:
        raise FileExistsError(
            f"{str(path)!r} already exists. Export a new version, or pass "
            "overwrite=True to replace it."
        )
    if path.is_dir() != is_dir:
        kind = "a directory" if path.is_dir() else "a file"
        raise FileExistsError(f"{str(path)!r} exists and is {kind}; not replacing it.")


def staging_dir(path: pathlib.Path) -> pathlib.Path:
    """Creates a hidden, empty directory next to `path` to write into.

    Its name starts with a dot and is not a number, so TF Serving, which
    only loads numeric version directories, never picks it up.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    return pathlib.Path(
        tempfile.mkdtemp(prefix=f".{path.name}.partial-", dir=path.parent)
    )


def move_into_place(staging: pathlib.Path, path: pathlib.Path, overwrite: bool):
    """Renames `staging` (a file or directory) to `path`.

    Without an existing `path` this is one `rename`. Replacing an existing
    `path` moves it aside first and deletes it only once the new one is in
    place; if the second rename fails, the old one is put back.
    """
    if not path.exists():
        # A directory rename fails rather than merge if `path` appeared.
        os.rename(staging, path)
        return
    if not overwrite:
        raise FileExistsError(f"{str(path)!r} appeared while exporting.")
    if staging.is_file():
        os.replace(staging, path)  # Atomic for files.
        return
    retired = pathlib.Path(
        tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=path.parent)
    )
    os.rename(path, retired / path.name)
    try:
        os.rename(staging, path)
    except BaseException:
        os.rename(retired / path.name, path)  # Put the previous export back.
        raise
    finally:
        shutil.rmtree(retired, ignore_errors=True)


def write_bytes(path: pathlib.Path, data: bytes, overwrite: bool):
    """Writes `data` to `path` atomically (a temporary file, then a rename)."""
    check_target(path, overwrite, is_dir=False)
    staging = staging_dir(path)
    try:
        (staging / path.name).write_bytes(data)
        move_into_place(staging / path.name, path, overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
