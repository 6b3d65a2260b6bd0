"""Glyphs: typeset digits over photo patches, rendered natively at 32x32.

An offline dataset with real high-frequency content, generated on the fly:
the ten digits 0-9 set in 15 typefaces, each drawn with a random affine
transform (rotation, scale, aspect, shear, translation) and stroke weight,
in a random colour, sometimes textured or outlined, over a patch of one of
scikit-learn's two bundled photographs (`china.jpg`, `flower.jpg`) cut at a
random position and scale. Nothing is downloaded and nothing is written:
the 12,000 images take a few CPU seconds and are kept in memory, once per
process.

- `"train"`: 10,000 images, `"test"`: 2,000 images, each split exactly
  balanced (1,000 and 200 per class), `uint8 (32, 32, 3)`, labels 0-9 with
  class names `"0"`-`"9"`. Slices as for every source: `"train[:90%]"`.
- Deterministic: the same bytes on every run and machine (see below).
- Disjoint by construction: each split is drawn from its own random stream,
  and its backgrounds come from its own tiles of the photographs (each photo
  is cut into 3x5 tiles of 128x128 pixels; one tile in five, spread
  diagonally, serves the test split only), so no test image shares a
  background pixel with a training image. `check_disjoint` sees the splits
  as index ranges (`ImageSource.ranges`): slices of one split overlap
  exactly when their indices do.

Why it exists. The bundled `"digits"` are 8x8 images: at 32 px they are
4x upsampled and have almost no energy above a quarter of the Nyquist
frequency, which hides the frequency effects Park & Kim study (Fourier
analysis of feature maps, robustness to band-limited noise). Glyphs are
rasterised at their final size, so edges and textures reach Nyquist. On the
32x32 training images as `eval_dataset` feeds them to a model (values in
[-1, 1]; energies with each image's mean removed; radial frequency in
radians per pixel, π = Nyquist), from `benchmarks/dataset_spectrum.py`:

| training split at 32 px | digits (8x8, resized) | glyphs |
|---|---|---|
| energy above 0.25π | 2.82% | 26.73% |
| energy above 0.50π | 0.44% | 9.06% |
| energy above 0.75π | 0.17% | 3.68% |
| log amplitude at (π, π) minus at 0 | -18.67 | -6.48 |
| small CNN, test accuracy after 400 steps | 92.8% | 59.0% |
| small CNN, test accuracy after 2,400 steps | 98.1% | 87.2% |

The log amplitude is Park & Kim's `Δ log amplitude` of the images
(`keras_vit.analysis.fourier`); the small CNN (3 convolutions, 94,538
parameters, Adam, batches of 128, no augmentation) takes 25 CPU seconds per
400 steps on 2 cores of an Intel Xeon with AMX and AVX-512. Chance is 10%:
glyphs are learnable and far from solved.

How an image is made (all of it vectorised in NumPy):

1. Glyph shapes. Each digit's outline comes from the font file
   (`matplotlib.textpath.TextPath`, the font's own Bézier contours); it is
   flattened and filled (even-odd rule) here on a 128x128 grid, then
   thinned or thickened by a disc (4 stroke weights, and a wider one for
   outlines). No font rasteriser, hinting or anti-aliasing of any library
   is involved. The typefaces are the DejaVu (Sans, Sans Bold, Sans Oblique,
   Sans Mono, Sans Mono Bold, Serif, Serif Bold, Serif Italic), STIX General
   (Regular, Bold, Italic) and Computer Modern (Roman, Bold, Sans,
   Typewriter) fonts that ship inside matplotlib (`mpl-data/fonts/ttf`).
2. Placement. Height 13-26 px, aspect 0.8-1.25, shear ±0.25, rotation ±20
   degrees, shift ±4 px. Each output pixel averages 4x4 point samples of
   the shape mapped through the inverse transform: anti-aliased edges made
   at 32 px, not a resized larger image.
3. Background. A square of 32, 64, 96 or 128 photo pixels inside one tile
   of the split, box-averaged to 32x32, rotated/flipped, its channels
   permuted, sometimes grey (15%), with a random gain (0.5-1.1) and offset
   (±30 levels).
4. Colour. The glyph's luma lies 40-160 levels from the background's mean,
   on the side with more room (15% of images: the other side, where it has
   room for 40 levels), with a random tint. One image in four has a
   textured fill (half the contrast of the background turned half round),
   one in five a grey outline of opposite contrast. Then a light [1, 2, 1]
   blur (15% of images) and uniform pixel noise of up to ±2-8 levels (50%).

Determinism. A split is a pure function of `GLYPHS_SEED`, the split's
stream, the font files and the two JPEGs. Random numbers come from NumPy's
PCG64 `Generator` (the same on every platform). The transform's inverse is
rounded to multiples of 2^-11 and the shift to 1/16 px, so every sample
position is computed exactly (in float32) and the shape lookups cannot
depend on the CPU's rounding or `sin`/`cos`; backgrounds are exact integer
sums; colours are element-wise IEEE arithmetic, then rounded. The checksums
pinned in `tests/test_glyphs.py` (images, labels, and the decoded photos
and glyph shapes apart) fail if any of it changes, e.g. under another
NumPy SIMD path (tested) or a JPEG decoder that decodes differently.

Cost: generating both splits takes 5-7 CPU seconds (0.7 of them for the
glyph shapes) on the machine above, its 2 cores shared with other work;
they hold 37 MB (150 MB at the peak of generation).

Needs matplotlib for the font files (`pip install matplotlib`).

Example:

```python
from keras_vit import data

train = data.load_source("glyphs", "train")  # 10,000 images, 10 classes
test = data.load_source("glyphs", "test")  # 2,000 images
data.check_disjoint(train, test)
```
"""

from __future__ import annotations

import functools
import hashlib
import os

import numpy as np
import tensorflow as tf

from keras_vit.data.source import ImageSource
from keras_vit.data.source import parse_split
from keras_vit.data.source import slice_index

NAME = "glyphs"
IMAGE_SIZE = 32
CLASS_NAMES = tuple("0123456789")
SPLIT_SIZES = {"train": 10_000, "test": 2_000}
GLYPHS_SEED = 20_220_128  # The dataset's seed.
_STREAMS = {"train": 0, "test": 1}  # Each split's own random streams.

# matplotlib's mpl-data/fonts/ttf files, in class-independent draw order.
FACES = (
    "DejaVuSans.ttf",
    "DejaVuSans-Bold.ttf",
    "DejaVuSans-Oblique.ttf",
    "DejaVuSansMono.ttf",
    "DejaVuSansMono-Bold.ttf",
    "DejaVuSerif.ttf",
    "DejaVuSerif-Bold.ttf",
    "DejaVuSerif-Italic.ttf",
    "STIXGeneral.ttf",
    "STIXGeneralBol.ttf",
    "STIXGeneralItalic.ttf",
    "cmr10.ttf",
    "cmb10.ttf",
    "cmss10.ttf",
    "cmtt10.ttf",
)

# Glyph shapes: a `_MASTER` square grid with the glyph's bounding box
# `_MASTER_HEIGHT` cells tall, centred; stroke weights by disc radius (in
# cells: about 0.15-0.3 output pixels each), the outline a disc wider.
_MASTER = 128
_MASTER_HEIGHT = 88
_WEIGHT_RADII = (-2, 0, 2, 4)
_OUTLINE_RADIUS = 3  # Added to the glyph's radius for its outline.
_CURVE_STEPS = 8  # Line segments per Bézier curve of an outline.
_SUPERSAMPLE = 4  # Point samples per output pixel and axis.
_COORDINATE_GRID = 2.0**-11  # The inverse transform's entries are multiples.
_SHIFT_GRID = 1.0 / 16  # Translations are multiples (pixels).
_CHUNK = 250  # Images rasterised at once (bounds the memory: ~100 MB).

# Backgrounds: each photo is cut into 3x5 tiles of 128x128 pixels, numbered
# row by row; the test split gets the tiles with (row + 2 * col) % 5 == 0.
_TILE = 128
_TILE_GRID = (3, 5)
_BACKGROUND_SCALES = (1, 2, 3, 4)  # Photo pixels per output pixel.

_LUMA = (0.299, 0.587, 0.114)
_MIN_CONTRAST = 40.0  # Luma levels between a glyph and its background, at least.


def glyphs(split: str = "train") -> ImageSource:
    """The glyphs dataset as an `ImageSource` (see the module docstring).

    Args:
        split: `"train"` (10,000 images) or `"test"` (2,000), with an
            optional slice such as `"train[:90%]"`.

    Returns:
        An `ImageSource` of `uint8 (32, 32, 3)` images whose `ranges` name
        the split's indices, for `check_disjoint`.

    Raises:
        ValueError: for an unknown split or a slice that selects nothing.
        ImportError: without matplotlib (the typefaces ship inside it).

    Example:

    ```python
    source = glyphs("train[:80%]")
    source.num_examples, source.num_classes  # (8000, 10)
    ```
    """
    base, start, stop = parse_split(split)
    if base not in SPLIT_SIZES:
        raise ValueError(
            f"Unknown glyphs split {split!r}. Known splits: {sorted(SPLIT_SIZES)}, "
            "with an optional slice such as 'train[:90%]'."
        )
    index = slice_index(np.arange(SPLIT_SIZES[base]), start, stop, split)
    images, labels = glyph_arrays(base)
    lo, hi = int(index[0]), int(index[-1]) + 1  # A slice of a range is a range.
    dataset = tf.data.Dataset.from_tensor_slices((images[lo:hi], labels[lo:hi]))
    return ImageSource(
        dataset=dataset,
        num_examples=hi - lo,
        num_classes=len(CLASS_NAMES),
        class_names=CLASS_NAMES,
        name=f"{NAME}:{split}",
        ranges=((NAME, base, lo, hi),),
    )


@functools.cache
def glyph_arrays(split: str) -> tuple[np.ndarray, np.ndarray]:
    """All images and labels of a split, generated once per process.

    Args:
        split: `"train"` or `"test"` (no slice).

    Returns:
        `(images, labels)`: read-only `uint8 (n, 32, 32, 3)` and `int64
        (n,)`.

    Example:

    ```python
    images, labels = glyph_arrays("test")
    images.shape, np.bincount(labels)  # (2000, 32, 32, 3), [200, ..., 200]
    ```
    """
    if split not in SPLIT_SIZES:
        raise ValueError(
            f"Unknown glyphs split {split!r}. Known splits: {sorted(SPLIT_SIZES)}."
        )
    stream = _STREAMS[split]
    rng = np.random.default_rng([GLYPHS_SEED, stream, 0])
    count = SPLIT_SIZES[split]
    params = _draw(rng, count, split)
    noise_rng = np.random.default_rng([GLYPHS_SEED, stream, 1])
    shapes = _shapes()
    images = np.empty((count, IMAGE_SIZE, IMAGE_SIZE, 3), np.uint8)
    for lo in range(0, count, _CHUNK):
        part = slice(lo, min(lo + _CHUNK, count))
        chunk = {key: value[part] for key, value in params.items()}
        images[part] = _render(chunk, shapes, noise_rng)
    labels = params["label"].astype(np.int64)
    images.flags.writeable = False
    labels.flags.writeable = False
    return images, labels


def checksum(array: np.ndarray) -> str:
    """SHA-256 of an array's bytes, its dtype and shape (for pinning)."""
    array = np.ascontiguousarray(array)
    digest = hashlib.sha256(f"{array.dtype.str}{array.shape}".encode())
    digest.update(array.tobytes())
    return digest.hexdigest()


# Per-image parameters ------------------------------------------------------


def _draw(rng: np.random.Generator, count: int, split: str) -> dict:
    """Every random choice of a split's images, drawn in a fixed order."""
    per_class = count // len(CLASS_NAMES)
    p = {}
    p["label"] = rng.permutation(np.repeat(np.arange(len(CLASS_NAMES)), per_class))
    p["face"] = rng.integers(0, len(FACES), count)
    p["weight"] = rng.integers(0, len(_WEIGHT_RADII), count)
    p["height"] = rng.uniform(13.0, 26.0, count)  # Glyph box height, pixels.
    p["aspect"] = rng.uniform(0.8, 1.25, count)
    p["shear"] = rng.uniform(-0.25, 0.25, count)
    p["angle"] = np.deg2rad(rng.uniform(-20.0, 20.0, count))
    p["shift"] = _quantise(rng.uniform(-4.0, 4.0, (count, 2)), _SHIFT_GRID)
    tiles = _split_tiles(split)
    p["tile"] = tiles[rng.integers(0, len(tiles), count)]
    p["scale"] = np.asarray(_BACKGROUND_SCALES)[
        rng.integers(0, len(_BACKGROUND_SCALES), count)
    ]
    room = _TILE - IMAGE_SIZE * p["scale"] + 1
    p["offset"] = (rng.random((count, 2)) * room[:, None]).astype(np.int64)
    p["orientation"] = rng.integers(0, 8, count)  # 4 rotations x flip
    p["channels"] = rng.integers(0, 6, count)  # permutation of RGB
    p["grey"] = rng.random(count) < 0.15
    p["gain"] = rng.uniform(0.5, 1.1, count)
    p["bias"] = rng.uniform(-30.0, 30.0, count)
    p["against"] = rng.random(count) < 0.15  # glyph on the side with less room
    p["contrast"] = rng.uniform(_MIN_CONTRAST, 160.0, count)
    p["tint"] = rng.uniform(-50.0, 50.0, (count, 3))
    p["textured"] = rng.random(count) < 0.25
    p["outlined"] = rng.random(count) < 0.2
    p["outline_contrast"] = rng.uniform(60.0, 160.0, count)
    p["blur"] = rng.random(count) < 0.15
    p["noise"] = np.where(rng.random(count) < 0.5, rng.integers(2, 9, count), 0)
    p["inverse"] = _inverse_transforms(p)
    return p


def _quantise(values: np.ndarray, grid: float) -> np.ndarray:
    return np.round(values / grid) * grid


def _inverse_transforms(p: dict) -> np.ndarray:
    """Output offsets -> shape cells: `(n, 2, 2)`, on a dyadic grid.

    The forward map is `R(angle) @ [[1, shear], [0, 1]] @ diag(s * aspect,
    s)` with `s` output pixels per shape cell; the inverse is written out
    and rounded, so that it is exact, whatever the CPU's `sin`/`cos`.
    """
    s = p["height"] / _MASTER_HEIGHT
    cos, sin, shear = np.cos(p["angle"]), np.sin(p["angle"]), p["shear"]
    inverse = np.empty((len(s), 2, 2))
    inverse[:, 0, 0] = (cos + shear * sin) / (s * p["aspect"])
    inverse[:, 0, 1] = (sin - shear * cos) / (s * p["aspect"])
    inverse[:, 1, 0] = -sin / s
    inverse[:, 1, 1] = cos / s
    return _quantise(inverse, _COORDINATE_GRID)


def _split_tiles(split: str) -> np.ndarray:
    """Background tile numbers (photo * 15 + row * 5 + col) of a split."""
    rows, cols = _TILE_GRID
    numbers = []
    for photo in range(2):
        for row in range(rows):
            for col in range(cols):
                if ((row + 2 * col) % 5 == 0) == (split == "test"):
                    numbers.append(photo * rows * cols + row * cols + col)
    return np.asarray(numbers)


# Rendering ----------------------------------------------------------------


def _render(p: dict, shapes: np.ndarray, noise_rng) -> np.ndarray:
    """One chunk of images, `uint8 (n, 32, 32, 3)`."""
    count = len(p["label"])
    background, mean = _backgrounds(p)  # (n, 32, 32, 3), (n, 3)
    weight = np.asarray(_WEIGHT_RADII)[p["weight"]]
    radii = np.asarray(_radii())
    shape_id = (p["face"] * len(CLASS_NAMES) + p["label"]) * len(radii)
    glyph_id = shape_id + np.searchsorted(radii, weight)
    coverage = _coverage(shapes, glyph_id, p["inverse"], p["shift"])  # (n, 32, 32)

    # The glyph's luma: `contrast` levels from the background's mean, toward
    # the side with more room, or (`against`) the other side when that has
    # room for `_MIN_CONTRAST` levels; at most as far as the room goes.
    luma = _luminance(mean)  # (n,)
    toward = np.where(luma < 127.5, 1.0, -1.0)
    other_room = np.where(toward > 0, luma, 255.0 - luma)
    against = p["against"] & (other_room >= _MIN_CONTRAST)
    toward = np.where(against, -toward, toward)
    room = np.where(toward > 0, 255.0 - luma, luma)
    target = luma + toward * np.minimum(p["contrast"], room)
    tint = p["tint"] - _luminance(p["tint"])[:, None]  # a hue, no luma
    fill = np.clip(target[:, None] + tint, 0.0, 255.0)  # (n, 3)
    fill = np.broadcast_to(fill[:, None, None, :], background.shape)
    texture = np.rot90(background, 2, axes=(1, 2)) - mean[:, None, None, :]
    textured = p["textured"][:, None, None, None]
    fill = np.where(textured, np.clip(fill + 0.5 * texture, 0.0, 255.0), fill)

    image = background
    outlined = np.flatnonzero(p["outlined"])
    if len(outlined):
        ring_id = shape_id[outlined] + np.searchsorted(
            radii, weight[outlined] + _OUTLINE_RADIUS
        )
        ring = _coverage(shapes, ring_id, p["inverse"][outlined], p["shift"][outlined])
        ring_luma = np.clip(
            target[outlined] - toward[outlined] * p["outline_contrast"][outlined],
            0.0,
            255.0,
        )
        ring_colour = ring_luma[:, None, None, None]
        image = image.copy()
        alpha = ring[..., None]
        image[outlined] = image[outlined] * (1.0 - alpha) + ring_colour * alpha
    alpha = coverage[..., None]
    image = image * (1.0 - alpha) + fill * alpha

    blurred = np.flatnonzero(p["blur"])
    if len(blurred):
        image[blurred] = _blur(image[blurred])
    draws = noise_rng.random((count, IMAGE_SIZE, IMAGE_SIZE, 3))
    amplitude = p["noise"][:, None, None, None]
    image = image + (np.floor(draws * (2 * amplitude + 1)) - amplitude)
    return np.clip(np.rint(image), 0, 255).astype(np.uint8)


def _luminance(rgb: np.ndarray) -> np.ndarray:
    """ITU-R BT.601 luma of `(..., 3)`, summed in a fixed order."""
    return rgb[..., 0] * _LUMA[0] + rgb[..., 1] * _LUMA[1] + rgb[..., 2] * _LUMA[2]


def _coverage(shapes, glyph_id, inverse, shift) -> np.ndarray:
    """Fraction of each output pixel the glyph covers: `(n, 32, 32)`.

    The mean of `_SUPERSAMPLE`^2 point samples per pixel (see `_cells`).
    """
    size = IMAGE_SIZE * _SUPERSAMPLE
    row, col = _cells(inverse, shift)  # (n, size, size) each
    cells = row
    cells *= _MASTER
    cells += col
    cells += (glyph_id.astype(np.int32) * _MASTER * _MASTER)[:, None, None]
    hits = shapes.reshape(-1).view(np.uint8)[cells]  # (n, size, size), 0 or 1
    hits = hits.reshape(-1, IMAGE_SIZE, _SUPERSAMPLE, size)
    rows = sum(hits[:, :, k] for k in range(1, _SUPERSAMPLE)) + hits[:, :, 0]
    rows = rows.reshape(-1, IMAGE_SIZE, IMAGE_SIZE, _SUPERSAMPLE)
    counts = sum(rows[..., k] for k in range(1, _SUPERSAMPLE)) + rows[..., 0]
    return counts / float(_SUPERSAMPLE**2)  # exact: counts are integers


def _cells(inverse, shift) -> tuple[np.ndarray, np.ndarray]:
    """The shape cells the point samples fall in: `int32 (n, 128, 128)` rows
    and columns, clipped to the grid.

    `_SUPERSAMPLE`^2 samples per output pixel, at positions that are
    multiples of 1/8 px, mapped through the inverse transforms (multiples of
    2^-11, shifts multiples of 1/16 px): every product and sum below is
    exact in float32 (at most 24 significant bits), so the cells are the
    same on every machine.
    """
    size = IMAGE_SIZE * _SUPERSAMPLE
    position = ((np.arange(size) + 0.5) / _SUPERSAMPLE - IMAGE_SIZE / 2).astype(
        np.float32
    )  # relative to the image centre
    shift = shift.astype(np.float32)
    inverse = inverse.astype(np.float32)
    u = position[None, None, :] - shift[:, 0, None, None]  # (n, 1, size)
    v = position[None, :, None] - shift[:, 1, None, None]  # (n, size, 1)
    centre = np.float32(_MASTER / 2)
    col = inverse[:, 0, 0, None, None] * u + centre  # (n, 1, size)
    col = np.floor(col + inverse[:, 0, 1, None, None] * v)  # (n, size, size)
    row = inverse[:, 1, 1, None, None] * v + centre  # (n, size, 1)
    row = np.floor(row + inverse[:, 1, 0, None, None] * u)  # (n, size, size)
    # The shapes' border cells are empty: clipping maps outside to empty.
    np.clip(col, 0, _MASTER - 1, out=col)
    np.clip(row, 0, _MASTER - 1, out=row)
    return row.astype(np.int32), col.astype(np.int32)


def _backgrounds(p: dict) -> tuple[np.ndarray, np.ndarray]:
    """Background patches `float64 (n, 32, 32, 3)` and their mean colours.

    Each output pixel is the mean of a `scale x scale` block of the photo,
    read as exact integer sums from the photo's summed-area table.
    """
    rows, cols = _TILE_GRID
    photo, tile = np.divmod(p["tile"], rows * cols)
    top = (tile // cols) * _TILE + p["offset"][:, 0]
    left = (tile % cols) * _TILE + p["offset"][:, 1]
    edges = np.arange(IMAGE_SIZE + 1)[None, :] * p["scale"][:, None]  # (n, 33)
    table = _summed_areas()
    corners = table[
        photo[:, None, None],
        (top[:, None] + edges)[:, :, None],
        (left[:, None] + edges)[:, None, :],
    ]  # (n, 33, 33, 3)
    sums = corners[:, 1:, 1:] - corners[:, :-1, 1:] - corners[:, 1:, :-1]
    sums += corners[:, :-1, :-1]  # (n, 32, 32, 3), exact integers
    for k in range(1, 4):
        group = np.flatnonzero(p["orientation"] % 4 == k)
        sums[group] = np.rot90(sums[group], k, axes=(1, 2))
    flipped = np.flatnonzero(p["orientation"] >= 4)
    sums[flipped] = sums[flipped, :, ::-1]
    permutations = np.asarray(
        [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]
    )
    order = permutations[p["channels"]]  # (n, 3)
    sums = np.take_along_axis(sums, order[:, None, None, :], axis=3)
    total = sums.sum(axis=(1, 2), dtype=np.int64)  # (n, 3), exact
    # Pixel values: sum / scale^2, then the gain and bias.
    factor = (p["gain"] / p["scale"] ** 2)[:, None, None, None]
    bias = p["bias"][:, None, None, None]
    background = sums * factor + bias
    mean = total * (factor[:, 0, 0] / IMAGE_SIZE**2) + bias[:, 0, 0]
    grey = np.flatnonzero(p["grey"])
    background[grey] = _luminance(background[grey])[..., None]
    mean[grey] = _luminance(mean[grey])[:, None]
    return np.clip(background, 0.0, 255.0), np.clip(mean, 0.0, 255.0)


def _blur(images: np.ndarray) -> np.ndarray:
    """[1, 2, 1] / 4 along both axes, edges repeated: `(n, h, w, 3)`."""
    padded = np.pad(images, ((0, 0), (1, 1), (0, 0), (0, 0)), mode="edge")
    images = (padded[:, :-2] + 2.0 * padded[:, 1:-1] + padded[:, 2:]) * 0.25
    padded = np.pad(images, ((0, 0), (0, 0), (1, 1), (0, 0)), mode="edge")
    return (padded[:, :, :-2] + 2.0 * padded[:, :, 1:-1] + padded[:, :, 2:]) * 0.25


# Inputs: glyph shapes and photos ---------------------------------------------


def _radii() -> tuple[int, ...]:
    """Every disc radius a shape is drawn with: the weights and outlines."""
    return tuple(
        sorted(set(_WEIGHT_RADII) | {r + _OUTLINE_RADIUS for r in _WEIGHT_RADII})
    )


@functools.lru_cache(maxsize=1)
def _shapes() -> np.ndarray:
    """Glyph shapes: `bool (faces * classes * radii, 128, 128)`, read-only.

    Index `(face * 10 + digit) * len(_radii()) + radius_index`.
    """
    radii = _radii()
    shapes = np.empty(
        (len(FACES), len(CLASS_NAMES), len(radii), _MASTER, _MASTER), bool
    )
    for face_index, face in enumerate(FACES):
        for digit, name in enumerate(CLASS_NAMES):
            shape = _fill(_outline(face, name))
            for k, radius in enumerate(radii):
                shapes[face_index, digit, k] = _thicken(shape, radius)
    border = shapes[..., [0, -1], :].any() or shapes[..., :, [0, -1]].any()
    if border:  # Would make `_coverage`'s clipping wrong.
        raise RuntimeError("A glyph shape reaches the border of its grid.")
    shapes = shapes.reshape(-1, _MASTER, _MASTER)
    shapes.flags.writeable = False
    return shapes


def _font_path(face: str) -> str:
    try:
        import matplotlib
    except ImportError as error:
        raise ImportError(
            "The glyphs dataset draws its digits with the fonts that ship "
            "inside matplotlib: pip install matplotlib."
        ) from error
    return os.path.join(matplotlib.get_data_path(), "fonts", "ttf", face)


def _outline(face: str, text: str) -> list[np.ndarray]:
    """The glyph's closed contours as polygons `(k, 2)` in font units (y up).

    Quadratic and cubic Bézier pieces are cut into `_CURVE_STEPS` straight
    segments here, with the Bernstein form, not by a library's flattener.
    """
    from matplotlib.font_manager import FontProperties
    from matplotlib.path import Path
    from matplotlib.textpath import TextPath

    path = TextPath((0, 0), text, size=1.0, prop=FontProperties(fname=_font_path(face)))
    t = (np.arange(1, _CURVE_STEPS + 1) / _CURVE_STEPS)[:, None]
    polygons, current = [], []
    for curve, code in path.iter_bezier():
        points = curve.control_points
        if code == Path.MOVETO:
            polygons.append(current)
            current = [points[0]]
        elif code == Path.LINETO:
            current.append(points[1])
        elif code == Path.CURVE3:
            p0, p1, p2 = points
            current.extend((1 - t) ** 2 * p0 + 2 * (1 - t) * t * p1 + t**2 * p2)
        elif code == Path.CURVE4:
            p0, p1, p2, p3 = points
            current.extend(
                (1 - t) ** 3 * p0
                + 3 * (1 - t) ** 2 * t * p1
                + 3 * (1 - t) * t**2 * p2
                + t**3 * p3
            )
    polygons.append(current)
    polygons = [np.asarray(polygon, float) for polygon in polygons if len(polygon) > 2]
    if not polygons:
        raise RuntimeError(f"Font {face!r} has no outline for {text!r}.")
    return polygons


def _fill(polygons: list[np.ndarray]) -> np.ndarray:
    """The polygons filled (even-odd) on the grid: `bool (128, 128)`.

    The glyph's bounding box is centred, `_MASTER_HEIGHT` cells tall; a cell
    is inside when its centre is.
    """
    points = np.concatenate(polygons)
    low, high = points.min(axis=0), points.max(axis=0)
    centre, unit = (low + high) / 2, (high[1] - low[1]) / _MASTER_HEIGHT
    cells = np.arange(_MASTER) + 0.5 - _MASTER / 2
    x = centre[0] + cells[None, :] * unit  # (1, 128)
    y = centre[1] - cells[:, None] * unit  # (128, 1), rows go down
    inside = np.zeros((_MASTER, _MASTER), bool)
    for polygon in polygons:
        x0, y0 = polygon[:, 0], polygon[:, 1]
        x1, y1 = np.roll(x0, -1), np.roll(y0, -1)
        for ax, ay, bx, by in zip(x0, y0, x1, y1, strict=True):
            if ay == by:
                continue
            crosses = (ay > y) != (by > y)  # (128, 1)
            at = ax + (y - ay) * ((bx - ax) / (by - ay))  # where it crosses
            inside ^= crosses & (x < at)
    return inside


def _thicken(shape: np.ndarray, radius: int) -> np.ndarray:
    """Dilation (radius > 0) or erosion (< 0) by a disc of `|radius|` cells."""
    if radius == 0:
        return shape.copy()
    grow = shape if radius > 0 else ~shape
    r = abs(radius)
    padded = np.pad(grow, r)
    out = np.zeros_like(grow)
    size = shape.shape[0]
    for dy in range(-r, r + 1):
        for dx in range(-r, r + 1):
            if dx * dx + dy * dy <= r * r:
                out |= padded[r + dy : r + dy + size, r + dx : r + dx + size]
    return out if radius > 0 else ~out


@functools.lru_cache(maxsize=1)
def _summed_areas() -> np.ndarray:
    """The photos' summed-area tables: `int64 (2, 428, 641, 3)`.

    Entry `[p, y, x]` is the sum of photo `p`'s pixels above row `y` and left
    of column `x`.
    """
    photos = _photos().astype(np.int64)
    table = np.zeros(
        (photos.shape[0], photos.shape[1] + 1, photos.shape[2] + 1, 3), np.int64
    )
    table[:, 1:, 1:] = photos.cumsum(axis=1).cumsum(axis=2)
    table.flags.writeable = False
    return table


@functools.lru_cache(maxsize=1)
def _photos() -> np.ndarray:
    """scikit-learn's `china.jpg` and `flower.jpg`: `uint8 (2, 427, 640, 3)`."""
    from sklearn.datasets import load_sample_images

    bunch = load_sample_images()
    names = [os.path.basename(name) for name in bunch.filenames]
    images = dict(zip(names, bunch.images, strict=True))
    photos = np.stack([images["china.jpg"], images["flower.jpg"]])
    photos.flags.writeable = False
    return photos
