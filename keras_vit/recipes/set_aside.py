"""Setting a previous run aside, and what a fresh start clears (no framework).

`--fresh` moves what a run wrote into `<workdir>/old-<UTC time>/`
(`set_aside_run`), never deleting it; a fresh start without `--fresh`
(`start_fresh`) sets aside what an earlier run finished or trained, and
deletes only what a run that committed no epoch left. Both take the run's
`keras_vit.recipes.rundir.Setup` (`run`), which decides when they are done
(`make_room`).

Example:

```python
moved = set_aside_run(run)  # e.g. "runs/x/old-20250101-120000", or None
```
"""

from __future__ import annotations

import os
import time

from keras_vit import atomic
from keras_vit import paths
from keras_vit.training.backup_records import committed_epochs
from keras_vit.training.backup_records import records_first
from keras_vit.training.backup_records import set_aside

# What a run writes into its directory; `--fresh` sets all of it aside.
RUN_FILES = (
    "config.json",
    "metrics.csv",
    "results.json",
    "final.keras",
    "encoder.keras",
    "saved_model",
    "checkpoints",
    "tensorboard",
    "backup",
)
# What a finished run produced: never deleted, only set aside.
FINAL_FILES = ("results.json", "final.keras", "encoder.keras", "saved_model")


def start_fresh(run) -> None:
    """Makes room for a new run in the directory (there is no backup).

    What a previous run finished or trained (`results.json`, the models, an
    unusable backup) is set aside (`set_aside_run`), never deleted; what a
    run that committed no epoch left (its logs and checkpoints of a partial
    first epoch) is deleted, so that nothing in the directory can be
    mistaken for the new run's. Another worker sets its own backup aside
    when it holds records (the workers agreed on no epoch), so that none of
    them can later pass for the new run's.
    """
    if not run.chief:
        if _has_records(run.backup_dir):
            moved = set_aside(run.backup_dir)
            run.say_worker(f"Starting afresh: moved this worker's backup to {moved}.")
        return
    finals = [n for n in FINAL_FILES if paths.exists(os.path.join(run.workdir, n))]
    if finals or _has_records(run.backup_dir):  # Records: it was unusable.
        moved = set_aside_run(run)
        run.say(f"Starting afresh: moved what an earlier run left to {moved}.")
        return
    for name in RUN_FILES:
        path = os.path.join(run.workdir, name)
        if paths.isdir(path):
            paths.rmtree(path)
        elif paths.exists(path):
            paths.remove(path)


# In `old-<UTC time>/` while `set_aside_run` moves files into it.
_SETTING_ASIDE = ".setting-aside"


def set_aside_run(run) -> str | None:
    """Moves what a previous run wrote into `<workdir>/old-<UTC time>/`.

    The chief moves the run's files (`RUN_FILES`), its backup first (a kill
    midway never leaves a backup without the rest set aside after it); every
    worker moves its own backup. The chief marks the folder while it moves
    (`.setting-aside`): a set-aside interrupted by a kill is finished into
    the same folder by the next run. Returns the folder, or `None` when
    there was nothing.

    At a URL each folder is moved file by file (`keras_vit.paths.move`; a
    backup's records first): a kill part-way leaves the rest in place, and
    the next run moves it into the same folder, merging.
    """
    names = RUN_FILES if run.chief else ()
    backup = os.path.basename(run.backup_dir)
    present = [n for n in names if paths.exists(os.path.join(run.workdir, n))]
    if backup in present:
        present.remove(backup)
        present.insert(0, backup)
    if not run.chief and paths.exists(run.backup_dir):
        present.append(backup)
    target = unfinished_set_aside(run.workdir) if run.chief else None
    merge = target is not None and paths.is_url(target)
    if not present and target is None:
        return None
    if target is None:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
        target = os.path.join(run.workdir, f"old-{stamp}")
        if run.chief and paths.exists(target):  # Two in one second.
            target = f"{target}.{os.getpid()}-{time.time_ns()}"
        paths.makedirs(target)
        if run.chief:
            atomic.write_text(os.path.join(target, _SETTING_ASIDE), "")
    for name in present:
        destination = os.path.join(target, name)
        if paths.exists(destination) and not merge:  # Two in one second.
            destination = f"{destination}.{os.getpid()}-{time.time_ns()}"
        paths.move(os.path.join(run.workdir, name), destination, records_first)
    if run.chief:
        paths.remove(os.path.join(target, _SETTING_ASIDE))
    return target


def unfinished_set_aside(workdir: str) -> str | None:
    """The `old-*/` folder a killed `set_aside_run` was moving into, if any."""
    try:
        names = paths.listdir(workdir)
    except OSError:
        return None
    for name in names:
        folder = os.path.join(workdir, name)
        if name.startswith("old-") and paths.exists(
            os.path.join(folder, _SETTING_ASIDE)
        ):
            return folder
    return None


def _has_records(backup_dir: str) -> bool:
    """Whether `backup_dir` holds a committed epoch's record (usable or not)."""
    return bool(committed_epochs(backup_dir))
