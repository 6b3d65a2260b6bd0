"""Image transforms shared by the input pipelines and the exported models.

Pure TensorFlow, so that the same ops run in `tf.data` pipelines and inside
SavedModel signatures: what a served model does to a JPEG is, op for op, what
evaluation did to the images the accuracy was measured on.

- `decode_image`: encoded bytes -> `uint8 (height, width, 3)`.
- `eval_resize`: the evaluation resize (plain bilinear, as the reference; or a
  central crop first).
- `to_model_range`: `[0, 255]` -> `[-1, 1]`, the range every ViT here expects.
"""

from __future__ import annotations

import tensorflow as tf

from keras_vit.utils import to_pair


def decode_image(contents: tf.Tensor | bytes) -> tf.Tensor:
    """Decodes one encoded image to a `uint8` RGB tensor.

    JPEG, PNG, GIF (first frame), BMP and WebP are recognised from their
    bytes. Grayscale images are repeated to three channels and an alpha
    channel is dropped.

    Args:
        contents: A scalar `tf.string` tensor (or Python `bytes`) holding one
            encoded image.

    Returns:
        A `uint8` tensor of shape `(height, width, 3)`.

    Raises:
        ValueError: if `contents` is not a scalar (decode a batch with
            `tf.map_fn`, or `Dataset.map` before batching).
        tf.errors.InvalidArgumentError: when run on bytes that are not an
            image in a known format ("Unknown image file format") or are
            corrupt. In a graph (a `tf.data` pipeline, a served signature) the
            error is raised when the graph runs, for that call only.

    Example:

    ```python
    image = decode_image(tf.io.read_file("cat.jpg"))  # (H, W, 3) uint8
    ```
    """
    contents = tf.convert_to_tensor(contents, dtype=tf.string)
    if contents.shape.rank is not None and contents.shape.rank != 0:
        raise ValueError(
            "decode_image takes one encoded image (a scalar string). Received "
            f"a tensor of shape {contents.shape}; map it over the batch."
        )
    image = tf.io.decode_image(
        contents, channels=3, dtype=tf.uint8, expand_animations=False
    )
    image.set_shape([None, None, 3])  # (H, W, 3)
    return image


def to_model_range(images: tf.Tensor) -> tf.Tensor:
    """Maps pixel values in `[0, 255]` to `[-1, 1]`: `(x - 127.5) / 127.5`.

    This is the reference implementation's normalisation, and the range of
    the inputs of a model built without `include_preprocessing`.

    Args:
        images: A tensor of pixel values in `[0, 255]`, any shape, integer or
            float.

    Returns:
        A `float32` tensor of the same shape, in `[-1, 1]`.
    """
    images = tf.cast(images, tf.float32)
    return (images - 127.5) / 127.5


def eval_resize(
    image: tf.Tensor,
    image_size: int | tuple[int, int],
    crop_fraction: float = 1.0,
) -> tf.Tensor:
    """Resizes images the way evaluation does.

    With `crop_fraction=1.0` (the default, and what the reference's
    evaluation does) the whole image is resized to `image_size` with bilinear
    interpolation, so the aspect ratio is not kept. With `crop_fraction < 1`
    a centred window is cut first and then resized: the largest centred
    window with the aspect ratio of `image_size`, shrunk by `crop_fraction`
    (for a square `image_size`: a square of `crop_fraction` times the shorter
    side, the "resize to size / crop_fraction, centre-crop size" rule of
    ImageNet evaluations).

    Args:
        image: `(height, width, channels)` or `(batch, height, width,
            channels)` pixels, integer or float.
        image_size: The output `(height, width)`, or an int for a square.
        crop_fraction: In `(0, 1]`. Defaults to 1.0 (no crop).

    Returns:
        A `float32` tensor of shape `(*image_size, channels)` (with the batch
        axis when the input had one), in the input's value range.

    Example:

    ```python
    image = decode_image(tf.io.read_file("cat.jpg"))
    x = to_model_range(eval_resize(image, 224))  # (224, 224, 3) in [-1, 1]
    ```
    """
    out_h, out_w = to_pair(image_size, "image_size")
    if not 0.0 < float(crop_fraction) <= 1.0:
        raise ValueError(
            f"`crop_fraction` must be in (0, 1]. Received: {crop_fraction!r}"
        )
    image = tf.convert_to_tensor(image)
    if image.shape.rank not in (3, 4):
        raise ValueError(
            "eval_resize expects (height, width, channels) or (batch, height, "
            f"width, channels) images. Received shape {image.shape}."
        )
    if crop_fraction < 1.0:
        image = _central_crop(image, out_h / out_w, float(crop_fraction))
    image = tf.image.resize(image, (out_h, out_w), method="bilinear")
    return tf.cast(image, tf.float32)


def _central_crop(image: tf.Tensor, aspect: float, fraction: float) -> tf.Tensor:
    """Cuts the centred window of aspect `aspect` (h / w) scaled by `fraction`."""
    shape = tf.shape(image)
    height = tf.cast(shape[-3], tf.float32)
    width = tf.cast(shape[-2], tf.float32)
    # The largest window of the target aspect that fits, then shrunk.
    window_h = tf.minimum(height, width * aspect) * fraction
    window_w = tf.minimum(width, height / aspect) * fraction
    window_h = tf.maximum(tf.cast(tf.round(window_h), tf.int32), 1)
    window_w = tf.maximum(tf.cast(tf.round(window_w), tf.int32), 1)
    top = (shape[-3] - window_h) // 2
    left = (shape[-2] - window_w) // 2
    return tf.image.crop_to_bounding_box(image, top, left, window_h, window_w)
