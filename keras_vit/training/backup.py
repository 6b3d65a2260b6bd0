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

import hashlib
import math
import os
import re

import keras

from keras_vit import atomic
from keras_vit import paths
from keras_vit._export import export

# Read, moved and deleted without Keras (`backup_records`); named here too.
from keras_vit.training.backup_records import BackupState  # noqa: F401
from keras_vit.training.backup_records import backup_dir_of  # noqa: F401
from keras_vit.training.backup_records import committed_epochs  # noqa: F401
from keras_vit.training.backup_records import differences  # noqa: F401
from keras_vit.training.backup_records import discard
from keras_vit.training.backup_records import discarded_leftovers  # noqa: F401
from keras_vit.training.backup_records import drop_after  # noqa: F401
from keras_vit.training.backup_records import latest_backup  # noqa: F401
from keras_vit.training.backup_records import records_first
from keras_vit.training.backup_records import resume_epoch  # noqa: F401
from keras_vit.training.backup_records import set_aside  # noqa: F401
from keras_vit.training.backup_records import usable_backups  # noqa: F401


def restore(model: keras.Model, state: BackupState) -> None:
    """Loads a backup's weights and optimizer state into a compiled `model`."""
    optimizer = model.optimizer
    if optimizer is not None and not optimizer.built:
        optimizer.build(model.trainable_variables)
    model.load_weights(state.weights)


@export("keras_vit.training.CrashSafeBackup")
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


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
