"""The run directory: a small state machine on disk (imports no framework).

A run is *training* (`backup/` holds the last committed epoch), *finishing*
(`backup/` holds the last epoch: every rerun restores it and redoes the
finishing steps, without training) or *finished* (`results.json` says so;
the backup is gone). A kill at any instant leaves one of these states.
Files are written whole or not at all (`keras_vit.atomic`). The run
directory, `init_from` and a `folder:` dataset may be URLs
(`gs://bucket/run1`): every file operation goes through `keras_vit.paths`,
and what holds on an object store (no atomic rename, a best-effort lock
object) is said where it differs (`WorkdirLock`,
`keras_vit.recipes.set_aside`, `keras_vit.atomic`).

The run engine (`keras_vit.recipes.engine`) moves a run through it:

1. `resume_or_start`: the lock on the run directory (`WorkdirLock`; a
   second live run on it is refused), then the newest whole backup, checked
   against the config's fingerprint (or a fresh start; `fresh=True` sets the
   previous run aside). A finished run is refused (`RunFinished`); one whose
   end was interrupted after `results.json` is completed (`RunCompleted`).
   The workers of a multi-worker run agree on the epoch first. It only
   decides: nothing in the directory changes yet.
2. `make_room`, once every check that can refuse the command has passed:
   what step 1 decided (the previous run set aside, a partial first epoch
   cleared, killed writers' temporary files removed); then `write_config`.
3. Training commits one backup per epoch (`keras_vit.training.backup`).
4. `finished`, when every final file is written: `results.json`, and only
   then the backup goes.

`Setup` is where and how a run executes; the engine makes it (`setup`:
the strategy, chief, seed and precision) and fills in what only the
framework knows (`on_tpu`, `workers`, `all_gather`, ...).

Example:

```python
with engine.setup(config, "train") as run:
    state = resume_or_start(config, run)  # None: a fresh start
    ...  # everything that can refuse the command
    make_room(run)
    write_config(config, run)
```
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import os
import time
from collections.abc import Callable

from keras_vit import atomic
from keras_vit import paths
from keras_vit.recipes.configs.base import RUN_ONLY_FIELDS
from keras_vit.recipes.configs.base import ConfigError
from keras_vit.recipes.configs.base import RunConfig
from keras_vit.recipes.configs.base import fingerprint as config_fingerprint
from keras_vit.recipes.configs.base import flat_fields
from keras_vit.recipes.configs.base import require_dataset
from keras_vit.recipes.set_aside import set_aside_run
from keras_vit.recipes.set_aside import start_fresh
from keras_vit.recipes.set_aside import unfinished_set_aside
from keras_vit.recipes.workdir_lock import WorkdirBusy  # noqa: F401  (a run error)
from keras_vit.recipes.workdir_lock import WorkdirLock
from keras_vit.training.backup_records import backup_dir_of
from keras_vit.training.backup_records import committed_epochs
from keras_vit.training.backup_records import differences
from keras_vit.training.backup_records import discard
from keras_vit.training.backup_records import drop_after
from keras_vit.training.backup_records import latest_backup
from keras_vit.training.backup_records import usable_backups


class RunFailed(RuntimeError):
    """The run failed (exit status 1); the message, one line, says why."""


class RunDiverged(RunFailed):
    """The loss became non-finite; the message says where and how to resume."""


class WorkerLost(RunFailed):
    """A multi-worker run lost a worker before they agreed where to resume."""


class RunFinished(RuntimeError):
    """The run directory holds this config's finished run: nothing to do."""


class RunCompleted(RunFinished):
    """The run had finished, but its end was interrupted: this call completed it.

    `results.json` said "finished" while the backup (or a half-deleted one)
    was still there; it is now gone. A success: the command exits with 0.
    """


@dataclasses.dataclass
class Trained:
    """What `fit` leaves for the finishing steps.

    Attributes:
        history: Per-epoch logs of the epochs this process trained (empty
            when it resumed after training had ended).
        epochs: Epochs the run has completed, resumed ones included.
        logs: The last epoch's logs.
    """

    history: dict
    epochs: int
    logs: dict


@dataclasses.dataclass
class Setup:
    """Where and how a run executes (made by `keras_vit.recipes.engine.setup`).

    A context manager: leaving it releases the run directory's lock; an
    interruption (`KeyboardInterrupt`), an `OSError`, another of
    `stop_errors` (the engine adds TensorFlow's file systems' `OpError`,
    e.g. a bucket that cannot be reached) or a full disk in TensorFlow's
    words leaving it gets two one-line attributes: `stopped_at` (e.g. "at
    epoch 2 of 3") and `resume_hint` (e.g. "rerun the same command to
    resume from the backup of epoch 1").

    What only the framework knows is given by the engine, so that this
    module imports none: `on_tpu`, `workers` (of a multi-worker run),
    `strategy_name` (for `results.json`), `all_gather` (one collective over
    the workers) and `stop_errors`.
    """

    strategy: object  # A `tf.distribute.Strategy`.
    chief: bool
    task: str
    workdir: str
    policy: str
    say: object
    started: float
    # Unreadable files left out of any split, each listed once (results.json).
    skipped_files: list[str] = dataclasses.field(default_factory=list)
    epochs: int = 0
    # "starting", "training" (epoch `epoch`, 0-based), "finishing", "finished".
    phase: str = "starting"
    epoch: int = 0
    lock: WorkdirLock | None = None
    # `--fresh` was given, and whether its set-aside has been done: from then
    # on the way to go on is the command without `--fresh`.
    fresh: bool = False
    fresh_applied: bool = False
    # What `make_room` does once the recipe's checks passed: "set_aside",
    # "start_fresh" or None.
    pending: str | None = None
    # The epoch the workers agreed to resume from, when this worker holds
    # backups of later epochs (they are redone: `make_room` drops them).
    redo_after: int | None = None
    # Prints on every worker (`say` prints on the chief only).
    say_worker: object = None
    # What the run's backups must agree on (`configs.base.fingerprint`).
    fingerprint: dict | None = None
    on_tpu: bool = False
    workers: int = 1
    strategy_name: str = ""
    # `rows -> table`: every worker's row of integers, stacked (one collective).
    all_gather: Callable[[list[int]], list[list[int]]] | None = None
    stop_errors: tuple[type[BaseException], ...] = (KeyboardInterrupt, OSError)

    @property
    def seconds(self) -> float:
        """Seconds since the run started."""
        return time.time() - self.started

    @property
    def backup_dir(self) -> str:
        return backup_dir_of(self.workdir, self.chief, self.task)

    def __enter__(self) -> Setup:
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        try:
            if isinstance(error, self.stop_errors) or (
                isinstance(error, Exception) and atomic.disk_full_code(error)
            ):
                error.stopped_at, error.resume_hint = self.where_stopped()
        finally:
            self.close()
        return False

    def close(self) -> None:
        """Releases the run directory's lock."""
        if self.lock is not None:
            self.lock.release()

    def where_stopped(self) -> tuple[str, str]:
        """`(where, what to do)`: where the run stopped, from what is on disk."""
        try:
            state = latest_backup(self.backup_dir, say=lambda _: None)
        except OSError:
            state = None
        done = 0 if state is None else state.epoch
        if self.phase == "training":
            where = f"at epoch {self.epoch + 1} of {self.epochs}"
        elif self.phase == "finishing":
            where = f"while finishing, after epoch {done} of {self.epochs}"
        elif self.phase == "finished":
            where = "after the run finished"
        else:
            where = "before training started"
        if self.phase == "finished":
            return where, f"its results are in {self.workdir}"
        if self.pending == "set_aside":  # Not (or not all) set aside yet.
            return where, (
                "rerun the same command to set the previous run aside and start again"
            )
        # Rerun with --fresh, it would set aside what this run did.
        again = self.fresh and self.fresh_applied
        same = "the same command without --fresh" if again else "the same command"
        if done >= self.epochs > 0:
            hint = (
                f"rerun {same} to finish from the backup of epoch "
                f"{done}, without training again"
            )
        elif done:
            hint = f"rerun {same} to resume from the backup of epoch {done}"
        else:
            hint = f"no epoch was finished: rerun {same} to start again"
        return where, hint


def check_paths(config: RunConfig) -> None:
    """Refuses, in one line, a config without a dataset or with a path no
    file system here can open.

    The run directory, `init_from`, `data_dir` and a `folder:` dataset may
    be URLs (`gs://bucket/...`) of any scheme TensorFlow has a file system
    for (`keras_vit.paths.check`); another scheme (`s3://` without its
    plugin, `http://`) is refused before anything is written. An
    `init_from` that is a checkpoint name (`hf://org/repo`, a timm name, a
    tag) is no path: the weights library finds it.

    Raises:
        ConfigError: naming the field, the URL and the usable schemes; or
            the config and the override to give (`require_dataset`).
    """
    from keras_vit.recipes.initialise import is_checkpoint_name

    require_dataset(config)
    dataset = getattr(config, "dataset", "") or ""
    init_from = getattr(config, "init_from", None)
    fields = [
        ("workdir", config.resolved_workdir()),
        # A checkpoint name (`hf://org/repo`, a timm name, a tag) is the
        # weights library's to find (`initialise.check_init_from`).
        ("init_from", None if is_checkpoint_name(init_from) else init_from),
        ("data_dir", getattr(config, "data_dir", None)),
    ]
    if dataset.startswith("folder:"):
        fields.append(("dataset", dataset[len("folder:") :]))
    for field, value in fields:
        try:
            paths.check(value, field)
        except paths.UnsupportedPath as error:
            raise ConfigError(str(error)) from None


def resume_or_start(
    config: RunConfig,
    run: Setup,
    *,
    fresh: bool = False,
    allow_changes: bool = False,
    finishing: str = "the final evaluation and save",
):
    """The backup to resume from (a `BackupState`), or `None` for a fresh run.

    Decides only: it takes the lock and reads the run directory, and changes
    nothing in it. What a fresh start needs (setting the previous run aside,
    clearing a partial first epoch) is recorded in `run.pending` and done by
    `make_room`, which the recipe calls once its data and model checks have
    passed: a refused command leaves the directory as it was.

    A backup of the last epoch means that training had finished and the run
    was stopped while finishing: the recipe restores it, `fit` trains
    nothing, and the finishing steps run again (`finishing` names them in
    the "Resuming" line).

    The workers of a multi-worker run each keep their own backup and commit
    each epoch separately, so a kill between two commits leaves them one
    epoch apart. They agree first (`_agree_on_backup`, a collective over
    the strategy): each restores the newest epoch that every worker holds a
    whole backup of, and drops its backups of later epochs (in `make_room`).

    Args:
        config: The run's config; its fingerprint must match the backup's.
        run: The run's `Setup`.
        fresh: Set everything a previous run left in the run directory
            aside (moved to `old-<UTC time>/` in it) and start again.
        allow_changes: Resume even though the config differs from the
            backup's (e.g. a lower `learning_rate` after a divergence).
        finishing: What the recipe does after training, for the message.

    Raises:
        WorkdirBusy: Another live run holds the run directory's lock
            (taken here, first, for this worker: released by `run.close()`).
        RunFinished: The directory holds this config's finished run
            (`results.json` says so); nothing was changed.
        RunCompleted: The same, but the run's end had been interrupted
            after `results.json`: its leftover backup was removed (a success).
        ConfigError: The backup, or the finished run, belongs to another
            config (one line naming the differing keys and saying how to
            start fresh).
        WorkerLost: Another worker stopped before the workers agreed on
            the epoch to resume from.
    """
    if run.lock is None:
        name = ".lock" if run.chief else f".lock-{run.task}"
        run.lock = WorkdirLock.acquire(run.workdir, name)
    run.fresh = fresh
    if fresh:  # Every worker was given it: no need to agree.
        run.pending = "set_aside"  # What is there now is set aside.
        return None
    if run.workers > 1:
        state = _agree_on_backup(config, run)
    elif run.chief and unfinished_set_aside(run.workdir):
        run.pending = "set_aside"
        return None
    else:
        _refuse_finished(config, run)
        state = latest_backup(run.backup_dir, say=print)
    if state is None and run.pending == "set_aside":
        return None
    if state is None:
        run.pending = "start_fresh"
        return None
    stored = _with_later_fields(state.fingerprint, config)
    changed = differences(stored, run.fingerprint)
    if changed and not allow_changes:
        raise ConfigError(
            f"the backup in {run.backup_dir} (epoch {state.epoch}) belongs to "
            f"another config: {_detail(stored, config, changed)}; "
            "rerun with --fresh to start again, or --allow-changes to resume "
            "with the new values"
        )
    note = f" with changed {', '.join(changed)}" if changed else ""
    if state.epoch >= config.epochs:
        run.phase = "finishing"
        run.say(
            f"Resuming: training finished at epoch {state.epoch}{note}; "
            f"finishing: {finishing}."
        )
    else:
        where = f"{run.backup_dir} at epoch {state.epoch + 1}"
        run.say(f"Resuming from the backup in {where}{note}.")
    return state


# How many of each worker's backups are compared when the workers agree.
_AGREEMENT_SLOTS = 8
# What a worker found before resuming, as it tells the others.
_GOING_ON, _COMPLETED, _FINISHED, _REFUSED = 0, 1, 2, 3


def _agree_on_backup(config: RunConfig, run: Setup):
    """This worker's backup of the newest epoch all workers hold, or `None`.

    Every worker reads its whole backups (two are kept: a kill between two
    workers' commits leaves them one epoch apart, and the one behind still
    holds the epoch before), then they exchange them in one collective
    (`run.all_gather`, over the strategy) and pick the newest epoch in every
    worker's list. A worker holding later epochs drops them in `make_room`
    (they are redone). With no epoch in common every worker starts afresh,
    its backup set aside. What the workers found otherwise (a finished run,
    a refusal) is exchanged too, so that they all stop together.
    """
    refusal, code, states = None, _GOING_ON, []
    if run.chief and unfinished_set_aside(run.workdir):
        run.pending = "set_aside"  # The chief then offers no backup.
    else:
        try:
            _refuse_finished(config, run)
        except RunCompleted as error:
            refusal, code = error, _COMPLETED
        except RunFinished as error:
            refusal, code = error, _FINISHED
        except ConfigError as error:
            refusal, code = error, _REFUSED
        else:
            states = usable_backups(run.backup_dir, say=print)
    epochs = [state.epoch for state in states][:_AGREEMENT_SLOTS]
    row = [code, *epochs, *[-1] * (_AGREEMENT_SLOTS - len(epochs))]
    table = run.all_gather(row)  # WorkerLost: another worker stopped.
    if refusal is not None:
        raise refusal
    codes = {int(offer[0]) for offer in table} - {_GOING_ON}
    if _REFUSED in codes:
        raise ConfigError(
            "another worker refused this run (see its output); nothing was changed"
        )
    if codes:
        results = os.path.join(run.workdir, "results.json")
        if discard(run.backup_dir):
            raise RunCompleted(
                f"the run in {run.workdir} has finished (the chief's {results}); "
                "removed the backup its interrupted end left on this worker"
            )
        raise RunFinished(
            f"the run in {run.workdir} has finished (the chief's {results}); "
            "nothing to do: rerun with --fresh to set it aside and train again"
        )
    agreed = agreed_epoch(table)
    newest = epochs[0] if epochs else 0
    if any(epoch >= 0 for offer in table for epoch in offer[1:]):
        run.say_worker(
            f"The {run.workers} workers agree to resume from the backup of "
            f"epoch {agreed}, the newest they all hold (this worker's newest: "
            f"epoch {newest})."
        )
    if agreed and any(e > agreed for e in committed_epochs(run.backup_dir)):
        run.redo_after = agreed
    return next((state for state in states if state.epoch == agreed), None)


def agreed_epoch(table) -> int:
    """The newest epoch in every row of `table` (0: none in common).

    Each row is what one replica offered: a status, then the epochs of its
    worker's whole backups, `-1` for none.

    Example:

    ```python
    agreed_epoch([[0, 7, 6, -1], [0, 6, 5, -1]])  # 6
    ```
    """
    held = [{int(e) for e in row[1:] if e >= 0} for row in table]
    return max(set.intersection(*held), default=0) if held else 0


def make_room(run: Setup) -> None:
    """Does what `resume_or_start` decided, once the recipe's checks passed.

    Sets the previous run aside (`--fresh`) or clears what a run that
    committed no epoch left (`start_fresh`), drops this worker's backups of
    epochs to be redone (`redo_after`: the workers agreed on an earlier
    one), and removes the temporary files that killed writers left (chief).
    """
    pending, chief = run.pending, run.chief
    if pending == "set_aside":
        moved = set_aside_run(run)
        run.pending, run.fresh_applied = None, True
        if moved:
            what = "--fresh" if run.fresh else "Finishing an interrupted --fresh"
            how = (
                " (file by file: copied there, then deleted here)"
                if paths.is_url(moved)
                else ""
            )
            run.say(f"{what}: moved the previous run to {moved}{how}.")
    elif pending == "start_fresh":
        start_fresh(run)
        run.pending = None
    if run.redo_after is not None:
        dropped = drop_after(run.backup_dir, run.redo_after)
        run.redo_after = None
        if dropped:
            listed = ", ".join(str(e) for e in sorted(dropped))
            run.say_worker(f"Dropped this worker's backup of epoch {listed}: redone.")
    if chief:
        atomic.remove_partials(run.workdir)
        atomic.remove_partials(os.path.join(run.workdir, "checkpoints"))


def write_config(config: RunConfig, run: Setup) -> None:
    """`config.json` (chief only), written atomically after the resume check."""
    if run.chief:
        atomic.write_json(
            os.path.join(run.workdir, "config.json"), dataclasses.asdict(config)
        )


def _with_later_fields(stored: dict, config: RunConfig) -> dict:
    """A stored fingerprint with the fields it lacks at their defaults.

    A field (or encoder option) added to keras_vit after the run was made
    is absent from its records; its default is what was done before, so a
    run made by an earlier version still resumes, or counts as finished.
    """
    defaults = config_fingerprint(type(config)())
    return {**{k: v for k, v in defaults.items() if k not in stored}, **stored}


def _detail(stored: dict, config: RunConfig, changed: list[str]) -> str:
    current = flat_fields(config)
    return ", ".join(
        f"{key} {stored.get(key, '<absent>')!r} -> {current.get(key, '<absent>')!r}"
        for key in changed
    )


def _refuse_finished(config: RunConfig, run: Setup) -> None:
    """Raises if `results.json` says the run in the directory finished."""
    results = atomic.read_json_object(os.path.join(run.workdir, "results.json"))
    if results.get("status") != "finished":
        return
    previous = atomic.read_json_object(os.path.join(run.workdir, "config.json"))
    stored = {
        k: v for k, v in flat_fields(previous).items() if k not in RUN_ONLY_FIELDS
    }
    stored = _with_later_fields(stored, config)
    changed = differences(stored, run.fingerprint) if previous else []
    if changed:
        raise ConfigError(
            f"{run.workdir} holds a finished run of another config: "
            f"{_detail(stored, config, changed)}; rerun with --fresh to set it "
            "aside and start again, or use another --set workdir=..."
        )
    saved = [
        os.path.join(run.workdir, name)
        for name in ("final.keras", "encoder.keras")
        if paths.exists(os.path.join(run.workdir, name))
    ]
    models = f", {'models' if len(saved) > 1 else 'model'} in {' and '.join(saved)}"
    models = models if saved else ""
    # Results are written before the backup goes: a kill in between leaves it
    # (or half of it). Removing it is the end of that run: a success.
    if discard(run.backup_dir):
        raise RunCompleted(
            f"the run in {run.workdir} has finished ({results.get('epochs', '?')} "
            f"epochs; results in {os.path.join(run.workdir, 'results.json')}"
            f"{models}); removed the backup its interrupted end left"
        )
    raise RunFinished(
        f"the run in {run.workdir} has finished ({results.get('epochs', '?')} "
        f"epochs; results in {os.path.join(run.workdir, 'results.json')}{models}); "
        "nothing to do: rerun with --fresh to set it aside and train again"
    )


def write_results(run: Setup, summary: dict) -> None:
    """`results.json` as strict JSON: non-finite numbers become `null`."""
    atomic.write_json(os.path.join(run.workdir, "results.json"), _finite(summary))


def finished(run: Setup, trained: Trained, source, **results) -> None:
    """Writes `results.json` of a finished run, then discards the backup.

    Call it last, when every final file is written: until `results.json`
    says "finished", a rerun finds the backup and finishes again. Every
    worker calls it (only the chief writes; each discards its own backup).
    """
    if run.chief:
        write_results(
            run,
            {
                "status": "finished",
                **results,
                "epochs": trained.epochs,
                "seconds": round(run.seconds, 1),
                "strategy": run.strategy_name,
                "precision": run.policy,
                "train_examples": source.num_examples,
                "skipped_files": run.skipped_files or list(source.skipped),
            },
        )
    run.phase = "finished"
    discard(run.backup_dir)


def printer(prefix: str, enabled: bool):
    """Returns `say(message)`, printing `[prefix] message` when `enabled`."""

    def say(message: str) -> None:
        if enabled:
            print(f"[{prefix}] {message}", flush=True)  # noqa: T201

    return say


def _finite(value):
    """`value` with its NumPy numbers as Python's, non-finite ones `None`.

    NumPy registers its scalars with `numbers` (`np.floating` is a
    `numbers.Real`, `np.integer` a `numbers.Integral`): no NumPy import.
    """
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value) if math.isfinite(value) else None
    return value
