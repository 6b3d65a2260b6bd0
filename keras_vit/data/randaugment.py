"""RandAugment in TensorFlow ops, stateless and seeded per image.

RandAugment (Cubuk et al., 2019) applies `num_ops` operations to each image,
each one drawn uniformly (with replacement) from a fixed list and applied at
one global strength, the magnitude. This module writes every operation with
TensorFlow's own kernels (`ImageProjectiveTransformV3` for rotations and
shears, a pad and a slice for translations, `histogram_fixed_width` and a
table lookup for Equalize, a 3x3 pooling for Sharpness) and dispatches with
`tf.switch_case`, so only the drawn operations run. All randomness comes
from an explicit shape-`(2,)` seed: the same image and seed always give the
same result, which makes a training run (and a resumed one) reproducible.

Magnitude: `magnitude` in `[0, 1]` is the reference code's level divided by
10. The paper puts each operation's strength on an integer scale whose level
10 is that operation's maximum; so magnitude 0.9 is the paper's ResNet-50
setting (M = 9) and 1.0 is AugReg's "light" `randaug(2, 10)`. Larger levels
seen in the paper's sweeps (up to about 30, e.g. M = 28 for EfficientNet-B7)
and AugReg's medium/strong presets (15, 20) push the same linear ranges past
their maxima; they are not offered here. Every operation is the identity at
magnitude 0 and grows with it to its strongest setting at magnitude 1:

| operation | at magnitude `m` | at `m = 1` |
|---|---|---|
| Rotate | `+-30 m` degrees | +-30 degrees |
| ShearX, ShearY | shear factor `+-0.3 m` | +-0.3 (~17 degrees) |
| TranslateX, TranslateY | `+-0.45 m` of the side | +-45% (100 px at 224) |
| Color, Contrast, Brightness, Sharpness | blend factor `1 +- 0.9 m` | 0.1 or 1.9 |
| Posterize | keep `8 - floor(4 m)` bits | 4 bits |
| Solarize | invert pixels `>= 256 (1 - m)` | every pixel |
| SolarizeAdd | add `110 m` to pixels `< 128` | +110 |
| Identity, AutoContrast, Equalize, Invert | no magnitude | |

The signed operations (the geometric ones and the four blends) take a random
sign per application. Three departures from the TF reference code, all so
that a larger magnitude always means a stronger change: the blend factors
are `1 +- 0.9 m` (the reference uses `0.1 + 1.8 m`, the identity at
`m = 0.5`); Solarize's threshold falls as `m` grows (the reference's rises);
Posterize keeps `8 - floor(4 m)` bits (the reference keeps `floor(4 m)`,
which blackens the image at low levels). Geometric operations fill uncovered
pixels with 128 and use nearest-neighbour sampling by default; rotations and
shears are about the image centre (the reference shears about the top-left
corner), translations move by whole pixels.

Images are `(height, width, channels)` with 1 or 3 channels and values in
`[0, 255]` (any dtype); results are `float32` in `[0, 255]`. On grayscale
images the color operations work on the single channel: Color is then the
identity and Contrast blends with the image's mean, which is what converting
to RGB, augmenting and taking one channel back gives (the luma weights sum
to 1), at a third of the cost.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from collections.abc import Sequence

import tensorflow as tf

from keras_vit._export import export

RANDAUGMENT_OPS = (
    "Identity",
    "AutoContrast",
    "Equalize",
    "Rotate",
    "Solarize",
    "Color",
    "Posterize",
    "Contrast",
    "Brightness",
    "Sharpness",
    "ShearX",
    "ShearY",
    "TranslateX",
    "TranslateY",
    "SolarizeAdd",
)
export("keras_vit.data.RANDAUGMENT_OPS").constant(__name__, "RANDAUGMENT_OPS")
"""The default operations: the paper's 14 plus SolarizeAdd, as AugReg uses."""

FILL_VALUE = 128.0
MAX_ROTATE_DEGREES = 30.0
MAX_SHEAR = 0.3
MAX_TRANSLATE = 0.45  # Fraction of the image side.
MAX_BLEND = 0.9  # Blend factors 1 +- 0.9.
MAX_POSTERIZE_DROP = 4  # Bits removed.
MAX_SOLARIZE_ADD = 110.0
SOLARIZE_ADD_THRESHOLD = 128.0

_GRAY_WEIGHTS = (0.299, 0.587, 0.114)  # ITU-R 601-2 luma, as PIL; sums to 1.
_INTERPOLATIONS = ("nearest", "bilinear")


@export("keras_vit.data.RandAugment")
class RandAugment:
    """RandAugment for single images, seeded per image.

    Draws `num_ops` operations from `ops` (uniformly, with replacement) and a
    sign for each, from `seed` alone, then applies them in order. See the
    module docstring for what `magnitude` does to each operation.

    Args:
        num_ops: Operations per image, a positive int (2 in the paper and in
            AugReg).
        magnitude: Strength in `[0, 1]`: the reference's 0-10 level divided
            by 10. 0 makes every operation the identity, 1 is the strongest
            setting. Defaults to 0.5.
        ops: Names of the operations to draw from. Defaults to
            `RANDAUGMENT_OPS`; `"Invert"` may be added.
        interpolation: `"nearest"` (default, as the reference) or
            `"bilinear"` for Rotate, ShearX and ShearY.
        fill_value: Value of the pixels the geometric operations uncover, in
            `[0, 255]`. Defaults to 128.

    Call arguments:
        image: `(height, width, channels)` image with 1 or 3 channels and
            values in `[0, 255]`.
        seed: Shape `(2,)` integer tensor; the same seed gives the same
            operations and signs.

    Returns:
        `float32 (height, width, channels)` in `[0, 255]`.

    Example:

    ```python
    augment = RandAugment(num_ops=2, magnitude=0.5)
    image = tf.random.uniform((224, 224, 3), 0, 255)
    out = augment(image, seed=tf.constant([7, 0]))  # (224, 224, 3) float32
    ```
    """

    def __init__(
        self,
        num_ops: int = 2,
        magnitude: float = 0.5,
        *,
        ops: Sequence[str] = RANDAUGMENT_OPS,
        interpolation: str = "nearest",
        fill_value: float = FILL_VALUE,
    ):
        if isinstance(num_ops, bool) or int(num_ops) != num_ops or num_ops <= 0:
            raise ValueError(
                f"`num_ops` must be a positive integer. Received: num_ops={num_ops}"
            )
        self.num_ops = int(num_ops)
        self.magnitude = _check_magnitude(magnitude)
        ops = (ops,) if isinstance(ops, str) else tuple(ops)
        if not ops:
            raise ValueError("`ops` must name at least one operation.")
        specs = [_op_spec(name, self.magnitude) for name in ops]
        self.ops = ops
        self.interpolation = _check_interpolation(interpolation)
        self.fill_value = _check_fill_value(fill_value)
        # Operations that share a kernel (Rotate and the shears, the two
        # translations, Solarize and Invert) differ only in their parameters:
        # the graph holds each kernel once.
        self._kernels = tuple(dict.fromkeys(spec.kernel for spec in specs))
        self._kernel_ids = [self._kernels.index(spec.kernel) for spec in specs]
        self._params = [spec.params for spec in specs]  # (len(ops), 3)
        self._signed = [float(spec.signed) for spec in specs]

    def __call__(self, image: tf.Tensor, seed: tf.Tensor) -> tf.Tensor:
        image = _check_image(image)  # (H, W, C) float32
        op_indices, signs = self.draw(seed)  # (num_ops,), (num_ops,)
        signed = tf.gather(self._signed, op_indices)  # (num_ops,) 0 or 1
        scale = 1.0 + signed * (signs - 1.0)  # The sign where it applies, else 1.
        params = tf.gather(self._params, op_indices) * scale[:, None]  # (num_ops, 3)
        kernel_ids = tf.gather(self._kernel_ids, op_indices)  # (num_ops,)
        geometry = {"interpolation": self.interpolation, "fill_value": self.fill_value}
        for step in range(self.num_ops):
            branches = [
                functools.partial(_run_kernel, kernel, image, params[step], geometry)
                for kernel in self._kernels
            ]
            image = tf.switch_case(kernel_ids[step], branches)
        return image

    def draw(self, seed: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
        """The operations and signs `seed` picks.

        Args:
            seed: Shape `(2,)` integer tensor.

        Returns:
            `(op_indices, signs)`: `int32 (num_ops,)` indices into `ops` and
            `float32 (num_ops,)` values `+-1`.
        """
        uniform = tf.random.stateless_uniform((2, self.num_ops), _check_seed(seed))
        count = len(self.ops)
        op_indices = tf.minimum(tf.cast(uniform[0] * count, tf.int32), count - 1)
        signs = tf.where(uniform[1] < 0.5, -1.0, 1.0)
        return op_indices, signs

    def get_config(self) -> dict:
        """The constructor arguments."""
        return {
            "num_ops": self.num_ops,
            "magnitude": self.magnitude,
            "ops": self.ops,
            "interpolation": self.interpolation,
            "fill_value": self.fill_value,
        }


def apply_op(
    image: tf.Tensor,
    name: str,
    magnitude: float,
    sign: float | tf.Tensor = 1.0,
    *,
    interpolation: str = "nearest",
    fill_value: float = FILL_VALUE,
) -> tf.Tensor:
    """Applies one RandAugment operation at a given magnitude.

    `RandAugment` runs exactly this for each operation it draws.

    Args:
        image: `(height, width, channels)`, 1 or 3 channels, in `[0, 255]`.
        name: One of `RANDAUGMENT_OPS` or `"Invert"`.
        magnitude: Strength in `[0, 1]` (see the module docstring).
        sign: `+1` or `-1` (a scalar tensor is fine): the direction of the
            signed operations; the others ignore it.
        interpolation: `"nearest"` or `"bilinear"` (Rotate, ShearX, ShearY).
        fill_value: Value of uncovered pixels (geometric operations).

    Returns:
        `float32 (height, width, channels)` in `[0, 255]`.

    Example:

    >>> image = tf.fill((4, 4, 3), 200.0)
    >>> float(apply_op(image, "Solarize", 1.0)[0, 0, 0])
    55.0
    """
    spec = _op_spec(name, _check_magnitude(magnitude))
    geometry = {
        "interpolation": _check_interpolation(interpolation),
        "fill_value": _check_fill_value(fill_value),
    }
    params = tf.constant(spec.params, tf.float32)  # (3,)
    if spec.signed:
        params = params * tf.cast(sign, tf.float32)
    return _run_kernel(spec.kernel, _check_image(image), params, geometry)


# Operations with their natural parameters. All take and return float32
# (H, W, C) images in [0, 255].


def solarize(image: tf.Tensor, threshold: float | tf.Tensor) -> tf.Tensor:
    """Inverts the pixels `>= threshold` and keeps the others."""
    # Arithmetic on a 0/1 mask: several times faster than `tf.where` here.
    selected = tf.cast(image >= threshold, image.dtype)
    return image + selected * (255.0 - 2.0 * image)


def solarize_add(
    image: tf.Tensor,
    addition: float | tf.Tensor,
    threshold: float = SOLARIZE_ADD_THRESHOLD,
) -> tf.Tensor:
    """Adds `addition` to the pixels `< threshold` (clipped to `[0, 255]`)."""
    selected = tf.cast(image < threshold, image.dtype)
    return tf.clip_by_value(image + selected * addition, 0.0, 255.0)


def posterize(image: tf.Tensor, bits: int) -> tf.Tensor:
    """Keeps the top `bits` bits of each (truncated) 8-bit value."""
    if not 1 <= int(bits) <= 8:
        raise ValueError(f"`bits` must be in [1, 8]. Received: bits={bits}")
    if bits == 8:
        return image
    return _floor_to_multiple(image, float(2 ** (8 - int(bits))))


def _floor_to_multiple(image, step):
    # Dropping the low bits of the truncated value: a multiple of `step`.
    return tf.floor(image / step) * step


def autocontrast(image: tf.Tensor) -> tf.Tensor:
    """Stretches each channel linearly so that its range becomes `[0, 255]`.

    Constant channels are kept as they are.
    """
    low, high = _channel_min_max(image)  # (C,), (C,)
    stretch = high > low
    scale = tf.where(stretch, 255.0 / tf.where(stretch, high - low, 1.0), 1.0)
    offset = tf.where(stretch, low, 0.0)
    return tf.clip_by_value((image - offset) * scale, 0.0, 255.0)


def equalize(image: tf.Tensor) -> tf.Tensor:
    """Histogram equalization of each channel (PIL's `ImageOps.equalize`).

    Values are truncated to integers first. Each channel's lookup table
    spreads its cumulative histogram over `[0, 255]`; a channel with a
    single value is kept.
    """
    channels = image.shape[-1]
    image = tf.clip_by_value(image, 0.0, 255.0)
    # 256 bins of width 1 over [0, 256): bin = the truncated value.
    histogram = tf.stack(
        [
            tf.histogram_fixed_width(image[..., c], (0.0, 256.0), nbins=256)
            for c in range(channels)
        ]
    )  # (C, 256)
    # PIL's step: the pixels outside the channel's top value, over 255.
    top = 255 - tf.argmax(tf.reverse(histogram, [1]) > 0, axis=1, output_type=tf.int32)
    top_count = tf.reduce_sum(histogram * tf.one_hot(top, 256, dtype=tf.int32), 1)
    step = (tf.reduce_sum(histogram, axis=1) - top_count) // 255  # (C,)
    below = tf.cumsum(histogram, axis=1, exclusive=True)  # (C, 256)
    table = (below + (step // 2)[:, None]) // tf.maximum(step, 1)[:, None]
    table = tf.where((step > 0)[:, None], tf.minimum(table, 255), tf.range(256))
    # One lookup for all channels: channel c reads entries 256c..256c+255.
    keys = tf.cast(image, tf.int32) + 256 * tf.range(channels)  # (H, W, C)
    table = tf.cast(tf.reshape(table, [-1]), tf.float32)  # (256 C,)
    return tf.gather(table, keys)


def grayscale(image: tf.Tensor) -> tf.Tensor:
    """Luma of an RGB image, `(H, W, 1)`; a 1-channel image is returned as is."""
    if image.shape[-1] == 1:
        return image
    weights = tf.constant(_GRAY_WEIGHTS, image.dtype)
    return tf.linalg.matvec(image, weights)[..., None]  # (H, W, 1)


def blend(
    degenerate: tf.Tensor, image: tf.Tensor, factor: float | tf.Tensor
) -> tf.Tensor:
    """`degenerate + factor * (image - degenerate)`, clipped to `[0, 255]`.

    Factor 1 gives `image`, 0 gives `degenerate`, above 1 extrapolates.
    """
    return tf.clip_by_value(degenerate + factor * (image - degenerate), 0.0, 255.0)


def adjust_color(image: tf.Tensor, factor: float | tf.Tensor) -> tf.Tensor:
    """Blends with the image's grayscale version (saturation)."""
    return blend(grayscale(image), image, factor)


def adjust_contrast(image: tf.Tensor, factor: float | tf.Tensor) -> tf.Tensor:
    """Blends with a flat image at the mean grayscale value."""
    channel_means = tf.reduce_mean(tf.reshape(image, (-1, image.shape[-1])), axis=0)
    mean = grayscale(channel_means[None, None])[0, 0, 0]  # ()
    return blend(mean, image, factor)


def adjust_brightness(image: tf.Tensor, factor: float | tf.Tensor) -> tf.Tensor:
    """Blends with black: scales the values by `factor`."""
    return tf.clip_by_value(image * factor, 0.0, 255.0)


def adjust_sharpness(image: tf.Tensor, factor: float | tf.Tensor) -> tf.Tensor:
    """Blends with a smoothed copy (kernel `[[1,1,1],[1,5,1],[1,1,1]] / 13`).

    The one-pixel border keeps its values, as in PIL. Factor 0 smooths,
    above 1 sharpens.
    """
    # Away from the border, the 3x3 mean is the plain 3x3 sum over 9.
    box = tf.nn.avg_pool2d(image[None], 3, 1, "SAME")[0] * 9.0  # (H, W, C)
    smooth = (box + 4.0 * image) / 13.0
    return tf.clip_by_value(
        image + _interior(image) * ((1.0 - factor) * (smooth - image)), 0.0, 255.0
    )


def _interior(image):
    # 1.0 away from the one-pixel border, 0.0 on it: (H, 1, 1) * (1, W, 1).
    shape = tf.shape(image)
    rows, cols = tf.range(shape[0]), tf.range(shape[1])
    inside_rows = tf.cast((rows > 0) & (rows < shape[0] - 1), tf.float32)
    inside_cols = tf.cast((cols > 0) & (cols < shape[1] - 1), tf.float32)
    return inside_rows[:, None, None] * inside_cols[None, :, None]


def rotate(
    image: tf.Tensor,
    degrees: float | tf.Tensor,
    *,
    interpolation: str = "nearest",
    fill_value: float = FILL_VALUE,
) -> tf.Tensor:
    """Turns the content counterclockwise by `degrees` about the centre."""
    matrix = _rotation_matrix(degrees)
    return affine_about_center(image, matrix, interpolation, fill_value)


def shear_x(
    image: tf.Tensor,
    shear: float | tf.Tensor,
    *,
    interpolation: str = "nearest",
    fill_value: float = FILL_VALUE,
) -> tf.Tensor:
    """Shifts each row by `shear * (its distance below the centre)` pixels."""
    matrix = _shear_matrix(shear, 0.0)
    return affine_about_center(image, matrix, interpolation, fill_value)


def shear_y(
    image: tf.Tensor,
    shear: float | tf.Tensor,
    *,
    interpolation: str = "nearest",
    fill_value: float = FILL_VALUE,
) -> tf.Tensor:
    """Shifts each column by `shear * (its distance right of the centre)`."""
    matrix = _shear_matrix(0.0, shear)
    return affine_about_center(image, matrix, interpolation, fill_value)


def affine_about_center(
    image: tf.Tensor,
    matrix: tf.Tensor,
    interpolation: str = "nearest",
    fill_value: float = FILL_VALUE,
) -> tf.Tensor:
    """Output pixel `p` reads input pixel `matrix (p - c) + c`, `c` the centre.

    Args:
        image: `(height, width, channels)` float32.
        matrix: `(2, 2)` float32, acting on `(x, y)` = (column, row).
        interpolation: `"nearest"` or `"bilinear"`.
        fill_value: Value of the pixels that read outside the image.

    Returns:
        The transformed image, same shape.
    """
    size = tf.cast(tf.shape(image)[1::-1], tf.float32)  # (W, H)
    center = (size - 1.0) / 2.0  # (x, y)
    offset = center - tf.linalg.matvec(matrix, center)  # (2,)
    # The kernel's 8 numbers: the top two rows of the 3x3 projective map.
    transform = tf.concat(
        [matrix[0], offset[:1], matrix[1], offset[1:], tf.zeros(2)], axis=0
    )  # (8,)
    out = tf.raw_ops.ImageProjectiveTransformV3(
        images=image[None],  # (1, H, W, C)
        transforms=transform[None],  # (1, 8)
        output_shape=tf.shape(image)[:2],
        fill_value=tf.constant(fill_value, tf.float32),
        interpolation=interpolation.upper(),
        fill_mode="CONSTANT",
    )[0]
    out.set_shape(image.shape)
    return out


def translate(
    image: tf.Tensor,
    dx: float | tf.Tensor = 0.0,
    dy: float | tf.Tensor = 0.0,
    *,
    fill_value: float = FILL_VALUE,
) -> tf.Tensor:
    """Moves the content `dx` pixels right and `dy` pixels down.

    The shifts are rounded to whole pixels (what nearest-neighbour sampling
    gives), so this is a copy with a border of `fill_value`, and far cheaper
    than a general transform.
    """
    shape = tf.shape(image)  # (H, W, C)
    shift = tf.cast(tf.round(tf.stack([dy, dx])), tf.int32)  # (2,) rows, columns
    shift = tf.clip_by_value(shift, -shape[:2], shape[:2])
    before, after = tf.maximum(shift, 0), tf.maximum(-shift, 0)  # (2,), (2,)
    padding = tf.pad(tf.stack([before, after], axis=1), [[0, 1], [0, 0]])  # (3, 2)
    padded = tf.pad(image, padding, constant_values=fill_value)
    out = tf.slice(padded, tf.pad(after, [[0, 1]]), shape)
    out.set_shape(image.shape)
    return out


def _rotation_matrix(degrees):
    radians = tf.cast(degrees, tf.float32) * (math.pi / 180.0)
    cos, sin = tf.cos(radians), tf.sin(radians)
    return tf.reshape(tf.stack([cos, -sin, sin, cos]), (2, 2))


def _shear_matrix(shear_x, shear_y):
    # [[1, shear_x], [0, 1]] @ [[1, 0], [shear_y, 1]]; one of them is 0 here.
    shear_x = tf.cast(shear_x, tf.float32)
    shear_y = tf.cast(shear_y, tf.float32)
    entries = [1.0 + shear_x * shear_y, shear_x, shear_y, tf.ones_like(shear_x)]
    return tf.reshape(tf.stack(entries), (2, 2))


def _channel_min_max(image):
    # Rows of the transposed image reduce faster than the image's columns.
    rows = tf.transpose(tf.reshape(image, (-1, image.shape[-1])))  # (C, H*W)
    return tf.reduce_min(rows, axis=1), tf.reduce_max(rows, axis=1)


# RandAugment's operations as a kernel and three parameters at a magnitude.
# A drawn sign multiplies the parameters of the signed operations; kernels
# read them as a float32 (3,) tensor `p`.


@dataclasses.dataclass(frozen=True)
class _Spec:
    kernel: str
    params: tuple[float, float, float] = (0.0, 0.0, 0.0)
    signed: bool = False


def _posterize_spec(m):
    bits = 8 - math.floor(MAX_POSTERIZE_DROP * m)
    if bits == 8:  # Flooring would still change fractional values.
        return _Spec("identity")
    return _Spec("posterize", (float(2 ** (8 - bits)), 0.0, 0.0))


_SPECS: dict[str, Callable[[float], _Spec]] = {
    "Identity": lambda m: _Spec("identity"),
    "AutoContrast": lambda m: _Spec("autocontrast"),
    "Equalize": lambda m: _Spec("equalize"),
    "Rotate": lambda m: _Spec("affine", (MAX_ROTATE_DEGREES * m, 0.0, 0.0), True),
    "Solarize": lambda m: _Spec("solarize", (256.0 * (1.0 - m), 0.0, 0.0)),
    "Color": lambda m: _Spec("color", (MAX_BLEND * m, 0.0, 0.0), True),
    "Posterize": _posterize_spec,
    "Contrast": lambda m: _Spec("contrast", (MAX_BLEND * m, 0.0, 0.0), True),
    "Brightness": lambda m: _Spec("brightness", (MAX_BLEND * m, 0.0, 0.0), True),
    "Sharpness": lambda m: _Spec("sharpness", (MAX_BLEND * m, 0.0, 0.0), True),
    "ShearX": lambda m: _Spec("affine", (0.0, MAX_SHEAR * m, 0.0), True),
    "ShearY": lambda m: _Spec("affine", (0.0, 0.0, MAX_SHEAR * m), True),
    "TranslateX": lambda m: _Spec("translate", (MAX_TRANSLATE * m, 0.0, 0.0), True),
    "TranslateY": lambda m: _Spec("translate", (0.0, MAX_TRANSLATE * m, 0.0), True),
    "SolarizeAdd": lambda m: _Spec("solarize_add", (MAX_SOLARIZE_ADD * m, 0.0, 0.0)),
    "Invert": lambda m: _Spec("solarize"),  # Threshold 0.
}


def _affine_kernel(image, p, geometry):
    # Rotation by p[0] degrees after shears p[1] (x) and p[2] (y).
    matrix = tf.matmul(_rotation_matrix(p[0]), _shear_matrix(p[1], p[2]))
    return affine_about_center(image, matrix, **geometry)


def _translate_kernel(image, p, geometry):
    size = tf.cast(tf.shape(image)[:2], tf.float32)  # (H, W)
    dx, dy = p[0] * size[1], p[1] * size[0]
    return translate(image, dx, dy, fill_value=geometry["fill_value"])


_KERNELS: dict[str, Callable] = {
    "identity": lambda image, p, geometry: image,
    "autocontrast": lambda image, p, geometry: autocontrast(image),
    "equalize": lambda image, p, geometry: equalize(image),
    "affine": _affine_kernel,
    "translate": _translate_kernel,
    "solarize": lambda image, p, geometry: solarize(image, p[0]),
    "solarize_add": lambda image, p, geometry: solarize_add(image, p[0]),
    "posterize": lambda image, p, geometry: _floor_to_multiple(image, p[0]),
    "color": lambda image, p, geometry: adjust_color(image, 1.0 + p[0]),
    "contrast": lambda image, p, geometry: adjust_contrast(image, 1.0 + p[0]),
    "brightness": lambda image, p, geometry: adjust_brightness(image, 1.0 + p[0]),
    "sharpness": lambda image, p, geometry: adjust_sharpness(image, 1.0 + p[0]),
}


def _run_kernel(kernel, image, params, geometry):
    out = _KERNELS[kernel](image, params, geometry)
    out.set_shape(image.shape)
    return out


def _op_spec(name, magnitude):
    if name not in _SPECS:
        raise ValueError(
            f"Unknown RandAugment operation {name!r}. Use one of {tuple(_SPECS)}."
        )
    return _SPECS[name](magnitude)


def _check_magnitude(magnitude):
    magnitude = float(magnitude)
    if not 0.0 <= magnitude <= 1.0:  # Also rejects NaN.
        raise ValueError(
            f"`magnitude` must be in [0, 1] (the 0-10 level divided by 10). "
            f"Received: magnitude={magnitude}"
        )
    return magnitude


def _check_interpolation(interpolation):
    if interpolation not in _INTERPOLATIONS:
        raise ValueError(
            f"`interpolation` must be one of {_INTERPOLATIONS}. "
            f"Received: interpolation={interpolation!r}"
        )
    return interpolation


def _check_fill_value(fill_value):
    fill_value = float(fill_value)
    if not 0.0 <= fill_value <= 255.0:
        raise ValueError(
            f"`fill_value` must be in [0, 255]. Received: fill_value={fill_value}"
        )
    return fill_value


def _check_image(image):
    image = tf.convert_to_tensor(image)
    if image.shape.rank != 3 or image.shape[-1] not in (1, 3):
        raise ValueError(
            "RandAugment works on one (height, width, channels) image with 1 or "
            "3 channels (map it over a batch). Received an image of shape "
            f"{image.shape}"
        )
    return tf.cast(image, tf.float32)


def _check_seed(seed):
    seed = tf.convert_to_tensor(seed)
    if not seed.dtype.is_integer or not seed.shape.is_compatible_with((2,)):
        raise ValueError(
            "`seed` must be a shape (2,) integer tensor. Received: "
            f"{seed.dtype.name} tensor of shape {seed.shape}"
        )
    return seed
