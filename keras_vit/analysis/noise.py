"""Robustness to frequency-band noise (Park & Kim, ICLR 2022, Fig. 2b).

Random noise restricted to a band of spatial frequencies is added to the
images, and the accuracy drop is recorded band by band. Park & Kim find ViTs
robust to high-frequency noise and hurt by low-frequency noise, ResNets the
other way round (MSAs are low-pass filters). Two protocols are available
(`protocol=` of `noise_robustness`):

**`"authors"` (default).** The authors' noise, from `Random` and
`FreqAttack` in `ops/adversarial.py` (xxxnell/how-do-vits-work at 9571ff1,
lines 99-175) and the author's pseudo-code in xxxnell/how-do-vits-work#44
(their Fig. 2b script is unreleased): sign noise `±epsilon`, drawn independently
for every pixel and channel, is Fourier-transformed over the spatial axes
and multiplied by a **square (L∞) annulus** around the frequency `f`
(radians per pixel, `0` to `π`) of half-width `width` (0.2 rad); the same
mask serves every channel; the real part of the inverse transform is the
noise. It is **not renormalised**: its energy grows with the annulus's
area, so its RMS rises about tenfold from `f = 0` to `f = π` (reported per
band as `"noise_rms"`).

The annulus is `M(f + s) - M(f - s)`, where `M(r)` keeps the centred
square of `2 m` frequency indices per axis, `m = trunc(r n / 2π)`: integer
frequencies `k` with `-m <= k <= m - 1` (all of them once `2 m >= n`).
The square is one index longer on the negative side; taking the real part
of the inverse FFT averages the mask with its mirror image, so the
effective filter is `(M(k) + M(-k)) / 2`: 1 inside, 1/2 on the unpaired
edge. The authors' code needs a square image of even size; the same index
rule is applied here to each axis of any size. On a small image the
lowest annulus can be empty (at 16 px, `trunc(0.2 * 16 / 2π) = 0`: no
noise at `f = 0`, and a reported RMS of 0).

**`"equal_energy"`** (an alternative). Gaussian white noise is
filtered to a band `[low, high)` of **radial** frequency in units of π
(Nyquist is 1, `r = 2 sqrt(fy² + fx²)` with `fy`, `fx` in cycles per pixel;
the spectrum's corners beyond `r = 1` belong to any band whose `high` is at
least 1), and each image's noise is **rescaled to L2 norm `norm`** (over all
pixels and channels; RMS `norm / sqrt(H W C)`), the same energy in every
band.

Under both, the noisy images are not clipped, which would move energy to
other frequencies.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_vit._export import export
from keras_vit.analysis._walk import batch_slices

PROTOCOLS = ("authors", "equal_energy")
AUTHORS_EPSILON = 0.7  # the pseudo-code of how-do-vits-work#44
AUTHORS_WIDTH = 0.2  # `FreqAttack`'s `s`, radians


def authors_frequencies(count: int = 11) -> np.ndarray:
    """`count` frequencies from 0 to π (radians per pixel), Fig. 2b's axis."""
    if int(count) < 1:
        raise ValueError(f"`count` must be >= 1. Received: {count}")
    return np.linspace(0.0, np.pi, int(count))


def _check_noise_shape(shape, **amplitude) -> tuple:
    """`shape` as `(batch, height, width, channels)`; the amplitude `>= 0`."""
    if len(shape) != 4:
        raise ValueError(f"`shape` must be (batch, height, width, channels): {shape}")
    ((name, value),) = amplitude.items()
    if not float(value) >= 0:
        raise ValueError(f"`{name}` must be >= 0. Received: {name}={value}")
    return tuple(shape)


def _centred_square(size: int, radius: float) -> np.ndarray:
    """1-D indicator, in FFT order, of the authors' centred square `M(radius)`."""
    half = int(radius * size / (2 * np.pi))  # truncates toward 0, as int()
    if 2 * half >= size:
        return np.ones(size, dtype=bool)
    k = np.rint(np.fft.fftfreq(size) * size).astype(int)
    return (k >= -half) & (k <= half - 1)


@export("keras_vit.analysis.square_annulus_mask")
def square_annulus_mask(
    height: int, width: int, frequency: float, half_width: float = AUTHORS_WIDTH
) -> np.ndarray:
    """The authors' `FreqAttack` mask: a square annulus around `frequency`.

    Args:
        height: Rows of the image.
        width: Columns of the image.
        frequency: Centre `f` in radians per pixel (0 to π).
        half_width: `s`, in radians. Defaults to 0.2.

    Returns:
        float64 `(height, width)` mask of 0s and 1s in NumPy's FFT order
        (frequency 0 at `[0, 0]`): `M(f + s) - M(f - s)` (see module).

    Example:

    ```python
    mask = square_annulus_mask(32, 32, frequency=np.pi / 2)
    ```
    """
    frequency, half_width = float(frequency), float(half_width)
    if not 0.0 <= frequency <= np.pi or half_width <= 0:
        raise ValueError(
            "Need 0 <= frequency <= π and half_width > 0 (radians). Received: "
            f"frequency={frequency}, half_width={half_width}"
        )
    outer = np.outer(
        _centred_square(height, frequency + half_width),
        _centred_square(width, frequency + half_width),
    )
    inner = np.outer(
        _centred_square(height, frequency - half_width),
        _centred_square(width, frequency - half_width),
    )
    return (outer & ~inner).astype("float64")


def effective_filter(mask: np.ndarray) -> np.ndarray:
    """`(M(k) + M(-k)) / 2`: what taking the real part makes of a mask."""
    mirrored = np.roll(np.flip(mask, axis=(0, 1)), shift=(1, 1), axis=(0, 1))
    return (mask + mirrored) / 2


@export("keras_vit.analysis.sign_band_noise")
def sign_band_noise(
    shape: tuple[int, int, int, int],
    frequency: float,
    epsilon: float = AUTHORS_EPSILON,
    half_width: float = AUTHORS_WIDTH,
    seed: int | np.random.Generator | None = None,
) -> np.ndarray:
    """The authors' frequency noise: sign noise in a square annulus.

    Args:
        shape: `(batch, height, width, channels)`.
        frequency: Centre `f` of the annulus, radians per pixel (0 to π).
        epsilon: Amplitude of the sign noise before filtering, in the
            model's input units. Defaults to 0.7 (how-do-vits-work#44's pseudo-code,
            whose inputs are ImageNet-normalised: 0.7 there is about 0.16 of
            the `[0, 1]` pixel range, or 0.31 in `[-1, 1]` units).
        half_width: `s`, in radians. Defaults to 0.2.
        seed: An int seed or a `numpy.random.Generator`.

    Returns:
        float32 noise of `shape`, not renormalised: its expected RMS is
        `epsilon * sqrt(mean(effective_filter(mask) ** 2))`.

    Example:

    ```python
    noise = sign_band_noise((8, 32, 32, 3), frequency=np.pi, epsilon=0.7)
    ```
    """
    _, height, width, _ = _check_noise_shape(shape, epsilon=epsilon)
    mask = square_annulus_mask(height, width, frequency, half_width)
    rng = np.random.default_rng(seed)
    signs = float(epsilon) * np.sign(rng.standard_normal(shape))  # ±eps
    spectrum = np.fft.fft2(signs, axes=(1, 2)) * mask[None, :, :, None]
    return np.real(np.fft.ifft2(spectrum, axes=(1, 2))).astype("float32")


def radial_frequency(height: int, width: int) -> np.ndarray:
    """`(height, width)` radial frequency of each FFT bin, in units of π."""
    fy = np.fft.fftfreq(int(height))[:, None]
    fx = np.fft.fftfreq(int(width))[None, :]
    return 2.0 * np.sqrt(fy**2 + fx**2)


@export("keras_vit.analysis.frequency_bands")
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
    """Boolean `(height, width)` mask of the FFT bins inside a radial `band`."""
    low, high = (float(b) for b in band)
    if not 0.0 <= low < high:
        raise ValueError(f"A band needs 0 <= low < high. Received: band={band}")
    radius = radial_frequency(height, width)
    mask = radius >= low
    if high < 1.0:
        mask &= radius < high
    return mask


@export("keras_vit.analysis.band_limited_noise")
def band_limited_noise(
    shape: tuple[int, int, int, int],
    band: tuple[float, float],
    norm: float,
    seed: int | np.random.Generator | None = None,
) -> np.ndarray:
    """Gaussian noise in a radial band, rescaled to a fixed L2 norm per image.

    The `"equal_energy"` protocol (see module).

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
    _, height, width, _ = _check_noise_shape(shape, norm=norm)
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


def _correct(model, images, labels, batch_size) -> np.ndarray:
    """`(N,)` bools: whether the model classifies each image right."""
    correct = np.zeros(len(images), dtype=bool)
    for part in batch_slices(len(images), batch_size):
        logits = keras.ops.convert_to_numpy(model.predict_on_batch(images[part]))
        correct[part] = logits.argmax(axis=-1) == labels[part]
    return correct


def _resolve_protocol(protocol, authors: dict, equal_energy: dict) -> str:
    """The protocol asked for, checking that no argument of the other is set."""
    given_authors = [name for name, value in authors.items() if value is not None]
    given_equal = [name for name, value in equal_energy.items() if value is not None]
    if protocol is None:
        protocol = "equal_energy" if given_equal else "authors"
    if protocol not in PROTOCOLS:
        raise ValueError(
            f"`protocol` must be one of {PROTOCOLS}. Received: {protocol!r}"
        )
    wrong = given_equal if protocol == "authors" else given_authors
    if wrong:
        names = ", ".join(f"`{name}`" for name in wrong)
        raise ValueError(
            f"{names} cannot be used with protocol={protocol!r}: `frequencies`, "
            "`epsilon` and `width` belong to 'authors', `bands` and `norm` to "
            "'equal_energy'."
        )
    return protocol


@export("keras_vit.analysis.noise_robustness")
def noise_robustness(
    model: keras.Model,
    images,
    labels,
    bands: int | list[tuple[float, float]] | None = None,
    norm: float | None = None,
    seed: int = 0,
    repeats: int = 1,
    batch_size: int = 32,
    verbose: int = 1,
    *,
    protocol: str | None = None,
    frequencies=None,
    epsilon: float | None = None,
    width: float | None = None,
) -> dict:
    """Accuracy drop under noise in each frequency band (Park & Kim, Fig. 2b).

    Args:
        model: A classifier returning scores `(batch, classes)`.
        images: `(batch, height, width, channels)` in the model's range.
        labels: `(batch,)` integer classes.
        bands: `"equal_energy"` only: a number of equal radial bands over 0
            to π, or a list of `(low, high)` bands in units of π. Defaults to
            10.
        norm: `"equal_energy"` only: L2 norm of each image's noise. Defaults
            to an RMS of 0.1 per value, `0.1 * sqrt(H * W * C)`.
        seed: Seed of the noise; each band gets its own draws.
        repeats: Noise draws per band; the accuracy is their mean (a
            steadier estimate on small test sets). Defaults to 1.
        batch_size: Images per forward pass. Defaults to 32.
        verbose: 1 shows a `keras.utils.Progbar` over the bands.
        protocol: `"authors"` (Park & Kim's sign noise in a square annulus,
            not renormalised) or `"equal_energy"` (Gaussian noise in radial
            bands, each rescaled to L2 norm `norm`); see the module
            docstring. When left out, passing `bands` or `norm` selects
            `"equal_energy"`, otherwise `"authors"`.
        frequencies: `"authors"` only: annulus centres, radians per pixel in
            `[0, π]`. Defaults to 11 from 0 to π (`authors_frequencies()`).
        epsilon: `"authors"` only: amplitude of the sign noise, in the
            model's input units. Defaults to 0.7 (see `sign_band_noise`).
        width: `"authors"` only: the annulus half-width `s` in radians.
            Defaults to 0.2.

    Returns:
        A dict with `"protocol"`, `"clean_accuracy"` (float), `"accuracy"`
        (`(K,)`, under noise), `"accuracy_drop"` (`(K,)`, clean minus
        noisy), `"noise_rms"` (`(K,)`, the RMS of the noise added in each
        band, over every value of every draw), `"bands"` (`(K, 2)`, in
        units of π), and per image `"clean_correct"` (`(N,)` bools) and
        `"correct"` (`(K, N)`, the share of its `repeats` draws classified
        right in each band): two models measured on the same images can be
        compared image by image (a paired error). `"authors"` adds
        `"frequencies"` (`(K,)`, radians), `"epsilon"`, `"width"` and
        `"expected_noise_rms"` (`(K,)`, the RMS's expectation, `epsilon *
        sqrt(mean(filter²))`); its `"bands"` are `f ∓ s` clipped to `[0,
        π]`. `"equal_energy"` adds `"norm"`.

    Example:

    ```python
    result = noise_robustness(model, x_test, y_test)  # the authors' protocol
    result["accuracy_drop"], result["noise_rms"]  # per frequency, 0 to π
    old = noise_robustness(model, x_test, y_test, bands=5, norm=3.0)
    ```
    """
    protocol = _resolve_protocol(
        protocol,
        {"frequencies": frequencies, "epsilon": epsilon, "width": width},
        {"bands": bands, "norm": norm},
    )
    images = np.asarray(keras.ops.convert_to_numpy(images), dtype="float32")
    labels = np.asarray(labels).astype("int64").reshape(-1)
    if images.ndim != 4:
        raise ValueError(f"Expected images (batch, h, w, c). Received: {images.shape}")
    if len(labels) != len(images) or not len(images):
        raise ValueError(
            f"Need one label per image: {len(images)} images, {len(labels)} labels."
        )
    if int(repeats) < 1:
        raise ValueError(f"`repeats` must be >= 1. Received: repeats={repeats}")
    _, height, width_px, _ = images.shape
    if protocol == "authors":
        frequencies = (
            authors_frequencies()
            if frequencies is None
            else np.asarray(frequencies, dtype="float64").reshape(-1)
        )
        epsilon = AUTHORS_EPSILON if epsilon is None else float(epsilon)
        width = AUTHORS_WIDTH if width is None else float(width)
        if not len(frequencies):
            raise ValueError("`frequencies` is empty.")
        masks = [  # checks every frequency before any model call
            square_annulus_mask(height, width_px, f, width) for f in frequencies
        ]

        def draw(index, rng):
            return sign_band_noise(
                images.shape, frequencies[index], epsilon, width, rng
            )

        count = len(frequencies)
    else:
        bands = 10 if bands is None else bands
        if isinstance(bands, (int, np.integer)):
            bands = frequency_bands(int(bands))
        bands = [tuple(float(b) for b in band) for band in bands]
        for band in bands:  # a band off the grid fails before any model call
            if not band_mask(height, width_px, band).any():
                raise ValueError(
                    f"The band {band} holds no frequency of a {height}x{width_px} grid."
                )
        if norm is None:
            norm = 0.1 * float(np.sqrt(np.prod(images.shape[1:])))

        def draw(index, rng):
            return band_limited_noise(images.shape, bands[index], norm, rng)

        count = len(bands)
    rng = np.random.default_rng(seed)
    clean_correct = _correct(model, images, labels, batch_size)
    clean = float(clean_correct.mean())
    progbar = keras.utils.Progbar(
        count, verbose=verbose, stateful_metrics=["drop"], unit_name="band"
    )
    correct, rms = [], []  # correct: (K, N), each image's share of right draws
    for index in range(count):
        hits, squares = np.zeros(len(images)), 0.0
        for _ in range(int(repeats)):
            noise = draw(index, rng)
            squares += float(np.mean(noise.astype("float64") ** 2))
            hits += _correct(model, images + noise, labels, batch_size)
        correct.append(hits / int(repeats))
        rms.append(np.sqrt(squares / int(repeats)))
        progbar.add(1, values=[("drop", clean - correct[-1].mean())])
    correct = np.asarray(correct, dtype="float32")
    accuracies = correct.mean(axis=1, dtype="float64")
    result = {
        "protocol": protocol,
        "clean_accuracy": clean,
        "accuracy": accuracies,
        "accuracy_drop": clean - accuracies,
        "noise_rms": np.asarray(rms),
        "clean_correct": clean_correct,
        "correct": correct,
    }
    if protocol == "authors":
        result.update(
            frequencies=np.asarray(frequencies, dtype="float64"),
            bands=np.stack(
                [
                    np.clip(frequencies - width, 0, np.pi) / np.pi,
                    np.clip(frequencies + width, 0, np.pi) / np.pi,
                ],
                axis=1,
            ),
            epsilon=epsilon,
            width=width,
            expected_noise_rms=np.array(
                [epsilon * np.sqrt(np.mean(effective_filter(m) ** 2)) for m in masks]
            ),
        )
    else:
        result.update(bands=np.asarray(bands, dtype="float64"), norm=float(norm))
    return result
