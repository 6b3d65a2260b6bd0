"""Robustness to frequency-band noise (Park & Kim, ICLR 2022, Fig. 3 / 8).

Random noise restricted to a band of spatial frequencies is added to the
images, and the accuracy drop is recorded band by band. Park & Kim find ViTs
robust to high-frequency noise and hurt by low-frequency noise, CNNs the
other way round (MSAs are low-pass filters).

Frequencies are radial, in units of π radians per pixel: Nyquist is 1, so
`r = 2 * sqrt(fy² + fx²)` with `fy`, `fx` in cycles per pixel. Bands are
half-open `[low, high)`; the corners of the spectrum beyond `r = 1` belong to
any band whose `high` is at least 1. Noise is Gaussian white noise, filtered
by zeroing every Fourier coefficient outside the band (the same mask for all
channels), and scaled so that each image's noise has L2 norm `norm` (over
all pixels and channels; its RMS is `norm / sqrt(H * W * C)`). The noisy
images are not clipped, which would move energy to other frequencies.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_vit.analysis._walk import batch_slices


def radial_frequency(height: int, width: int) -> np.ndarray:
    """`(height, width)` radial frequency of each FFT bin, in units of π."""
    fy = np.fft.fftfreq(int(height))[:, None]
    fx = np.fft.fftfreq(int(width))[None, :]
    return 2.0 * np.sqrt(fy**2 + fx**2)


def frequency_bands(num_bands: int = 10) -> list[tuple[float, float]]:
    """Splits `[0, 1]` (0 to π) into `num_bands` equal bands."""
    if int(num_bands) < 1:
        raise ValueError(f"`num_bands` must be >= 1. Received: {num_bands}")
    edges = np.linspace(0.0, 1.0, int(num_bands) + 1)
    return [
        (float(low), float(high))
        for low, high in zip(edges[:-1], edges[1:], strict=True)
    ]


def band_mask(height: int, width: int, band: tuple[float, float]) -> np.ndarray:
    """Boolean `(height, width)` mask of the FFT bins inside `band`."""
    low, high = (float(b) for b in band)
    if not 0.0 <= low < high:
        raise ValueError(f"A band needs 0 <= low < high. Received: band={band}")
    radius = radial_frequency(height, width)
    mask = radius >= low
    if high < 1.0:
        mask &= radius < high
    return mask


def band_limited_noise(
    shape: tuple[int, int, int, int],
    band: tuple[float, float],
    norm: float,
    seed: int | np.random.Generator | None = None,
) -> np.ndarray:
    """Gaussian noise restricted to a band of spatial frequencies.

    Args:
        shape: `(batch, height, width, channels)`.
        band: `(low, high)` radial frequencies in units of π (see module).
        norm: L2 norm of each image's noise.
        seed: An int seed or a `numpy.random.Generator`.

    Returns:
        float32 noise of `shape`; each image's noise has L2 norm `norm`.

    Example:

    ```python
    noise = band_limited_noise((8, 32, 32, 3), band=(0.9, 1.0), norm=5.0)
    ```
    """
    if len(shape) != 4:
        raise ValueError(f"`shape` must be (batch, height, width, channels): {shape}")
    if float(norm) < 0:
        raise ValueError(f"`norm` must be >= 0. Received: norm={norm}")
    _, height, width, _ = shape
    mask = band_mask(height, width, band)
    if not mask.any():
        raise ValueError(
            f"The band {band} holds no frequency of a {height}x{width} grid."
        )
    rng = np.random.default_rng(seed)
    white = rng.standard_normal(shape)
    spectrum = np.fft.fft2(white, axes=(1, 2)) * mask[None, :, :, None]
    # The mask is symmetric under f -> -f, so the inverse is real.
    noise = np.real(np.fft.ifft2(spectrum, axes=(1, 2)))
    norms = np.sqrt((noise**2).sum(axis=(1, 2, 3), keepdims=True))
    return (noise * (float(norm) / np.maximum(norms, 1e-12))).astype("float32")


def _accuracy(model, images, labels, batch_size) -> float:
    correct = 0
    for part in batch_slices(len(images), batch_size):
        logits = keras.ops.convert_to_numpy(model.predict_on_batch(images[part]))
        correct += int((logits.argmax(axis=-1) == labels[part]).sum())
    return correct / len(images)


def noise_robustness(
    model: keras.Model,
    images,
    labels,
    bands: int | list[tuple[float, float]] = 10,
    norm: float | None = None,
    seed: int = 0,
    repeats: int = 1,
    batch_size: int = 32,
    verbose: int = 1,
) -> dict:
    """Accuracy drop under noise in each frequency band.

    Args:
        model: A classifier returning scores `(batch, classes)`.
        images: `(batch, height, width, channels)` in the model's range.
        labels: `(batch,)` integer classes.
        bands: A number of equal bands over 0 to π, or a list of
            `(low, high)` bands. Defaults to 10.
        norm: L2 norm of each image's noise. Defaults to an RMS of 0.1 per
            value, `0.1 * sqrt(H * W * C)` (5% of the `[-1, 1]` range).
        seed: Seed of the noise; each band gets its own draws.
        repeats: Noise draws per band; the accuracy is their mean (a
            steadier estimate on small test sets). Defaults to 1.
        batch_size: Images per forward pass. Defaults to 32.
        verbose: 1 shows a `keras.utils.Progbar` over the bands.

    Returns:
        A dict with `"bands"` (`(K, 2)`), `"clean_accuracy"` (float),
        `"accuracy"` (`(K,)`, under noise) and `"accuracy_drop"` (`(K,)`,
        clean minus noisy), and `"norm"`.

    Example:

    ```python
    result = noise_robustness(model, x_test, y_test, bands=5, norm=3.0)
    result["accuracy_drop"]  # one value per band, low to high frequency
    ```
    """
    images = np.asarray(keras.ops.convert_to_numpy(images), dtype="float32")
    labels = np.asarray(labels).astype("int64").reshape(-1)
    if images.ndim != 4:
        raise ValueError(f"Expected images (batch, h, w, c). Received: {images.shape}")
    if len(labels) != len(images) or not len(images):
        raise ValueError(
            f"Need one label per image: {len(images)} images, {len(labels)} labels."
        )
    if isinstance(bands, (int, np.integer)):
        bands = frequency_bands(int(bands))
    if int(repeats) < 1:
        raise ValueError(f"`repeats` must be >= 1. Received: repeats={repeats}")
    if norm is None:
        norm = 0.1 * float(np.sqrt(np.prod(images.shape[1:])))
    rng = np.random.default_rng(seed)
    clean = _accuracy(model, images, labels, batch_size)
    progbar = keras.utils.Progbar(
        len(bands), verbose=verbose, stateful_metrics=["drop"], unit_name="band"
    )
    accuracies = []
    for band in bands:
        accuracy = 0.0
        for _ in range(int(repeats)):
            noisy = images + band_limited_noise(images.shape, band, norm, rng)
            accuracy += _accuracy(model, noisy, labels, batch_size) / int(repeats)
        accuracies.append(accuracy)
        progbar.add(1, values=[("drop", clean - accuracies[-1])])
    accuracies = np.asarray(accuracies)
    return {
        "bands": np.asarray(bands, dtype="float64"),
        "clean_accuracy": clean,
        "accuracy": accuracies,
        "accuracy_drop": clean - accuracies,
        "norm": float(norm),
    }
