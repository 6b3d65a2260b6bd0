"""Files and directories written whole or not at all; no TensorFlow needed.

A process killed while it writes (a pre-empted machine, `kill -9`, a full
disk) must never leave a torn file where a reader expects a complete one.

**Files** (`atomic_write`, `write_text`, `write_json`, `save_model`,
`save_weights`): the writer writes a hidden temporary file in the target's
own directory (same file system, so the rename is atomic), flushes it to
disk, renames it over the target and syncs the directory. A reader sees the
old file or the new one, never a mix. The temporary file is named
`.partial-<pid>@<host>-<name>`: a writer killed before its rename (SIGKILL)
leaves it, and the next write of the same file removes it once no process
of that pid runs on this host (never a live writer's, nor another host's on
a shared file system).

**A full disk** (`ENOSPC`, or `EDQUOT` over a quota) while a file is written
raises `DiskFull`, an `OSError` whose message is one line naming the file,
its mount point and the space left; the previous file is untouched and the
partial one removed. HDF5 (`.weights.h5`) is the case that needs care: it
buffers, fails when Keras closes the file, reports each failed flush on
stderr and can crash the interpreter (a segmentation fault). So
`save_weights` first checks that the file system has room for the file
(the size of the file it replaces or of its previous version, else the
variables' bytes, plus 2 KiB per variable and 1 MiB) and raises `DiskFull`
before HDF5 writes anything; and a write that still fails (another process
filled the disk meanwhile) is closed by `atomic_write` before it is removed.

**A read-only file system** (`EROFS`) or a folder one may not write in
(`EACCES`, `EPERM`) raises `NotWritable`, one line too, with nothing left
behind; `save_weights` and `check_writable` tell it before anything is
written (a read-only file system is not reported as full, even when it has
no space left).

**Directories** (exports, `keras_vit.save_pretrained`: `staging_dir`,
`finish`, `move_into_place`, `write_bytes`): everything is first written
into a hidden staging directory next to the target and renamed into place
once complete. Staging directories are named

    .<target>.partial-<pid>-<token>@<host>    (a new export being written)
    .<target>.old-<pid>-<token>@<host>        (a version being replaced)

so that a later export can tell a staging directory left by a killed process
(same host, process gone) from one a live export is still writing, and remove
only the former; a version a killed process had moved aside (`.old-`) is put
back first if the target is missing. Replacing a directory never loses it:
if the new one cannot be renamed into place, the old one is renamed back.
Their names are not numbers: TF Serving never loads them.
Permissions follow the umask: the staging directory is created with mode
`0o777 & ~umask` (what `mkdir` gives), and before the rename every directory
written inside it gets that mode and every file the same without the execute
bits (`0o755`/`0o644` under umask 022, `0o700`/`0o600` under 077).

**URLs** (`gs://bucket/run1/...`, any scheme `tf.io.gfile` has; see
`keras_vit.paths`, whose `check` every target passes first: a scheme with
no file system here, or `gs:/bucket` with a slash missing, is refused
before anything is written): an object store renames nothing atomically, syncs
nothing and locks nothing, but it writes one object whole or not at all.
So a file for a URL is written complete in a local temporary folder
(`tempfile`; a full local disk there raises `DiskFull` naming it), uploaded
next to the target under a temporary name (`.partial-<pid>-<name>`) and
renamed over the target (`tf.io.gfile.rename(overwrite=True)`; in an object
store a server-side copy and a delete). A reader sees the old object or the
new one, never a part of one; a kill can leave the temporary object, which
`remove_partials` deletes. What needs several files to be consistent (a
training backup) commits them in order: the record is written only after
the file it describes (`keras_vit.training.backup`).

Example:

```python
from keras_vit import atomic

atomic.write_json("runs/x/results.json", {"accuracy": 0.98})
atomic.save_model(model, "runs/x/final.keras")
atomic.write_json("gs://my-bucket/x/results.json", {"accuracy": 0.98})
```
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import pathlib
import re
import secrets
import shutil
import socket
import stat
import sys
import tempfile

from keras_vit import paths

logger = logging.getLogger("keras_vit.atomic")

# Temporary files start with this; `remove_partials` cleans what a killed
# writer left behind. The target's suffix is kept (`.keras`, `.weights.h5`),
# since Keras checks it.
PARTIAL_PREFIX = ".partial-"

_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
_NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


class DiskFull(OSError):
    """A write failed because its file system is full (or over quota).

    `str()` is one line: the file, the reason, the mount point and the space
    left there. The error it replaces is its `__cause__`.

    Attributes:
        path: The file that could not be written.
        mount: The mount point of the file system it is on (for a URL: of
            the local folder it was being written in before its upload).
        free: Bytes available there after the failed write was removed.

    Example:

    ```python
    try:
        atomic.write_json("runs/x/results.json", {"accuracy": 0.98})
    except atomic.DiskFull as error:
        print(error.mount, error.free)
    ```
    """

    def __init__(
        self,
        path: str,
        code: int = errno.ENOSPC,
        needed: int | None = None,
        staged_at: str | None = None,
    ):
        super().__init__(code, os.strerror(code), path)
        self.path = os.fspath(path)
        local = staged_at or (None if paths.is_url(self.path) else self.path)
        self.mount = None if local is None else mount_point(local)
        self.needed = needed
        try:
            self.free = None if local is None else shutil.disk_usage(self.mount).free
        except OSError:
            self.free = None

    def __str__(self):
        free = "?" if self.free is None else _bytes(self.free)
        needed = "" if self.needed is None else f", about {_bytes(self.needed)} needed"
        if self.mount is None:
            return f"disk full: could not write {self.path} ({self.strerror})"
        staged = (
            ", where it is written before its upload" if paths.is_url(self.path) else ""
        )
        return (
            f"disk full: could not write {self.path} ({self.strerror} on "
            f"{self.mount}{staged}, {free} free{needed})"
        )


class NotWritable(OSError):
    """A write failed because its file system is read-only (`EROFS`) or
    the folder may not be written in (`EACCES`, `EPERM`).

    `str()` is one line: the reason and the file (for a read-only file
    system, also its mount point). The error it replaces, if any, is its
    `__cause__`.

    Attributes:
        path: The file that could not be written.
        mount: The mount point of its file system (a local path), or `None`.

    Example:

    ```python
    try:
        atomic.write_json("/mnt/cdrom/results.json", {"accuracy": 0.98})
    except atomic.NotWritable as error:
        print(error)  # read-only file system: could not write ...
    ```
    """

    def __init__(self, path: str, code: int = errno.EROFS):
        super().__init__(code, os.strerror(code), path)
        self.path = os.fspath(path)
        self.mount = None if paths.is_url(self.path) else mount_point(self.path)

    def __str__(self):
        if self.errno == errno.EROFS:
            where = f" ({self.mount} is mounted read-only)" if self.mount else ""
            return f"read-only file system: could not write {self.path}{where}"
        return f"permission denied: could not write {self.path} ({self.strerror})"


def disk_full_code(error: BaseException) -> int | None:
    """`ENOSPC` or `EDQUOT` if `error` (or an error it wraps) is a full disk.

    Looks through the chain of causes, and at the text of wrappers that keep
    only the message (h5py's, TensorFlow's: `errno = 28`, `No space left on
    device`).
    """
    return _error_code(error, _DISK_FULL)


def not_writable_code(error: BaseException) -> int | None:
    """`EROFS`, `EACCES` or `EPERM` if `error` (or an error it wraps) is a
    refused write: a read-only file system, or a folder one may not write
    in (looked for as `disk_full_code` does)."""
    return _error_code(error, _NOT_WRITABLE)


def _error_code(error: BaseException, codes) -> int | None:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno in codes:
            return error.errno
        text = str(error)
        for code in codes:
            if os.strerror(code) in text or f"errno = {code}," in text:
                return code
        error = error.__cause__ or error.__context__
    return None


def file_error_text(error: BaseException, path: str | None = None) -> str:
    """One line for a failed write or read: what a command prints.

    A full disk reads as `DiskFull` does, a read-only file system or a
    refused folder as `NotWritable` does (whoever raised them: Keras, h5py,
    TensorFlow); another `OSError` (or TensorFlow file-system error) as
    `PATH: REASON`, its first line.

    Args:
        error: The error.
        path: The file or folder written: named when `error` names none, or
            names a temporary file or staging folder of it (which the
            failed write removed).

    Example:

    ```python
    try:
        atomic.save_model(model, "out/vit.keras")
    except OSError as error:
        cli.fail(atomic.file_error_text(error, "out/vit.keras"), cli.EXIT_FAILED)
    ```
    """
    if isinstance(error, DiskFull | NotWritable):
        return str(error)
    tf_errors = getattr(sys.modules.get("tensorflow"), "errors", None)
    if tf_errors is not None and isinstance(error, tf_errors.OpError):
        error = paths.as_os_error(error, path) if path else paths.as_os_error(error)
    named = getattr(error, "filename", None) or path
    if path is not None and _is_temporary(named):
        named = path
    code = disk_full_code(error)
    if code is not None and named:
        return str(DiskFull(named, code))
    code = not_writable_code(error)
    written = path is None or os.fspath(named).startswith(os.fspath(path))
    if code is not None and named and written:  # Not a file being read.
        return str(NotWritable(named, code))
    reason = getattr(error, "strerror", None) or str(error).strip()
    reason = (reason or type(error).__name__).splitlines()[0]
    return f"{named}: {reason}" if named else reason


def _is_temporary(path) -> bool:
    """Whether `path` is in (or is) a temporary file or staging folder."""
    parts = os.fspath(path).replace(os.sep, "/").split("/")
    return any(
        part.startswith(PARTIAL_PREFIX) or _STAGING_NAME.fullmatch(part)
        for part in parts
    )


def mount_point(path: str) -> str:
    """The mount point of the file system holding `path` (or its parent)."""
    path = os.path.abspath(path)
    while not os.path.ismount(path):
        parent = os.path.dirname(path)
        if parent == path:
            break
        path = parent
    return path


def atomic_write(path: str, write, on_written=None) -> str:
    """Calls `write(temporary_path)`, then moves the result to `path`.

    Args:
        path: The file to create or replace: a local path or a URL (see the
            module docstring).
        write: A function writing the whole file at the (local) path it is
            given.
        on_written: Optional `on_written(temporary_path)`, called once the
            file is complete and before it replaces `path` (e.g. to hash it).

    Returns:
        `path`. On any error (or interruption) the temporary file is removed
        and `path` is left as it was. Temporary files of this same `path`
        left by killed writers (see the module docstring) are removed first.

    Raises:
        DiskFull: The file system is full or over quota (one-line message);
            `path` is left as it was.
        NotWritable: The file system is read-only, or the folder may not be
            written in (one-line message); `path` is left as it was.
        keras_vit.paths.UnsupportedPath: `path` is a URL no file system
            here takes, or one with a slash missing (`gs:/bucket/x`);
            nothing is written.
    """
    path = os.fspath(path)
    paths.check(path, "path")
    if paths.is_url(path):
        return _write_url(path, write, on_written)
    directory = os.path.dirname(os.path.abspath(path))
    with new_folders_removed_on_error(directory):
        try:
            os.makedirs(directory, exist_ok=True)
        except OSError as error:
            raise_if_disk_full(error, path)
            raise_if_not_writable(error, path)
            raise
        name = os.path.basename(path)
        remove_stale_partials(directory, name)
        partial = os.path.join(directory, _partial_name(name))
        try:
            write(partial)
            _fsync_file(partial)
            if on_written is not None:
                on_written(partial)
            os.replace(partial, path)
        except BaseException as error:
            _close_hdf5(partial)
            # Any error: on a read-only file system even a missing file's
            # removal fails (EROFS), and must not hide the write's own error.
            with contextlib.suppress(OSError):
                os.remove(partial)
            raise_if_disk_full(error, path)
            raise_if_not_writable(error, path)
            raise
    _fsync_dir(directory)
    return path


@contextlib.contextmanager
def new_folders_removed_on_error(folder):
    """Within it, the folders that lead to local `folder` and are created
    meanwhile are removed again, if empty, when it raises (or is
    interrupted): a failed write leaves no empty folders behind.

    Example:

    ```python
    with atomic.new_folders_removed_on_error("figures/run1"):
        atomic.write_text("figures/run1/notes.txt", "hello")
    ```
    """
    folder = os.path.abspath(os.fspath(folder))
    first = folder
    while not os.path.lexists(first):
        parent = os.path.dirname(first)
        if parent == first:
            break
        first = parent
    created = None if first == folder else folder
    try:
        yield
    except BaseException:
        while created is not None and len(created) > len(first):
            try:
                os.rmdir(created)
            except OSError:
                break  # Not empty (another writer's), or already gone.
            created = os.path.dirname(created)
        raise


def _partial_name(name: str) -> str:
    """`.partial-<pid>@<host>-<name>`: this process's temporary file."""
    return f"{PARTIAL_PREFIX}{os.getpid()}@{_host()}-{name}"


def remove_stale_partials(directory: str, name: str) -> list[str]:
    """Removes temporary files of `name` in `directory` that killed writers
    left (see the module docstring); returns the names removed.

    Only `.partial-<pid>@<host>-<name>` files of this host whose process is
    gone are removed: a live writer's file, another host's (a shared file
    system) and files of other names are left alone.
    """
    host, removed = _host(), []
    prefix, suffix = PARTIAL_PREFIX, f"@{host}-{name}"
    try:
        entries = os.listdir(directory)
    except OSError:
        return removed
    for entry in entries:
        if not (entry.startswith(prefix) and entry.endswith(suffix)):
            continue
        pid = entry[len(prefix) : -len(suffix)]
        if not pid.isdigit() or _process_exists(int(pid)):
            continue
        with contextlib.suppress(OSError):
            os.remove(os.path.join(directory, entry))
            removed.append(entry)
            logger.info("Removed %s, left by a killed writer.", entry)
    return removed


def _write_url(url: str, write, on_written) -> str:
    """`atomic_write` for a URL: written locally, then `upload`ed."""
    with tempfile.TemporaryDirectory(prefix="keras_vit-") as folder:
        local = os.path.join(folder, os.path.basename(url))
        try:
            write(local)
        except BaseException as error:
            _close_hdf5(local)
            raise_if_disk_full(error, url, staged_at=local)
            raise
        if on_written is not None:
            on_written(local)
        upload(local, url)
    return url


def upload(local: str, url: str) -> str:
    """Copies the complete local file `local` to `url`, whole or not at all.

    The file is copied next to `url` under a temporary name, then renamed
    over it (`keras_vit.paths.rename`); the temporary object is deleted if
    anything fails. Returns `url`.
    """
    directory = os.path.dirname(url)
    partial = os.path.join(
        directory, f"{PARTIAL_PREFIX}{os.getpid()}-{os.path.basename(url)}"
    )
    try:
        paths.copy_file(local, partial)
        paths.rename(partial, url)
    except BaseException:
        with contextlib.suppress(OSError):
            paths.remove(partial)
        raise
    return url


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


def read_json_object(path: str) -> dict:
    """The JSON object in `path`, or `{}` if it is absent, unreadable or not
    an object (a record `write_json` wrote is whole or absent, so `{}` means
    "no record")."""
    try:
        with paths.open_file(path) as f:
            value = json.load(f)
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def save_model(model, path: str) -> str:
    """`model.save(path)` (a `.keras` file), atomically."""
    return atomic_write(path, model.save)


def save_weights(model, path: str, on_written=None) -> str:
    """`model.save_weights(path)` (a `.weights.h5` file), atomically.

    `on_written(temporary_path)` as in `atomic_write`. For a URL the room
    checked is that of the local temporary folder the file is written in
    before its upload.

    Raises:
        DiskFull: The file system has no room for the file (checked before
            HDF5 writes: see the module docstring).
    """
    needed = weights_file_bytes(model, path)
    if paths.is_url(path):
        directory = tempfile.gettempdir()
    else:
        directory = os.path.dirname(os.path.abspath(path))
    paths.check(path, "path")
    if not paths.is_url(path):
        check_writable(path)  # A read-only disk has no room either: say why.
    try:
        free = shutil.disk_usage(_existing(directory)).free
    except OSError:
        free = None
    if free is not None and free < needed:
        staged = directory if paths.is_url(path) else None
        raise DiskFull(path, errno.ENOSPC, needed=needed, staged_at=staged)
    return atomic_write(path, model.save_weights, on_written)


def check_output(path: str, what: str = "path", is_dir: bool = False) -> str:
    """Returns `path` if a command may write there, checked before its work.

    The check every output of the commands passes first: `paths.check` (a
    URL's scheme needs a file system here; `gs:/bucket` with a slash
    missing is refused, never made a local folder), then for a URL one
    request to its store (offline, that fails at once), for a local path
    `check_writable` (`is_dir`: `path` is a folder to write files in).

    Raises:
        keras_vit.paths.UnsupportedPath: one line (a `ValueError`).
        OSError: the store cannot be reached, or `NotWritable`.

    Example:

    ```python
    atomic.check_output("gs://my-bucket/fewshot.json", "--out")
    ```
    """
    paths.check(path, what)
    if paths.is_url(path):
        paths.exists(path)
    else:
        check_writable(path, is_dir)
    return path


def check_writable(path: str, is_dir: bool = False) -> str:
    """Returns local `path`, or raises `NotWritable` if it cannot be written:
    the folder it goes in (or the nearest one that exists) is on a
    read-only file system or may not be written in by this process.
    `is_dir`: `path` is itself a folder to write files in.

    For commands, to fail in one line before their work rather than after;
    a URL is left to its first write. A full disk is not detected here.

    Example:

    ```python
    atomic.check_writable("figures/filters.png")
    ```
    """
    path = os.fspath(path)
    if paths.is_url(path):
        return path
    folder = os.path.abspath(path)
    folder = _existing(folder if is_dir else os.path.dirname(folder))
    try:
        read_only = bool(os.statvfs(folder).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # No statvfs (Windows): ask access.
        read_only = False
    if read_only:
        raise NotWritable(path, errno.EROFS)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise NotWritable(path, errno.EACCES)
    return path


def weights_file_bytes(model, path: str) -> int:
    """An upper estimate of the bytes `model.save_weights(path)` writes.

    The largest of: the file at `path`, its siblings named alike but for
    their digits (the previous epoch's backup), and the bytes of the
    model's and optimizer's variables; plus 2 KiB per variable (HDF5's
    metadata takes about 1 KiB) and 1 MiB.
    """
    import numpy as np

    optimizer = getattr(model, "optimizer", None)
    variables = [*model.weights, *(getattr(optimizer, "variables", None) or [])]
    sizes = [sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize for v in variables)]
    path = os.fspath(path)
    directory, name = os.path.split(
        path if paths.is_url(path) else os.path.abspath(path)
    )
    pattern = re.sub(r"[0-9]+", "#", name)
    with contextlib.suppress(OSError):
        for other in paths.listdir(directory):
            if re.sub(r"[0-9]+", "#", other) == pattern:
                sizes.append(paths.getsize(os.path.join(directory, other)))
    return max(sizes) + 2048 * len(variables) + (1 << 20)


def _existing(directory: str) -> str:
    while not os.path.isdir(directory):
        parent = os.path.dirname(directory)
        if parent == directory:
            break
        directory = parent
    return directory


def raise_if_disk_full(
    error: BaseException, path: str, staged_at: str | None = None
) -> None:
    """Raises `DiskFull` for `path` (from `error`) if `error` is a full disk.

    `staged_at`: the local file a URL's content was being written to.
    """
    code = disk_full_code(error) if isinstance(error, Exception) else None
    if code is not None:
        raise DiskFull(path, code, staged_at=staged_at) from error


def raise_if_not_writable(error: BaseException, path: str) -> None:
    """Raises `NotWritable` for `path` (from `error`) if `error` is a write
    refused by a read-only file system or the folder's permissions."""
    if isinstance(error, NotWritable):
        return
    code = not_writable_code(error) if isinstance(error, Exception) else None
    if code is not None:
        raise NotWritable(path, code) from error


def _close_hdf5(partial: str) -> None:
    """Closes an HDF5 file that a failed write left open at `partial`.

    Keras does not close its h5py file when a write raises; h5py would then
    flush it again (and fail again) whenever the object is freed, reporting
    every failure on stderr, and HDF5 crashes at interpreter exit. The file
    is truncated first, so that closing it needs no space, and the errors of
    the close are not reported (the write's own error is).
    """
    h5py = sys.modules.get("h5py")
    if h5py is None:
        return
    try:
        files = h5py.h5f.get_obj_ids(types=h5py.h5f.OBJ_FILE)
    except Exception:  # noqa: BLE001  (an h5py without this API: nothing to do)
        return
    target = os.path.abspath(partial)
    for file_id in files:
        try:
            if os.path.abspath(os.fsdecode(file_id.name)) != target:
                continue
        except Exception:  # noqa: BLE001
            continue
        hook = sys.unraisablehook
        sys.unraisablehook = lambda _: None
        try:
            with contextlib.suppress(Exception):
                os.ftruncate(file_id.get_vfd_handle(), 0)
            with contextlib.suppress(Exception):
                h5py.File(file_id).close()
        finally:
            sys.unraisablehook = hook


def _bytes(count: float) -> str:
    if count < 1024:
        return f"{int(count)} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        count /= 1024
        if count < 1024 or unit == "TiB":
            return f"{count:.1f} {unit}"


def remove_partials(directory: str) -> list[str]:
    """Deletes temporary files a killed writer left in `directory` (or URL)."""
    removed = []
    if not paths.isdir(directory):
        return removed
    for name in paths.listdir(directory):
        if name.startswith(PARTIAL_PREFIX):
            with contextlib.suppress(FileNotFoundError):
                paths.remove(os.path.join(directory, name))
                removed.append(name)
    return removed


# -- directories ------------------------------------------------------------
# `.1.partial-4242-0badcafe@host`: target, kind, pid, token, host.
_STAGING_NAME = re.compile(
    r"\.(?P<target>.+)\.(?P<kind>partial|old)-(?P<pid>[0-9]+)-[0-9a-f]{8}@(?P<host>.+)"
)


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


def check_url_target(url: str, overwrite: bool, is_dir: bool):
    """`check_target` for a URL (a `str`)."""
    if not paths.exists(url):
        return
    if not overwrite:
        raise FileExistsError(
            f"{url!r} already exists. Export a new version, or pass "
            "overwrite=True to replace it."
        )
    if paths.isdir(url) != is_dir:
        kind = "a directory" if paths.isdir(url) else "a file"
        raise FileExistsError(f"{url!r} exists and is {kind}; not replacing it.")


def staging_dir(path: pathlib.Path) -> pathlib.Path:
    """Creates a hidden, empty directory next to `path` to write into.

    Stale staging directories of killed exports in the same parent are
    removed first (see `remove_stale`). The new directory's mode is
    `0o777 & ~umask`.

    Raises:
        keras_vit.paths.UnsupportedPath: `path` has a URL's scheme with a
            slash missing (`gs:/bucket/x`); nothing is created.
    """
    paths.check(os.fspath(path), "path")
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale(path.parent)
    return _make_staging(path, "partial")


def remove_stale(directory: pathlib.Path) -> list[pathlib.Path]:
    """Removes the staging directories in `directory` left by dead processes.

    A staging directory is stale when it was made on this host by a process
    that no longer exists. Those of live processes, of other hosts (a shared
    file system) and names this module did not make are left alone. A stale
    `.old-` directory holds a version that a killed `overwrite=True` export
    had moved aside: it is put back first if the version is missing.

    Returns:
        The removed directories.
    """
    removed = []
    host = _host()
    for entry in sorted(directory.iterdir()):
        match = _STAGING_NAME.fullmatch(entry.name)
        if match is None or match["host"] != host or not entry.is_dir():
            continue
        if _process_exists(int(match["pid"])):
            continue
        if match["kind"] == "old":
            _restore(entry / match["target"], directory / match["target"])
        shutil.rmtree(entry, ignore_errors=True)
        if not entry.exists():
            logger.info("Removed %s, left by a killed export.", entry)
            removed.append(entry)
    return removed


def finish(staging: pathlib.Path):
    """Makes a complete staging tree readable per the umask, and durable.

    Every directory gets the staging directory's own mode (`0o777 & ~umask`)
    and every file that mode without execute bits; then each file and
    directory is `fsync`ed, so that the rename that publishes the tree never
    outlives its contents in a power cut.
    """
    dir_mode = stat.S_IMODE(staging.stat().st_mode)
    file_mode = dir_mode & 0o666
    for root, dirs, names in os.walk(staging, topdown=False):
        for name in names:
            file = os.path.join(root, name)
            if os.path.islink(file):
                continue
            os.chmod(file, file_mode)
            _fsync_file(file)
        for name in dirs:
            if not os.path.islink(os.path.join(root, name)):
                os.chmod(os.path.join(root, name), dir_mode)
        _fsync_dir(root)


def move_into_place(staging: pathlib.Path, path: pathlib.Path, overwrite: bool):
    """Renames `staging` (a file or directory) to `path`.

    Without an existing `path` this is one `rename`. Replacing an existing
    `path` moves it aside first and deletes it only once the new one is in
    place; if the second rename fails (or is interrupted), the old one is
    put back. A process killed between the two renames leaves the old one
    in a `.old-` staging directory, which `remove_stale` puts back.
    """
    try:
        _move(staging, path, overwrite)
    finally:
        _fsync_dir(path.parent)


def write_bytes(path: pathlib.Path | str, data: bytes, overwrite: bool):
    """Writes `data` to `path` atomically (a temporary file, then a rename).

    `path` may be a URL (a `str`): see the module docstring.
    """
    if paths.is_url(path):
        check_url_target(path, overwrite, is_dir=False)

        def write(local):
            with open(local, "wb") as f:
                f.write(data)

        atomic_write(path, write)
        return
    check_target(path, overwrite, is_dir=False)
    staging = staging_dir(path)
    try:
        with open(staging / path.name, "wb") as f:
            f.write(data)
        finish(staging)
        move_into_place(staging / path.name, path, overwrite)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _move(staging: pathlib.Path, path: pathlib.Path, overwrite: bool):
    if not path.exists():
        # A directory rename fails rather than merge if `path` appeared.
        os.rename(staging, path)
        return
    if not overwrite:
        raise FileExistsError(f"{str(path)!r} appeared while exporting.")
    if staging.is_file():
        os.replace(staging, path)  # Atomic for files.
        return
    retired = _make_staging(path, "old")
    try:
        os.rename(path, retired / path.name)
        os.rename(staging, path)
    except BaseException:
        # Put the previous version back. Should that fail too, `retired`
        # keeps it, and the next `remove_stale` after this process ends
        # puts it back: it is never deleted unless the new one is in place.
        _restore(retired / path.name, path)
        if not os.path.lexists(retired / path.name):
            shutil.rmtree(retired, ignore_errors=True)
        raise
    shutil.rmtree(retired, ignore_errors=True)


def _make_staging(path: pathlib.Path, kind: str) -> pathlib.Path:
    while True:
        name = f".{path.name}.{kind}-{os.getpid()}-{secrets.token_hex(4)}@{_host()}"
        staging = path.parent / name
        try:
            staging.mkdir(mode=0o777)  # The umask applies, as for any mkdir.
        except FileExistsError:
            continue
        return staging


def _restore(retired: pathlib.Path, path: pathlib.Path):
    if not retired.exists() or path.exists():
        return
    try:
        os.rename(retired, path)
        logger.info("Restored %s, moved aside by a killed export.", path)
    except OSError:
        pass  # Another export restored it, or wrote a new one, first.


def process_exists(pid: int) -> bool:
    """Whether process `pid` exists on this host (always for this process).

    Where there is no safe probe (not POSIX), `True`.
    """
    return _process_exists(pid)


def _process_exists(pid: int) -> bool:
    if pid == os.getpid():
        return True
    if os.name != "posix":
        return True  # No safe liveness probe: never remove.
    try:
        os.kill(pid, 0)  # Signal 0: only checks that the process exists.
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # Alive, owned by another user.
    return True


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", socket.gethostname()) or "localhost"


def _fsync_file(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path):
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # Directories cannot be opened on some platforms.
    try:
        os.fsync(fd)
    except OSError:
        pass  # Some file systems cannot sync a directory.
    finally:
        os.close(fd)
