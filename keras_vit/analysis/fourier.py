"""Fourier analysis of feature maps (Park & Kim, "How Do Vision Transformers
Work?", ICLR 2022, Fig. 2).

Each block's patch tokens form a feature map `(h, w, D)`. Its 2-D discrete
Fourier transform is taken over the spatial axes, channel by channel; the log
amplitude `log(|F| + eps)` is averaged over channels and images. The
**relative log amplitude** at a frequency is that average minus its value at
frequency 0. The summary number per map, `Δ log amplitude`, is the value at
the highest frequency of the grid, `(π, π)` (index `(h // 2, w // 2)`): large
when the map has much high-frequency content relative to its mean, very
negative for a smooth map. Park & Kim find that multi-head self-attention
lowers it (a low-pass filter) and MLPs/convolutions raise it.

The profile along the diagonal from `(0, 0)` to `(π, π)` is also returned,
for the frequency-resolved picture.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_vit.analysis._walk import BlockWalker
from keras_vit.analysis._walk import batch_slices
from keras_vit.analysis._walk import check_images
from keras_vit.models import layout as names

DEFAULT_EPSILON = 1e-6


def _check_maps(maps) -> np.ndarray:
    maps = np.asarray(keras.ops.convert_to_numpy(maps), dtype="float64")
    if maps.ndim != 4:
        raise ValueError(
            "Expected feature maps of shape (batch, h, w, channels). Received: "
            f"shape {maps.shape}"
        )
    if maps.shape[1] < 2 or maps.shape[2] < 2:
        raise ValueError(
            f"The maps need at least 2x2 positions. Received: shape {maps.shape}"
        )
    return maps


def _log_amplitude_sums(maps: np.ndarray, epsilon: float) -> np.ndarray:
    """Sum over images and channels of `log(|FFT2| + eps)`, `(h, w)`."""
    amplitude = np.abs(np.fft.fft2(maps, axes=(1, 2)))  # (B, h, w, C)
    return np.log(amplitude + epsilon).sum(axis=(0, 3))


def _diagonal(spectrum: np.ndarray) -> np.ndarray:
    """Values from frequency (0, 0) to the highest (h // 2, w // 2)."""
    height, width = spectrum.shape
    steps = min(height, width) // 2 + 1
    t = np.linspace(0.0, 1.0, steps)
    rows = np.rint(t * (height // 2)).astype(int)
    cols = np.rint(t * (width // 2)).astype(int)
    return spectrum[rows, cols]


def log_amplitude_spectrum(maps, epsilon: float = DEFAULT_EPSILON) -> np.ndarray:
    """Mean log amplitude of the maps' 2-D Fourier transforms.

    Args:
        maps: `(batch, h, w, channels)` feature maps.
        epsilon: Added to the amplitude before the log. Defaults to 1e-6.

    Returns:
        `(h, w)` in NumPy's FFT order (frequency 0 at `[0, 0]`), averaged
        over images and channels.
    """
    maps = _check_maps(maps)
    return _log_amplitude_sums(maps, epsilon) / (maps.shape[0] * maps.shape[3])


def relative_log_amplitude(maps, epsilon: float = DEFAULT_EPSILON) -> np.ndarray:
    """Log amplitude along the diagonal, relative to frequency 0.

    Args:
        maps: `(batch, h, w, channels)` feature maps.
        epsilon: Added to the amplitude before the log. Defaults to 1e-6.

    Returns:
        `(min(h, w) // 2 + 1,)`: entry `t` is the mean log amplitude at
        frequency `(t / T) * (π, π)` minus the one at 0 (so entry 0 is 0); the
        last entry is `high_frequency_log_amplitude(maps)`.
    """
    profile = _diagonal(log_amplitude_spectrum(maps, epsilon))
    return profile - profile[0]


def high_frequency_log_amplitude(maps, epsilon: float = DEFAULT_EPSILON) -> float:
    """Park & Kim's `Δ log amplitude`: log amplitude at `(π, π)` minus at 0.

    A constant map has no energy above frequency 0: it gives the lowest value,
    `log(eps) - log(|c| h w + eps)`. A checkerboard `(-1)^(i + j)` has all its
    energy at `(π, π)` and none at 0: it gives the highest,
    `log(h w + eps) - log(eps)`. White noise gives about 0.

    Args:
        maps: `(batch, h, w, channels)` feature maps.
        epsilon: Added to the amplitude before the log. Defaults to 1e-6.

    Returns:
        A float.
    """
    return float(relative_log_amplitude(maps, epsilon)[-1])


def token_map(tokens, grid_size: tuple[int, int], num_prefix_tokens: int) -> np.ndarray:
    """Drops the prefix tokens of `(B, N, D)` and lays the rest out `(B, h, w, D)`."""
    tokens = np.asarray(keras.ops.convert_to_numpy(tokens))
    batch, _, dim = tokens.shape
    return tokens[:, num_prefix_tokens:].reshape(batch, *grid_size, dim)


def feature_map_frequencies(
    model: keras.Model,
    images,
    sublayers: bool = True,
    epsilon: float = DEFAULT_EPSILON,
    batch_size: int = 32,
) -> dict:
    """`Δ log amplitude` of the token map at each depth of a model.

    Depth 0 is the block input (patch embedding plus position embedding).
    With `sublayers`, each block contributes two points: after its attention
    residual (`z + MSA(LN(z))`, label `"msa_{i}"`) and after its MLP
    residual (the block output, `"mlp_{i}"`); otherwise one point per block
    (`"block_{i}"`). Only one block's activations exist at a time.

    Args:
        model: A model built by `keras_vit.ViT` (or a loaded copy).
        images: `(batch, height, width, channels)` in the model's range.
        sublayers: Split each block at its two residuals. Defaults to `True`.
        epsilon: Added to the amplitude before the log. Defaults to 1e-6.
        batch_size: Images per forward pass. Defaults to 32.

    Returns:
        A dict with `"labels"` (list of str), `"delta"` (`(points,)`, the
        `Δ log amplitude` at each depth) and `"profiles"` (`(points, T)`, the
        relative log amplitude from 0 to π at each depth).

    Example:

    ```python
    result = feature_map_frequencies(model, images)
    result["labels"][:3], result["delta"][:3]  # ['embedding', 'msa_0', 'mlp_0']
    ```
    """
    walker = BlockWalker(model)
    layout = walker.layout
    images = check_images(images, layout)
    labels = [names.EMBEDDING]  # the first block's input
    for index in range(layout.depth):
        labels += [f"msa_{index}", f"mlp_{index}"] if sublayers else [f"block_{index}"]
    sums = np.zeros((len(labels), *layout.grid_size))  # (points, h, w)
    dim = 1
    for part in batch_slices(len(images), batch_size):
        point = 0
        for step in walker.walk(images[part], after_attention=sublayers):
            states = [step.inputs] if step.index == 0 else []
            states += [step.after_attention] if sublayers else []
            states.append(step.outputs)
            for state in states:  # reduced at once: one block's tokens at a time
                maps = token_map(state, layout.grid_size, layout.num_prefix_tokens)
                sums[point] += _log_amplitude_sums(maps, epsilon)
                dim = maps.shape[-1]
                point += 1
    spectra = sums / (len(images) * dim)
    profiles = np.stack([_diagonal(spectrum) for spectrum in spectra])
    profiles = profiles - profiles[:, :1]
    return {"labels": labels, "delta": profiles[:, -1], "profiles": profiles}
