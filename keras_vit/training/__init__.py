"""Training on `tf.distribute`: strategy, precision, optimizers, callbacks.

The pieces `recipes/train.py` assembles:

- `select_strategy("auto")`: TPU, multi-worker, mirrored or default.
- `resolve_precision("auto", strategy)`: the policy for the hardware
  (`mixed_bfloat16` on TPUs and CPUs with native bfloat16, `mixed_float16`
  on GPUs, `float32` elsewhere) and why; `precision_policy`, `set_precision`.
- `WarmupDecay`, `make_optimizer`: the paper's AdamW (pre-training) and
  SGD-momentum (fine-tuning) with warm-up, decay, clipping and EMA;
  `build_optimizer`: its variables created before the first step (which is
  then traced once, not twice).
- `training_callbacks`, `TrainingMonitor`, `ReseedEachEpoch`,
  `DivergenceGuard`, `CrashSafeBackup`, `latest_backup`, `resume_epoch`:
  crash-safe checkpoints and backups, fault tolerance and TensorBoard
  (every file written whole or not at all: `keras_vit.atomic`).
- `prepare_multi_worker_fit`: Keras 3 work-arounds for `model.fit` under
  `MultiWorkerMirroredStrategy`.

TensorFlow only (like `keras_vit.data`); not imported by `import keras_vit`.
"""

from keras_vit import _imports

_EXPORTS = {
    "AtomicCheckpoint": "keras_vit.training.callbacks",
    "AtomicCSVLogger": "keras_vit.training.callbacks",
    "BackupState": "keras_vit.training.backup",
    "build_optimizer": "keras_vit.training.optimizers",
    "class_token_attention": "keras_vit.training.monitor",
    "CrashSafeBackup": "keras_vit.training.backup",
    "describe": "keras_vit.training.strategy",
    "DivergenceGuard": "keras_vit.training.callbacks",
    "is_chief": "keras_vit.training.strategy",
    "latest_backup": "keras_vit.training.backup",
    "make_optimizer": "keras_vit.training.optimizers",
    "NO_WEIGHT_DECAY": "keras_vit.training.optimizers",
    "num_workers": "keras_vit.training.strategy",
    "OPTIMIZERS": "keras_vit.training.optimizers",
    "precision_policy": "keras_vit.training.precision",
    "prepare_multi_worker_fit": "keras_vit.training.compat",
    "ReseedEachEpoch": "keras_vit.training.callbacks",
    "resolve_precision": "keras_vit.training.precision",
    "resume_epoch": "keras_vit.training.backup",
    "select_strategy": "keras_vit.training.strategy",
    "set_precision": "keras_vit.training.precision",
    "StepsPerSecond": "keras_vit.training.callbacks",
    "STRATEGIES": "keras_vit.training.strategy",
    "task_name": "keras_vit.training.strategy",
    "training_callbacks": "keras_vit.training.callbacks",
    "TrainingMonitor": "keras_vit.training.monitor",
    "WarmupDecay": "keras_vit.training.schedules",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _imports.lazy_exports(__name__, _EXPORTS)
