"""The callbacks of a training run, in the order that makes resuming exact.

`training_callbacks` assembles, for a run directory `workdir`:

| callback | writes | runs on |
|---|---|---|
| `ReseedEachEpoch` | - | all workers |
| `BackupAndRestore` | `backup/` (non-chief: `backup_<task>/`), removed at the end | all |
| `SwapEMAWeights` (with EMA) | - | all |
| metric callbacks (e.g. few-shot) | entries in the epoch logs | all |
| `ModelCheckpoint` x2 | `checkpoints/best.keras`, `checkpoints/last.keras` | chief |
| `TerminateOnNaN` | - | all |
| `CSVLogger` | `metrics.csv` (appended on resume) | chief |
| `TensorBoard` | `tensorboard/{train,validation}` | chief |
| `TrainingMonitor` | `tensorboard/train` | chief |

The progress bar is `model.fit`'s own (`verbose=1`).

Order matters at the end of an epoch: the backup is written before
`SwapEMAWeights` puts the averaged weights into the model, so it holds the
raw training state, while the checkpoints after it hold the averaged weights.
"""

from __future__ import annotations

import json
import os

import keras

from keras_vit.training.monitor import TrainingMonitor

BACKUP_METADATA = "training_metadata.json"
# Epoch `e` runs each generator from seed `initial + e * stride`, a stream
# disjoint from every other epoch's.
_EPOCH_SEED_STRIDE = 1_000_003


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


def resume_epoch(backup_dir: str) -> int:
    """The epoch a run backed up in `backup_dir` will resume from (0 if none).

    Reads the metadata that `keras.callbacks.BackupAndRestore` writes next
    to its checkpoint, so that the input pipeline can start at that epoch.
    """
    path = os.path.join(backup_dir, BACKUP_METADATA)
    if not os.path.exists(path):
        return 0
    with open(path) as f:
        return int(json.load(f)["epoch"])


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
            (e.g. `keras_vit.fewshot.FewShotCallback`); placed after the EMA
            swap and before the checkpoints and loggers that read the logs.
            Run on every worker.

    Returns:
        A list of callbacks for `model.fit`.
    """
    backup = os.path.join(workdir, "backup" if chief else f"backup_{task}")
    callbacks = [
        ReseedEachEpoch(),
        keras.callbacks.BackupAndRestore(backup, save_freq="epoch"),
    ]
    if ema:
        callbacks.append(keras.callbacks.SwapEMAWeights(swap_on_epoch=True))
    callbacks += list(metric_callbacks)
    if chief:
        checkpoints = os.path.join(workdir, "checkpoints")
        callbacks += [
            keras.callbacks.ModelCheckpoint(
                os.path.join(checkpoints, "best.keras"),
                monitor=monitor,
                save_best_only=True,
            ),
            keras.callbacks.ModelCheckpoint(os.path.join(checkpoints, "last.keras")),
        ]
    callbacks.append(keras.callbacks.TerminateOnNaN())
    if chief:
        callbacks += [
            keras.callbacks.CSVLogger(
                os.path.join(workdir, "metrics.csv"), append=True
            ),
            keras.callbacks.TensorBoard(
                os.path.join(workdir, "tensorboard"),
                update_freq=update_freq,
                profile_batch=profile_batch,
            ),
        ]
        if training_monitor is not None:
            callbacks.append(training_monitor)
    return callbacks
