"""The callbacks of a training run, in the order that makes resuming exact.

`training_callbacks` assembles, for a run directory `workdir`:

| callback | writes | runs on |
|---|---|---|
| `DivergenceGuard` | - (stops at a non-finite loss, records where) | all workers |
| `ReseedEachEpoch` | - | all |
| `CrashSafeBackup` | `backup/epoch-N.weights.h5` (others: `backup_<task>/`) | all |
| `SwapEMAWeights` (with EMA) | - | all |
| metric callbacks (e.g. few-shot) | entries in the epoch logs | all |
| `StepsPerSecond` | `steps_per_second` in the epoch logs | all |
| `AtomicCheckpoint` x2 | `checkpoints/{best,last}.keras`, `best.json` | chief |
| `AtomicCSVLogger` | `metrics.csv` (continued on resume) | chief |
| `TensorBoard` | `tensorboard/{train,validation}` | chief |
| `TrainingMonitor` | `tensorboard/train` | chief |
| the backup's commit | `backup/epoch-N.json`: the epoch is done | all |

Every file is written whole or not at all (`keras_vit.atomic`),
and nothing is written once the guard has fired: a diverged run keeps its
last finite backup and checkpoints. The progress bar is `model.fit`'s own.

Order matters at the end of an epoch. The backup's weights are written
before `SwapEMAWeights` puts the averaged weights into the model, so they
hold the raw training state, while the checkpoints after it hold the
averaged weights. The epoch is committed (the record that makes a rerun
resume after it) last, once its `metrics.csv` row and TensorBoard summaries
are written: a kill at any instant before leaves the epoch to be redone, and
every committed epoch is in the logs once (`AtomicCSVLogger` drops the rows
of redone epochs; TensorBoard shows a redone epoch's point twice, with the
same values). The backup is kept when `fit` ends (`delete_at_end=False`):
the recipe discards it once its final results are saved.
"""

from __future__ import annotations

import math
import os
import time

import keras

from keras_vit import atomic
from keras_vit import paths
from keras_vit._export import export
from keras_vit.training.backup import CrashSafeBackup
from keras_vit.training.backup import backup_dir_of
from keras_vit.training.backup import resume_epoch  # noqa: F401  (re-exported)
from keras_vit.training.monitor import TrainingMonitor

# Epoch `e` runs each generator from seed `initial + e * stride`, a stream
# disjoint from every other epoch's.
_EPOCH_SEED_STRIDE = 1_000_003


@export("keras_vit.training.ReseedEachEpoch")
class ReseedEachEpoch(keras.callbacks.Callback):
    """Resets the model's random generators at the start of every epoch.

    Dropout and stochastic depth draw from per-layer generators whose state
    is not part of a checkpoint. Setting each one to a state derived from
    its initial seed and the epoch makes an epoch's random masks the same
    whether the run was interrupted before it or not.

    Example:

    ```python
    model.fit(dataset, epochs=10, callbacks=[ReseedEachEpoch()])
    ```
    """

    def __init__(self):
        super().__init__()
        self._initial = None

    def on_train_begin(self, logs=None):
        # Fresh generators hold [seed, 0]; remember the seeds.
        self._initial = [
            (variable, keras.ops.convert_to_numpy(variable.value).copy())
            for variable in self.model.variables
            if variable.name == "seed_generator_state"
        ]

    def on_epoch_begin(self, epoch, logs=None):
        for variable, initial in self._initial:
            state = initial.copy()
            state[0] = state[0] + epoch * _EPOCH_SEED_STRIDE
            variable.assign(state)


@export("keras_vit.training.DivergenceGuard")
class DivergenceGuard(keras.callbacks.Callback):
    """Stops training at the first non-finite loss and records where.

    After it fires, `diverged` is `{"epoch": e, "step": s, "loss": "nan"}`
    (1-based epoch and step) and `finished_epochs` the number of epochs
    that ended with finite weights; the crash-safe writers then write
    nothing more.

    Example:

    ```python
    guard = DivergenceGuard()
    model.fit(dataset, epochs=10, callbacks=[guard])
    if guard.diverged:
        raise SystemExit(f"diverged: {guard.diverged}")
    ```
    """

    def __init__(self):
        super().__init__()
        self.diverged = None
        self.finished_epochs = 0
        self._epoch = 0

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch
        self.finished_epochs = epoch

    def on_train_batch_end(self, batch, logs=None):
        self._check(batch + 1, logs)

    def on_epoch_end(self, epoch, logs=None):
        self._check(self.params.get("steps") or 0, logs)
        if not self.diverged:
            self.finished_epochs = epoch + 1

    def _check(self, step, logs):
        loss = (logs or {}).get("loss")
        if self.diverged or loss is None or math.isfinite(float(loss)):
            return
        self.diverged = {
            "epoch": self._epoch + 1,
            "step": step,
            "loss": str(float(loss)),
        }
        self.model.stop_training = True


@export("keras_vit.training.StepsPerSecond")
class StepsPerSecond(keras.callbacks.Callback):
    """Adds `steps_per_second` (training steps, validation excluded) to the
    epoch logs, so that `TensorBoard` and `CSVLogger` record it.

    Example:

    ```python
    model.fit(dataset, epochs=3, callbacks=[StepsPerSecond(), TensorBoard(d)])
    ```
    """

    def on_epoch_begin(self, epoch, logs=None):
        self._start, self._steps, self._end = time.perf_counter(), 0, None

    def on_train_batch_end(self, batch, logs=None):
        self._steps = batch + 1
        self._end = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        if logs is not None and self._end is not None and self._end > self._start:
            logs["steps_per_second"] = self._steps / (self._end - self._start)


@export("keras_vit.training.AtomicCheckpoint")
class AtomicCheckpoint(keras.callbacks.Callback):
    """`model.save(path)` at the end of each epoch, written whole or not at all.

    Args:
        path: A `.keras` file.
        monitor: With `None` (default), saves every epoch; else saves only
            when this log entry improves (higher for names with "acc", lower
            otherwise, as Keras's `ModelCheckpoint` decides).
        guard: A `DivergenceGuard`; nothing is saved once it has fired.

    With `monitor`, each improvement is also recorded in a JSON file next to
    `path` (`best.keras` -> `best.json`: the epoch and value of each); a
    resumed run reads the records of the epochs before it, so that it keeps
    the same best model as a run that was never interrupted.

    Example:

    ```python
    AtomicCheckpoint("runs/x/checkpoints/best.keras", monitor="val_accuracy")
    ```
    """

    def __init__(self, path: str, monitor: str | None = None, guard=None):
        super().__init__()
        self.path, self.monitor, self.guard = path, monitor, guard
        self._higher = monitor is not None and "acc" in monitor
        self._best = None
        self._records = None
        root, _ = os.path.splitext(path)
        self.record_path = f"{root}.json" if monitor is not None else None

    def on_epoch_begin(self, epoch, logs=None):
        if self.monitor is None or self._records is not None:
            return
        self._records = {}
        stored = atomic.read_json_object(self.record_path)
        if stored.get("monitor") != self.monitor:
            return
        # 1-based epochs done before this (resumed) run: the others are redone.
        for key, value in (stored.get("improvements") or {}).items():
            if str(key).isdigit() and int(key) <= epoch and value is not None:
                self._records[str(int(key))] = float(value)
        if self._records:
            self._best = self._records[max(self._records, key=int)]

    def on_epoch_end(self, epoch, logs=None):
        if self.guard is not None and self.guard.diverged:
            return
        if self.monitor is not None:
            value = (logs or {}).get(self.monitor)
            if value is None or not math.isfinite(float(value)):
                return
            value = float(value)
            if self._best is not None and (
                value <= self._best if self._higher else value >= self._best
            ):
                return
            self._best = value
        atomic.save_model(self.model, self.path)
        if self.monitor is not None:
            if self._records is None:
                self._records = {}
            self._records[str(epoch + 1)] = value
            atomic.write_json(
                self.record_path,
                {"monitor": self.monitor, "improvements": self._records},
            )


@export("keras_vit.training.AtomicCSVLogger")
class AtomicCSVLogger(keras.callbacks.Callback):
    """One CSV row per epoch; the whole file is rewritten atomically.

    On a resumed run, rows of the epochs about to be redone are dropped first,
    so the file holds each epoch once.

    Example:

    ```python
    model.fit(dataset, epochs=3, callbacks=[AtomicCSVLogger("runs/x/metrics.csv")])
    ```
    """

    def __init__(self, path: str):
        super().__init__()
        self.path = path
        self._rows = None
        self._keys = None

    def on_epoch_begin(self, epoch, logs=None):
        if self._rows is not None:
            return
        self._rows = []
        if paths.exists(self.path):
            with paths.open_file(self.path) as f:
                lines = f.read().splitlines()
            if lines:
                self._keys = lines[0].split(",")[1:]
                self._rows = [line for line in lines[1:] if _epoch_of(line) < epoch]

    def on_epoch_end(self, epoch, logs=None):
        logs = logs or {}
        if self._keys is None:
            self._keys = sorted(logs)
        values = [_format(logs.get(key, "")) for key in self._keys]
        self._rows.append(",".join([str(epoch), *values]))
        header = ",".join(["epoch", *self._keys])
        atomic.write_text(self.path, "\n".join([header, *self._rows]) + "\n")


@export("keras_vit.training.training_callbacks")
def training_callbacks(
    workdir: str,
    *,
    chief: bool = True,
    task: str = "chief",
    ema: bool = False,
    monitor: str = "val_accuracy",
    update_freq: str | int = "epoch",
    profile_batch: int | tuple[int, int] = 0,
    training_monitor: TrainingMonitor | None = None,
    metric_callbacks: list[keras.callbacks.Callback] = (),
    fingerprint: dict | None = None,
    guard: DivergenceGuard | None = None,
) -> list[keras.callbacks.Callback]:
    """The callbacks of a run writing into `workdir` (see the module table).

    Args:
        workdir: The run directory.
        chief: Whether this process is the chief (writes logs and
            checkpoints). Defaults to `True`.
        task: This worker's name, for its own backup directory.
        ema: Whether the optimizer keeps an EMA of the weights; adds
            `SwapEMAWeights(swap_on_epoch=True)`.
        monitor: Metric that decides `best.keras`, e.g. `"val_accuracy"`.
        update_freq: TensorBoard's `update_freq` (`"epoch"` or a step
            count).
        profile_batch: TensorBoard's `profile_batch`, e.g. `(10, 15)` to
            profile steps 10-15; 0 (default) does not profile.
        training_monitor: A `TrainingMonitor` to add (chief only).
        metric_callbacks: Callbacks that add entries to the epoch's logs
            (e.g. `keras_vit.analysis.fewshot.FewShotCallback`); placed after the EMA
            swap and before the checkpoints and loggers that read the logs.
            Run on every worker.
        fingerprint: Stored with each backup (see `CrashSafeBackup`).
        guard: The run's `DivergenceGuard` (a new one by default); read
            `guard.diverged` after `model.fit`.

    Returns:
        A list of callbacks for `model.fit`; the last one commits each
        epoch's backup (put any callback of yours before it). The backup is
        kept when `fit` ends: call `keras_vit.training.backup.discard` on
        it once the run's final results are saved.
    """
    guard = guard or DivergenceGuard()
    backup = CrashSafeBackup(
        backup_dir_of(workdir, chief, task),
        fingerprint=fingerprint,
        guard=guard,
        delete_at_end=False,
    )
    callbacks = [guard, ReseedEachEpoch(), backup]
    if ema:
        callbacks.append(keras.callbacks.SwapEMAWeights(swap_on_epoch=True))
    callbacks += [*metric_callbacks, StepsPerSecond()]
    if chief:
        checkpoints = os.path.join(workdir, "checkpoints")
        atomic.remove_partials(checkpoints)
        atomic.remove_partials(workdir)
        callbacks += [
            AtomicCheckpoint(
                os.path.join(checkpoints, "best.keras"), monitor=monitor, guard=guard
            ),
            AtomicCheckpoint(os.path.join(checkpoints, "last.keras"), guard=guard),
            AtomicCSVLogger(os.path.join(workdir, "metrics.csv")),
            keras.callbacks.TensorBoard(
                os.path.join(workdir, "tensorboard"),
                update_freq=update_freq,
                profile_batch=profile_batch,
            ),
        ]
        if training_monitor is not None:
            callbacks.append(training_monitor)
    # The summaries reach the disk before the epoch is committed.
    flush = [c for c in callbacks if isinstance(c, keras.callbacks.TensorBoard)]
    return [*callbacks, backup.commit_callback(lambda: flush_summaries(flush))]


def flush_summaries(callbacks) -> None:
    """Writes out what the `TensorBoard` callbacks among `callbacks` hold.

    Keras's `TensorBoard` writes through `tf.summary` writers (`_writers`:
    `train`, `val`) that queue events; TensorFlow 2.x flushes them when a
    `with writer.as_default()` block ends (the epoch scalars) and Keras
    closes them when `fit` ends, which an interrupted `fit` never reaches.
    Flushing here makes each commit independent of both. Errors are not
    raised: the summaries are a log, and this may run while an error is
    already on its way.
    """
    for callback in callbacks:
        if not isinstance(callback, keras.callbacks.TensorBoard):
            continue
        for writer in list(getattr(callback, "_writers", {}).values()):
            try:
                writer.flush()
            except Exception:  # noqa: BLE001, S110  (a closed writer, a full disk)
                pass


def _epoch_of(line: str) -> int:
    try:
        return int(line.split(",", 1)[0])
    except ValueError:
        return -1


def _format(value) -> str:
    if isinstance(value, str):
        return value
    try:
        return repr(float(value))
    except (TypeError, ValueError):
        return str(value)
