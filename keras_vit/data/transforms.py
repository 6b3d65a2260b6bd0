"""Image transforms shared by the input pipelines and the exported models.

Pure TensorFlow, so that the same ops run in `tf.data` pipelines and inside
SavedModel signatures: what a served model does to a JPEG is, op for op, what
evaluation did to the images the accuracy was measured on.

Every checkpoint has an input contract (`keras_vit.Preprocessing`, carried
by every keras_vit model as `model.preprocessing`): how its images were
resized and cropped and how pixels were normalised. Feed a model what its
contract says:

- `decode_image`: encoded bytes -> `uint8 (height, width, 3)`.
- `resize_and_crop`: the contract's resize (filter, antialiasing) and central
  crop (`crop_mode`, `crop_fraction`), timm's evaluation transform in TF ops.
- `normalize`: `[0, 255]` -> `(x / 255 - mean) / std` of the contract.
- `prepare_image`: both, what the evaluation pipeline and the serving
  signatures apply.
- `resize_image`: the contract's resize alone, to any size (a tensor too);
  `with_crop_fraction`: a contract with its crop overridden.

The paper's contract (`[-1, 1]` inputs, plain bilinear resize of the whole
image: `keras_vit.models.preprocessing.PAPER`) is also available as the
older functions, kept as they were:

- `eval_resize`: the paper's evaluation resize (plain bilinear, as the
  reference; or a central crop first).
- `to_model_range`: `[0, 255]` -> `[-1, 1]`, the paper's (and SigLIP's) range.
"""

from __future__ import annotations

import tensorflow as tf

from keras_vit._export import export
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.preprocessing import as_preprocessing
from keras_vit.utils import to_pair


@export("keras_vit.data.decode_image")
def decode_image(contents: tf.Tensor | bytes) -> tf.Tensor:
    """Decodes one encoded image to a `uint8` RGB tensor.

    JPEG, PNG, GIF (first frame), BMP and WebP are recognised from their
    bytes. Grayscale images are repeated to three channels and an alpha
    channel is dropped. JPEGs are decoded with libjpeg's accurate integer
    inverse DCT, as Pillow (and so timm and transformers) decodes them:
    TensorFlow's default fast DCT is off by about one level per pixel.

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
    image = tf.cond(
        tf.io.is_jpeg(contents),
        lambda: tf.io.decode_jpeg(contents, channels=3, dct_method="INTEGER_ACCURATE"),
        lambda: tf.io.decode_image(
            contents, channels=3, dtype=tf.uint8, expand_animations=False
        ),
    )
    image.set_shape([None, None, 3])  # (H, W, 3)
    return image


@export("keras_vit.data.to_model_range")
def to_model_range(images: tf.Tensor) -> tf.Tensor:
    """Maps pixel values in `[0, 255]` to `[-1, 1]`: `(x - 127.5) / 127.5`.

    This is the reference implementation's normalisation: the paper's
    contract (and SigLIP's), the inputs of the paper's checkpoints. Other
    checkpoints expect other statistics (DeiT III and DINOv2: ImageNet's
    mean and std): use `normalize(images, preprocessing_of(model))`, which
    equals this function, op for op, for the `[-1, 1]` contracts.

    Args:
        images: A tensor of pixel values in `[0, 255]`, any shape, integer or
            float.

    Returns:
        A `float32` tensor of the same shape, in `[-1, 1]`.
    """
    images = tf.cast(images, tf.float32)
    return (images - 127.5) / 127.5


@export("keras_vit.data.eval_resize")
def eval_resize(
    image: tf.Tensor,
    image_size: int | tuple[int, int],
    crop_fraction: float = 1.0,
) -> tf.Tensor:
    """Resizes images the way the paper's evaluation does.

    The resize of the paper's contract: `resize_and_crop(image, PAPER,
    image_size)` equals `eval_resize(image, image_size)`. A model with
    another contract (bicubic, antialiased, centre-cropped as timm) is fed
    with `resize_and_crop(image, preprocessing_of(model), image_size)`.

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


@export("keras_vit.data.normalize")
def normalize(images: tf.Tensor, preprocessing: Preprocessing | None) -> tf.Tensor:
    """Maps `[0, 255]` pixels to a model's inputs: `(x / 255 - mean) / std`.

    One multiply-add per channel, `images * scale + offset` in float32
    (`preprocessing.scale`, `.offset`): what the `preprocessing` layer of
    `keras_vit.ViT(..., include_preprocessing=True)` computes. For a `[-1,
    1]` contract (`preprocessing.is_inception`, the paper's and SigLIP's)
    it is `to_model_range`, op for op: `(x - 127.5) / 127.5`.

    Args:
        images: Pixel values in `[0, 255]`, `(..., channels)`, integer or
            float. A contract with different statistics per channel needs
            3 channels; one with the same in every channel (the `[-1, 1]`
            ones) takes any number.
        preprocessing: The model's contract (`preprocessing_of(model)`), its
            config dict, or `None` for the paper's.

    Returns:
        A `float32` tensor of the same shape.

    Example:

    ```python
    x = normalize(pixels, preprocessing_of(model))  # DeiT III: ImageNet stats
    logits = model(x)
    ```
    """
    preprocessing = as_preprocessing(preprocessing)
    images = tf.cast(images, tf.float32)
    if preprocessing.is_inception:
        return to_model_range(images)
    scale, offset = preprocessing.scale, preprocessing.offset
    if len(set(scale)) == 1 and len(set(offset)) == 1:
        scale, offset = scale[0], offset[0]  # The same in every channel.
    elif images.shape.rank is not None and images.shape[-1] != 3:
        raise ValueError(
            f"The input contract ({preprocessing.describe()}) normalises each "
            f"of 3 RGB channels with its own statistics; received images of "
            f"shape {images.shape}."
        )
    scale = tf.constant(scale, tf.float32)
    offset = tf.constant(offset, tf.float32)
    return images * scale + offset


@export("keras_vit.data.resize_and_crop")
def resize_and_crop(
    image: tf.Tensor,
    preprocessing: Preprocessing | None,
    image_size: int | tuple[int, int] | None = None,
) -> tf.Tensor:
    """Resizes and centre-crops images to `image_size` by a model's contract.

    timm's evaluation transform in TensorFlow ops (any image size, in
    `tf.data` and inside SavedModel signatures), with the contract's
    `interpolation` and `antialias`:

    - `crop_mode="squash"`: the whole image is resized to
      `floor(image_size / crop_fraction)` (aspect ratio not kept), then the
      central `image_size` window is kept. With `crop_fraction=1` that is a
      plain resize to `image_size`: for the paper's contract (bilinear, not
      antialiased) exactly `eval_resize(image, image_size)`.
    - `crop_mode="center"`: the image is resized, aspect kept, so that it
      covers `floor(image_size / crop_fraction)`: for a square target the
      shorter side becomes that size and the longer `int(size * long /
      short)` (torchvision's `Resize(int)`); for a non-square target each
      side is `round(side / ratio)` with the smaller of the two side ratios
      (timm's `ResizeKeepRatio`). The central `image_size` window is kept.

    The central window starts at `round((resized - size) / 2)` (rounding
    half to even, as torchvision's `CenterCrop`). With `antialias=True` the
    image is resized as PIL resizes (timm and transformers resize with it):
    the filter spans every source pixel when it shrinks the image, the
    width is resized first, then the height, and each pass is clipped to
    `[0, 255]` and, for an integer (`uint8`) image, rounded. That gives
    PIL's pixels to within one level for most sizes, a few levels for the
    sizes where Pillow runs the height pass first (measured in
    `tests/test_input_contract.py`).
    Without antialiasing it is one `tf.image.resize` (the paper's, with
    bilinear: exactly `eval_resize`).

    Args:
        image: `(height, width, channels)` or `(batch, height, width,
            channels)` pixels in `[0, 255]`, integer or float; height and
            width may be unknown until run time.
        preprocessing: The model's contract (`preprocessing_of(model)`), its
            config dict, or `None` for the paper's.
        image_size: The output `(height, width)`, or an int for a square;
            `None` takes the contract's `image_size`.

    Returns:
        A `float32` tensor of shape `(*image_size, channels)` (with the batch
        axis when the input had one), in the input's value range.

    Example:

    ```python
    image = decode_image(tf.io.read_file("cat.jpg"))
    pixels = resize_and_crop(image, preprocessing_of(model), 224)
    ```
    """
    preprocessing = as_preprocessing(preprocessing)
    if image_size is None:
        image_size = preprocessing.image_size
        if image_size is None:
            raise ValueError(
                "resize_and_crop needs an `image_size`: the contract records none."
            )
    out_h, out_w = to_pair(image_size, "image_size")
    image = tf.convert_to_tensor(image)
    if image.shape.rank not in (3, 4):
        raise ValueError(
            "resize_and_crop expects (height, width, channels) or (batch, "
            f"height, width, channels) images. Received shape {image.shape}."
        )
    fraction, mode = preprocessing.crop_fraction, preprocessing.crop_mode
    if mode == "squash" and fraction == 1.0:
        return _resize(image, (out_h, out_w), preprocessing)  # Nothing to crop.
    scale_h, scale_w = preprocessing.resize_size((out_h, out_w))
    if mode == "squash":
        size = tf.constant([scale_h, scale_w], tf.int32)
    else:
        size = _covering_size(tf.shape(image), scale_h, scale_w)
    resized = _resize(image, size, preprocessing)
    return _center_crop(resized, out_h, out_w)


@export("keras_vit.data.prepare_image")
def prepare_image(
    image: tf.Tensor,
    preprocessing: Preprocessing | None,
    image_size: int | tuple[int, int] | None = None,
) -> tf.Tensor:
    """Pixels in `[0, 255]` -> a model's inputs, resized and normalised.

    `normalize(resize_and_crop(image, preprocessing, image_size),
    preprocessing)`: the evaluation pipeline's and the serving signatures'
    transform.

    Example:

    ```python
    image = decode_image(tf.io.read_file("cat.jpg"))
    x = prepare_image(image, preprocessing_of(model), model.input_shape[1:3])
    logits = model(x[None])
    ```
    """
    preprocessing = as_preprocessing(preprocessing)
    return normalize(resize_and_crop(image, preprocessing, image_size), preprocessing)


def with_crop_fraction(
    preprocessing: Preprocessing | None, crop_fraction: float | None
) -> Preprocessing:
    """The contract `preprocessing` (the paper's for `None`), its crop
    replaced by `crop_fraction` unless that is `None`."""
    preprocessing = as_preprocessing(preprocessing)
    if crop_fraction is None or float(crop_fraction) == preprocessing.crop_fraction:
        return preprocessing
    if not 0.0 < float(crop_fraction) <= 1.0:
        raise ValueError(
            f"`crop_fraction` must be in (0, 1]. Received: {crop_fraction!r}"
        )
    return preprocessing.replace(crop_fraction=float(crop_fraction))


# The filters PIL applies as two separable passes (its BILINEAR, BICUBIC and
# LANCZOS), which an antialiased resize reproduces pass by pass.
_SEPARABLE = ("bilinear", "bicubic", "lanczos3")


def resize_image(
    image: tf.Tensor, preprocessing: Preprocessing | None, size
) -> tf.Tensor:
    """Resizes images to `size` with the contract's filter, without a crop.

    Not antialiased: one `tf.image.resize` (for the paper's bilinear, the
    call `eval_resize` makes). Antialiased (PIL's resize, which timm and
    transformers use): PIL's two passes, the width first, then the height,
    each clipped to `[0, 255]` (bicubic and Lanczos overshoot at edges)
    and, for an integer image, rounded, as PIL's 8-bit images are.

    Args:
        image: `(height, width, channels)` or `(batch, height, width,
            channels)` pixels in `[0, 255]`.
        preprocessing: The contract (its `interpolation` and `antialias`);
            `None` for the paper's.
        size: `(height, width)`: two ints or an int32 tensor (e.g. each
            image's own size, computed in the graph).

    Returns:
        The resized `float32` images.
    """
    return _resize(image, size, as_preprocessing(preprocessing))


def _resize(image: tf.Tensor, size, preprocessing: Preprocessing) -> tf.Tensor:
    method = preprocessing.interpolation
    if not preprocessing.antialias:
        return tf.cast(tf.image.resize(image, size, method=method), tf.float32)
    if method not in _SEPARABLE:
        image = tf.image.resize(image, size, method=method, antialias=True)
        return tf.cast(image, tf.float32)
    integer = image.dtype.is_integer

    def one_pass(pixels, to):
        pixels = tf.image.resize(pixels, to, method=method, antialias=True)
        pixels = tf.clip_by_value(tf.cast(pixels, tf.float32), 0.0, 255.0)
        return tf.round(pixels) if integer else pixels

    width = tf.convert_to_tensor(size, tf.int32)[1]
    image = one_pass(image, tf.stack([tf.shape(image)[-3], width]))  # (.., H, w)
    return one_pass(image, size)


def _covering_size(shape: tf.Tensor, target_h: int, target_w: int) -> tf.Tensor:
    """`(2,)` int32: the aspect-keeping size that covers `(target_h, target_w)`."""
    height = tf.cast(shape[-3], tf.float64)
    width = tf.cast(shape[-2], tf.float64)
    if target_h == target_w:
        # torchvision's Resize(int): the shorter side to the size, the longer
        # to int(size * long / short), in double precision as Python.
        short, long = tf.minimum(height, width), tf.maximum(height, width)
        long = tf.floor(target_h * long / short)
        target = tf.constant(float(target_h), tf.float64)
        size = tf.where(
            height <= width, tf.stack([target, long]), tf.stack([long, target])
        )
    else:
        # timm's ResizeKeepRatio(longest=0): the smaller ratio, sides rounded
        # half to even (Python's round).
        ratio = tf.minimum(height / target_h, width / target_w)
        size = tf.round(tf.stack([height, width]) / ratio)
    return tf.cast(size, tf.int32)


def _center_crop(image: tf.Tensor, height: int, width: int) -> tf.Tensor:
    """torchvision's `CenterCrop`: top `round((H - height) / 2)`, half to even."""
    shape = tf.shape(image)
    top = tf.round(tf.cast(shape[-3] - height, tf.float64) / 2.0)
    left = tf.round(tf.cast(shape[-2] - width, tf.float64) / 2.0)
    return tf.image.crop_to_bounding_box(
        image, tf.cast(top, tf.int32), tf.cast(left, tf.int32), height, width
    )
