"""The steps the training recipes share (imports TensorFlow; load it lazily).

`recipes.train` and `recipes.pretrain_masked` are each a short sequence of
these steps:

1. `setup`: strategy (first: TPU and multi-worker strategies must exist
   before TensorFlow uses a device), chief, seed, precision. Use the result
   as a context manager: it releases the run directory's lock, and an
   interruption or a full disk leaving it carries where the run stopped and
   how to go on (`stopped_at`, `resume_hint`).
2. `resume_or_start`: the lock on the run directory (`WorkdirLock`; a
   second live run on it is refused), then the newest whole backup, checked
   against the config's fingerprint (or a fresh start; `fresh=True` sets the
   previous run aside). A finished run is refused (`RunFinished`); one whose
   end was interrupted after `results.json` is completed (`RunCompleted`).
   It only decides: nothing in the directory changes yet.
3. `training_data`: the training source and its seeded stream, starting at
   the resumed epoch, normalised by the model's input contract
   (`preprocessing`: `recipes.train` builds the model first and passes
   `preprocessing_of(model)`, the checkpoint's when fine-tuning).
4. `compile_model`: the warm-up/decay schedule and the optimizer, compiled
   inside the strategy's scope; then `restore` the backup into it. The
   recipe builds its callbacks too: every check that can refuse the
   command has run.
5. `make_room`: what step 2 decided (the previous run set aside, a partial
   first epoch cleared, killed writers' temporary files removed), then
   `write_config`.
6. `fit`: `model.fit` from the resumed epoch with the crash-safe callbacks;
   raises `RunDiverged` (after writing `results.json`) when the loss became
   non-finite. A backup of the last epoch skips it: training had finished.
7. The recipe's finishing steps (evaluate, save the models), then
   `finished`: `results.json`, and only then the backup goes.

A run is a small state machine on disk: *training* (`backup/` holds the
last committed epoch), *finishing* (`backup/` holds the last epoch: every
rerun restores it and redoes the finishing steps, without training), and
*finished* (`results.json` says so; the backup is gone). A kill at any
instant leaves one of these states. Files are written whole or not at all
(`keras_vit.atomic`). The run directory, `init_from` and a `folder:`
dataset may be URLs (`gs://bucket/run1`): every file operation goes
through `keras_vit.paths`, and what holds on an object store (no atomic
rename, a best-effort lock object) is said where it differs
(`WorkdirLock`, `set_aside_run`, `keras_vit.atomic`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import socket
import sys
import threading
import time

import keras
import numpy as np
import tensorflow as tf

from keras_vit import atomic
from keras_vit import data
from keras_vit import paths
from keras_vit import training
from keras_vit.analysis.fewshot import FewShotCallback
from keras_vit.analysis.fewshot import few_shot_pools
from keras_vit.finetune import layer_decay_multipliers
from keras_vit.recipes.configs.base import RUN_ONLY_FIELDS
from keras_vit.recipes.configs.base import ConfigError
from keras_vit.recipes.configs.base import RunConfig
from keras_vit.recipes.configs.base import fingerprint
from keras_vit.recipes.configs.base import flat_fields
from keras_vit.recipes.termination import raise_if_terminated
from keras_vit.training.backup import backup_dir_of
from keras_vit.training.backup import committed_epochs
from keras_vit.training.backup import differences
from keras_vit.training.backup import discard
from keras_vit.training.backup import drop_after
from keras_vit.training.backup import latest_backup
from keras_vit.training.backup import records_first
from keras_vit.training.backup import restore
from keras_vit.training.backup import set_aside
from keras_vit.training.backup import usable_backups
from keras_vit.training.callbacks import flush_summaries

try:
    import fcntl
except ImportError:  # Windows: runs are not locked.
    fcntl = None

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
    """Where and how a run executes (the result of `setup`).

    A context manager: leaving it releases the run directory's lock; an
    interruption (`KeyboardInterrupt`), an `OSError`, an error of
    TensorFlow's file systems (`tf.errors.OpError`, e.g. a bucket that
    cannot be reached) or a full disk in TensorFlow's words leaving it gets
    two one-line attributes: `stopped_at` (e.g. "at epoch 2 of 3") and
    `resume_hint` (e.g. "rerun the same command to resume from the backup
    of epoch 1").
    """

    strategy: tf.distribute.Strategy
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

    @property
    def seconds(self) -> float:
        """Seconds since the run started."""
        return time.time() - self.started

    @property
    def on_tpu(self) -> bool:
        return isinstance(self.strategy, tf.distribute.TPUStrategy)

    @property
    def backup_dir(self) -> str:
        return backup_dir_of(self.workdir, self.chief, self.task)

    def __enter__(self) -> Setup:
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        try:
            if isinstance(error, (KeyboardInterrupt, OSError, tf.errors.OpError)) or (
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


def setup(config: RunConfig, recipe: str) -> Setup:
    """Strategy, chief, seed and precision of a run; says what it picked.

    Use the result as a context manager: it releases the run directory's
    lock that `resume_or_start` takes.

    Raises:
        ConfigError: A path of the config is a URL that no file system here
            can open (`check_paths`); nothing was written.
    """
    started = time.time()
    check_paths(config)
    strategy = training.select_strategy(config.strategy)
    chief = training.is_chief(strategy)
    say = printer(recipe, config.verbose and chief)
    keras.utils.set_random_seed(config.seed)
    policy, why = training.resolve_precision(config.mixed_precision, strategy)
    keras.config.set_dtype_policy(policy)
    replicas = strategy.num_replicas_in_sync
    per_replica = data.per_replica_batch_size(config.global_batch_size, replicas)
    say(
        f"Strategy: {training.describe(strategy)}; batch {config.global_batch_size} "
        f"= {replicas} x {per_replica}; precision {policy} ({why})."
    )
    task = training.task_name(strategy)
    return Setup(
        strategy,
        chief,
        task,
        paths.normalize(config.resolved_workdir()),
        policy,
        say,
        started,
        epochs=config.epochs,
        say_worker=printer(f"{recipe} {task}", config.verbose),
    )


def check_paths(config: RunConfig) -> None:
    """Refuses, in one line, a config path no file system here can open.

    The run directory, `init_from`, `data_dir` and a `folder:` dataset may
    be URLs (`gs://bucket/...`) of any scheme TensorFlow has a file system
    for (`keras_vit.paths.check`); another scheme (`s3://` without its
    plugin, `http://`) is refused before anything is written.

    Raises:
        ConfigError: naming the field, the URL and the usable schemes.
    """
    dataset = getattr(config, "dataset", "") or ""
    fields = [
        ("workdir", config.resolved_workdir()),
        ("init_from", getattr(config, "init_from", None)),
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
    if _workers(run) > 1:
        state = _agree_on_backup(config, run)
    elif run.chief and _unfinished_set_aside(run.workdir):
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
    changed = differences(state.fingerprint, fingerprint(config))
    if changed and not allow_changes:
        raise ConfigError(
            f"the backup in {run.backup_dir} (epoch {state.epoch}) belongs to "
            f"another config: {_detail(state.fingerprint, config, changed)}; "
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


def _workers(run: Setup) -> int:
    """The workers of a multi-worker run (1 under any other strategy)."""
    if not isinstance(run.strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return 1
    spec = run.strategy.cluster_resolver.cluster_spec().as_dict()
    return max(1, len(spec.get("chief", [])) + len(spec.get("worker", [])))


def _agree_on_backup(config: RunConfig, run: Setup):
    """This worker's backup of the newest epoch all workers hold, or `None`.

    Every worker reads its whole backups (two are kept: a kill between two
    workers' commits leaves them one epoch apart, and the one behind still
    holds the epoch before), then they exchange them in one collective
    (`all_gather` over the strategy) and pick the newest epoch in every
    worker's list. A worker holding later epochs drops them in `make_room`
    (they are redone). With no epoch in common every worker starts afresh,
    its backup set aside. What the workers found otherwise (a finished run,
    a refusal) is exchanged too, so that they all stop together.
    """
    refusal, code, states = None, _GOING_ON, []
    if run.chief and _unfinished_set_aside(run.workdir):
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
    row = np.full(_AGREEMENT_SLOTS + 1, -1, np.int64)
    row[0] = code
    epochs = [state.epoch for state in states][:_AGREEMENT_SLOTS]
    row[1 : 1 + len(epochs)] = epochs
    table = _all_gather(run, row)
    if refusal is not None:
        raise refusal
    codes = {int(c) for c in table[:, 0]} - {_GOING_ON}
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
    if (table[:, 1:] >= 0).any():
        run.say_worker(
            f"The {_workers(run)} workers agree to resume from the backup of "
            f"epoch {agreed}, the newest they all hold (this worker's newest: "
            f"epoch {newest})."
        )
    if agreed and any(e > agreed for e in committed_epochs(run.backup_dir)):
        run.redo_after = agreed
    return next((state for state in states if state.epoch == agreed), None)


def agreed_epoch(table: np.ndarray) -> int:
    """The newest epoch in every row of `table` (0: none in common).

    Each row is what one replica offered: a status, then the epochs of its
    worker's whole backups, `-1` for none.

    Example:

    ```python
    agreed_epoch(np.array([[0, 7, 6, -1], [0, 6, 5, -1]]))  # 6
    ```
    """
    held = [{int(e) for e in row[1:] if e >= 0} for row in table]
    return max(set.intersection(*held), default=0) if held else 0


def _all_gather(run: Setup, row: np.ndarray) -> np.ndarray:
    """Every replica's `row`, stacked: one collective over the strategy.

    Raises:
        WorkerLost: The collective failed (another worker stopped).
    """
    value = tf.constant(row[None])
    strategy = run.strategy

    @tf.function
    def gather():
        def step():
            return tf.distribute.get_replica_context().all_gather(value, axis=0)

        return strategy.run(step)

    try:
        result = gather()
    except tf.errors.OpError as error:
        raise WorkerLost(
            "another worker stopped before the workers agreed on the epoch to "
            f"resume from ({type(error).__name__}); nothing was changed: see "
            "its output, then start every worker again with the same command"
        ) from None
    return strategy.experimental_local_results(result)[0].numpy()


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
    changed = differences(stored, fingerprint(config)) if previous else []
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


def start_fresh(run: Setup) -> None:
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


def set_aside_run(run: Setup) -> str | None:
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
    target = _unfinished_set_aside(run.workdir) if run.chief else None
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


def _unfinished_set_aside(workdir: str) -> str | None:
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


def training_source(config: RunConfig):
    """The training split of `config`'s dataset (`keras_vit.data.ImageSource`)."""
    return data.load_source(
        config.dataset, config.train_split, config.data_dir, seed=config.seed
    )


def steps_per_epoch(config: RunConfig, source) -> int:
    """`config.steps_per_epoch`, or the whole global batches in `source`."""
    return config.steps_per_epoch or data.full_batches(
        source.num_examples, config.global_batch_size
    )


def training_data(
    config: RunConfig,
    start_epoch: int,
    *,
    source=None,
    preprocessing=None,
    **augmentation,
):
    """`(source, steps_per_epoch, dataset)`: the seeded training stream.

    Args:
        config: The run's config (data and augmentation fields).
        start_epoch: The first epoch the stream produces (a resumed run's).
            A run whose training had ended (`start_epoch >= epochs`) gets
            the last epoch's stream: it only gives shapes (the multi-worker
            build), since `fit` then trains nothing.
        source: The training source, already loaded (`training_source`);
            `None` loads it.
        preprocessing: The model's input contract (`preprocessing_of(model)`),
            whose normalisation ends every example; `None` for the paper's
            `[-1, 1]`.
        **augmentation: Recipe-specific `keras_vit.data.Augmentation`
            fields (e.g. `mixup_alpha`).
    """
    if source is None:
        source = training_source(config)
    steps = steps_per_epoch(config, source)
    first = min(start_epoch, config.epochs - 1)
    stream = _stream(config, source, steps, first, augmentation, preprocessing)
    return source, steps, stream


def first_batch(
    config: RunConfig, source, steps: int, *, preprocessing=None, **augmentation
):
    """The first training batch of the run's first epoch, or `None`.

    The same batch whether the run was resumed or not (a monitor's probe
    and example images); `None` for an empty stream. `preprocessing` is the
    model's input contract, as for `training_data`.
    """
    stream = _stream(config, source, steps, 0, augmentation, preprocessing)
    for batch in stream.take(1):
        return batch
    return None


def _stream(
    config: RunConfig,
    source,
    steps: int,
    start_epoch: int,
    augmentation,
    preprocessing=None,
):
    return data.train_dataset(
        source,
        image_size=config.image_size,
        global_batch_size=config.global_batch_size,
        epochs=config.epochs,
        start_epoch=start_epoch,
        steps_per_epoch=steps,
        seed=config.seed,
        channels=config.channels,
        augmentation=data.Augmentation(
            crop_area_range=config.crop_area_range,
            crop_aspect_range=config.crop_aspect_range,
            flip=config.random_flip,
            randaugment_ops=config.randaugment_ops,
            randaugment_magnitude=config.randaugment_magnitude,
            **augmentation,
        ),
        shuffle_buffer=config.shuffle_buffer,
        preprocessing=preprocessing,
    )


def check_disjoint(run: Setup, train_source, other_sources) -> None:
    """Raises `ValueError` when the training split shares files with another.

    Also records every split's unreadable files in `run.skipped_files`.
    """
    skipped = set(train_source.skipped)
    for other in other_sources:
        if other is not None:
            data.check_disjoint(train_source, other)
            skipped.update(other.skipped)
    run.skipped_files = sorted(skipped)


def compile_model(model: keras.Model, config: RunConfig, total_steps: int, **kwargs):
    """Compiles `model` with the config's schedule and optimizer.

    Call it inside the strategy's scope. `kwargs` go to `model.compile`
    (loss, metrics).
    """
    schedule = training.WarmupDecay(
        config.learning_rate,
        total_steps=total_steps,
        warmup_steps=min(config.warmup_steps, total_steps),
        decay=config.schedule,
        end_learning_rate=config.end_learning_rate,
    )
    optimizer = training.make_optimizer(
        config.optimizer,
        schedule,
        weight_decay=config.weight_decay,
        momentum=config.momentum,
        beta_1=config.beta_1,
        beta_2=config.beta_2,
        global_clipnorm=config.global_clipnorm,
        ema_momentum=config.ema_momentum,
        lr_multipliers=_layer_decay(model, config),
    )
    model.compile(
        optimizer=optimizer,
        jit_compile=config.jit_compile,
        steps_per_execution=config.steps_per_execution,
        **kwargs,
    )
    # Outside the first step: otherwise the step is traced twice.
    training.build_optimizer(model)


def _layer_decay(model: keras.Model, config: RunConfig) -> dict | None:
    """Layer-wise rate factors when the config asks for them (fine-tuning)."""
    decay = getattr(config, "layer_decay", None)
    if decay is None:
        return None
    return layer_decay_multipliers(model, decay)


def compile_and_restore(
    model: keras.Model, config: RunConfig, run: Setup, steps: int, dataset, state,
    **kwargs,
) -> None:  # fmt: skip
    """Compiles `model` (built in the strategy's scope) and restores `state`.

    `kwargs` go to `model.compile` (loss, metrics); `dataset` is the training
    stream (`prepare_multi_worker_fit` builds the model from its first batch).
    """
    total_steps = steps * config.epochs
    with run.strategy.scope():
        compile_model(model, config, total_steps, **kwargs)
    training.prepare_multi_worker_fit(model, run.strategy, dataset)
    if state is not None:
        with run.strategy.scope():
            restore(model, state)
    run.say(
        f"Model: {model.name}, {model.count_params():,} parameters, "
        f"{config.image_size}px; {config.optimizer}, {steps} steps/epoch, "
        f"{total_steps} steps."
    )


def run_callbacks(
    config: RunConfig,
    run: Setup,
    *,
    monitor: str,
    training_monitor,
    fewshot,
    extra=(),
):
    """`(guard, callbacks)`: the crash-safe set of `training_callbacks`.

    `extra` callbacks (a caller's) go before the last one, the backup's
    commit, so that an epoch is committed after everything it wrote.
    """
    guard = training.DivergenceGuard()
    callbacks = training.training_callbacks(
        run.workdir,
        chief=run.chief,
        task=run.task,
        ema=config.ema_momentum is not None,
        monitor=monitor,
        update_freq=config.tensorboard_update_freq,
        profile_batch=config.profile_steps or 0,
        training_monitor=training_monitor,
        metric_callbacks=[fewshot] if fewshot is not None else [],
        fingerprint=fingerprint(config),
        guard=guard,
    )
    return guard, [*callbacks[:-1], *extra, callbacks[-1]]


def write_config(config: RunConfig, run: Setup) -> None:
    """`config.json` (chief only), written atomically after the resume check."""
    if run.chief:
        atomic.write_json(
            os.path.join(run.workdir, "config.json"), dataclasses.asdict(config)
        )


def fit(
    model, config: RunConfig, run: Setup, dataset, *, steps, state, callbacks, **kwargs
):
    """`model.fit` from the resumed epoch; the `Trained` result.

    Args:
        model: The compiled model, with `state` restored.
        config: The run's config.
        run: The run's `Setup`.
        dataset: The training stream (from the resumed epoch).
        steps: Steps per epoch.
        state: The `BackupState` resumed from, or `None`.
        callbacks: A function returning `(guard, callbacks)`; called only
            when there are epochs left to train.
        **kwargs: More `model.fit` arguments (`validation_data`).

    A backup of the last epoch trains nothing: the model already holds the
    trained state, and gets its final values (the averaged weights with
    EMA), as `model.fit` gives them when it ends.

    Raises:
        RunDiverged: The loss became non-finite (after `results.json`
            recorded where).
    """
    start_epoch = 0 if state is None else state.epoch
    if start_epoch >= config.epochs:
        with run.strategy.scope():
            model.optimizer.finalize_variable_values(model.trainable_variables)
        run.phase = "finishing"
        return Trained({}, state.epoch, dict(state.logs))
    guard, callback_list = callbacks()
    run.phase, run.epoch = "training", start_epoch
    try:
        history = model.fit(
            dataset,
            epochs=config.epochs,
            initial_epoch=start_epoch,
            steps_per_epoch=steps,
            callbacks=[_Progress(run), *callback_list],
            shuffle=False,  # The pipeline shuffles, reproducibly.
            verbose=config.verbose,
            **kwargs,
        )
    except BaseException:  # Ctrl-C, SIGTERM, a full disk: `fit` closes nothing.
        flush_summaries(callback_list)
        raise
    if guard.diverged:
        run.phase = "diverged"
        where = guard.diverged
        if run.chief:
            write_results(
                run,
                {
                    "status": "diverged",
                    "diverged": where,
                    "epochs": guard.finished_epochs,
                    "epochs_planned": config.epochs,
                    "seconds": round(run.seconds, 1),
                    "strategy": training.describe(run.strategy),
                    "precision": run.policy,
                },
            )
        same = "the same command without --fresh" if run.fresh else "the same command"
        resume = (
            f"the backup of epoch {guard.finished_epochs} in {run.backup_dir} is kept: "
            f"rerun {same} with a lower --set learning_rate=... "
            "and --allow-changes to resume from it, or with --fresh to start again"
            if guard.finished_epochs
            else "no epoch finished: rerun with a lower --set learning_rate=..."
        )
        raise RunDiverged(
            f"training diverged at epoch {where['epoch']}, step {where['step']} "
            f"(loss {where['loss']}); no weights were saved after it; {resume}"
        )
    run.phase = "finishing"
    logs = {key: values[-1] for key, values in history.history.items() if values}
    return Trained(history.history, guard.finished_epochs, logs)


class _Progress(keras.callbacks.Callback):
    """Keeps `Setup.epoch` current, for the line an interruption prints.

    At each step it also raises a SIGTERM whose `Terminated` Python
    swallowed (`termination.raise_if_terminated`).
    """

    def __init__(self, run: Setup):
        super().__init__()
        self.run = run

    def on_epoch_begin(self, epoch, logs=None):
        raise_if_terminated()
        self.run.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        raise_if_terminated()

    def on_test_batch_end(self, batch, logs=None):
        raise_if_terminated()


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
                "strategy": training.describe(run.strategy),
                "precision": run.policy,
                "train_examples": source.num_examples,
                "skipped_files": run.skipped_files or list(source.skipped),
            },
        )
    run.phase = "finished"
    discard(run.backup_dir)


def fewshot_callback(
    config: RunConfig,
    *,
    dataset: str,
    train_split: str,
    test_split: str,
    max_test_examples: int | None,
    say,
    preprocessing=None,
):
    """The few-shot linear evaluation callback: pools drawn and held once.

    The pools' images are prepared by `preprocessing`, the model's input
    contract (the paper's for `None`).
    """
    train, test, _ = few_shot_pools(
        dataset,
        train_split=train_split,
        test_split=test_split,
        image_size=config.image_size,
        channels=config.channels,
        shots=config.fewshot_shots,
        seed=config.seed,
        data_dir=config.data_dir,
        max_test_examples=max_test_examples,
        preprocessing=preprocessing,
    )
    pools = []
    for part in (train, test):
        batches = [(x.numpy(), np.argmax(y.numpy(), axis=-1)) for x, y in part]
        pools.append(tuple(np.concatenate(a) for a in zip(*batches, strict=True)))
    say(
        f"Few-shot: {len(pools[0][0])} drawn train images, {len(pools[1][0])} test "
        f"images, every {config.fewshot_every} epoch(s)."
    )
    return FewShotCallback(
        pools[0],
        pools[1],
        shots=config.fewshot_shots,
        every_n_epochs=config.fewshot_every,
        seed=config.seed,
    )


def printer(prefix: str, enabled: bool):
    """Returns `say(message)`, printing `[prefix] message` when `enabled`."""

    def say(message: str) -> None:
        if enabled:
            print(f"[{prefix}] {message}", flush=True)  # noqa: T201

    return say


def _finite(value):
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    if isinstance(value, (float, np.floating)):
        return float(value) if np.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    return value
