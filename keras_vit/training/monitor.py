"""TensorBoard extras: weight and gradient norms, example images, attention maps.

Keras's `TensorBoard` callback already writes the loss, accuracy and
learning rate of every epoch (and profiles steps on request). `TrainingMonitor`
adds what it does not, once per epoch and cheaply, into the same run
directory (`<log_dir>/train`):

- `weight_norm/global` and `weight_norm/<layer>`: L2 norms of the weights;
- `grad_norm/global` and `grad_norm/<layer>`: L2 norms of the gradient of the
  loss on a fixed probe batch (in inference mode, so dropout does not blur
  the trend; `model.fit` does not expose its own gradients);
- `examples`: a few training images as the model sees them (after
  augmentation), once at the start;
- `attention/class_token`: for a few fixed images, the last block's
  attention from the class token to each patch (mean over heads), next to
  the image and overlaid on it.
"""

from __future__ import annotations

import os

import keras
import numpy as np
import tensorflow as tf

from keras_vit._export import export
from keras_vit.analysis._walk import BlockWalker
from keras_vit.analysis._walk import check_images
from keras_vit.models.preprocessing import preprocessing_of


@export("keras_vit.training.TrainingMonitor")
class TrainingMonitor(keras.callbacks.Callback):
    """Writes weight/gradient norms, example images and attention maps.

    Args:
        log_dir: The TensorBoard log directory (the one given to
            `keras.callbacks.TensorBoard`); summaries go to `log_dir/train`.
        probe_batch: `(images, labels)` for the gradient norms; `None` skips
            them.
        example_images: Model inputs (prepared by the model's contract,
            `model.preprocessing`) logged once at the start, shown as pixels.
        attention_images: Model inputs whose attention maps are logged each
            epoch; `None` skips them.
        every_n_epochs: Logging period. Defaults to 1.
        max_images: Images per summary. Defaults to 4.

    Example:

    ```python
    monitor = TrainingMonitor("runs/x/tensorboard", probe_batch=(x, y),
                              attention_images=x[:4])
    model.fit(dataset, callbacks=[keras.callbacks.TensorBoard(...), monitor])
    ```
    """

    def __init__(
        self,
        log_dir: str,
        probe_batch=None,
        example_images=None,
        attention_images=None,
        every_n_epochs: int = 1,
        max_images: int = 4,
    ):
        super().__init__()
        self.log_dir = log_dir
        self.probe_batch = probe_batch
        self.example_images = example_images
        self.attention_images = attention_images
        self.every_n_epochs = max(1, int(every_n_epochs))
        self.max_images = int(max_images)
        self._writer = None
        self._walker = None

    def on_train_begin(self, logs=None):
        self._writer = tf.summary.create_file_writer(
            os.path.join(self.log_dir, "train")
        )
        if self.example_images is not None:
            with self._writer.as_default():
                images = _enlarge(
                    _to_unit_range(
                        self.example_images[: self.max_images],
                        preprocessing_of(self.model),
                    )
                )
                tf.summary.image(
                    "examples", images, step=0, max_outputs=self.max_images
                )
            self._writer.flush()

    def on_epoch_end(self, epoch, logs=None):
        if (epoch + 1) % self.every_n_epochs:
            return
        with self._writer.as_default():
            self._log_norms(
                "weight_norm", _group_norms(self.model.trainable_weights), epoch
            )
            if self.probe_batch is not None:
                self._log_norms("grad_norm", self._gradient_norms(), epoch)
            if self.attention_images is not None:
                maps = self.attention_maps(self.attention_images[: self.max_images])
                tf.summary.image(
                    "attention/class_token",
                    maps,
                    step=epoch,
                    max_outputs=self.max_images,
                )
        self._writer.flush()

    def on_train_end(self, logs=None):
        if self._writer is not None:
            self._writer.close()

    def attention_maps(self, images) -> np.ndarray:
        """`[image | attention | overlay]` panels, `(batch, H, 3 W, 3)` in [0, 1]."""
        if self._walker is None or self._walker.model is not self.model:
            self._walker = BlockWalker(self.model)
        heat = class_token_attention(self.model, images, self._walker)  # (B, gh, gw)
        images = _to_unit_range(images, preprocessing_of(self.model))
        height, width = images.shape[1:3]
        heat = tf.image.resize(heat[..., None], (height, width), method="nearest")
        heat = tf.tile(heat, (1, 1, 1, 3))
        color = heat * tf.constant([1.0, 0.35, 0.0])  # (B, H, W, 3) orange
        overlay = 0.55 * tf.image.rgb_to_grayscale(images) + 0.45 * color
        return _enlarge(tf.concat([images, heat, overlay], axis=2)).numpy()

    def _gradient_norms(self):
        images, labels = self.probe_batch
        loss_fn = self.model.loss
        with tf.GradientTape() as tape:
            outputs = self.model(images, training=False)
            if isinstance(loss_fn, keras.losses.Loss):
                loss = tf.reduce_mean(loss_fn.call(labels, outputs))
            else:
                loss = tf.reduce_mean(
                    keras.losses.categorical_crossentropy(
                        labels, outputs, from_logits=True
                    )
                )
        variables = self.model.trainable_weights
        gradients = tape.gradient(loss, variables)
        return _group_norms(variables, gradients)

    def _log_norms(self, prefix, norms, step):
        for name, value in norms.items():
            tf.summary.scalar(f"{prefix}/{name}", value, step=step)


@export("keras_vit.training.class_token_attention")
def class_token_attention(
    model: keras.Model, images, walker: BlockWalker | None = None
) -> np.ndarray:
    """The last block's attention from the class token to each patch.

    The last block reports its attention probabilities itself
    (`keras_vit.analysis`'s block walk). With a class token, the map is its
    attention row (mean over heads); without one, the attention each patch
    receives, averaged over queries and heads. Each map is scaled to
    `[0, 1]`.

    Args:
        model: A `keras_vit.ViT` model.
        images: `(batch, height, width, channels)` in the model's input range.
        walker: A `BlockWalker` of `model` to reuse across calls.

    Returns:
        `(batch, grid_h, grid_w)` float32 maps.
    """
    walker = walker or BlockWalker(model)
    layout = walker.layout
    images = check_images(images, layout)
    last = layout.depth - 1
    *_, step = walker.walk(images, scores_for=[last])
    scores = np.asarray(keras.ops.convert_to_numpy(step.scores), "float32")
    prefix = layout.num_prefix_tokens
    if prefix:
        attention = scores[:, :, 0, prefix:].mean(axis=1)  # (B, h*w)
    else:
        attention = scores.mean(axis=(1, 2))  # (B, h*w)
    attention = attention.reshape(-1, *layout.grid_size)  # (B, gh, gw)
    low = attention.min(axis=(1, 2), keepdims=True)
    high = attention.max(axis=(1, 2), keepdims=True)
    return (attention - low) / np.maximum(high - low, 1e-12)


def _group_norms(variables, values=None) -> dict[str, float]:
    """L2 norms per top-level layer (first component of the path) and global."""
    values = variables if values is None else values
    squares: dict[str, float] = {}
    for variable, value in zip(variables, values, strict=True):
        if value is None:
            continue
        group = variable.path.split("/")[0]
        value = tf.cast(tf.convert_to_tensor(value), tf.float32)
        squares[group] = squares.get(group, 0.0) + float(
            tf.reduce_sum(tf.square(value))
        )
    norms = {name: float(np.sqrt(total)) for name, total in squares.items()}
    norms["global"] = float(np.sqrt(sum(squares.values())))
    return norms


def _enlarge(images, min_height: int = 96):
    """Nearest-neighbour upscaling so that small images stay visible."""
    factor = -(-min_height // images.shape[1])  # ceil
    if factor <= 1:
        return images
    size = (images.shape[1] * factor, images.shape[2] * factor)
    return tf.image.resize(images, size, method="nearest")


def _to_unit_range(images, preprocessing):
    """Model inputs back to `[0, 1]` pixels for display: the inverse of the
    model's input contract (`x * std + mean`; `(x + 1) / 2` for `[-1, 1]`)."""
    images = tf.convert_to_tensor(images, tf.float32)
    if images.shape[-1] == 3 and not preprocessing.is_inception:
        images = images * tf.constant(preprocessing.std) + tf.constant(
            preprocessing.mean
        )
    else:
        images = (images + 1.0) / 2.0
    if images.shape[-1] == 1:
        images = tf.image.grayscale_to_rgb(images)
    return tf.clip_by_value(images, 0.0, 1.0)
