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

TensorFlow only (like `keras_vit.data`).

Example:

```python
from keras_vit import training

strategy = training.select_strategy("auto")
optimizer = training.make_optimizer("adamw", learning_rate=1e-3, weight_decay=0.1)
```
"""

from keras_vit.training.backup import BackupState
from keras_vit.training.backup import CrashSafeBackup
from keras_vit.training.backup import latest_backup
from keras_vit.training.backup import resume_epoch
from keras_vit.training.callbacks import AtomicCheckpoint
from keras_vit.training.callbacks import AtomicCSVLogger
from keras_vit.training.callbacks import DivergenceGuard
from keras_vit.training.callbacks import ReseedEachEpoch
from keras_vit.training.callbacks import StepsPerSecond
from keras_vit.training.callbacks import training_callbacks
from keras_vit.training.compat import prepare_multi_worker_fit
from keras_vit.training.monitor import TrainingMonitor
from keras_vit.training.monitor import class_token_attention
from keras_vit.training.optimizers import NO_WEIGHT_DECAY
from keras_vit.training.optimizers import OPTIMIZERS
from keras_vit.training.optimizers import build_optimizer
from keras_vit.training.optimizers import make_optimizer
from keras_vit.training.precision import precision_policy
from keras_vit.training.precision import resolve_precision
from keras_vit.training.precision import set_precision
from keras_vit.training.schedules import WarmupDecay
from keras_vit.training.strategy import STRATEGIES
from keras_vit.training.strategy import describe
from keras_vit.training.strategy import is_chief
from keras_vit.training.strategy import num_workers
from keras_vit.training.strategy import select_strategy
from keras_vit.training.strategy import task_name

__all__ = [
    "AtomicCSVLogger",
    "AtomicCheckpoint",
    "BackupState",
    "CrashSafeBackup",
    "DivergenceGuard",
    "NO_WEIGHT_DECAY",
    "OPTIMIZERS",
    "ReseedEachEpoch",
    "STRATEGIES",
    "StepsPerSecond",
    "TrainingMonitor",
    "WarmupDecay",
    "build_optimizer",
    "class_token_attention",
    "describe",
    "is_chief",
    "latest_backup",
    "make_optimizer",
    "num_workers",
    "precision_policy",
    "prepare_multi_worker_fit",
    "resolve_precision",
    "resume_epoch",
    "select_strategy",
    "set_precision",
    "task_name",
    "training_callbacks",
]
