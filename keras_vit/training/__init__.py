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

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
