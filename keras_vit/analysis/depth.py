"""Fourier amplitude and variance of feature maps by depth, for any family.

Park & Kim ("How Do Vision Transformers Work?", ICLR 2022) compare a ViT, a
ResNet and AlterNet layer by layer: Fig. 2 and 8 plot `Δ log amplitude`, the
log amplitude of each feature map's 2-D Fourier transform at a high
frequency relative to frequency 0 (see `keras_vit.analysis.fourier`), and
Fig. 9 the feature-map variance, which MSAs lower and convolutions raise.
`depth_statistics` measures both on the named maps of
`keras_vit.analysis.FeatureMaps` (ViT blocks on the patch grid, or the maps
another model's layout names, e.g. a CNN's stem and blocks), so the three
networks go through the same code.

Feature-map variance has two definitions (`definition=` / `variance=`):

- `"spatial"` (default): the authors' `featuremap_variance.ipynb`
  (xxxnell/how-do-vits-work at 9571ff1, line 294),
  `latent.var(dim=[-1, -2]).mean(dim=[0, 1])` on `(B, C, h, w)` maps: the
  variance over the `h w` positions of each channel of each image, unbiased
  (divided by `h w - 1`, as `torch.var`), averaged over channels and
  images.
- `"all_values"` (an alternative): for each image, the variance of
  all `h w C` values of the map (positions and channels together, divided by
  `h w C`), averaged over images. By the law of total variance it adds the
  spread of the channel means across channels to the (population) spatial
  variance, so it grows with any per-channel offset that the authors'
  measure does not see.
"""

from __future__ import annotations

import numpy as np

from keras_vit._export import export
from keras_vit.analysis._maps import FeatureMaps
from keras_vit.analysis._walk import batch_slices
from keras_vit.analysis.fourier import DEFAULT_EPSILON
from keras_vit.analysis.fourier import FREQUENCIES
from keras_vit.analysis.fourier import _check_frequency
from keras_vit.analysis.fourier import _check_maps
from keras_vit.analysis.fourier import _diagonal
from keras_vit.analysis.fourier import _log_amplitude_sums
from keras_vit.analysis.fourier import diagonal_frequencies

VARIANCES = ("spatial", "all_values")


def _check_definition(definition: str) -> str:
    if definition not in VARIANCES:
        raise ValueError(
            f"The variance definition must be one of {VARIANCES}. Received: "
            f"{definition!r}"
        )
    return definition


def _variance_sums(maps: np.ndarray) -> dict:
    """Per definition: the sum of the per-item variances, and the item count."""
    batch, height, width, channels = maps.shape
    spatial = maps.var(axis=(1, 2), ddof=1)  # (B, C): unbiased, as torch.var
    whole = maps.reshape(batch, -1).var(axis=1)  # (B,)
    return {
        "spatial": (float(spatial.sum()), batch * channels),
        "all_values": (float(whole.sum()), batch),
    }


@export("keras_vit.analysis.map_variance")
def map_variance(maps, definition: str = "spatial") -> float:
    """Feature-map variance, by the authors' definition or an alternative.

    Args:
        maps: `(batch, h, w, channels)` feature maps.
        definition: `"spatial"` (default, Park & Kim's notebook): the
            unbiased variance over positions of each channel of each image,
            averaged over channels and images. `"all_values"` (an
            alternative): per image, the variance of all values, positions and
            channels together, averaged over images. See the module
            docstring.

    Returns:
        A float.

    Example:

    ```python
    maps = np.random.normal(size=(4, 8, 8, 16)) + np.arange(16)  # channel offsets
    map_variance(maps)  # about 1: the offsets are not spatial variation
    map_variance(maps, definition="all_values")  # about 22: they are counted
    ```
    """
    _check_definition(definition)
    total, count = _variance_sums(_check_maps(maps))[definition]
    return total / count


@export("keras_vit.analysis.depth_statistics")
def depth_statistics(
    model,
    images,
    sublayers: bool = True,
    epsilon: float = DEFAULT_EPSILON,
    batch_size: int = 32,
    frequency: str = "authors",
    variance: str = "spatial",
) -> dict:
    """`Δ log amplitude` and variance of every named feature map of a model.

    Both definitions of each measure come from the same maps at no extra
    cost: `frequency=` and `variance=` pick which one fills `"delta"`,
    `"profiles"` and `"variance"`; `"deltas"` and `"variances"` hold both.

    Args:
        model: A keras_vit ViT, ResNet, PreActResNet or AlterNet (fixed input
            size).
        images: `(batch, height, width, channels)` in the model's range.
        sublayers: For a ViT, a point after each attention and each MLP
            residual (default); otherwise one per block.
        epsilon: Added to the Fourier amplitude before the log.
        batch_size: Images per forward pass. Defaults to 32.
        frequency: `"authors"` (default, Park & Kim's notebook: the highest
            positive frequency, index `(n - 1) // 2`) or `"nyquist"` (π); see
            `keras_vit.analysis.fourier`.
        variance: `"spatial"` (default, Park & Kim's notebook) or
            `"all_values"`; see the module docstring.

    Returns:
        A dict with `"labels"` and `"kinds"` (lists of str, see
        `keras_vit.analysis._maps`), `"delta"` (`(points,)`, the `Δ log
        amplitude` by `frequency`), `"profiles"` (list of `(T_i,)` arrays,
        the relative log amplitude along the diagonal; `T_i` depends on the
        map's size), `"frequencies"` (list of `(T_i, 2)`, each profile
        entry's frequencies in units of π), `"variance"` (`(points,)`, by
        `variance`), `"deltas"` and `"variances"` (`{definition:
        (points,)}`, every definition), `"frequency"` and
        `"variance_definition"` (the names used) and `"sizes"` (`(points,
        2)`, each map's height and width).

    Example:

    ```python
    model = keras_vit.AlterNet("test", image_size=16, num_classes=3)
    stats = depth_statistics(model, images)
    stats["labels"]  # ['stem', 'stage1_block1', 'stage2_block1', 'stage2_msa2']
    stats["variances"]["all_values"]  # the alternative, same maps
    ```
    """
    _check_frequency(frequency)
    _check_definition(variance)
    maps = FeatureMaps.of(model, sublayers=sublayers)
    images = np.asarray(images, dtype="float32")
    points = len(maps.labels)
    sums = [None] * points  # (h, w) per point
    counts = np.zeros(points)
    variance_sums = {name: np.zeros((points, 2)) for name in VARIANCES}
    for part in batch_slices(len(images), batch_size):
        for point, value in maps.iter_maps(images[part]):
            value = _check_maps(value)  # (B, h, w, C) float64
            total = _log_amplitude_sums(value, epsilon)
            sums[point] = total if sums[point] is None else sums[point] + total
            counts[point] += len(value) * value.shape[-1]
            for name, (summed, items) in _variance_sums(value).items():
                variance_sums[name][point] += (summed, items)
    profiles = {name: [] for name in FREQUENCIES}
    for total, count in zip(sums, counts, strict=True):
        for name in FREQUENCIES:
            profile = _diagonal(total / count, name)
            profiles[name].append(profile - profile[0])
    variances = {name: v[:, 0] / v[:, 1] for name, v in variance_sums.items()}
    deltas = {
        name: np.array([profile[-1] for profile in profiles[name]])
        for name in FREQUENCIES
    }
    return {
        "labels": list(maps.labels),
        "kinds": list(maps.kinds),
        "delta": deltas[frequency],
        "profiles": profiles[frequency],
        "frequencies": [
            diagonal_frequencies(*total.shape, frequency) for total in sums
        ],
        "variance": variances[variance],
        "deltas": deltas,
        "variances": variances,
        "frequency": frequency,
        "variance_definition": variance,
        "sizes": np.array([total.shape for total in sums]),
    }
