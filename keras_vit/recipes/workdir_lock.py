"""The lock on a run directory: one live run at a time (imports no framework).

`WorkdirLock.acquire(workdir)` takes it or raises `WorkdirBusy`, naming the
run that holds it. On a local disk the kernel holds it (`fcntl.flock`) and
releases it when the process ends, however it ends; at a URL (an object
store has no locks) it is an object its holder keeps fresh with a heartbeat.

Example:

```python
lock = WorkdirLock.acquire("runs/x")  # WorkdirBusy if another run has it
try:
    ...
finally:
    lock.release()
```
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import sys
import threading
import time

from keras_vit import atomic
from keras_vit import paths

try:
    import fcntl
except ImportError:  # Windows: runs are not locked.
    fcntl = None


class WorkdirBusy(RuntimeError):
    """Another live run holds the run directory's lock."""


class WorkdirLock:
    """An exclusive lock on a run directory, held while the process lives.

    On a local disk: `fcntl.flock` on `<workdir>/.lock` (another worker's:
    `.lock-<task>`): the kernel releases it when the process ends, however
    it ends, so a killed run never leaves it stuck. The file names the
    holder (PID, host, start time, command) for the refusal of a second
    run; it is removed when the lock is released. On a system without
    `fcntl` (Windows) nothing is locked.

    At a URL (an object store has no locks) the lock is best effort: the
    object `<workdir>/.lock` names its holder (PID, host, start time,
    command) and a heartbeat, rewritten every `URL_LOCK_HEARTBEAT_S`
    seconds while the run lives. A second run is refused while the holder
    is alive: on the same host, while its process exists; from another
    host, until `URL_LOCK_STALE_S` seconds after the holder's last
    heartbeat (by this host's clock). So a killed run's lock is taken over
    at once on its own host, and after that delay from another one. Two
    runs started at the same moment can both pass the check (no
    compare-and-set through `tf.io.gfile`): each reads the object back
    after writing it, and the one that finds the other's stops.

    Example:

    ```python
    lock = WorkdirLock.acquire("runs/x")  # WorkdirBusy if another run has it
    try:
        ...
    finally:
        lock.release()
    ```
    """

    def __init__(self, path: str, file=None, created: str | None = None):
        self.path, self._file = path, file
        # The highest folder that `acquire` created (removed again, if empty,
        # on release: a refused or interrupted command leaves no new folder).
        self._created = created
        self._heartbeat = None  # At a URL: the thread that keeps it fresh.

    @classmethod
    def acquire(cls, workdir: str, name: str = ".lock") -> WorkdirLock:
        """Takes the lock `<workdir>/<name>` or raises `WorkdirBusy`."""
        path = os.path.join(workdir, name)
        if paths.is_url(workdir):
            return cls._acquire_url(workdir, path)
        if fcntl is None:
            return cls(path)
        created = _first_missing(workdir)
        while True:
            try:
                os.makedirs(workdir, exist_ok=True)
                file = open(path, "a+", encoding="utf-8")  # noqa: SIM115
            except FileNotFoundError:  # A releasing holder removed the folder.
                continue
            except OSError as error:
                _remove_empty(workdir, created)
                atomic.raise_if_disk_full(error, path)
                raise
            try:
                fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                file.seek(0)
                holder = _holder(file.read())
                file.close()
                _remove_empty(workdir, created)
                raise WorkdirBusy(
                    f"{workdir} is in use by another run ({holder}): wait for it "
                    "to end, or give this one another --set workdir=..."
                ) from None
            # The holder may have released and removed the file between our
            # open and flock: then ours is an orphan, and we try again.
            try:
                same = os.path.samestat(os.fstat(file.fileno()), os.stat(path))
            except FileNotFoundError:
                same = False
            if same:
                break
            file.close()
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
        }
        try:  # Only informs a refused run: a full disk must not stop this one.
            file.seek(0)
            file.truncate()
            file.write(json.dumps(record) + "\n")
            file.flush()
        except OSError:
            pass
        return cls(path, file, created)

    @classmethod
    def _acquire_url(cls, workdir: str, path: str) -> WorkdirLock:
        """The lock object at a URL (see the class docstring)."""
        created = _first_missing(workdir)
        holder = atomic.read_json_object(path)
        if holder and _holder_alive(holder):
            _remove_empty(workdir, created)
            raise _busy(workdir, holder)
        record = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "command": " ".join([os.path.basename(sys.executable), *sys.argv]),
            "token": secrets.token_hex(8),
            "heartbeat": time.time(),
        }
        try:
            atomic.write_json(path, record)
        except BaseException:
            _remove_empty(workdir, created)
            raise
        holder = atomic.read_json_object(path)
        if holder.get("token") != record["token"]:  # Another run wrote after us.
            raise _busy(workdir, holder)
        lock = cls(path, None, created)
        lock._heartbeat = _Heartbeat(path, record)
        return lock

    def release(self) -> None:
        """Removes the file and releases the lock (idempotent)."""
        if self._heartbeat is not None:
            heartbeat, self._heartbeat = self._heartbeat, None
            heartbeat.stop()
            holder = atomic.read_json_object(self.path)
            if holder.get("token") == heartbeat.record["token"]:
                try:
                    paths.remove(self.path)
                except OSError:
                    pass
            _remove_empty(os.path.dirname(self.path), self._created)
            return
        if self._file is None:
            return
        try:
            os.remove(self.path)  # While still held: no one can lock it meanwhile.
        except OSError:
            pass
        self._file.close()  # Releases the flock.
        self._file = None
        _remove_empty(os.path.dirname(self.path), self._created)


# A lock at a URL: how often its holder rewrites it, and how long after its
# last heartbeat another host takes it over.
URL_LOCK_HEARTBEAT_S = 60
URL_LOCK_STALE_S = 300


class _Heartbeat:
    """Rewrites a URL lock's `heartbeat` every `URL_LOCK_HEARTBEAT_S`."""

    def __init__(self, path: str, record: dict):
        self.path, self.record = path, dict(record)
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="keras_vit-lock-heartbeat", daemon=True
        )
        self._thread.start()

    def _run(self):
        while not self._stop.wait(URL_LOCK_HEARTBEAT_S):
            self.record["heartbeat"] = time.time()
            try:
                atomic.write_json(self.path, self.record)
            except Exception:  # noqa: BLE001  (a missed beat must not stop a run)
                pass

    def stop(self):
        self._stop.set()
        self._thread.join()


def _holder_alive(holder: dict) -> bool:
    """Whether the run a URL lock object names may still be running."""
    if holder.get("host") == socket.gethostname():
        pid = holder.get("pid")
        return not isinstance(pid, int) or atomic.process_exists(pid)
    beat = holder.get("heartbeat")
    if not isinstance(beat, (int, float)):
        return True
    return time.time() - beat < URL_LOCK_STALE_S


def _busy(workdir: str, holder: dict) -> WorkdirBusy:
    text = _holder(json.dumps(holder))
    beat = holder.get("heartbeat")
    if isinstance(beat, (int, float)):
        text += f", last heartbeat {max(0, time.time() - beat):.0f} s ago"
    return WorkdirBusy(
        f"{workdir} is in use by another run ({text}): wait for it to end, or "
        "give this one another --set workdir=..."
    )


def _first_missing(folder: str) -> str | None:
    """The highest missing folder on the way to `folder` (`None`: it exists)."""
    if paths.is_url(folder):
        folder, missing = folder.rstrip("/"), None
        while folder is not None and not paths.exists(folder):
            missing, folder = folder, paths.parent(folder)
        return missing
    folder, missing = os.path.abspath(folder), None
    while not os.path.exists(folder):
        missing = folder
        parent = os.path.dirname(folder)
        if parent == folder:
            break
        folder = parent
    return missing


def _remove_empty(folder: str, up_to: str | None) -> None:
    """Removes `folder` and its parents up to `up_to`, as long as each is empty."""
    if up_to is None:
        return
    if paths.is_url(folder):
        folder = folder.rstrip("/")
        while folder is not None and (
            folder == up_to or folder.startswith(up_to + "/")
        ):
            if not paths.remove_empty_dir(folder):
                return
            folder = paths.parent(folder)
        return
    folder = os.path.abspath(folder)
    while folder == up_to or folder.startswith(up_to + os.sep):
        try:
            os.rmdir(folder)
        except OSError:
            return
        folder = os.path.dirname(folder)


def _holder(text: str) -> str:
    try:
        record = json.loads(text)
        return f"PID {record['pid']} on {record['host']}, since {record['started']}"
    except (ValueError, KeyError, TypeError):
        return "its PID is not recorded yet"
