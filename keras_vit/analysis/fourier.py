"""Fourier analysis of feature maps (Park & Kim, "How Do Vision Transformers
Work?", ICLR 2022, Fig. 2a and 8).

Each block's patch tokens form a feature map `(h, w, D)`. Its 2-D discrete
Fourier transform is taken over the spatial axes, channel by channel; the log
amplitude `log(|F| + eps)` is averaged over channels and images. The
**relative log amplitude** at a frequency is that average minus its value at
frequency 0, read along the diagonal of the spectrum. Park & Kim find that
multi-head self-attention lowers the high-frequency end (a low-pass filter)
and MLPs/convolutions raise it.

The summary number per map, `Δ log amplitude`, is the last entry of that
diagonal profile. Two definitions of "last" are available (`frequency=`):

- `"authors"` (default): the authors' notebook (`fourier_analysis.ipynb` of
  xxxnell/how-do-vits-work at 9571ff1, lines 221-230 and 268-269, 315)
  rolls the spectrum by `h/2`, keeps `diag()[h/2:]` and plots its last
  entry: diagonal index `(h - 1) // 2`, the highest *positive* frequency,
  `((h - 1) // 2) / h · 2π` (0.75π on an 8 × 8 grid, 0.857π on 14 × 14).
  The profile has `(min(h, w) - 1) // 2 + 1` entries.
- `"nyquist"` (an alternative): index `h // 2`, the Nyquist
  frequency `π` on an even grid. The profile has `min(h, w) // 2 + 1`
  entries. The Nyquist bin is real-valued, which lowers the mean log
  amplitude there by about 0.35 relative to its neighbours.

On an odd grid both end at the same bin and give the same numbers. On a
non-square grid the profile runs from `(0, 0)` to the last index of each
axis, sampled at the shorter axis's resolution (the authors' code assumes a
square grid).
"""

from __future__ import annotations

import keras
import numpy as np

from keras_vit._export import export
from keras_vit.analysis._walk import BlockWalker
from keras_vit.analysis._walk import batch_slices
from keras_vit.analysis._walk import check_images
from keras_vit.models import layout as names

DEFAULT_EPSILON = 1e-6
FREQUENCIES = ("authors", "nyquist")


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


def _check_frequency(frequency: str) -> str:
    if frequency not in FREQUENCIES:
        raise ValueError(
            f"`frequency` must be one of {FREQUENCIES}. Received: {frequency!r}"
        )
    return frequency


def _last_index(size: int, frequency: str) -> int:
    """The diagonal's last index along an axis of `size` bins."""
    return (size - 1) // 2 if frequency == "authors" else size // 2


def _diagonal_indices(height: int, width: int, frequency: str):
    last_h = _last_index(height, _check_frequency(frequency))
    last_w = _last_index(width, frequency)
    t = np.linspace(0.0, 1.0, min(last_h, last_w) + 1)
    return np.rint(t * last_h).astype(int), np.rint(t * last_w).astype(int)


def _diagonal(spectrum: np.ndarray, frequency: str = "authors") -> np.ndarray:
    """Values from frequency (0, 0) to the diagonal's last bin (see module)."""
    rows, cols = _diagonal_indices(*spectrum.shape, frequency)
    return spectrum[rows, cols]


@export("keras_vit.analysis.diagonal_frequencies")
def diagonal_frequencies(
    height: int, width: int, frequency: str = "authors"
) -> np.ndarray:
    """Frequencies of the entries of a relative log-amplitude profile.

    Args:
        height: Rows of the feature map.
        width: Columns of the feature map.
        frequency: `"authors"` (default) or `"nyquist"` (see module).

    Returns:
        `(T, 2)`: the vertical and horizontal frequency of each entry, in
        units of π (`2 k / n`).

    Example:

    ```python
    diagonal_frequencies(8, 8)[-1]  # [0.75, 0.75]
    diagonal_frequencies(8, 8, "nyquist")[-1]  # [1.0, 1.0]
    ```
    """
    rows, cols = _diagonal_indices(int(height), int(width), frequency)
    return np.stack([2.0 * rows / int(height), 2.0 * cols / int(width)], axis=1)


@export("keras_vit.analysis.log_amplitude_spectrum")
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


@export("keras_vit.analysis.relative_log_amplitude")
def relative_log_amplitude(
    maps, epsilon: float = DEFAULT_EPSILON, frequency: str = "authors"
) -> np.ndarray:
    """Log amplitude along the diagonal, relative to frequency 0.

    Args:
        maps: `(batch, h, w, channels)` feature maps.
        epsilon: Added to the amplitude before the log. Defaults to 1e-6.
        frequency: Where the diagonal ends: `"authors"` (default, index
            `(n - 1) // 2`, as Park & Kim's notebook) or `"nyquist"` (index
            `n // 2`, π). See the module docstring.

    Returns:
        `(T,)`: entry `t` is the mean log amplitude at the frequencies of
        `diagonal_frequencies(h, w, frequency)[t]` minus the one at 0 (so
        entry 0 is 0); the last entry is
        `high_frequency_log_amplitude(maps, frequency=frequency)`.

    Example:

    ```python
    relative_log_amplitude(maps)  # (4,) on an 8 x 8 map: 0 to 0.75π
    ```
    """
    profile = _diagonal(log_amplitude_spectrum(maps, epsilon), frequency)
    return profile - profile[0]


@export("keras_vit.analysis.high_frequency_log_amplitude")
def high_frequency_log_amplitude(
    maps, epsilon: float = DEFAULT_EPSILON, frequency: str = "authors"
) -> float:
    """Park & Kim's `Δ log amplitude`: the profile's last entry minus frequency 0.

    With `frequency="nyquist"` the last entry is `(π, π)`: a constant map
    gives the lowest value, `log(eps) - log(|c| h w + eps)`, and a
    checkerboard `(-1)^(i + j)` (all its energy at `(π, π)`) the highest,
    `log(h w + eps) - log(eps)`. With the default `"authors"` the last
    entry is the highest positive frequency, `(h - 1) // 2` (see the
    module): on an even grid the checkerboard then gives the lowest value
    too, and a cosine at that bin the highest. White noise gives about 0
    under `"nyquist"` and about `log(2) / 2 ≈ 0.35` under `"authors"`:
    frequency 0 and the Nyquist bin are real-valued, the authors' last bin
    is complex, and a complex Gaussian's mean log amplitude is higher by
    `log(2) / 2`.

    Args:
        maps: `(batch, h, w, channels)` feature maps.
        epsilon: Added to the amplitude before the log. Defaults to 1e-6.
        frequency: `"authors"` (default) or `"nyquist"`.

    Returns:
        A float.

    Example:

    ```python
    high_frequency_log_amplitude(maps)  # the authors' definition
    high_frequency_log_amplitude(maps, frequency="nyquist")  # at π
    ```
    """
    return float(relative_log_amplitude(maps, epsilon, frequency)[-1])


def token_map(tokens, grid_size: tuple[int, int], num_prefix_tokens: int) -> np.ndarray:
    """Drops the prefix tokens of `(B, N, D)` and lays the rest out `(B, h, w, D)`."""
    tokens = np.asarray(keras.ops.convert_to_numpy(tokens))
    batch, _, dim = tokens.shape
    return tokens[:, num_prefix_tokens:].reshape(batch, *grid_size, dim)


@export("keras_vit.analysis.feature_map_frequencies")
def feature_map_frequencies(
    model: keras.Model,
    images,
    sublayers: bool = True,
    epsilon: float = DEFAULT_EPSILON,
    batch_size: int = 32,
    frequency: str = "authors",
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
        frequency: Where the profiles end: `"authors"` (default, Park &
            Kim's notebook) or `"nyquist"` (π); see the module docstring.

    Returns:
        A dict with `"labels"` (list of str), `"delta"` (`(points,)`, the
        `Δ log amplitude` at each depth), `"profiles"` (`(points, T)`, the
        relative log amplitude along the diagonal at each depth),
        `"frequencies"` (`(T, 2)`, each profile entry's frequencies in
        units of π) and `"frequency"` (the definition used).

    Example:

    ```python
    result = feature_map_frequencies(model, images)
    result["labels"][:3], result["delta"][:3]  # ['embedding', 'msa_0', 'mlp_0']
    ```
    """
    _check_frequency(frequency)
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
    profiles = np.stack([_diagonal(spectrum, frequency) for spectrum in spectra])
    profiles = profiles - profiles[:, :1]
    return {
        "labels": labels,
        "delta": profiles[:, -1],
        "profiles": profiles,
        "frequencies": diagonal_frequencies(*layout.grid_size, frequency),
        "frequency": frequency,
    }
