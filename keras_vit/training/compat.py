"""Work-arounds for Keras issues met on the way, each with its reference."""

from __future__ import annotations

import keras
import tensorflow as tf

from keras_vit import keras_internals
from keras_vit._export import export


@export("keras_vit.training.prepare_multi_worker_fit")
def prepare_multi_worker_fit(model: keras.Model, strategy, dataset) -> None:
    """Lets `model.fit`/`evaluate` run under `MultiWorkerMirroredStrategy`.

    Keras 3 (checked with 3.15) fails in two places with several workers
    (keras-team/keras#20585):

    1. before the first step, `fit` averages the first distributed batch
       with `strategy.reduce`, which cannot take a nested `(images, labels)`
       batch. Here the model, its loss, metrics and optimizer are built
       beforehand from a plain batch, and that step is skipped;
    2. each step's logs are averaged over replicas with
       `strategy.reduce("MEAN", value, axis=0)`, which fails on the scalar
       metric values. Here the steps return each value with a leading axis
       of length 1, which that reduction removes again.

    Only this model instance is changed, and only under a multi-worker
    strategy; other strategies are left alone. The Keras internals this
    relies on are in `keras_vit.keras_internals` (`build_for_fit`,
    `logs_with_batch_axis`), each with a probe test.

    Args:
        model: A compiled model, created under `strategy.scope()`.
        strategy: The strategy it will be trained with.
        dataset: The training `tf.data.Dataset` (undistributed); its first
            batch gives the shapes and dtypes to build with.
    """
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return
    with strategy.scope():
        keras_internals.build_for_fit(model, next(iter(dataset.take(1))))
    keras_internals.logs_with_batch_axis(model)
