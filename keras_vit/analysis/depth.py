"""Fourier amplitude and variance of feature maps by depth, for any family.

Park & Kim ("How Do Vision Transformers Work?", ICLR 2022) compare a ViT, a
ResNet and AlterNet layer by layer: Fig. 2 plots `Δ log amplitude`, the log
amplitude of each feature map's 2-D Fourier transform at the highest
frequency `(π, π)` relative to frequency 0 (see `keras_vit.analysis.fourier`),
and their feature-map variance figure shows MSAs lowering, convolutions
raising, the variance of the maps. `depth_statistics` measures both on the
named maps of `keras_vit.analysis._maps` (ViT blocks on the patch grid, CNN
stem and blocks), so the three families go through the same code.

Feature-map variance, as measured here: for each image, the variance of all
values of the map (positions and channels together), averaged over images.
"""

from __future__ import annotations

import numpy as np

from keras_vit.analysis._maps import FeatureMaps
from keras_vit.analysis._walk import batch_slices
from keras_vit.analysis.fourier import DEFAULT_EPSILON
from keras_vit.analysis.fourier import _check_maps
from keras_vit.analysis.fourier import _diagonal
from keras_vit.analysis.fourier import _log_amplitude_sums


def map_variance(maps) -> float:
    """Per-image variance of a map's values, averaged over images.

    Args:
        maps: `(batch, h, w, channels)` feature maps.

    Returns:
        A float: `mean_b var(maps[b])` over positions and channels.
    """
    maps = _check_maps(maps)
    return float(maps.reshape(len(maps), -1).var(axis=1).mean())


def depth_statistics(
    model,
    images,
    sublayers: bool = True,
    epsilon: float = DEFAULT_EPSILON,
    batch_size: int = 32,
) -> dict:
    """`Δ log amplitude` and variance of every named feature map of a model.

    Args:
        model: A keras_vit ViT, PreActResNet or AlterNet (fixed input size).
        images: `(batch, height, width, channels)` in the model's range.
        sublayers: For a ViT, a point after each attention and each MLP
            residual (default); otherwise one per block.
        epsilon: Added to the Fourier amplitude before the log.
        batch_size: Images per forward pass. Defaults to 32.

    Returns:
        A dict with `"labels"` and `"kinds"` (lists of str, see
        `keras_vit.analysis._maps`), `"delta"` (`(points,)`, the `Δ log
        amplitude` at π), `"profiles"` (list of `(T_i,)` arrays, the relative
        log amplitude from 0 to π; `T_i` depends on the map's size),
        `"variance"` (`(points,)`) and `"sizes"` (`(points, 2)`, each map's
        height and width).

    Example:

    ```python
    model = keras_vit.AlterNet("test", image_size=16, num_classes=3)
    stats = depth_statistics(model, images)
    stats["labels"]  # ['stem', 'stage1_block1', 'stage2_block1', 'stage2_msa2']
    ```
    """
    maps = FeatureMaps.of(model, sublayers=sublayers)
    images = np.asarray(images, dtype="float32")
    points = len(maps.labels)
    sums = [None] * points  # (h, w) per point
    variance = np.zeros(points)
    counts = np.zeros(points)
    for part in batch_slices(len(images), batch_size):
        for point, value in maps.iter_maps(images[part]):
            value = _check_maps(value)  # (B, h, w, C) float64
            total = _log_amplitude_sums(value, epsilon)
            sums[point] = total if sums[point] is None else sums[point] + total
            counts[point] += len(value) * value.shape[-1]
            variance[point] += value.reshape(len(value), -1).var(axis=1).sum()
    profiles = []
    for total, count in zip(sums, counts, strict=True):
        profile = _diagonal(total / count)
        profiles.append(profile - profile[0])
    return {
        "labels": list(maps.labels),
        "kinds": list(maps.kinds),
        "delta": np.array([profile[-1] for profile in profiles]),
        "profiles": profiles,
        "variance": variance / len(images),
        "sizes": np.array([total.shape for total in sums]),
    }
