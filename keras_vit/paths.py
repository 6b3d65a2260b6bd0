"""Paths on the local disk or behind a URL (`gs://bucket/run1`), one API.

Cloud TPU and multi-worker runs keep their run directories, exports and
datasets on object stores. Every file operation of the recipes goes through
these functions: a local path (no `scheme://`) uses the operating system
(`os`, `shutil`, and `keras_vit.atomic`'s careful writes: `fsync`, atomic
renames, `fcntl` locks); a path with a URL scheme uses TensorFlow's file
systems (`tf.io.gfile`: `gs://` built in, `ram://` in memory, `s3://` or
`hdfs://` where a plugin such as `tensorflow-io` registers them).
TensorFlow is imported only when a URL is used.

A URL whose scheme TensorFlow has no file system for (`s3://` without its
plugin, `http://`) is refused by `check` in one line, before anything is
written; nothing ever turns a URL into a local folder (`./gs:/bucket`). A
path that starts like a URL with a slash missing (`gs:/bucket/run`) is
refused too, naming the URL it probably means: it would otherwise be a
local folder named `gs:`. (A local folder of that name is written
`./gs:/bucket/run`.)
Errors of TensorFlow's file systems come out as `OSError`s (`strerror` one
line, `filename` the path): `FileNotFoundError`, `FileExistsError`,
`PermissionError`, or `OSError` with `EIO`.

What an object store cannot do: rename atomically (a rename is a copy and a
delete, object by object), hold an empty directory (on some stores), lock.
`move` of a directory therefore renames its files one by one;
`keras_vit.atomic` writes a URL's file in a local temporary file, uploads
it under a temporary name and renames it over the target (one object:
whole or absent).

Example:

```python
from keras_vit import paths

paths.check("gs://my-bucket/run1", "workdir")  # one-line error if unusable
if not paths.exists("gs://my-bucket/run1/config.json"):
    paths.makedirs("gs://my-bucket/run1")
with paths.open_file("gs://my-bucket/run1/notes.txt", "w") as f:
    f.write("hello")
```
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import tempfile
from typing import NamedTuple

# `scheme://`, as RFC 3986 spells a scheme.
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")
# Schemes that are never a file system one can write to.
_WEB = ("http", "https", "ftp")
# `gs:/bucket/run` or `gs:`: a URL with a slash missing, as a first component.
_SLASH_MISSING = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):(?:/(?!/)|$)(.*)$", re.S)


class UnsupportedPath(ValueError):
    """A URL whose scheme has no file system here; `str()` is one line.

    Example:

    ```python
    try:
        paths.check("s3://bucket/run", "workdir")
    except paths.UnsupportedPath as error:
        print(error)
    ```
    """


def scheme(path) -> str | None:
    """The URL scheme of `path` in lower case (`"gs"`), or `None` (local)."""
    match = _SCHEME.match(os.fspath(path)) if path is not None else None
    return match.group(1).lower() if match else None


def is_url(path) -> bool:
    """Whether `path` is a URL (`scheme://...`) rather than a local path."""
    return path is not None and scheme(path) is not None


def normalize(path):
    """`path`, with a `file://` URL turned into the local path it names.

    Local files get the local code (atomic renames, locks) whatever their
    spelling; other values are returned unchanged.
    """
    if path is not None and scheme(path) == "file":
        return os.fspath(path)[len("file://") :] or "/"
    return path


def check(path, what: str = "path"):
    """Returns `path`, or raises `UnsupportedPath` if it cannot be used.

    A local path always passes. A URL passes when TensorFlow has a file
    system for its scheme (`tf.io.gfile`); web addresses (`http://`,
    `https://`) never do. Call it before writing anything, so that a run
    refused here leaves no trace.

    A local path whose first component is a scheme and a colon
    (`gs:/bucket/run`, `ram:`) is refused: it is a URL with a slash
    missing, and would otherwise create a local folder named `gs:`. The
    error names the URL meant (`gs://bucket/run`) and how to spell such a
    local folder (`./gs:/bucket/run`).

    Args:
        path: A local path or a URL.
        what: What the path is, for the message (e.g. `"workdir"`).

    Raises:
        UnsupportedPath: one line naming the path and the schemes that work,
            or the URL a path with a slash missing means.
    """
    kind = scheme(path) if path is not None else None
    if kind is None:
        if path is not None:
            _refuse_slash_missing(os.fspath(path), what)
        return path
    if kind == "file":
        return path
    known = _registered_schemes(path)
    if kind in _WEB or kind not in known:
        usable = ", ".join(f"{s}://" for s in sorted(known) if s and s != "file")
        why = (
            "a web address, not a file system"
            if kind in _WEB
            else f"TensorFlow has no file system for {kind}:// in this process"
        )
        plugin = (
            "; install the package that registers it (tensorflow-io for s3:// "
            "and hdfs://)"
            if kind not in _WEB
            else ""
        )
        raise UnsupportedPath(
            f"{what}={os.fspath(path)!r}: {why} (usable: a local path"
            f"{', ' + usable if usable else ''}){plugin}"
        )
    return path


def _refuse_slash_missing(path: str, what: str) -> None:
    """Raises `UnsupportedPath` for `gs:/bucket/run` (see `check`)."""
    match = _SLASH_MISSING.match(path)
    if match is None:
        return
    kind, rest = match.group(1), match.group(2)
    meant = f"{kind}:///{rest}" if kind.lower() == "file" else f"{kind}://{rest}"
    raise UnsupportedPath(
        f"{what}={path!r} is a URL with a slash missing, not a local path: did "
        f"you mean {meant!r}? (a local folder of that name is written "
        f"{'./' + path!r})"
    )


def _registered_schemes(path) -> set[str]:
    gfile = _gfile()
    registered = getattr(gfile, "get_registered_schemes", None)
    if registered is not None:
        return {s.lower() for s in registered()}
    import tensorflow as tf

    try:  # Older TensorFlow: ask the file system itself.
        gfile.exists(os.fspath(path))
    except tf.errors.UnimplementedError:
        return {"file"}
    except tf.errors.OpError:
        pass
    return {"file", scheme(path)}


def _gfile():
    import tensorflow as tf

    return tf.io.gfile


@contextlib.contextmanager
def _errors(path, other=None):
    """Turns TensorFlow's file-system errors into one-line `OSError`s."""
    import tensorflow as tf

    try:
        yield
    except tf.errors.OpError as error:
        raise as_os_error(error, path, other) from error


def as_os_error(error, path=None, other=None) -> OSError:
    """The `OSError` for a `tf.errors.OpError` on `path` (message: one line).

    Example:

    ```python
    try:
        tf.io.gfile.listdir(url)
    except tf.errors.OpError as error:
        raise paths.as_os_error(error, url) from error
    ```
    """
    import tensorflow as tf

    codes = (
        (tf.errors.NotFoundError, errno.ENOENT, "not found"),
        (tf.errors.AlreadyExistsError, errno.EEXIST, "already exists"),
        (tf.errors.PermissionDeniedError, errno.EACCES, "permission denied"),
        (tf.errors.UnauthenticatedError, errno.EACCES, "not authenticated"),
        (tf.errors.UnimplementedError, errno.ENOSYS, "not supported here"),
        (tf.errors.ResourceExhaustedError, errno.ENOSPC, "no space left"),
    )
    code, default = errno.EIO, type(error).__name__
    for kind, number, words in codes:
        if isinstance(error, kind):
            code, default = number, words
            break
    lines = [line.strip() for line in str(error.message or "").splitlines()]
    reason = next((line for line in lines if line), default)
    path = getattr(error, "filename", None) if path is None else path
    if other is not None:
        return OSError(code, reason, os.fspath(path), None, os.fspath(other))
    return OSError(code, reason, None if path is None else os.fspath(path))


# -- queries -----------------------------------------------------------------
def exists(path) -> bool:
    """Whether `path` exists (a symbolic link counts, even a dangling one)."""
    if not is_url(path):
        return os.path.lexists(path)
    with _errors(path):
        found = _gfile().exists(os.fspath(path))
    return found and _listed(path)


def isdir(path) -> bool:
    """Whether `path` is a directory (or, in an object store, a prefix)."""
    if not is_url(path):
        return os.path.isdir(path)
    with _errors(path):
        found = _gfile().isdir(os.fspath(path))
    return found and _listed(path)


def _listed(path) -> bool:
    """Whether `path` is listed in its folder: `True` but at `ram://`.

    TensorFlow's in-memory file system (`ram://`, for tests) matches names
    by prefix: with only `d/f.h5` there, it says that `d/f` exists and is a
    directory, and lists `.b` in `a/` for a sibling `a.b/`. There a path
    exists when its folder lists it.
    """
    if scheme(path) != "ram":
        return True
    path = os.fspath(path).rstrip("/")
    folder = parent(path)
    return folder is None or os.path.basename(path) in listdir(folder)


def isfile(path) -> bool:
    """Whether `path` is a file (an object)."""
    if not is_url(path):
        return os.path.isfile(path)
    return exists(path) and not isdir(path)


def listdir(path) -> list[str]:
    """The names in directory `path`, sorted (a missing one: `OSError`)."""
    if not is_url(path):
        return sorted(os.listdir(path))
    with _errors(path):
        names = _gfile().listdir(os.fspath(path))
    names = sorted({name.rstrip("/") for name in names if name.rstrip("/")})
    if scheme(path) == "ram":  # See `_listed`: `.b` in `a/` for `a.b/`.
        gfile = _gfile()
        names = [n for n in names if gfile.exists(os.path.join(os.fspath(path), n))]
    return names


def getsize(path) -> int:
    """The size of file `path` in bytes."""
    if not is_url(path):
        return os.path.getsize(path)
    with _errors(path):
        return int(_gfile().stat(os.fspath(path)).length)


class URLStat(NamedTuple):
    """What `stat` gives for a URL: the size and modification time."""

    st_size: int
    st_mtime_ns: int


def stat(path):
    """`os.stat(path)`, or for a URL a `URLStat` (size, modification time)."""
    if not is_url(path):
        return os.stat(path)
    with _errors(path):
        info = _gfile().stat(os.fspath(path))
    return URLStat(int(info.length), int(info.mtime_nsec))


def walk(top):
    """`os.walk(top)`, for a local path or a URL (top-down, sorted)."""
    if not is_url(top):
        for root, dirs, files in os.walk(top):
            dirs.sort()
            yield root, dirs, sorted(files)
        return
    top = os.fspath(top).rstrip("/")
    if not isdir(top):
        return
    names = listdir(top)
    dirs = [n for n in names if isdir(os.path.join(top, n))]
    yield top, dirs, [n for n in names if n not in dirs]
    for name in dirs:
        yield from walk(os.path.join(top, name))


def sha256(path) -> str:
    """The SHA-256 of file `path`, in hex."""
    digest = hashlib.sha256()
    with open_file(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def parent(path) -> str | None:
    """The directory holding `path`; `None` above a URL's root (`gs://b`)."""
    path = os.fspath(path).rstrip("/") or os.fspath(path)
    if is_url(path):
        root = _url_root(path)
        if len(path) <= len(root):
            return None
        return os.path.dirname(path)
    return os.path.dirname(os.path.abspath(path))


def _url_root(path: str) -> str:
    """`scheme://host` (`gs://bucket`) of a URL."""
    match = re.match(r"^[A-Za-z][A-Za-z0-9+.\-]*://[^/]*", path)
    return match.group(0)


# -- changes -----------------------------------------------------------------
def open_file(path, mode: str = "r", encoding: str | None = "utf-8"):
    """`open(path, mode)` for a local path, `tf.io.gfile.GFile` for a URL.

    Text modes use `encoding` (UTF-8 by default); binary modes ignore it.
    A URL opened for writing has its folder created first. Errors opening
    a URL are raised as `OSError`s; once open, the file object's own.
    """
    binary = "b" in mode
    if not is_url(path):
        if binary:
            return open(path, mode)  # noqa: SIM115
        return open(path, mode, encoding=encoding)  # noqa: SIM115
    if any(flag in mode for flag in "wax"):
        makedirs(os.path.dirname(os.fspath(path)))
    with _errors(path):
        return _URLFile(_gfile().GFile(os.fspath(path), mode), path)


class _URLFile:
    """A `tf.io.gfile.GFile` whose errors are `OSError`s (it opens lazily:
    a missing file fails at the first read)."""

    def __init__(self, file, path):
        self._file, self._path = file, path

    def __getattr__(self, name):
        value = getattr(self._file, name)
        if not callable(value):
            return value

        def call(*args, **kwargs):
            with _errors(self._path):
                return value(*args, **kwargs)

        return call

    def __iter__(self):
        with _errors(self._path):
            yield from self._file

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        with _errors(self._path):
            self._file.close()
        return False


def makedirs(path) -> None:
    """Creates directory `path` and its parents (nothing if it exists)."""
    if not is_url(path):
        os.makedirs(path, exist_ok=True)
        return
    if parent(path) is None:
        return  # A bucket: it exists or it does not, nothing to create.
    with _errors(path):
        _gfile().makedirs(os.fspath(path))


def remove(path) -> None:
    """Deletes file `path`."""
    if not is_url(path):
        os.remove(path)
        return
    with _errors(path):
        _gfile().remove(os.fspath(path))


def rmtree(path) -> None:
    """Deletes directory `path` and everything in it (a missing one: nothing).

    In an object store the files are deleted one by one: a kill part-way
    leaves some of them, and the next `rmtree` deletes the rest.
    """
    if not exists(path):
        return
    if not is_url(path):
        shutil.rmtree(path)
        return
    import tensorflow as tf

    try:
        _gfile().rmtree(os.fspath(path))
    except tf.errors.NotFoundError:
        pass  # Some stores report the folder itself missing once emptied.
    except tf.errors.OpError as error:
        raise as_os_error(error, path) from error


def remove_empty_dir(path) -> bool:
    """Deletes directory `path` if it is empty; returns whether it did."""
    if not is_url(path):
        try:
            os.rmdir(path)
        except OSError:
            return False
        return True
    try:
        if listdir(path):
            return False
        rmtree(path)
    except OSError:
        return False
    return True


def copy_file(source, target) -> None:
    """Copies file `source` to `target` (replacing it), across schemes."""
    if not is_url(source) and not is_url(target):
        shutil.copyfile(source, target)
        return
    if is_url(target):
        makedirs(os.path.dirname(os.fspath(target)))
    with _errors(source, target):
        _gfile().copy(os.fspath(source), os.fspath(target), overwrite=True)


def rename(source, target) -> None:
    """Renames file `source` to `target`, replacing `target`.

    Local: `os.replace` (atomic). URL: `tf.io.gfile.rename(overwrite=True)`
    (in an object store a server-side copy, then a delete: `target` is
    written whole, as one object), or a copy and a delete where the file
    system has no rename.
    """
    if not is_url(source) and not is_url(target):
        os.replace(source, target)
        return
    import tensorflow as tf

    try:
        _gfile().rename(os.fspath(source), os.fspath(target), overwrite=True)
    except tf.errors.UnimplementedError:
        copy_file(source, target)
        remove(source)
    except tf.errors.OpError as error:
        raise as_os_error(error, source, target) from error


def move(source, target, order=None) -> int:
    """Moves file or directory `source` to `target` (which must not exist).

    Local: one `os.replace`. URL: a file is renamed; a directory is copied
    file by file, each deleted once copied, then the empty folders; a kill
    part-way leaves the rest at `source`, and the same call moves it.
    `order(names)` (optional) sorts each folder's files, e.g. so that a
    backup's records go first.

    Returns:
        The number of files moved (1 for a local move).
    """
    if not is_url(source) and not is_url(target):
        os.replace(source, target)
        return 1
    if not isdir(source):
        rename(source, target)
        return 1
    moved = 0
    source = os.fspath(source).rstrip("/")
    target = os.fspath(target).rstrip("/")
    for root, _, files in walk(source):
        relative = root[len(source) :].lstrip("/")
        destination = os.path.join(target, relative) if relative else target
        makedirs(destination)
        for name in order(files) if order is not None else files:
            rename(os.path.join(root, name), os.path.join(destination, name))
            moved += 1
    rmtree(source)
    return moved


@contextlib.contextmanager
def local_copy(path):
    """Yields a local path holding file `path`'s content.

    A local path is yielded as is; a URL is downloaded into a temporary
    folder (same file name, so that its suffix still says its format),
    deleted on exit.

    Example:

    ```python
    with paths.local_copy("gs://bucket/pre.npz") as local:
        weights = np.load(local)
    ```
    """
    if not is_url(path):
        yield os.fspath(path)
        return
    with tempfile.TemporaryDirectory(prefix="keras_vit-") as folder:
        local = os.path.join(folder, os.path.basename(os.fspath(path).rstrip("/")))
        copy_file(path, local)
        yield local
