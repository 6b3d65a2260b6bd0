"""The serving signatures: what an exported ViT takes and returns.

Every signature runs the same graph: pixels in `[0, 255]` are normalised
inside the graph by the model's input contract (`model.preprocessing`, a
`keras_vit.Preprocessing`: `(x / 255 - mean) / std`, e.g. `[-1, 1]` for the
paper's ViT and SigLIP, ImageNet's mean and std for DeiT III and DINOv2),
one forward pass gives the pooled representation, and the head's affine map
gives the logits. Clients never need to know the normalisation, and
`serving_bytes` resizes and centre-crops decoded images by the same
contract (filter, antialiasing, crop), as the checkpoint was evaluated.
Before decoding, it reads each image's size from its header and refuses
an image of more than `max_pixels` pixels (`keras_vit.export.pixel_limit`).

| signature | input (dtype, shape) | outputs (dtype, shape) |
|---|---|---|
| `serving_default` | `images` uint8 `(batch, H, W, 3)` | `logits`, `probabilities` float32 `(batch, classes)` |
| `serving_float` | `images` float32 `(batch, H, W, 3)`, in `[0, 255]` | same as `serving_default` |
| `serving_bytes` | `image_bytes` string `(batch,)`: JPEG/PNG/GIF/BMP/WebP | `probabilities` float32 `(batch, classes)`, `top_k_classes` int32 `(batch, k)`, `top_k_scores` float32 `(batch, k)`, `top_k_names` string `(batch, k)` (with class names) |
| `features` | `images` uint8 `(batch, H, W, 3)` | `pooled` float32 `(batch, dim)` |

A model without a head (`include_top=False`) serves its representation:
every signature then returns `pooled` only. Every signature first checks the
shape of its input (`check_shape`): a request of another size, channel count
or rank fails alone, with a message saying what was expected. `serving_float`
also refuses NaN and infinite pixels (`check_finite`).

A dynamic-size model (`keras_vit.ViT(..., dynamic_image_size=True)`) is
served at any size: `serving_default`, `serving_float` and `features` take
`(batch, H, W, 3)` with `H` and `W` any multiples of the token stride (any
size at all when the model pads), and `serving_bytes` either resizes every
image to one size (`bytes_image_size`) or keeps each decoded image's own
size, shrunk to at most `max_image_size` pixels on its longer side and
rounded to the token stride, running the images one at a time.
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Sequence

import keras
import tensorflow as tf

from keras_vit._export import export
from keras_vit.data.transforms import decode_image
from keras_vit.data.transforms import normalize
from keras_vit.data.transforms import resize_and_crop
from keras_vit.data.transforms import resize_image
from keras_vit.data.transforms import with_crop_fraction
from keras_vit.export.pixel_limit import DEFAULT_MAX_PIXELS
from keras_vit.export.pixel_limit import check_max_pixels
from keras_vit.export.pixel_limit import check_pixels
from keras_vit.models import layout as names
from keras_vit.models.features import feature_extractor
from keras_vit.models.layout import ViTLayout
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.preprocessing import as_preprocessing
from keras_vit.models.preprocessing import preprocessing_of
from keras_vit.utils import to_pair

SERVING_DEFAULT = "serving_default"
export("keras_vit.export.SERVING_DEFAULT").constant(__name__, "SERVING_DEFAULT")
SERVING_FLOAT = "serving_float"
export("keras_vit.export.SERVING_FLOAT").constant(__name__, "SERVING_FLOAT")
SERVING_BYTES = "serving_bytes"
export("keras_vit.export.SERVING_BYTES").constant(__name__, "SERVING_BYTES")
FEATURES = "features"
export("keras_vit.export.FEATURES").constant(__name__, "FEATURES")
SIGNATURE_NAMES = (SERVING_DEFAULT, SERVING_FLOAT, SERVING_BYTES, FEATURES)
export("keras_vit.export.SIGNATURE_NAMES").constant(__name__, "SIGNATURE_NAMES")

# The head's activation -> how probabilities are computed from the logits.
_PROBABILITIES = {
    "linear": tf.nn.softmax,
    "softmax": tf.nn.softmax,
    "sigmoid": tf.sigmoid,
}


class ServingGraph:
    """The computation behind every signature of an exported model.

    Args:
        model: A classifier (or headless model with pooling) built by
            `keras_vit.ViT`, at the resolution to serve.
        class_names: Optional names, one per class; adds `top_k_names` to
            `serving_bytes`.
        top_k: Classes reported by `serving_bytes` (clipped to the number of
            classes). Defaults to 5.
        crop_fraction: The central crop of decoded images in `serving_bytes`
            (timm's `crop_pct`, see `keras_vit.data.transforms.
            resize_and_crop`), overriding the contract's. Defaults to `None`:
            the model's contract's (1.0, a plain resize, for the paper's).
        bytes_image_size: For a dynamic-size model, the size `serving_bytes`
            resizes every image to; `None` (default) keeps each image's own
            size (bounded by `max_image_size`). Static models always resize
            to their input size.
        max_image_size: For a dynamic-size model with `bytes_image_size=None`:
            images whose longer side exceeds it are shrunk to it (aspect
            kept). Defaults to 1024.
        preprocessing: The input contract to serve with; defaults to the
            model's (`preprocessing_of(model)`, the paper's for a model that
            carries none).
        max_pixels: The most pixels (width x height, read from the header
            before decoding) of an image `serving_bytes` decodes; a larger
            one fails its request. Defaults to Pillow's
            `Image.MAX_IMAGE_PIXELS`, 89,478,485. At most `2**30`.
    """

    def __init__(
        self,
        model: keras.Model,
        class_names: Sequence[str] | None = None,
        top_k: int = 5,
        crop_fraction: float | None = None,
        bytes_image_size: int | tuple[int, int] | None = None,
        max_image_size: int = 1024,
        preprocessing: Preprocessing | None = None,
        max_pixels: int = DEFAULT_MAX_PIXELS,
    ):
        if len(model.inputs) != 1 or len(model.input_shape) != 4:
            raise ValueError(
                f"{model.name!r} must take one (batch, height, width, channels) "
                f"input. Received input_shape={model.input_shape}."
            )
        layout = ViTLayout.of(model)
        if layout.channels != 3:
            raise ValueError(
                f"Exports serve RGB images; {model.name!r} has {layout.channels} "
                "channels."
            )
        if layout.pooled_name is None:
            raise ValueError(
                f"{model.name!r} has no pooling layer: exports serve a pooled "
                "representation. Build the model with pooling='token' or 'gap'."
            )
        if int(max_image_size) < 1:
            raise ValueError(
                f"`max_image_size` must be >= 1. Received: {max_image_size}"
            )
        if int(top_k) < 1:
            raise ValueError(f"`top_k` must be >= 1. Received: top_k={top_k}")
        self.max_pixels = check_max_pixels(max_pixels)
        if crop_fraction is not None and not 0.0 < float(crop_fraction) <= 1.0:
            raise ValueError(
                f"`crop_fraction` must be in (0, 1]. Received: {crop_fraction}"
            )
        if preprocessing is None:
            preprocessing = preprocessing_of(model)
        # The contract the signatures apply: the model's, crop overridden.
        self.preprocessing = with_crop_fraction(
            as_preprocessing(preprocessing), crop_fraction
        )
        self.model = model
        self.dynamic = layout.dynamic
        # The example and (static) serving size; a dynamic model's native one.
        self.image_size = (
            layout.native_image_size if self.dynamic else layout.image_size
        )
        self.stride = layout.stride
        self.pads_images = layout.pads_images
        self.bytes_image_size = None
        if bytes_image_size is not None or not self.dynamic:
            self.bytes_image_size = (
                self.image_size
                if bytes_image_size is None
                else to_pair(bytes_image_size, "bytes_image_size")
            )
        self.max_image_size = int(max_image_size)
        self.crop_fraction = self.preprocessing.crop_fraction
        # One functional model over the same layers gives the representation;
        # the logits follow from it through the head's weights.
        self.features_model = feature_extractor(
            model, blocks=None, include_tokens=False
        )
        if layout.has(names.HEAD_DIST):
            raise ValueError(
                f"{model.name!r} is a distilled model (a second head, "
                f"{names.HEAD_DIST!r}): exports serve one head's logits, which "
                "would not be the model's averaged output. Export a model "
                "without distillation."
            )
        self.head = layout.head
        self.includes_preprocessing = layout.has_preprocessing
        self.num_classes = None
        self.probabilities_fn = None
        if self.head is not None:
            self._check_head()
            self.num_classes = int(self.head.units)
        self.class_names = self._check_class_names(class_names)
        self.top_k = min(int(top_k), self.num_classes or 1)
        self._traced_forward = None

    def _check_head(self):
        pooled = self.features_model.outputs[0]
        if (
            not isinstance(self.head, keras.layers.Dense)
            or self.head.input is not pooled
        ):
            raise ValueError(
                f"The 'head' layer of {self.model.name!r} must be a Dense layer "
                "applied to the pooled representation (as `keras_vit.ViT` builds it)."
            )
        if getattr(self.head, "quantization_mode", None):
            raise ValueError(
                f"The head of {self.model.name!r} is quantized "
                f"({self.head.quantization_mode}); exports compute the logits from "
                "a float head. Quantize with keras_vit.finetune.quantize(model, "
                "mode), which keeps the head in float."
            )
        activation = keras.activations.serialize(self.head.activation)
        if activation not in _PROBABILITIES:
            raise ValueError(
                f"Cannot serve a head with activation {activation!r}; expected "
                f"one of {sorted(_PROBABILITIES)}."
            )
        self.probabilities_fn = _PROBABILITIES[activation]

    def _check_class_names(self, class_names):
        if class_names is None:
            return None
        if self.num_classes is None:
            raise ValueError("`class_names` needs a model with a classification head.")
        if isinstance(class_names, str):
            raise ValueError(
                "`class_names` must be a sequence of strings, not a string."
            )
        class_names = tuple(str(name) for name in class_names)
        if len(class_names) != self.num_classes:
            raise ValueError(
                f"Received {len(class_names)} class names for a model with "
                f"{self.num_classes} classes."
            )
        return class_names

    # Input specs -------------------------------------------------------------

    def input_signatures(self) -> dict[str, list[tf.TensorSpec]]:
        """Returns each signature's input specs, by signature name."""
        height, width = (None, None) if self.dynamic else self.image_size
        uint8 = tf.TensorSpec((None, height, width, 3), tf.uint8, name="images")
        float32 = tf.TensorSpec((None, height, width, 3), tf.float32, name="images")
        encoded = tf.TensorSpec((None,), tf.string, name="image_bytes")
        return {
            SERVING_DEFAULT: [uint8],
            SERVING_FLOAT: [float32],
            SERVING_BYTES: [encoded],
            FEATURES: [uint8],
        }

    def functions(self) -> dict:
        """Returns each signature's Python function, by signature name."""
        return {
            SERVING_DEFAULT: self.serving_default,
            SERVING_FLOAT: self.serving_float,
            SERVING_BYTES: self.serving_bytes,
            FEATURES: self.features,
        }

    # The computation ---------------------------------------------------------

    def _forward(self, pixels: tf.Tensor) -> dict[str, tf.Tensor]:
        """`(B, H, W, 3)` float32 pixels in `[0, 255]` -> every output."""
        # A model with a `preprocessing` layer normalises [0, 255] itself.
        if self.includes_preprocessing:
            x = pixels
        else:
            x = normalize(pixels, self.preprocessing)
        pooled = self.features_model(x, training=False)["pooled"]
        outputs = {"pooled": tf.cast(pooled, tf.float32)}  # (B, D)
        if self.head is None:
            return outputs
        # The head without its activation: logits even for a softmax head.
        kernel = tf.cast(self.head.kernel, tf.float32)
        logits = tf.matmul(outputs["pooled"], kernel)  # (B, K)
        if self.head.use_bias:
            logits = logits + tf.cast(self.head.bias, tf.float32)
        outputs["logits"] = logits
        outputs["probabilities"] = self.probabilities_fn(logits)
        return outputs

    def forward(self, pixels: tf.Tensor) -> dict[str, tf.Tensor]:
        """Runs the model once: `pooled`, and `logits`, `probabilities`.

        A `tf.function` traced once and called by every signature, so
        exporting traces the model once rather than once per signature.

        Args:
            pixels: `(batch, H, W, 3)` pixels in `[0, 255]`, any real dtype.
        """
        if self._traced_forward is None:
            size = (None, None) if self.dynamic else self.image_size
            spec = tf.TensorSpec((None, *size, 3), tf.float32)
            self._traced_forward = tf.function(
                self._forward, input_signature=[spec], autograph=False
            )
        return self._traced_forward(tf.cast(pixels, tf.float32))

    def classify(self, pixels: tf.Tensor) -> dict[str, tf.Tensor]:
        """Pixels in `[0, 255]` -> `logits`, `probabilities` (or `pooled`)."""
        outputs = self.forward(pixels)
        if self.head is None:
            return {"pooled": outputs["pooled"]}
        return {key: outputs[key] for key in ("logits", "probabilities")}

    def decode(self, image_bytes: tf.Tensor) -> tf.Tensor:
        """`(B,)` encoded images -> `(B, H, W, 3)` float32 pixels in `[0, 255]`.

        Every image is resized and centre-cropped to `bytes_image_size` by
        the contract (`keras_vit.data.transforms.resize_and_crop`).
        """
        height, width = self.bytes_image_size

        def load(contents):
            image = decode_image(contents)
            return resize_and_crop(image, self.preprocessing, self.bytes_image_size)

        return tf.map_fn(
            load,
            image_bytes,
            fn_output_signature=tf.TensorSpec((height, width, 3), tf.float32),
        )

    def own_size(self, image: tf.Tensor) -> tf.Tensor:
        """One decoded image at its own size, bounded and on the token grid.

        The longer side is shrunk to `max_image_size` when larger (aspect
        kept); each side is then rounded to a multiple of the token stride
        (at least one token), unless the model pads images itself. The
        contract's crop fraction is cut first (a central window of that
        fraction of each side) and its filter resizes.
        """
        if self.crop_fraction < 1.0:
            image = tf.image.central_crop(image, self.crop_fraction)
        size = tf.cast(tf.shape(image)[:2], tf.float32)  # (2,)
        scale = tf.minimum(1.0, self.max_image_size / tf.reduce_max(size))
        size = size * scale
        if not self.pads_images:
            stride = tf.constant(self.stride, tf.float32)
            size = tf.maximum(tf.round(size / stride), 1.0) * stride
        size = tf.cast(tf.maximum(tf.round(size), 1.0), tf.int32)
        # The contract's filter (plain bilinear for the paper's, as
        # `eval_resize`).
        return resize_image(image, self.preprocessing, size)  # (h, w, 3)

    def classify_each(self, image_bytes: tf.Tensor) -> dict[str, tf.Tensor]:
        """`(B,)` encoded images, each run at its own size (dynamic models)."""
        keys = ("pooled",) if self.head is None else ("logits", "probabilities")
        width = {"pooled": None, "logits": self.num_classes}
        width["probabilities"] = self.num_classes

        def run(contents):
            pixels = self.own_size(decode_image(contents))[None]  # (1, h, w, 3)
            outputs = self.classify(pixels)
            return {key: outputs[key][0] for key in keys}

        dim = self.features_model.outputs[0].shape[-1]
        signature = {
            key: tf.TensorSpec((width[key] or dim,), tf.float32) for key in keys
        }
        return tf.map_fn(run, image_bytes, fn_output_signature=signature)

    # The signatures ----------------------------------------------------------

    def serving_default(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        """uint8 `(B, H, W, 3)` -> `logits`, `probabilities`."""
        return self.classify(self._checked(images, SERVING_DEFAULT, "images"))

    def serving_float(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        """float32 `(B, H, W, 3)` in `[0, 255]` -> `logits`, `probabilities`."""
        images = self._checked(images, SERVING_FLOAT, "images")
        return self.classify(check_finite(images, SERVING_FLOAT, "images"))

    def serving_bytes(self, image_bytes: tf.Tensor) -> dict[str, tf.Tensor]:
        """string `(B,)` -> `probabilities`, `top_k_*` (decoded, resized).

        Every image's size is read from its header and checked against
        `max_pixels` before any image is decoded
        (`keras_vit.export.pixel_limit.check_pixels`): a larger image, or
        one whose header cannot be read, fails the request, which names it.
        """
        image_bytes = check_shape(image_bytes, (), SERVING_BYTES, "image_bytes")
        image_bytes = check_pixels(image_bytes, self.max_pixels, SERVING_BYTES)
        if self.bytes_image_size is None:
            outputs = self.classify_each(image_bytes)
        else:
            outputs = self.classify(self.decode(image_bytes))
        if self.head is None:
            return outputs
        probabilities = outputs["probabilities"]
        scores, classes = tf.math.top_k(probabilities, k=self.top_k)  # (B, k)
        result = {
            "probabilities": probabilities,
            "top_k_classes": classes,
            "top_k_scores": scores,
        }
        if self.class_names is not None:
            names = tf.constant(self.class_names, dtype=tf.string)
            result["top_k_names"] = tf.gather(names, classes)
        return result

    def features(self, images: tf.Tensor) -> dict[str, tf.Tensor]:
        """uint8 `(B, H, W, 3)` -> `pooled`, the image representation."""
        images = self._checked(images, FEATURES, "images")
        return {"pooled": self.forward(images)["pooled"]}

    def _checked(self, images: tf.Tensor, signature: str, key: str) -> tf.Tensor:
        if not self.dynamic:
            return check_shape(images, (*self.image_size, 3), signature, key)
        multiple = (1, 1) if self.pads_images else self.stride
        return check_shape(images, (None, None, 3), signature, key, multiple)


def check_shape(
    tensor: tf.Tensor,
    dims: Sequence[int | None],
    signature: str,
    key: str,
    multiple: tuple[int, int] = (1, 1),
) -> tf.Tensor:
    """Returns `tensor`, once checked to be of shape `(batch, *dims)` when run.

    A signature's declared input shape is not enforced when it runs: a
    request of another size or channel count would otherwise fail deep in
    the graph, or abort the whole process (a batch without its batch axis
    fails a `CHECK` in the oneDNN convolution). Here it fails first, alone,
    with an `InvalidArgumentError` saying what was expected and what came,
    e.g. `serving_default: expected images of shape (batch, 32, 32, 3), got
    (2, 64, 64, 3)`. The check is made on the runtime shape, written out as
    a string, so that nothing can answer it from the declared static shape
    (as `tf.rank` would, at trace time).

    Args:
        tensor: The signature's input.
        dims: The expected shape after the batch axis; `None` for any size
            (an image height or width of a dynamic-size model).
        signature: The signature's name, for the message.
        key: The input's name, for the message.
        multiple: For `None` height and width, what they must be multiples
            of (the token stride of a dynamic model that does not pad).

    Example:

    ```python
    images = check_shape(images, (224, 224, 3), "serving_default", "images")
    ```
    """
    names = {1: "height", 2: "width"}
    expected = ", ".join(
        [
            "batch",
            *(
                names.get(i, "?") if d is None else str(int(d))
                for i, d in enumerate(dims, 1)
            ),
        ]
    )
    pattern = "[0-9]+" + "".join(
        ", [1-9][0-9]*" if d is None else f", {int(d)}" for d in dims
    )
    got = tf.strings.reduce_join(
        tf.strings.as_string(tf.shape(tensor)), separator=", "
    )  # e.g. "2, 64, 64, 3"
    suffix = ""
    ok = tf.strings.regex_full_match(got, pattern)
    if None in dims and multiple != (1, 1):
        suffix = f" with height and width multiples of {multiple}"

        def fits():
            shape = tf.shape(tensor)
            return tf.logical_and(
                tf.equal(shape[1] % multiple[0], 0),
                tf.equal(shape[2] % multiple[1], 0),
            )

        # The shape test first: `shape[1]` exists only for a tensor of rank 4.
        ok = tf.cond(ok, fits, lambda: tf.constant(False))
    message = tf.strings.join(
        [f"{signature}: expected {key} of shape ({expected}){suffix}, got (", got, ")"]
    )
    assertion = tf.debugging.Assert(ok, [message])
    with tf.control_dependencies([assertion]):
        return tf.identity(tensor)  # Nothing downstream runs before the check.


def check_finite(tensor: tf.Tensor, signature: str, key: str) -> tf.Tensor:
    """Returns `tensor`, once checked to hold no NaN or infinity when run.

    A float request with a NaN or an infinite pixel would otherwise be
    answered (with NaN scores, or a class chosen from them). It fails
    instead, alone, with an `InvalidArgumentError` counting what came, e.g.
    `serving_float: expected finite images (pixel values in [0, 255]), got 1
    NaN and 0 infinite value(s)`. Built from comparisons only (no
    `IsFinite`), so that LiteRT and ONNX conversions keep working.

    Args:
        tensor: The signature's float input.
        signature: The signature's name, for the message.
        key: The input's name, for the message.

    Example:

    ```python
    images = check_finite(images, "serving_float", "images")
    ```
    """
    largest = tf.constant(tensor.dtype.max, tensor.dtype)
    finite = tf.math.less_equal(tf.math.abs(tensor), largest)  # False for NaN.
    nan = tf.math.not_equal(tensor, tensor)

    def count(mask):
        return tf.strings.as_string(tf.math.count_nonzero(mask))

    ok = tf.math.reduce_all(finite)
    infinite = tf.math.logical_and(
        tf.math.logical_not(finite), tf.math.logical_not(nan)
    )
    message = tf.strings.join(
        [
            f"{signature}: expected finite {key} (pixel values in [0, 255]), got ",
            count(nan),
            " NaN and ",
            count(infinite),
            " infinite value(s)",
        ]
    )
    assertion = tf.debugging.Assert(ok, [message])
    with tf.control_dependencies([assertion]):
        return tf.identity(tensor)  # Nothing downstream runs before the check.


def build_archive(graph: ServingGraph) -> keras.export.ExportArchive:
    """Returns a `keras.export.ExportArchive` with every signature added."""
    archive = keras.export.ExportArchive()
    # Variables used by the endpoints are saved with them. `archive.track`
    # is not called: it would store every weight a second time, through
    # its Keras wrapper.
    specs = graph.input_signatures()
    for name, fn in graph.functions().items():
        archive.add_endpoint(name, fn, input_signature=specs[name])
    return archive
