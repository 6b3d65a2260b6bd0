"""Classify images with any keras_vit classifier: `keras_vit.predict`.

`predict(model, images)` takes image files, PIL images or pixel arrays,
prepares them the way the model's checkpoint was evaluated (its input
contract, `model.preprocessing`: resize filter, crop, mean and standard
deviation, at the model's input size), runs the model and returns each
image's top-k classes with their probabilities.

The helpers below are what `keras-vit predict` and `keras-vit validate` share
with it: `load_model` (a model, a `.keras` file or a pretrained name),
`check_images`, `check_classifier`, `image_size_of`, `takes_pixels`,
`class_names_of`, `prepare`, `output_activation` and `to_probabilities`.

Example:

```python
import keras_vit

model = keras_vit.from_pretrained("vit_base_patch16_224.augreg2_in21k_ft_in1k")
(top5,) = keras_vit.predict(model, "cat.jpg")
top5[0]  # Prediction(label='tabby', index=281, probability=0.62)
```
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf
from PIL import Image

from keras_vit import imagenet
from keras_vit import paths
from keras_vit import plugins
from keras_vit._export import export
from keras_vit.data.transforms import decode_image
from keras_vit.data.transforms import normalize
from keras_vit.data.transforms import resize_and_crop
from keras_vit.imagenet import softmax
from keras_vit.models import layout as names
from keras_vit.models.layout import PREPROCESSING
from keras_vit.models.layout import LayoutError
from keras_vit.models.layout import ModelLayout
from keras_vit.models.layout import ViTLayout
from keras_vit.models.preprocessing import preprocessing_of
from keras_vit.pretrained import from_pretrained

_DECODABLE_FORMATS = frozenset({"BMP", "GIF", "JPEG", "PNG", "WEBP"})


@dataclasses.dataclass(frozen=True)
class Prediction:
    """One class of an image's top-k, as `keras_vit.predict` returns it.

    Attributes:
        label: The class name (`class_names[index]`), or the index as a
            string when the model's classes have no names.
        index: The class index in the model's output.
        probability: The model's probability for the class, in `[0, 1]`.

    Example:

    ```python
    best = keras_vit.predict(model, "cat.jpg")[0][0]
    best.label, best.index, best.probability  # ('tabby', 281, 0.62)
    best.as_dict()  # {'label': 'tabby', 'index': 281, 'probability': 0.62}
    ```
    """

    label: str
    index: int
    probability: float

    def as_dict(self) -> dict:
        """`{"label": ..., "index": ..., "probability": ...}` (JSON-able)."""
        return dataclasses.asdict(self)


class ImageInputError(ValueError):
    """Inputs that are not images `predict` can read; the message names each.

    Attributes:
        problems: `(input, reason)` pairs, one per bad input, in input order.
    """

    def __init__(self, problems: list[tuple[str, str]]):
        self.problems = list(problems)
        if len(self.problems) == 1:
            name, reason = self.problems[0]
            message = f"{name}: {reason}"
        else:
            listed = "; ".join(f"{name}: {reason}" for name, reason in self.problems)
            message = f"{len(self.problems)} inputs are not usable images: {listed}"
        super().__init__(message)


class MissingImageError(ImageInputError, FileNotFoundError):
    """Image files that do not exist (an `ImageInputError` and a
    `FileNotFoundError`)."""


# -- the model -----------------------------------------------------------------
def load_model(model_or_name, *, force_download: bool = False):
    """The model `model_or_name` names.

    Args:
        model_or_name: A built `keras.Model` (returned as it is); the path of
            a `.keras` file (a local path or a URL, see `keras_vit.paths`);
            or anything `keras_vit.from_pretrained` loads: a weights tag, a
            timm name (`"vit_base_patch16_224.augreg2_in21k_ft_in1k"`), an
            `hf://org/repo` or a local folder.
        force_download: For a name: download its files again even when
            cached (`keras_vit.from_pretrained`'s).

    Raises:
        FileNotFoundError: a `.keras` path with no file.
        ValueError: a name when `keras_vit.from_pretrained` is not available.
    """

    if isinstance(model_or_name, keras.Model):
        return model_or_name
    if not isinstance(model_or_name, str | os.PathLike):
        raise TypeError(
            "`model_or_name` must be a keras.Model, a .keras file or a "
            f"pretrained model's name. Received: {type(model_or_name).__name__}"
        )

    name = os.fspath(model_or_name)
    if name.endswith(".keras"):
        if not paths.isfile(name):
            raise FileNotFoundError(f"No model file at {name!r}")
        plugins.load_plugins()  # A plug-in's model names its Keras classes.
        return keras.saving.load_model(name, compile=False)

    return from_pretrained(name, force_download=force_download)


def check_classifier(model) -> int:
    """The number of classes of `model`, or a `ValueError` if it has no
    classification head (`include_top=False`) or not one output of shape
    `(batch, classes)`."""

    try:
        layout = ModelLayout.of(model)
    except LayoutError:  # Not built by keras_vit: judged by its output.
        layout = None
    if layout is not None and getattr(layout, "head_name", names.HEAD) is None:
        raise ValueError(
            f"Model {model.name!r} has no classification head (it was built "
            "with include_top=False): classifying needs a model with a head "
            "(keras_vit.feature_extractor gives a headless model's features)."
        )
    if len(model.outputs) != 1 or len(model.outputs[0].shape) != 2:
        shapes = [tuple(output.shape) for output in model.outputs]
        raise ValueError(
            f"Model {model.name!r} is not a classifier: its outputs have shapes "
            f"{shapes}, not one (batch, classes)."
        )
    return int(model.outputs[0].shape[-1])


def image_size_of(model) -> tuple[int, int]:
    """The `(height, width)` images are prepared at for `model`: its input
    size; for a model that takes any size, its contract's `image_size`, else
    the size its position table was made for."""

    shape = tuple(model.inputs[0].shape)
    if len(shape) != 4:
        raise ValueError(
            f"Model {model.name!r} takes inputs of shape {shape}, not images "
            "(batch, height, width, channels)."
        )
    if shape[1] is not None and shape[2] is not None:
        return int(shape[1]), int(shape[2])
    contract = preprocessing_of(model)
    if contract.image_size is not None:
        return contract.image_size
    try:
        return ViTLayout.of(model).native_image_size
    except LayoutError:
        raise ValueError(
            f"Model {model.name!r} takes images of any size and names none "
            "(model.preprocessing.image_size): give it a fixed input size."
        ) from None


def takes_pixels(model) -> bool:
    """Whether `model` takes `[0, 255]` pixels (it was built with
    `include_preprocessing=True`) rather than normalised inputs."""

    return any(layer.name == PREPROCESSING for layer in model.layers)


def class_names_of(model, class_names=None, num_classes: int | None = None):
    """The names of `model`'s classes, or `None` when it has none.

    The first of: `class_names` as given; `model.class_names`; the
    ImageNet-1k names for a model with 1000 classes. An ImageNet-21k model
    (21843 classes) and any other have none: their labels are the indices.

    Raises:
        ValueError: names whose number is not the model's classes.
    """

    if num_classes is None:
        num_classes = check_classifier(model)
    names = class_names
    given = "`class_names`"
    if names is None:
        names = getattr(model, "class_names", None)
        given = "`model.class_names`"
    if names is None and num_classes == imagenet.NUM_CLASSES:
        return tuple(imagenet.class_names())
    if names is None:
        return None
    names = tuple(str(name) for name in names)
    if len(names) != num_classes:
        raise ValueError(
            f"{given} lists {len(names)} names, but model {model.name!r} has "
            f"{num_classes} classes."
        )
    return names


def output_activation(model) -> str:
    """`"softmax"`, `"sigmoid"` or `"linear"` (logits): what the layer that
    makes `model`'s output applies last."""

    history = getattr(model.outputs[0], "_keras_history", None)
    layer = getattr(history, "operation", None) if history is not None else None
    if layer is None and any(lyr.name == names.HEAD for lyr in model.layers):
        layer = model.get_layer(names.HEAD)
    if isinstance(layer, keras.layers.Softmax):
        return "softmax"
    activation = getattr(layer, "activation", None)
    name = getattr(activation, "__name__", "") if activation is not None else ""
    if isinstance(activation, str):
        name = activation
    if name in ("softmax", "log_softmax"):
        return "softmax" if name == "softmax" else "log_softmax"
    if name == "sigmoid":
        return "sigmoid"
    return "linear"


def to_probabilities(outputs, activation: str) -> np.ndarray:
    """A classifier's outputs as probabilities (`float32`, NumPy).

    Logits (`activation="linear"`) get a softmax, a log-softmax output is
    exponentiated; softmax and sigmoid outputs are probabilities already.
    """

    outputs = np.asarray(outputs, dtype=np.float32)
    if activation == "linear":
        return softmax(outputs)
    if activation == "log_softmax":
        return np.exp(outputs)
    return outputs


# -- the images ----------------------------------------------------------------
def _flatten_inputs(images) -> list[tuple[str, object]]:
    """`(name, image)` for each image: a path, a PIL image or an `(H, W, C)`
    array; batches are split. Names are for messages."""
    if _is_single(images):
        if _is_array(images) and np.ndim(images) == 4:
            return [(f"images[{i}]", image) for i, image in enumerate(_array(images))]
        return [(_name_of(images, "images"), images)]
    if not isinstance(images, Sequence) or isinstance(images, bytes):
        raise TypeError(
            "`images` must be a path, a PIL image, an array or a list of them. "
            f"Received: {type(images).__name__}"
        )
    if len(images) == 0:
        raise ValueError("`images` is empty: give at least one image.")
    flat = []
    for i, image in enumerate(images):
        if _is_array(image) and np.ndim(image) == 4:
            flat += [
                (f"images[{i}][{j}]", item) for j, item in enumerate(_array(image))
            ]
        else:
            flat.append((_name_of(image, f"images[{i}]"), image))
    return flat


def _is_pil(value) -> bool:
    return isinstance(value, Image.Image)


def _is_array(value) -> bool:
    return isinstance(value, np.ndarray) or (
        hasattr(value, "shape") and hasattr(value, "dtype") and not _is_pil(value)
    )


def _is_single(value) -> bool:
    return isinstance(value, str | os.PathLike) or _is_pil(value) or _is_array(value)


def _array(value) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value

    return np.asarray(keras.ops.convert_to_numpy(value))


def _name_of(image, position: str) -> str:
    if isinstance(image, str | os.PathLike):
        return os.fspath(image)
    if _is_pil(image):
        return f"{position} (a PIL image)"
    return position


def _check(name: str, image) -> str | None:
    """Why `image` cannot be classified, or `None` if it can (files: that
    they exist and hold an image of a format TensorFlow decodes)."""
    if isinstance(image, str | os.PathLike):
        return _check_file(os.fspath(image))
    if _is_pil(image):
        return None
    if not _is_array(image):
        return (
            f"a {type(image).__name__}, not a path, a PIL image or an array of pixels"
        )
    array = _array(image)
    if array.ndim != 3 or array.shape[-1] not in (1, 3) or 0 in array.shape:
        return (
            f"an array of shape {array.shape}; expected RGB pixels of shape "
            "(height, width, 3) or a batch (images, height, width, 3)"
        )
    if array.dtype.kind not in "uif":  # Unsigned, signed, float.
        return f"an array of dtype {array.dtype}, not pixel values"
    low, high = float(np.min(array)), float(np.max(array))
    if not (np.isfinite(low) and np.isfinite(high)) or low < 0 or high > 255:
        return (
            f"an array of shape {array.shape} with values from {low:g} to "
            f"{high:g}; expected pixels in [0, 255] (not normalised model inputs)"
        )
    return None


def _check_file(path: str) -> str | None:

    if not paths.exists(path):
        return "no such file"
    if not paths.isfile(path):
        return "not a file"
    try:
        with paths.open_file(path, "rb") as file, Image.open(file) as image:
            image.verify()
            image_format = image.format
    except Exception:  # noqa: BLE001  Pillow raises many types for bad files.
        return "not an image (or damaged)"
    if image_format not in _DECODABLE_FORMATS:
        return (
            f"a {image_format} image; readable formats: "
            f"{', '.join(sorted(_DECODABLE_FORMATS))}"
        )
    return None


def check_images(images) -> list[tuple[str, object]]:
    """`images` as `(name, image)` pairs, once every one is checked.

    Files must exist and hold an image (Pillow reads their headers: no
    decoding); arrays must be `(height, width, 3)` (or 1 channel) pixels in
    `[0, 255]`.

    Raises:
        MissingImageError: files that do not exist, and nothing else wrong.
        ImageInputError: any other bad input; every bad input is named.
    """
    flat = _flatten_inputs(images)
    problems = [(name, why) for name, image in flat if (why := _check(name, image))]
    if problems:
        missing = all(why == "no such file" for _, why in problems)
        raise (MissingImageError if missing else ImageInputError)(problems)
    return flat


def _pixels(name: str, image):
    """One image as a `uint8`/`float32` `(H, W, 3)` tensor."""

    if isinstance(image, str | os.PathLike):
        try:
            return decode_image(tf.io.read_file(os.fspath(image)))
        except (tf.errors.OpError, ValueError) as error:
            reason = (getattr(error, "message", "") or str(error)).strip()
            reason = reason.splitlines()[0] if reason else type(error).__name__
            raise ImageInputError([(name, f"cannot be decoded ({reason})")]) from None
    if _is_pil(image):
        return tf.constant(np.asarray(image.convert("RGB")))
    array = _array(image)
    if array.dtype != np.uint8:
        array = array.astype(np.float32)
    return tf.constant(array)


def prepare(images, preprocessing, image_size, pixels: bool, channels: int = 3):
    """Pixels in `[0, 255]` as a model's inputs, by its contract.

    Resized and cropped to `image_size` (`resize_and_crop`), then normalised
    (`normalize`) unless the model takes `pixels` (it was built with
    `include_preprocessing=True`). Grayscale images are repeated to RGB;
    for a model of 1 input `channels`, the prepared RGB image is converted
    to grayscale last.

    Args:
        images: `(height, width, 1 or 3)` or `(batch, height, width, 1 or
            3)` pixels, integer or float; in a `tf.data` map or eagerly.
        preprocessing: The model's contract (`preprocessing_of(model)`).
        image_size: The output `(height, width)` (`image_size_of(model)`).
        pixels: Whether the model normalises itself (`takes_pixels(model)`).
        channels: The model's input channels. Defaults to 3.

    Returns:
        `float32` model inputs of shape `(..., *image_size, channels)`.
    """

    images = tf.convert_to_tensor(images)
    if images.shape[-1] == 1:
        images = tf.image.grayscale_to_rgb(images)
    inputs = resize_and_crop(images, preprocessing, image_size)
    if not pixels:
        inputs = normalize(inputs, preprocessing)
    if channels == 1:
        inputs = tf.image.rgb_to_grayscale(inputs)
    return inputs


@export("keras_vit.predict")
def predict(model_or_name, images, *, top_k=5, class_names=None, batch_size=32):
    """Classifies images with a keras_vit classifier: each image's top-k.

    Every image is prepared as the model's checkpoint was evaluated, by the
    input contract the model carries (`model.preprocessing`): resized with
    its filter and cropped by its crop fraction and mode
    (`keras_vit.data.transforms.resize_and_crop`) to the model's input size,
    then normalised with its mean and standard deviation
    (`keras_vit.data.transforms.normalize`; skipped for a model built with
    `include_preprocessing=True`, which normalises itself). A model that
    takes any image size is fed its contract's `image_size`, else the size
    its position table was made for. The model's logits become
    probabilities with a softmax; a head with a softmax or sigmoid
    activation is reported as it is.

    Args:
        model_or_name: A classifier (a `keras.Model` with a head), the path
            of a `.keras` file, or a name `keras_vit.from_pretrained` loads
            (a timm name such as `"vit_base_patch16_224.augreg2_in21k_ft_in1k"`,
            a tag, `"hf://org/repo"`, a folder).
        images: One image or a list of them. An image is a file path (`str`
            or `os.PathLike`; JPEG, PNG, GIF, BMP or WebP, decoded with
            `keras_vit.data.transforms.decode_image`), a PIL image, or a
            NumPy array (or tensor) of RGB pixels `(height, width, 3)`,
            `uint8` or float in `[0, 255]`; a `(batch, height, width, 3)`
            array is that many images. Images may differ in size. (With
            an antialiased contract, `uint8` pixels are resized as PIL
            resizes 8-bit images and float pixels without rounding: the
            two can differ slightly; see `resize_and_crop`.)
        top_k: Classes reported per image, highest probability first.
            Defaults to 5 (fewer if the model has fewer classes).
        class_names: The names of the model's classes, in index order. By
            default `model.class_names` if the model has them, else the
            ImageNet-1k names for a 1000-class model, else none: labels are
            then the class indices (`"0"`, `"1"`, ...), as for ImageNet-21k.
        batch_size: Images run through the model at once. Defaults to 32.

    Returns:
        One list per image, in input order (a batch array counts as its
        images), of `top_k` `Prediction(label, index, probability)`s. A
        single image gives a list of one list.

    Raises:
        FileNotFoundError: (`MissingImageError`) image files that do not
            exist, every one named; or a `.keras` model path with no file.
        ValueError: (`ImageInputError`) inputs that are not images (a file
            that is not an image, an array of the wrong shape or values
            outside `[0, 255]`), every one named; a model without a
            classification head (`include_top=False`); `class_names` whose
            number is not the model's classes; a `top_k` or `batch_size`
            below 1.

    Example:

    ```python
    model = keras_vit.from_pretrained("vit_base_patch16_224.augreg2_in21k_ft_in1k")
    predictions = keras_vit.predict(model, ["cat.jpg", "dog.png"], top_k=3)
    for p in predictions[0]:
        print(f"{p.label:20s} {p.probability:.3f}")
    # tabby                0.620
    # tiger cat            0.210
    # Egyptian cat         0.081

    # A PIL image or pixels work the same:
    keras_vit.predict(model, PIL.Image.open("cat.jpg"))
    keras_vit.predict(model, np.zeros((2, 300, 400, 3), "uint8"))  # 2 images
    ```
    """

    for value, name in ((top_k, "top_k"), (batch_size, "batch_size")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"`{name}` must be a positive int. Received: {value!r}")
    items = check_images(images)
    model = load_model(model_or_name)
    num_classes = check_classifier(model)
    names = class_names_of(model, class_names, num_classes)
    contract = preprocessing_of(model)
    size = image_size_of(model)
    pixels = takes_pixels(model)
    channels = int(model.inputs[0].shape[-1])
    activation = output_activation(model)
    k = min(top_k, num_classes)
    results = []
    for start in range(0, len(items), batch_size):
        chunk = items[start : start + batch_size]
        batch = tf.stack(
            [
                prepare(_pixels(name, image), contract, size, pixels, channels)
                for name, image in chunk
            ]
        )
        outputs = keras.ops.convert_to_numpy(model(batch, training=False))
        probabilities = to_probabilities(outputs, activation)
        for row in probabilities:
            order = np.argsort(-row, kind="stable")[:k]
            results.append(
                [
                    Prediction(
                        label=names[i] if names is not None else str(int(i)),
                        index=int(i),
                        probability=float(row[i]),
                    )
                    for i in order
                ]
            )
    return results
