"""Crash-safe training backups that know which run they belong to.

`CrashSafeBackup` replaces `keras.callbacks.BackupAndRestore` (which writes
its one file in place: a kill during the write leaves a torn file that every
later run dies on). At the end of each epoch it writes, in `backup_dir`:

- `epoch-000003.weights.h5`: the weights and optimizer state (atomically);
- then `epoch-000003.json`: the epoch, the weights file's size and SHA-256,
  the epoch's logs and the run's fingerprint (atomically; its presence marks
  the pair whole: the record *commits* the epoch).

The previous pair is kept until the new one is complete (the two newest are
kept, so that the workers of a multi-worker run, each committing its own
epochs, always share one: see `usable_backups`). `latest_backup` returns
the newest pair whose file matches its checksum, saying in one line when it
falls back past a torn one; the recipe restores it (`restore`) and passes
`initial_epoch` to `model.fit`, so no Keras internal is involved.

The two writes can be split (`commit_callback`): the weights are written
where the callback stands (before an EMA swap: the raw training state), and
the record by a second callback placed last, after the epoch's logs,
checkpoints and summaries are on disk. A kill anywhere in between leaves the
epoch uncommitted: it is redone on resume, and no committed epoch lacks its
`metrics.csv` row. A recipe that saves results after `fit` passes
`delete_at_end=False` and calls `discard` once they are written, so that a
kill before then still finds the trained weights.

`backup_dir` may be a URL (`gs://bucket/run1/backup`): the same order holds
there, through `tf.io.gfile` (`keras_vit.paths`). The weights file is
uploaded whole (a temporary object renamed over the target) and its size
and SHA-256 are taken from the local copy before the upload; the record is
uploaded only once that is done. Since an object store reads back what was
written (Google Cloud Storage and S3 are strongly consistent), a record
always finds its weights, and a torn upload is never committed.

Example:

```python
state = latest_backup("runs/x/backup")
start = 0 if state is None else state.epoch
model.compile(...)
if state is not None:
    restore(model, state)
model.fit(data, epochs=10, initial_epoch=start,
          callbacks=[CrashSafeBackup("runs/x/backup", fingerprint={...})])
```
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import shutil
import time

import keras

from keras_vit import atomic
from keras_vit import paths

_STATE = re.compile(r"^epoch-(\d{6})\.json$")


@dataclasses.dataclass(frozen=True)
class BackupState:
    """One complete backup: the state at the end of epoch `epoch`.

    Attributes:
        epoch: Epochs completed; the run resumes with epoch `epoch + 1`
            (0-based index `epoch`).
        weights: Path of the `.weights.h5` file (weights and optimizer).
        fingerprint: What the run was (config fields), as stored.
        logs: The epoch's logs as committed (metrics; `None` for a
            non-finite value); empty for a backup written without them.
    """

    epoch: int
    weights: str
    fingerprint: dict
    logs: dict = dataclasses.field(default_factory=dict)


def backup_dir_of(workdir: str, chief: bool = True, task: str = "chief") -> str:
    """A run's backup directory: `backup/` (chief) or `backup_<task>/`."""
    return os.path.join(workdir, "backup" if chief else f"backup_{task}")


def latest_backup(backup_dir: str, say=print) -> BackupState | None:
    """The newest whole backup in `backup_dir`, or `None`.

    A backup whose weights file is missing, truncated or altered (its size or
    SHA-256 differs from the record) is passed over with one line through
    `say`, and the one before it is used (or none: a fresh start).
    """
    epochs = committed_epochs(backup_dir)
    for index, epoch in enumerate(epochs):
        problem, state = _read_state(backup_dir, epoch)
        if state is not None:
            return state
        fallback = (
            f"falling back to the backup of epoch {epochs[index + 1]}"
            if index + 1 < len(epochs)
            else "no older backup: starting afresh"
        )
        where = os.path.join(backup_dir, f"epoch-{epoch:06d}")
        say(f"Backup {where} is unusable ({problem}); {fallback}.")
    return None


def committed_epochs(backup_dir: str) -> list[int]:
    """The epochs with a record in `backup_dir`, newest first (usable or not)."""
    if not paths.isdir(backup_dir):
        return []
    names = paths.listdir(backup_dir)
    return sorted(
        (int(m.group(1)) for m in map(_STATE.match, names) if m), reverse=True
    )


def usable_backups(backup_dir: str, say=print) -> list[BackupState]:
    """Every whole backup in `backup_dir`, newest first.

    Each record's weights file is checked (size and SHA-256); an unusable
    one is named in one line through `say`. The workers of a multi-worker
    run agree on the newest epoch they all hold (`keras_vit.recipes.common`):
    a kill between two workers' commits leaves one a backup ahead, and the
    backup before it is still there (two are kept).
    """
    states = []
    for epoch in committed_epochs(backup_dir):
        problem, state = _read_state(backup_dir, epoch)
        if state is not None:
            states.append(state)
        else:
            where = os.path.join(backup_dir, f"epoch-{epoch:06d}")
            say(f"Backup {where} is unusable ({problem}); passing over it.")
    return states


def drop_after(backup_dir: str, epoch: int) -> list[int]:
    """Deletes the backups of epochs after `epoch` (they are to be redone).

    Records go first: a kill part-way leaves at most a weights file without
    a record, which no run reads and the next backup of that epoch replaces.
    Returns the epochs dropped.
    """
    dropped = [e for e in committed_epochs(backup_dir) if e > epoch]
    names = paths.listdir(backup_dir) if dropped else []
    doomed = [
        n
        for n in names
        if (m := re.match(r"^epoch-(\d{6})\.", n)) and int(m.group(1)) > epoch
    ]
    for name in sorted(doomed, key=lambda n: not n.endswith(".json")):
        paths.remove(os.path.join(backup_dir, name))
    return dropped


def resume_epoch(backup_dir: str) -> int:
    """The epoch a run backed up in `backup_dir` resumes from (0 if none)."""
    state = latest_backup(backup_dir, say=lambda _: None)
    return 0 if state is None else state.epoch


def differences(stored: dict, current: dict) -> list[str]:
    """Keys whose values differ between two fingerprints (JSON-normalised)."""
    stored, current = _normalise(stored), _normalise(current)
    return sorted(
        key
        for key in set(stored) | set(current)
        if stored.get(key, "<absent>") != current.get(key, "<absent>")
    )


def restore(model: keras.Model, state: BackupState) -> None:
    """Loads a backup's weights and optimizer state into a compiled `model`."""
    optimizer = model.optimizer
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)
    model.load_weights(state.weights)


def discard(backup_dir: str) -> bool:
    """Deletes `backup_dir` (a run's results are saved: it is not needed).

    The directory is first renamed to `<backup_dir>.discarded-<unique>`, so
    that an interrupted deletion never leaves a partial backup under the real
    name; leftovers of earlier interrupted deletions (`<backup_dir>.discarded*`)
    go too. Returns whether there was anything to delete.

    At a URL (no atomic rename) the records are deleted first, oldest
    first, then the rest: at every instant the newest committed epoch is
    the one it was, or none is left.
    """
    if paths.is_url(backup_dir):
        if not paths.exists(backup_dir):
            return False
        for epoch in sorted(committed_epochs(backup_dir)):
            paths.remove(os.path.join(backup_dir, f"epoch-{epoch:06d}.json"))
        paths.rmtree(backup_dir)
        return True
    leftovers = discarded_leftovers(backup_dir)
    found = bool(leftovers) or os.path.lexists(backup_dir)
    if os.path.lexists(backup_dir):
        doomed = f"{backup_dir}.discarded-{os.getpid()}-{time.time_ns()}"
        os.replace(backup_dir, doomed)
        leftovers.append(doomed)
    for path in leftovers:
        shutil.rmtree(path, ignore_errors=True)
    return found


def discarded_leftovers(backup_dir: str) -> list[str]:
    """What interrupted `discard`s of `backup_dir` left (`<name>.discarded*`)."""
    if paths.is_url(backup_dir):
        return []  # `discard` deletes a URL's backup in place.
    parent, name = os.path.split(os.path.abspath(backup_dir))
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    prefix = f"{name}.discarded"
    return sorted(
        os.path.join(os.path.dirname(backup_dir) or ".", n)
        for n in names
        if n == prefix or n.startswith(f"{prefix}-")
    )


def set_aside(backup_dir: str) -> str | None:
    """Renames `backup_dir` to `<backup_dir>.old-<UTC time>`; returns it.

    At a URL the files are moved one by one, records first
    (`keras_vit.paths.move`).
    """
    if not paths.exists(backup_dir):
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    target = f"{backup_dir.rstrip('/')}.old-{stamp}"
    paths.move(backup_dir, target, order=records_first)
    return target


def records_first(names: list[str]) -> list[str]:
    """`names` with the backup records first, oldest first, then the rest.

    The order in which a backup is moved or deleted file by file (at a
    URL): until its last record goes, the newest committed epoch stays
    the one it was, with its weights.
    """
    return sorted(names, key=lambda n: (not _STATE.match(n), n))


class CrashSafeBackup(keras.callbacks.Callback):
    """Backs up the training state at the end of every epoch, atomically.

    Args:
        backup_dir: The directory of this run's (or worker's) backups.
        fingerprint: A JSON-serialisable dict describing the run (e.g. its
            config fields); stored with each backup and checked on resume.
        keep: How many complete backups to keep. Defaults to 2, so that a
            torn newest one falls back to the one before.
        guard: A `DivergenceGuard`; nothing is written once it has fired,
            and the backups are then kept at the end.
        delete_at_end: Whether to delete `backup_dir` when training ends
            normally. Defaults to `True`; a run that saves results after
            `fit` passes `False` and calls `discard` once they are saved.

    Call `commit_callback()` to get the callback that commits each epoch
    (writes its record); place it last. Without it, this callback writes the
    weights and the record together.

    Example:

    ```python
    model.fit(data, epochs=10, callbacks=[CrashSafeBackup("runs/x/backup")])
    ```
    """

    def __init__(
        self,
        backup_dir: str,
        fingerprint: dict | None = None,
        keep: int = 2,
        guard=None,
        delete_at_end: bool = True,
    ):
        super().__init__()
        if keep < 1:
            raise ValueError(f"keep must be at least 1. Received: keep={keep}")
        self.backup_dir = backup_dir
        self.fingerprint = dict(fingerprint or {})
        self.keep = keep
        self.guard = guard
        self.delete_at_end = delete_at_end
        self._committer = None
        self._pending = None

    def commit_callback(self, before=None) -> keras.callbacks.Callback:
        """The callback that commits each epoch's backup; place it last.

        `before()`, if given, runs just before each commit (e.g. flushing
        the epoch's TensorBoard summaries to disk).
        """
        if self._committer is None:
            self._committer = _Commit(self, before)
        return self._committer

    def on_train_begin(self, logs=None):
        atomic.remove_partials(self.backup_dir)
        self._pending = None

    def on_epoch_end(self, epoch, logs=None):
        if self.guard is not None and self.guard.diverged:
            return  # Never back up non-finite weights.
        stem = os.path.join(self.backup_dir, f"epoch-{epoch + 1:06d}")
        written = {}

        def measure(local):  # The complete file, before it takes its name.
            written.update(size=os.path.getsize(local), sha256=_sha256(local))

        path = atomic.save_weights(self.model, f"{stem}.weights.h5", measure)
        self._pending = (epoch, path, written["size"], written["sha256"])
        if self._committer is None:
            self.commit(epoch, logs)

    def commit(self, epoch: int, logs=None) -> None:
        """Writes the record of epoch `epoch` (0-based), then prunes."""
        if self._pending is None or self._pending[0] != epoch:
            return  # Not written (diverged): nothing to commit.
        if self.guard is not None and self.guard.diverged:
            return
        _, weights, size, digest = self._pending
        record = {
            "epoch": epoch + 1,
            "weights": os.path.basename(weights),
            "size": size,
            "sha256": digest,
            "logs": _loggable(logs),
            "fingerprint": self.fingerprint,
            "keras": keras.__version__,
        }
        atomic.write_json(f"{weights[: -len('.weights.h5')]}.json", record)
        self._pending = None
        self._prune(epoch + 1)

    def on_train_end(self, logs=None):
        diverged = self.guard is not None and self.guard.diverged
        if self.delete_at_end and not diverged:
            discard(self.backup_dir)

    def _prune(self, newest: int) -> None:
        # Records first: a kill part-way never leaves a record without its
        # weights.
        for name in records_first(paths.listdir(self.backup_dir)):
            match = re.match(r"^epoch-(\d{6})\.", name)
            if match and int(match.group(1)) <= newest - self.keep:
                paths.remove(os.path.join(self.backup_dir, name))


class _Commit(keras.callbacks.Callback):
    """Commits the epoch its `CrashSafeBackup` wrote (see `commit_callback`)."""

    def __init__(self, backup: CrashSafeBackup, before=None):
        super().__init__()
        self.backup, self.before = backup, before

    def on_epoch_end(self, epoch, logs=None):
        if self.before is not None:
            self.before()
        self.backup.commit(epoch, logs)


def _loggable(logs) -> dict:
    """The numeric entries of an epoch's logs, as strict JSON (NaN: None)."""
    out = {}
    for key, value in (logs or {}).items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        out[str(key)] = number if math.isfinite(number) else None
    return out


def _read_state(backup_dir: str, epoch: int):
    """`(problem, None)` or `(None, BackupState)` for one epoch's backup."""
    stem = os.path.join(backup_dir, f"epoch-{epoch:06d}")
    try:
        with paths.open_file(f"{stem}.json") as f:
            record = json.load(f)
        weights = os.path.join(backup_dir, record["weights"])
        size, digest = record["size"], record["sha256"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"unreadable record: {type(error).__name__}", None
    if not paths.exists(weights):
        return f"{os.path.basename(weights)} is missing", None
    actual = paths.getsize(weights)
    if actual != size:
        return f"{os.path.basename(weights)} has {actual} of {size} bytes", None
    if paths.sha256(weights) != digest:
        return f"{os.path.basename(weights)} fails its checksum", None
    return None, BackupState(
        epoch, weights, record.get("fingerprint", {}), record.get("logs") or {}
    )


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _normalise(fingerprint: dict) -> dict:
    return json.loads(json.dumps(fingerprint, sort_keys=True))
