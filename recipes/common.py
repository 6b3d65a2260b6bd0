"""Small helpers shared by the recipe scripts."""

from __future__ import annotations

import os
import shutil

from keras_vit.training import resume_epoch


def resume_or_start(workdir: str, chief: bool, task: str, say) -> int:
    """Returns the epoch to resume from (0 for a fresh run).

    A run's `BackupAndRestore` state lives in `workdir/backup` (the chief) or
    `workdir/backup_<task>` (other workers). With no backup, the chief clears
    the logs a previous, finished run left in `workdir`.
    """
    backup_dir = os.path.join(workdir, "backup" if chief else f"backup_{task}")
    start_epoch = resume_epoch(backup_dir)
    if start_epoch:
        say(f"Resuming from the backup in {backup_dir} at epoch {start_epoch + 1}.")
    elif chief:
        start_fresh(workdir)
    return start_epoch


def start_fresh(workdir: str) -> None:
    """Clears what a previous, finished run left (no backup: not a resume)."""
    for name in ("metrics.csv", "tensorboard", "results.json"):
        path = os.path.join(workdir, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)


def printer(prefix: str, enabled: bool):
    """Returns `say(message)`, printing `[prefix] message` when `enabled`."""

    def say(message: str) -> None:
        if enabled:
            print(f"[{prefix}] {message}", flush=True)  # noqa: T201

    return say
