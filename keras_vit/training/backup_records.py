"""A run's backups as files: their records, read, moved and deleted without Keras.

A backup directory holds, per committed epoch, `epoch-000003.weights.h5`
and its record `epoch-000003.json` (the weights file's size and SHA-256, the
epoch's logs, the run's fingerprint); the record *commits* the epoch
(`keras_vit.training.backup.CrashSafeBackup` writes both). What reads or
moves them is here, apart from the callback, so that the run directory's
state machine (`keras_vit.recipes.rundir`) imports no framework.

Example:

```python
state = latest_backup("runs/x/backup")  # None: no whole backup
start = 0 if state is None else state.epoch
```
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time

from keras_vit import paths
from keras_vit._export import export

_STATE = re.compile(r"^epoch-(\d{6})\.json$")


@export("keras_vit.training.BackupState")
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


@export("keras_vit.training.latest_backup")
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
    run agree on the newest epoch they all hold (`keras_vit.recipes.agreement`):
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


@export("keras_vit.training.resume_epoch")
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


def _normalise(fingerprint: dict) -> dict:
    return json.loads(json.dumps(fingerprint, sort_keys=True))
