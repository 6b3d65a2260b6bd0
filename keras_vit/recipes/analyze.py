"""Writes the inspection figures of a ViT as PNG files and TensorBoard images.

The ViT paper's Fig. 7 and Appendix D (embedding filters, position-embedding
similarity, mean attention distance, attention rollout), the raw attention of
one block, and Park & Kim's "How Do Vision Transformers Work?" analyses
(Fourier analysis of feature maps, Hessian max-eigenvalue spectrum,
robustness to frequency-band noise).

Usage:

```bash
python -m recipes.analyze --model digits_vit.keras --images digits --out figures/
python -m recipes.analyze --variant B/16 --weights vit_b16.npz --num-classes 1000 \
    --images my_images/ --out figures/ --logdir tb/ --only rollout,distance
```

`--images` is a directory of image files (with one sub-directory per class,
in sorted order, if labels are wanted), an `.npz` file with `images` (uint8
pixels, or floats in `[-1, 1]`) and optionally `labels`, or
`digits[:SPLIT]` (the embedded scikit-learn digits, `test` split by default,
through the same evaluation pipeline as training: `keras_vit.data`). In a
directory, files Pillow cannot read as images (truncated, another format)
are skipped and listed on stderr, as training skips them. The model is fed
the images normalised by its input contract (`preprocessing_of(model)`,
e.g. ImageNet's mean and std for DeiT III), or `[0, 255]` pixels when it
has its own `preprocessing` layer.

Each figure is `<out>/<name>.png` with its caption drawn under it and stored
as PNG metadata; with `--logdir` the same images go to TensorBoard
(`tf.summary.image`, caption as description). The Hessian and noise analyses
need labels.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time

import numpy as np

from keras_vit import atomic
from keras_vit import paths
from keras_vit.recipes import cli

ANALYSES = (
    "filters",
    "position",
    "attention",
    "distance",
    "rollout",
    "fourier",
    "hessian",
    "noise",
)
NEEDS_LABELS = ("hessian", "noise")


def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(
        prog=cli.prog("analyze"),
        description=__doc__.split("\n\n")[0],
    )
    cli.add_model_arguments(parser, "--image-size")
    parser.add_argument(
        "--images",
        required=True,
        help="an image directory, an .npz file, or 'digits[:SPLIT]'",
    )
    parser.add_argument("--out", required=True, help="directory for the PNG files")
    parser.add_argument("--logdir", help="also write the figures to TensorBoard here")
    parser.add_argument(
        "--only", help=f"comma-separated subset of: {','.join(ANALYSES)}"
    )
    parser.add_argument(
        "--max-images",
        type=cli.positive_int_arg,
        default=64,
        help="analyse at most this many images, the first ones (default 64)",
    )
    parser.add_argument(
        "--batch-size",
        type=cli.positive_int_arg,
        default=32,
        help="images per forward pass of 'distance', 'fourier' and 'noise' "
        "(default 32)",
    )
    parser.add_argument(
        "--block",
        type=int,
        default=-1,
        help="block of the 'attention' figure; negative counts from the last "
        "(default -1)",
    )
    parser.add_argument(
        "--rollout-images",
        type=cli.positive_int_arg,
        default=6,
        help="images of the 'rollout' figure (default 6)",
    )
    parser.add_argument(
        "--hessian-batches",
        type=cli.positive_int_arg,
        default=4,
        help="batches of 'hessian', one spectrum each (default 4)",
    )
    parser.add_argument(
        "--hessian-batch-size",
        type=cli.positive_int_arg,
        default=16,
        help="images per batch of 'hessian' (default 16)",
    )
    parser.add_argument(
        "--hessian-top-k",
        type=cli.positive_int_arg,
        default=5,
        help="largest eigenvalues of 'hessian' per batch (default 5)",
    )
    parser.add_argument(
        "--hessian-iterations",
        type=cli.positive_int_arg,
        default=20,
        help="power iterations per eigenvalue of 'hessian' (default 20)",
    )
    parser.add_argument(
        "--noise-bands",
        type=cli.positive_int_arg,
        default=10,
        help="equal frequency bands from 0 to pi of 'noise' (default 10)",
    )
    parser.add_argument(
        "--noise-norm",
        type=float,
        help="L2 norm of each image's noise, in model-input units (default: "
        "an RMS of 0.1 per value)",
    )
    parser.add_argument(
        "--noise-repeats",
        type=cli.positive_int_arg,
        default=1,
        help="noise draws per band of 'noise' (default 1)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        help="seed of the Hessian's starting vectors and of the noise (default 0)",
    )
    parser.add_argument("--verbose", type=int, default=1, help="0 hides progress bars")
    return parser


def digits_images(image_size: tuple[int, int], channels: int, split: str = "test"):
    """The digits' held-out split, through the evaluation pipeline of training."""
    from keras_vit import data

    source = data.load_source("digits", split)
    dataset = data.eval_dataset(
        source, image_size=image_size, global_batch_size=512, channels=channels
    )
    images, labels = [], []
    for batch_images, batch_labels in dataset:
        images.append(batch_images.numpy())
        labels.append(batch_labels.numpy().argmax(axis=-1))  # one-hot -> index
    return np.concatenate(images).astype("float32"), np.concatenate(labels)


def _fit(images: np.ndarray, image_size, channels) -> np.ndarray:
    """Resizes `(N, H, W, C)` images and matches the channel count."""
    import tensorflow as tf

    if images.ndim == 3:
        images = images[..., None]
    if images.ndim != 4:
        cli.fail(f"images must be (N, H, W[, C]), not {images.shape}")
    if images.shape[-1] != channels:
        if images.shape[-1] == 1:
            images = np.repeat(images, channels, axis=-1)
        elif images.shape[-1] == 3 and channels == 1:
            images = images.mean(axis=-1, keepdims=True)
        else:
            cli.fail(
                f"images have {images.shape[-1]} channels; the model takes {channels}"
            )
    if tuple(images.shape[1:3]) != tuple(image_size):
        images = tf.image.resize(images, image_size, method="bilinear").numpy()
    return images.astype("float32")


def load_images(source: str, image_size, channels):
    """Returns `(images in [-1, 1], labels or None)`."""
    if source == "digits" or source.startswith("digits:"):
        split = source.partition(":")[2] or "test"
        return digits_images(image_size, channels, split)
    if source.endswith(".npz"):
        images, labels = _load_npz(source)
        if images.dtype == np.uint8:
            images = images.astype("float32") / 127.5 - 1.0
        return _fit(images, image_size, channels), labels
    if os.path.isdir(source):
        return _load_directory(source, image_size, channels)
    cli.fail(f"--images {source!r} is not a directory, an .npz file or 'digits'")


def _load_npz(source: str):
    """`(images, labels or None)` of an `.npz` file; a bad file is one line.

    Read as checkpoints are (`keras_vit.weights.formats.npz.read_arrays`):
    each array's claimed shape is checked against its record and the cap
    of `keras_vit.weights.formats.limits` before it is allocated, so a
    small file cannot claim terabytes.
    """
    from keras_vit.weights.errors import CheckpointError
    from keras_vit.weights.formats import npz

    try:
        data = npz.read_arrays(source, keys=("images", "x", "labels", "y"))
    except (OSError, CheckpointError) as error:
        detail = str(error).strip() or type(error).__name__
        cli.fail(f"--images {source!r} cannot be read as an .npz file: {detail}")
    key = "images" if "images" in data else "x" if "x" in data else None
    if key is None:
        cli.fail(f"{source} has no 'images' (or 'x') array")
    labels = data["labels"] if "labels" in data else data.get("y")
    return data[key], labels


def _load_directory(source, image_size, channels):
    """Every image Pillow reads in `source` (or its class folders), resized.

    Files that are not readable images (truncated, another format) are
    skipped and listed in one line on stderr, as training skips them.
    """
    from PIL import Image

    classes = sorted(entry.name for entry in os.scandir(source) if entry.is_dir())
    folders = [
        (os.path.join(source, name), index) for index, name in enumerate(classes)
    ]
    folders = folders or [(source, None)]
    images, labels, skipped = [], [], []
    for folder, label in folders:
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if name.startswith(".") or not os.path.isfile(path):
                continue
            try:
                with Image.open(path) as image:
                    image = image.convert("L" if channels == 1 else "RGB")
                    image = image.resize(image_size[::-1], Image.BILINEAR)
                    images.append(np.asarray(image, dtype="float32"))
            except Exception:  # Pillow raises many types for bad files.
                skipped.append(os.path.relpath(path, source))
                continue
            labels.append(label)
    listed = ", ".join(skipped[:20]) + (
        f" and {len(skipped) - 20} more" if len(skipped) > 20 else ""
    )
    if not images:
        found = f" (skipped as unreadable: {listed})" if skipped else ""
        cli.fail(f"no readable image file in {source}{found}")
    if skipped:
        print(  # noqa: T201
            f"warning: skipped {len(skipped)} file(s) in {source} that are not "
            f"readable images: {listed}",
            file=sys.stderr,
            flush=True,
        )
    images = np.stack(images) / 127.5 - 1.0
    labels = None if folders[0][1] is None else np.asarray(labels, dtype="int64")
    return _fit(images, image_size, channels), labels


def model_inputs_of(model, images: np.ndarray):
    """`(model_inputs, value_range)` of `[-1, 1]` images for `model`.

    A model with a `preprocessing` layer takes `[0, 255]` pixels; another
    takes them normalised by its input contract (`preprocessing_of(model)`:
    `[-1, 1]` for the paper's, ImageNet's mean and std for DeiT III and
    DINOv2). `value_range` is the inputs' range (per-channel ranges
    averaged), which scales the default noise norm.
    """
    from keras_vit.analysis import token_layout
    from keras_vit.data.transforms import normalize
    from keras_vit.models.preprocessing import preprocessing_of

    if token_layout(model).has_preprocessing:
        return (images + 1.0) * 127.5, (0.0, 255.0)
    preprocessing = preprocessing_of(model)
    if preprocessing.is_inception:
        return images, (-1.0, 1.0)
    pixels = (images + 1.0) * 127.5
    inputs = normalize(pixels, preprocessing).numpy()
    scale, offset = np.asarray(preprocessing.scale), np.asarray(preprocessing.offset)
    value_range = (float(offset.mean()), float((255.0 * scale + offset).mean()))
    return inputs, value_range


def selected_analyses(args, has_labels: bool, parser) -> list[str]:
    if args.only:
        chosen = [name.strip() for name in args.only.split(",") if name.strip()]
        unknown = sorted(set(chosen) - set(ANALYSES))
        if unknown:
            parser.error(f"--only: unknown analyses {unknown}; choose from {ANALYSES}")
        missing = [name for name in chosen if name in NEEDS_LABELS and not has_labels]
        if missing:
            parser.error(
                f"{missing} need labels, and --images {args.images!r} has none."
            )
        return [name for name in ANALYSES if name in chosen]
    chosen = list(ANALYSES)
    if not has_labels:
        print(f"No labels in {args.images!r}: skipping {', '.join(NEEDS_LABELS)}.")
        chosen = [name for name in chosen if name not in NEEDS_LABELS]
    return chosen


def make_figure(name, args, model, images, labels, model_inputs, value_range):
    """Runs one analysis and returns its `CaptionedFigure`."""
    from keras_vit import analysis
    from keras_vit.analysis import plotting

    layout = analysis.token_layout(model)
    if name == "filters":
        return plotting.plot_embedding_filters(analysis.embedding_filters(model))
    if name == "position":
        return plotting.plot_position_similarity(
            analysis.position_embedding_similarity(model)
        )
    if name == "attention":
        block = args.block % layout.depth
        scores = analysis.attention_weights(model, model_inputs[:1], blocks=block)[
            block
        ]
        return plotting.plot_attention_heads(
            images[0], scores[0], layout.grid_size, layout.num_prefix_tokens, block
        )
    if name == "distance":
        distances = analysis.attention_distances(
            model, model_inputs, batch_size=args.batch_size
        )
        return plotting.plot_attention_distance(distances)
    if name == "rollout":
        count = min(args.rollout_images, len(images))
        maps = analysis.attention_rollout_maps(model, model_inputs[:count])
        heat = analysis.to_image_space(maps, layout.image_size)
        raw = [analysis.overlay(images[i], heat[i], alpha=0.0) for i in range(count)]
        over = [analysis.overlay(images[i], heat[i]) for i in range(count)]
        titles = None
        if labels is not None:
            titles = [f"label {int(label)}" for label in labels[:count]]
        return plotting.plot_rollout(np.stack(raw), np.stack(over), titles)
    if name == "fourier":
        return plotting.plot_fourier(
            analysis.feature_map_frequencies(
                model, model_inputs, batch_size=args.batch_size
            )
        )
    if name == "hessian":
        size = args.hessian_batch_size
        batches = [
            (model_inputs[start : start + size], labels[start : start + size])
            for start in range(0, len(model_inputs), size)
        ][: args.hessian_batches]
        eigenvalues = analysis.hessian_eigenvalues(
            model,
            batches,
            num_batches=None,  # already cut to --hessian-batches
            top_k=args.hessian_top_k,
            max_iterations=args.hessian_iterations,
            seed=args.seed,
            verbose=args.verbose,
        )
        return plotting.plot_hessian_spectrum(eigenvalues)
    if name == "noise":
        norm = args.noise_norm
        if norm is None:
            norm = 0.1 * (value_range[1] - value_range[0]) / 2
            norm *= float(np.sqrt(np.prod(model_inputs.shape[1:])))
        result = analysis.noise_robustness(
            model,
            model_inputs,
            labels,
            bands=args.noise_bands,
            norm=norm,
            seed=args.seed,
            repeats=args.noise_repeats,
            batch_size=args.batch_size,
            verbose=args.verbose,
        )
        return plotting.plot_noise_robustness(result)
    raise ValueError(f"Unknown analysis {name!r}")


def main(argv: list[str] | None = None) -> dict[str, str]:
    """Runs the command; returns `{analysis: png_path}`."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.only:  # Checked before TensorFlow is imported.
        chosen = {name.strip() for name in args.only.split(",") if name.strip()}
        unknown = sorted(chosen - set(ANALYSES))
        if unknown:
            parser.error(f"--only: unknown analyses {unknown}; choose from {ANALYSES}")
        if args.variant and args.num_classes == 0 and chosen & set(NEEDS_LABELS):
            parser.error(f"{sorted(chosen & set(NEEDS_LABELS))} need a head")
    _check_outputs(args)
    import keras

    from keras_vit import analysis

    keras.utils.set_random_seed(args.seed)
    try:
        model = cli.model_from_args(args)
    except ValueError as error:
        cli.fail(str(error))
    layout = analysis.token_layout(model)
    images, labels = load_images(args.images, layout.image_size, layout.channels)
    images, labels = (
        images[: args.max_images],
        (None if labels is None else np.asarray(labels)[: args.max_images]),
    )
    model_inputs, value_range = model_inputs_of(model, images)
    names = selected_analyses(args, labels is not None, parser)
    print(f"{model.name}: {len(images)} images, analyses: {', '.join(names)}")
    written = {}
    try:
        with _new_folder_removed_on_error(args.out):
            paths.makedirs(args.out)
            _write_figures(
                args, names, written, model, images, labels, model_inputs, value_range
            )
    except (OSError, _tf_errors()) as error:  # A full or read-only disk.
        done = f"; whole: {', '.join(written.values())}" if written else ""
        cli.fail(f"{atomic.file_error_text(error, args.out)}{done}", cli.EXIT_FAILED)
    return written


def _write_figures(args, names, written, model, images, labels, inputs, value_range):
    """Makes each figure and writes it (and its TensorBoard image); adds
    each written PNG to `written`."""
    from keras_vit.analysis import plotting

    writer = None
    if args.logdir:
        import tensorflow as tf

        writer = tf.summary.create_file_writer(args.logdir)
    for name in names:
        start = time.perf_counter()
        result = make_figure(name, args, model, images, labels, inputs, value_range)
        path = plotting.save_figure(result, os.path.join(args.out, f"{name}.png"))
        written[name] = path
        if writer is not None:
            with writer.as_default():
                tf.summary.image(
                    f"analysis/{name}",
                    plotting.figure_to_array(result)[None],
                    step=0,
                    description=result.caption,
                )
        print(f"[{time.perf_counter() - start:6.1f}s] {path}: {result.caption}")
    if writer is not None:
        writer.flush()


def _check_outputs(args) -> None:
    """Refuses, in one line and before any work, an `--out` or `--logdir`
    that cannot be written (`keras_vit.atomic.check_output`: a URL no file
    system here takes, `gs:/bucket` with a slash missing, a read-only or
    refused folder, a bucket out of reach). A URL is written through
    `tf.io.gfile`, never to a local folder named after it."""
    for flag, value in (("--out", args.out), ("--logdir", args.logdir)):
        if value is None:
            continue
        try:
            atomic.check_output(value, flag, is_dir=True)
        except paths.UnsupportedPath as error:
            cli.fail(str(error))
        except OSError as error:
            cli.fail(f"{flag}: {atomic.file_error_text(error, value)}", cli.EXIT_FAILED)


def _new_folder_removed_on_error(folder):
    """`atomic.new_folders_removed_on_error` for a local folder."""
    if paths.is_url(folder):
        return contextlib.nullcontext()
    return atomic.new_folders_removed_on_error(folder)


def _tf_errors():
    """TensorFlow's file-system error class (TensorFlow is loaded by then)."""
    import tensorflow as tf

    return tf.errors.OpError


if __name__ == "__main__":
    from keras_vit.recipes.__main__ import exit_status

    sys.exit(exit_status(main(sys.argv[1:])))
