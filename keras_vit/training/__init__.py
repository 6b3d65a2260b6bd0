"""Training on `tf.distribute`: strategy, precision, optimizers, callbacks.

The pieces `recipes/train.py` assembles:

- `select_strategy("auto")`: TPU, multi-worker, mirrored or default.
- `precision_policy(True, strategy)`: `mixed_bfloat16` / `mixed_float16`.
- `WarmupDecay`, `make_optimizer`: the paper's AdamW (pre-training) and
  SGD-momentum (fine-tuning) with warm-up, decay, clipping and EMA.
- `training_callbacks`, `TrainingMonitor`, `ReseedEachEpoch`,
  `resume_epoch`: checkpoints, fault tolerance and TensorBoard.
- `load_encoder_weights`: initialise a model from our own saved models.
- `prepare_multi_worker_fit`: Keras 3 work-arounds for `model.fit` under
  `MultiWorkerMirroredStrategy`.

TensorFlow only (like `keras_vit.data`); not imported by `import keras_vit`.
"""

from keras_vit.training.callbacks import (
    ReseedEachEpoch,
    resume_epoch,
    training_callbacks,
)
from keras_vit.training.compat import prepare_multi_worker_fit
from keras_vit.training.monitor import TrainingMonitor, class_token_attention
from keras_vit.training.optimizers import NO_WEIGHT_DECAY, OPTIMIZERS, make_optimizer
from keras_vit.training.precision import precision_policy, set_precision
from keras_vit.training.schedules import WarmupDecay
from keras_vit.training.strategy import (
    STRATEGIES,
    describe,
    is_chief,
    num_workers,
    select_strategy,
    task_name,
)
from keras_vit.training.transfer import TransferReport, load_encoder_weights
