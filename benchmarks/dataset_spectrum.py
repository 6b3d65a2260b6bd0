"""How much high-frequency content the offline datasets have: digits vs glyphs.

Park & Kim's analyses (Fourier spectra of feature maps, robustness to noise
in frequency bands) need images with content up to the Nyquist frequency.
This script measures it on the 32x32 images the input pipeline produces
(`keras_vit.data.eval_dataset` at `image_size=32`, values in [-1, 1]): the
bundled `"digits"` (8x8, bilinearly resized to 32) and `"glyphs"` (rendered
at 32; `keras_vit.parkkim.glyphs`). For each, over the training split:

- the fraction of the spectral energy (each image's channels with their
  mean removed) at radial frequency |ω| above 0.25π, 0.5π and 0.75π, in
  radians per pixel (π = Nyquist); the same with the square annulus
  max(|ω_x|, |ω_y|) that Park & Kim's noise bands use;
- the mean log amplitude along the diagonal at (π, π) minus at 0, Park &
  Kim's `Δ log amplitude` (`keras_vit.analysis.fourier`), and the radial
  profile of the mean log amplitude.

Optionally (`--cnn-steps N`) it trains the same small CNN (3 convolutions,
94,538 parameters, Adam 1e-3, batches of 128, no augmentation) on each
dataset for N steps and prints the test accuracy and the CPU seconds: how
hard the task is.

Usage:

    python benchmarks/dataset_spectrum.py
    python benchmarks/dataset_spectrum.py --figure docs/figures/glyphs.png
    python benchmarks/dataset_spectrum.py --cnn-steps 400

Prints a Markdown table. The figure (example images and both spectra) is
written complete or not at all (temporary file, then rename).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

DATASETS = ("digits", "glyphs")
THRESHOLDS = (0.25, 0.5, 0.75)  # Multiples of π.
IMAGE_SIZE = 32


def pipeline_images(dataset: str, split: str) -> tuple[np.ndarray, np.ndarray]:
    """`(images, labels)` as `eval_dataset` gives them: `(n, 32, 32, 3)` in
    [-1, 1] and integer labels."""
    from keras_vit import data

    source = data.load_source(dataset, split)
    batches = data.eval_dataset(source, image_size=IMAGE_SIZE, global_batch_size=1000)
    images, labels = [], []
    for x, y in batches:
        images.append(x.numpy())
        labels.append(np.argmax(y.numpy(), axis=1))
    return np.concatenate(images), np.concatenate(labels)


def _frequencies(size: int) -> tuple[np.ndarray, np.ndarray]:
    """Radial and square-annulus frequency of each FFT bin, radians/pixel."""
    omega = 2 * np.pi * np.fft.fftfreq(size)  # in [-π, π)
    wy, wx = np.meshgrid(omega, omega, indexing="ij")
    return np.hypot(wx, wy), np.maximum(np.abs(wx), np.abs(wy))


def spectrum(images: np.ndarray) -> dict:
    """Energy fractions, `Δ log amplitude` and radial profile of `images`.

    Args:
        images: `(n, size, size, channels)`.

    Returns:
        A dict: `"radial"` and `"square"` (energy fraction above each of
        `THRESHOLDS`), `"delta"` (log amplitude at (π, π) minus at 0),
        `"profile"` (relative mean log amplitude per integer radius 0 to
        size/2, i.e. |ω| from 0 to π) and `"above"` (`(frequencies, fraction
        of the energy above each)` for a curve).
    """
    from keras_vit.analysis import fourier

    images = np.asarray(images, np.float64)
    size = images.shape[1]
    centred = images - images.mean(axis=(1, 2), keepdims=True)
    power = (np.abs(np.fft.fft2(centred, axes=(1, 2))) ** 2).sum(axis=(0, 3))
    radial, square = _frequencies(size)
    total = power.sum()
    result = {
        "radial": [power[radial > t * np.pi].sum() / total for t in THRESHOLDS],
        "square": [power[square > t * np.pi].sum() / total for t in THRESHOLDS],
        "delta": fourier.high_frequency_log_amplitude(images),
    }
    log_amplitude = fourier.log_amplitude_spectrum(images)  # (size, size)
    radius = np.rint(radial * size / (2 * np.pi)).astype(int)  # index units
    profile = np.asarray(
        [log_amplitude[radius == r].mean() for r in range(size // 2 + 1)]
    )
    result["profile"] = profile - profile[0]
    grid = np.linspace(0.0, np.pi, 65)
    result["above"] = (
        grid,
        np.asarray([power[radial > w].sum() / total for w in grid]),
    )
    return result


def small_cnn_accuracy(train, test, steps: int, seed: int = 0) -> tuple[float, float]:
    """Test accuracy of a small CNN after `steps` batches of 128, and the
    CPU seconds the training took."""
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(seed)
    layers = keras.layers
    model = keras.Sequential(
        [
            keras.Input((IMAGE_SIZE, IMAGE_SIZE, 3)),
            layers.Conv2D(32, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(64, 3, padding="same", activation="relu"),
            layers.MaxPooling2D(),
            layers.Conv2D(128, 3, padding="same", activation="relu"),
            layers.GlobalAveragePooling2D(),
            layers.Dense(10),
        ]
    )
    model.compile(
        keras.optimizers.Adam(1e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    batches = (
        tf.data.Dataset.from_tensor_slices(train)
        .shuffle(len(train[0]), seed=seed)
        .repeat()
        .batch(128)
    )
    start = time.process_time()
    model.fit(batches, steps_per_epoch=steps, epochs=1, shuffle=False, verbose=0)
    seconds = time.process_time() - start
    accuracy = model.evaluate(*test, batch_size=500, verbose=0)[1]
    return float(accuracy), seconds


def table(results: dict, accuracies: dict | None = None, steps: int = 0) -> str:
    names = list(results)
    lines = [
        "| | " + " | ".join(names) + " |",
        "|---" * (len(names) + 1) + "|",
    ]
    for kind in ("radial", "square"):
        for i, t in enumerate(THRESHOLDS):
            cells = [f"{100 * results[n][kind][i]:.2f}%" for n in names]
            lines.append(
                f"| energy above {t:.2f}π ({kind}) | " + " | ".join(cells) + " |"
            )
    cells = [f"{results[n]['delta']:.2f}" for n in names]
    lines.append("| Δ log amplitude at (π, π) | " + " | ".join(cells) + " |")
    for fraction in (0.5, 1.0):
        r = int(round(fraction * IMAGE_SIZE / 2))
        cells = [f"{results[n]['profile'][r]:.2f}" for n in names]
        lines.append(
            f"| radial log amplitude at {fraction:g}π | " + " | ".join(cells) + " |"
        )
    if accuracies:
        cells = [
            f"{100 * accuracies[n][0]:.1f}% ({accuracies[n][1]:.0f} CPU s)"
            for n in names
        ]
        lines.append(
            f"| small CNN, test accuracy after {steps} steps | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)


def write_figure(path: str, examples: dict, results: dict) -> None:
    """Example images of each dataset and the two spectra, as a PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(10.0, 4.0), dpi=100, layout="constrained")
    FigureCanvasAgg(figure)
    grid = figure.add_gridspec(2, 3, width_ratios=(1.2, 1, 1))
    for row, name in enumerate(DATASETS):
        axes = figure.add_subplot(grid[row, 0])
        tiles = (examples[name][:18] + 1.0) / 2.0  # (18, 32, 32, 3) in [0, 1]
        tiles = tiles.reshape(3, 6, IMAGE_SIZE, IMAGE_SIZE, 3)
        mosaic = np.pad(
            tiles, ((0, 0), (0, 0), (1, 1), (1, 1), (0, 0)), constant_values=1
        )
        mosaic = mosaic.transpose(0, 2, 1, 3, 4).reshape(3 * 34, 6 * 34, 3)
        axes.imshow(np.clip(mosaic, 0, 1), interpolation="nearest")
        axes.set_axis_off()
        source = "8x8, resized" if name == "digits" else "rendered"
        axes.set_title(f"{name} ({source}) at {IMAGE_SIZE} px", fontsize=9)
    axes = figure.add_subplot(grid[:, 1])
    frequency = np.arange(IMAGE_SIZE // 2 + 1) / (IMAGE_SIZE // 2)
    for name in DATASETS:
        axes.plot(frequency, results[name]["profile"], marker=".", label=name)
    axes.set_xlabel("radial frequency ω (× π)")
    axes.set_ylabel("mean log amplitude, relative to ω = 0")
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3)
    axes = figure.add_subplot(grid[:, 2])
    for name in DATASETS:
        omega, above = results[name]["above"]
        axes.semilogy(omega / np.pi, np.maximum(above, 1e-6), label=name)
    axes.set_xlabel("radial frequency ω (× π)")
    axes.set_ylabel("fraction of energy above ω")
    axes.set_ylim(1e-5, 1.2)
    axes.legend(fontsize=8)
    axes.grid(alpha=0.3)
    folder = os.path.dirname(os.path.abspath(path))
    handle, temporary = tempfile.mkstemp(suffix=".png", dir=folder)
    try:
        with os.fdopen(handle, "wb") as file:
            figure.savefig(file, format="png")
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        os.remove(temporary)
        raise


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", default="train", help="split to measure")
    parser.add_argument("--figure", help="write a PNG of examples and spectra")
    parser.add_argument(
        "--cnn-steps",
        type=int,
        default=0,
        help="train a small CNN for this many batches of 128 on each dataset",
    )
    args = parser.parse_args(argv)
    results, examples, accuracies = {}, {}, {}
    for name in DATASETS:
        start = time.process_time()
        images, labels = pipeline_images(name, args.split)
        results[name] = spectrum(images)
        examples[name] = images
        print(
            f"{name}: {len(images)} images of split {args.split!r} in "
            f"{time.process_time() - start:.1f} CPU s",
            file=sys.stderr,
        )
        if args.cnn_steps > 0:
            test = pipeline_images(name, "test")
            accuracies[name] = small_cnn_accuracy(
                (images, labels), test, args.cnn_steps
            )
    print(table(results, accuracies, args.cnn_steps))
    if args.figure:
        write_figure(args.figure, examples, results)
        print(f"Wrote {args.figure}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
