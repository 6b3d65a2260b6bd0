"""ViT, pre-activation ResNet and AlterNet side by side under Park & Kim's analyses.

"How Do Vision Transformers Work?" (Park & Kim, ICLR 2022) compares the three
families: Hessian max-eigenvalue spectra (flatness), Fourier amplitude of
feature maps by depth (MSA low-pass, convolution high-pass), feature-map
variance, accuracy under low- and high-frequency noise, and mean attention
distance. This command trains the three on the same data, budget,
augmentation and optimiser, over several seeds, and writes:

- `<out>/fourier.png`, `variance.png`, `hessian.png`, `noise.png`,
  `distance.png`: the models side by side;
- `<out>/vit_distance.png`, `vit_position.png`: the ViT's mean attention
  distance by depth and position-embedding similarity (ViT paper Fig. 7),
  first seed;
- `<out>/table.md`: accuracy (mean ± sd, min-max over seeds), parameters,
  FLOPs, Hessian top eigenvalue, high-frequency amplitude, accuracy under
  low/high-frequency noise, training time;
- `<out>/results.json` (every number) and `<out>/runs/<model>_seed<s>.json`
  (one per training run, written as it ends);
- `<out>/tensorboard/`: training curves per run, the table and the figures.

Every file is written whole or not at all (temporary file + `os.replace`).
A failed or diverged run exits with status 1; a bad argument with 2.

Default: the embedded scikit-learn digits (1,437 train / 360 test) upscaled
to 32 px; the `mini` PreActResNet (702,970 parameters) and AlterNet
(423,789), and a ViT of 6 blocks, width 96, MLP 192, 4 heads, 4x4 patches
(an 8x8 grid, average pooling; 460,714 parameters); 15 epochs of batch 64,
AdamW (3e-3, weight decay 0.05, global clipnorm 1) with one warm-up epoch
and cosine decay, label smoothing 0.1, crops of 60-100% of the area, no
flips; 3 seeds. The analyses use the 360 test images; the Hessian 4
batches of 32 training images per seed.

Time, measured on this project's machine (2 cores of an AMD EPYC Zen 5,
2026-11-23) while other jobs shared the cores (load average 7-9; the
command got 62% of one core on average): 16 min 19 s wall, 10 min 13 s CPU
(568.6 s user + 44.1 s system). On 2 idle cores the wall time should lie
between half the CPU time and the CPU time (5-10 min; not measured idle).
`--quick` (the `test` rows at 16 px, 1 seed, 2 epochs of 2 steps) takes
about 1 min on the shared machine, mostly graph tracing.

Usage:

```bash
python -m recipes.compare --out runs/compare
python -m recipes.compare --quick --out /tmp/compare_smoke
python -m recipes.compare --dataset folder:/data/flowers --image-size 64 \
    --epochs 30 --out runs/flowers
```
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time

from recipes import cli

MODELS = ("vit", "resnet", "alternet")
TITLES = {"vit": "ViT", "resnet": "PreActResNet", "alternet": "AlterNet"}


@dataclasses.dataclass(frozen=True)
class ViTShape:
    """A small ViT row: width, depth, MLP width, heads and patch size."""

    hidden_dim: int = 96
    depth: int = 6
    mlp_dim: int = 192
    num_heads: int = 4
    patch_size: int = 4


QUICK_VIT = ViTShape(hidden_dim=32, depth=2, mlp_dim=64, num_heads=2, patch_size=4)


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value <= 0:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return value


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"not a number >= 0: {text!r}")
    return value


def _models(text: str) -> tuple[str, ...]:
    names = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = [n for n in names if n not in MODELS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown model(s) {unknown or text!r}; choose from {','.join(MODELS)}"
        )
    return names


def _vit_shape(text: str) -> ViTShape:
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        values = []
    if len(values) != 5 or min(values) <= 0:
        raise argparse.ArgumentTypeError(
            f"not a ViT shape: {text!r} (width,depth,mlp,heads,patch, e.g. "
            "96,6,192,4,4)"
        )
    return ViTShape(*values)


def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(
        prog="python -m recipes.compare",
        description=__doc__.split("\n\n")[0],
    )
    parser.add_argument("--out", default="runs/compare", help="output directory")
    parser.add_argument(
        "--dataset",
        default="digits",
        help='"digits" (default), "folder:PATH" or a TFDS name',
    )
    parser.add_argument("--train-split", default="train")
    parser.add_argument("--test-split", default="test")
    parser.add_argument("--data-dir", help="TFDS data directory")
    parser.add_argument("--image-size", type=cli.image_size_arg, default=None)
    parser.add_argument("--models", type=_models, default=MODELS)
    parser.add_argument("--seeds", type=_positive, default=None, help="default 3")
    parser.add_argument("--epochs", type=_positive, default=None, help="default 15")
    parser.add_argument("--steps-per-epoch", type=_positive, default=None)
    parser.add_argument("--batch-size", type=_positive, default=64)
    parser.add_argument("--learning-rate", type=_fraction, default=3e-3)
    parser.add_argument("--weight-decay", type=_fraction, default=0.05)
    parser.add_argument(
        "--cnn-variant", default=None, help='PreActResNet/AlterNet row (default "mini")'
    )
    parser.add_argument(
        "--vit",
        type=_vit_shape,
        default=None,
        help="the ViT: width,depth,mlp,heads,patch (default 96,6,192,4,4)",
    )
    parser.add_argument(
        "--analysis-images",
        type=_positive,
        default=360,
        help="test images the analyses use (default 360)",
    )
    parser.add_argument(
        "--hessian-batches", type=_positive, default=4, help="per seed (default 4)"
    )
    parser.add_argument("--hessian-batch-size", type=_positive, default=32)
    parser.add_argument("--hessian-iterations", type=_positive, default=20)
    parser.add_argument("--noise-bands", type=_positive, default=5)
    parser.add_argument(
        "--noise-rms",
        type=_fraction,
        default=0.25,
        help="RMS of the noise per pixel value, in [-1, 1] units (default 0.25)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="smoke test: test rows, 16 px, 1 seed, 2 epochs of 2 steps",
    )
    cli.add_verbose_flag(parser)
    return parser


def resolve(args) -> argparse.Namespace:
    """Fills the defaults that depend on `--quick`."""
    quick = args.quick
    defaults = {
        "image_size": (16, 16) if quick else (32, 32),
        "seeds": 1 if quick else 3,
        "epochs": 2 if quick else 15,
        "steps_per_epoch": 2 if quick else None,
        "cnn_variant": "test" if quick else "mini",
        "vit": QUICK_VIT if quick else ViTShape(),
    }
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if quick:
        args.analysis_images = min(args.analysis_images, 32)
        args.hessian_batches = min(args.hessian_batches, 1)
        args.hessian_iterations = min(args.hessian_iterations, 3)
        args.hessian_batch_size = min(args.hessian_batch_size, 8)
    return args


class RunFailed(Exception):
    """A training run diverged or an output could not be made."""


def build_vit(shape: ViTShape, image_size, num_classes: int):
    """A `keras_vit.ViT` of an arbitrary width and depth (average pooling).

    The size is not a row of `keras_vit.VARIANTS`: `keras_vit.ViT` gets its
    spec (`keras_vit.models.variants.custom_spec`).
    """
    import keras_vit
    from keras_vit.models.variants import custom_spec

    spec = custom_spec(
        shape.patch_size,
        hidden_dim=shape.hidden_dim,
        depth=shape.depth,
        mlp_dim=shape.mlp_dim,
        num_heads=shape.num_heads,
    )
    return keras_vit.ViT(
        spec,  # a size the table lacks
        image_size=image_size,
        num_classes=num_classes,
        pooling="gap",
        class_token=False,
        name=f"vit_w{shape.hidden_dim}_d{shape.depth}",
    )


def build_model(name: str, args, num_classes: int):
    import keras_vit

    if name == "vit":
        return build_vit(args.vit, args.image_size, num_classes)
    family = keras_vit.PreActResNet if name == "resnet" else keras_vit.AlterNet
    return family(args.cnn_variant, image_size=args.image_size, num_classes=num_classes)


def count_flops(model) -> int:
    """Floating-point operations of one forward pass of one image (TF profiler;
    a multiply-add counts as 2)."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    spec = tf.TensorSpec((1, *model.inputs[0].shape[1:]), tf.float32)
    function = tf.function(lambda x: model(x, training=False))
    frozen = convert_variables_to_constants_v2(function.get_concrete_function(spec))
    options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
    options["output"] = "none"
    info = tf.compat.v1.profiler.profile(graph=frozen.graph, options=options)
    return int(info.total_float_ops)


def _arrays(dataset, limit=None):
    """`(images, integer labels)` of a batched `(images, one-hot)` dataset."""
    import numpy as np

    images, labels = [], []
    for x, y in dataset:
        images.append(np.asarray(x))
        labels.append(np.asarray(y).argmax(axis=-1))
        if limit is not None and sum(len(i) for i in images) >= limit:
            break
    images, labels = np.concatenate(images), np.concatenate(labels)
    return images[:limit], labels[:limit]


def _to_json(value):
    import numpy as np

    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_json(v) for v in value]
    if isinstance(value, np.ndarray):
        return _to_json(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


def train_one(name, seed, args, data, log_dir):
    """Trains one model on one seed and runs the analyses; returns a dict."""
    import keras
    import numpy as np

    from keras_vit import analysis
    from keras_vit import data as kdata
    from keras_vit.analysis.depth import depth_statistics
    from keras_vit.analysis.window_distance import attention_distance_by_depth
    from keras_vit.training import WarmupDecay
    from keras_vit.training import make_optimizer

    keras.utils.set_random_seed(seed)
    model = build_model(name, args, data["num_classes"])
    steps = args.steps_per_epoch or data["train"].num_examples // args.batch_size
    total = steps * args.epochs
    schedule = WarmupDecay(args.learning_rate, total, min(steps, total), "cosine")
    model.compile(
        optimizer=make_optimizer("adamw", schedule, weight_decay=args.weight_decay),
        loss=keras.losses.CategoricalCrossentropy(
            from_logits=True, label_smoothing=0.1
        ),
        metrics=["accuracy"],
    )
    train = kdata.train_dataset(
        data["train"],
        image_size=args.image_size,
        global_batch_size=args.batch_size,
        epochs=args.epochs,
        steps_per_epoch=steps,
        seed=seed,
        augmentation=kdata.Augmentation(
            crop_area_range=(0.6, 1.0), crop_aspect_range=(0.8, 1.25), flip=False
        ),
    )
    started, cpu = time.perf_counter(), time.process_time()
    history = model.fit(
        train,
        epochs=args.epochs,
        steps_per_epoch=steps,
        verbose=1 if sys.stdout.isatty() else 2,
        callbacks=[
            keras.callbacks.TerminateOnNaN(),
            keras.callbacks.TensorBoard(
                os.path.join(log_dir, f"{name}_seed{seed}"), write_graph=False
            ),
        ],
    )
    train_seconds = time.perf_counter() - started
    train_cpu = time.process_time() - cpu
    losses = history.history.get("loss", [])
    if len(losses) < args.epochs or not np.all(np.isfinite(losses)):
        raise RunFailed(f"{name} seed {seed} diverged (loss {losses[-1:]})")
    x_test, y_test = data["test_arrays"]
    logits = model.predict(x_test, batch_size=128, verbose=0)
    accuracy = float((np.asarray(logits).argmax(-1) == y_test).mean())
    x_small, y_small = x_test[: args.analysis_images], y_test[: args.analysis_images]
    stats = depth_statistics(model, x_small, batch_size=64)
    x_h, y_h = data["hessian_arrays"]
    size = args.hessian_batch_size
    batches = [
        (
            x_h[i : i + size],
            keras.utils.to_categorical(y_h[i : i + size], data["num_classes"]),
        )
        for i in range(0, size * args.hessian_batches, size)
    ]
    eigenvalues = analysis.hessian_eigenvalues(
        model,
        batches,
        loss=keras.losses.CategoricalCrossentropy(from_logits=True),
        top_k=1,
        num_batches=args.hessian_batches,
        max_iterations=args.hessian_iterations,
        tolerance=1e-3,
        seed=seed,
        verbose=0,
    )
    norm = args.noise_rms * float(np.sqrt(np.prod(x_small.shape[1:])))
    noise = analysis.noise_robustness(
        model, x_small, y_small, bands=args.noise_bands, norm=norm, seed=seed, verbose=0
    )
    distances = attention_distance_by_depth(model, x_small, batch_size=64)
    result = {
        "model": name,
        "seed": seed,
        "parameters": int(model.count_params()),
        "accuracy": accuracy,
        "train_seconds": train_seconds,
        "train_cpu_seconds": train_cpu,
        "loss": losses,
        "depth": stats,
        "hessian": eigenvalues,
        "noise": noise,
        "distances": distances,
    }
    if name == "vit" and seed == args.first_seed:
        result["vit_distance"] = analysis.attention_distances(model, x_small)
        result["vit_position"] = analysis.position_embedding_similarity(model)
    return _to_json(result)


def _spread(values) -> tuple[float, float, float, float]:
    import numpy as np

    values = np.asarray(values, dtype="float64")
    sd = float(values.std(ddof=1)) if len(values) > 1 else 0.0
    return float(values.mean()), sd, float(values.min()), float(values.max())


def summarize(runs: dict, flops: dict) -> list[dict]:
    """One row per model: the table's numbers."""
    import numpy as np

    rows = []
    for name, seeds in runs.items():
        eig = np.concatenate([np.ravel(r["hessian"]) for r in seeds])
        bands = seeds[0]["noise"]["accuracy"]
        rows.append(
            {
                "model": name,
                "parameters": seeds[0]["parameters"],
                "flops": flops[name],
                "accuracy": _spread([r["accuracy"] for r in seeds]),
                "hessian_median": float(np.median(eig)),
                "hessian_max": float(eig.max()),
                "hessian_negative": int((eig < 0).sum()),
                "hessian_count": int(eig.size),
                "delta_last": _spread([r["depth"]["delta"][-1] for r in seeds]),
                "delta_mean": _spread([np.mean(r["depth"]["delta"]) for r in seeds]),
                "clean": _spread([r["noise"]["clean_accuracy"] for r in seeds]),
                "low_noise": _spread([r["noise"]["accuracy"][0] for r in seeds]),
                "high_noise": _spread(
                    [r["noise"]["accuracy"][len(bands) - 1] for r in seeds]
                ),
                "train_seconds": float(sum(r["train_seconds"] for r in seeds)),
            }
        )
    return rows


def markdown_table(rows: list[dict], args) -> str:
    def pct(stat):
        mean, sd, low, high = stat
        return f"{100 * mean:.2f} ± {100 * sd:.2f} ({100 * low:.1f}–{100 * high:.1f})"

    def num(stat):
        mean, sd, _, _ = stat
        return f"{mean:.2f} ± {sd:.2f}"

    header = (
        "| model | params | FLOPs/img | test accuracy % | Hessian top eig. "
        "median (max; negative) | Δ log amp. at π, last map | mean over depth "
        "| acc. % low-freq noise | acc. % high-freq noise | train time |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for row in rows:
        lines.append(
            f"| {TITLES[row['model']]} | {row['parameters']:,} | "
            f"{row['flops'] / 1e6:.1f} M | {pct(row['accuracy'])} | "
            f"{row['hessian_median']:.3g} ({row['hessian_max']:.3g}; "
            f"{row['hessian_negative']}/{row['hessian_count']}) | "
            f"{num(row['delta_last'])} | {num(row['delta_mean'])} | "
            f"{pct(row['low_noise'])} | {pct(row['high_noise'])} | "
            f"{row['train_seconds']:.0f} s |"
        )
    bands = args.noise_bands
    note = (
        f"\n{args.seeds} seed(s), {args.epochs} epochs, image size "
        f"{args.image_size[0]}x{args.image_size[1]}, dataset {args.dataset}. "
        "Accuracy: mean ± sd (min–max) over seeds. Hessian: largest-magnitude "
        f"eigenvalue on {args.hessian_batches} batches of "
        f"{args.hessian_batch_size} training images per seed, pooled. Noise: "
        f"RMS {args.noise_rms} per value, lowest and highest of {bands} "
        "radial-frequency bands. Train time: all seeds.\n"
    )
    return header + "\n".join(lines) + "\n" + note


def _save_png(figure, path):
    from keras_vit import atomic
    from keras_vit.analysis.plotting import save_figure

    atomic.atomic_write(path, lambda partial: save_figure(figure, partial))


def write_figures(runs: dict, out: str) -> dict:
    """The side-by-side PNGs; returns `{file stem: CaptionedFigure}`."""
    import numpy as np

    from keras_vit.analysis import plotting
    from keras_vit.analysis import plotting_compare as pc

    titled = {TITLES[name]: seeds for name, seeds in runs.items()}
    figures = {
        "fourier": pc.plot_depth_comparison(
            {k: [r["depth"] for r in v] for k, v in titled.items()}, "delta"
        ),
        "variance": pc.plot_depth_comparison(
            {k: [r["depth"] for r in v] for k, v in titled.items()}, "variance"
        ),
        "hessian": pc.plot_hessian_density(
            {k: [r["hessian"] for r in v] for k, v in titled.items()}
        ),
        "noise": pc.plot_noise_comparison(
            {k: [r["noise"] for r in v] for k, v in titled.items()}
        ),
        "distance": pc.plot_distance_comparison(
            {k: [r["distances"] for r in v] for k, v in titled.items()}
        ),
    }
    if "vit" in runs and "vit_distance" in runs["vit"][0]:
        first = runs["vit"][0]
        figures["vit_distance"] = plotting.plot_attention_distance(
            np.asarray(first["vit_distance"])
        )
        figures["vit_position"] = plotting.plot_position_similarity(
            np.asarray(first["vit_position"])
        )
    for stem, figure in figures.items():
        _save_png(figure, os.path.join(out, f"{stem}.png"))
    return figures


def write_tensorboard(log_dir: str, table: str, figures: dict, rows) -> None:
    """The table (as text and as scalars per model) and the figures."""
    import numpy as np
    import tensorflow as tf

    from keras_vit.analysis.plotting import figure_to_array

    writer = tf.summary.create_file_writer(os.path.join(log_dir, "comparison"))
    with writer.as_default():
        tf.summary.text("table", table, step=0)
        for row in rows:
            for key in ("accuracy", "delta_last", "low_noise", "high_noise"):
                tf.summary.scalar(f"{row['model']}/{key}", row[key][0], step=0)
            tf.summary.scalar(
                f"{row['model']}/hessian_median", row["hessian_median"], step=0
            )
        for stem, figure in figures.items():
            image = figure_to_array(figure)[None].astype(np.uint8)
            tf.summary.image(stem, image, step=0, description=figure.caption)
    writer.flush()


def load_data(args) -> dict:
    from keras_vit import data as kdata

    train = kdata.load_source(args.dataset, args.train_split, data_dir=args.data_dir)
    test = kdata.load_source(args.dataset, args.test_split, data_dir=args.data_dir)
    if train.num_classes != test.num_classes:
        raise ValueError(
            f"--train-split has {train.num_classes} classes, --test-split "
            f"{test.num_classes}"
        )
    kdata.check_disjoint(train, test)

    def arrays(source, limit=None):
        dataset = kdata.eval_dataset(
            source, image_size=args.image_size, global_batch_size=256
        )
        return _arrays(dataset, limit)

    hessian_images = args.hessian_batch_size * args.hessian_batches
    return {
        "train": train,
        "num_classes": train.num_classes,
        "test_arrays": arrays(test),
        "hessian_arrays": arrays(train, hessian_images),
    }


def run_key(args) -> dict:
    """The settings a finished run's JSON must match to be reused."""
    skip = {"out", "tf_logs", "models", "seeds", "first_seed"}
    settings = {k: v for k, v in vars(args).items() if k not in skip}
    settings["vit"] = dataclasses.asdict(args.vit)
    return _to_json(settings)


def _finished_run(path: str, key: dict):
    """The result of a run an earlier invocation finished, or `None`."""
    try:
        with open(path, encoding="utf-8") as f:
            result = json.load(f)
    except (OSError, ValueError):
        return None
    if result.get("settings") != key:
        return None
    print(f"reusing {path}", flush=True)  # noqa: T201
    return result


def run(args) -> dict:
    """Trains every model on every seed, then writes the table and figures."""
    import keras

    from keras_vit import atomic

    out = args.out
    os.makedirs(os.path.join(out, "runs"), exist_ok=True)
    log_dir = os.path.join(out, "tensorboard")
    args.first_seed = 0
    data = load_data(args)
    hessian_needed = args.hessian_batch_size * args.hessian_batches
    if len(data["hessian_arrays"][0]) < hessian_needed:
        raise ValueError(
            f"--hessian-batches x --hessian-batch-size = {hessian_needed} images, "
            f"but the training split has {len(data['hessian_arrays'][0])}"
        )
    key = run_key(args)
    started, cpu = time.perf_counter(), time.process_time()
    runs, flops = {}, {}
    progress = keras.utils.Progbar(
        len(args.models) * args.seeds, unit_name="run", stateful_metrics=["accuracy"]
    )
    for name in args.models:
        flops[name] = count_flops(build_model(name, args, data["num_classes"]))
        runs[name] = []
        for seed in range(args.seeds):
            path = os.path.join(out, "runs", f"{name}_seed{seed}.json")
            result = _finished_run(path, key)
            if result is None:
                print(f"\n== {TITLES[name]}, seed {seed}", flush=True)  # noqa: T201
                result = train_one(name, seed, args, data, log_dir)
                result["settings"] = key
            atomic.write_json(
                os.path.join(out, "runs", f"{name}_seed{seed}.json"), result
            )
            runs[name].append(result)
            progress.add(1, values=[("accuracy", result["accuracy"])])
    rows = summarize(runs, flops)
    table = markdown_table(rows, args)
    elapsed = time.perf_counter() - started
    cpu_seconds = time.process_time() - cpu
    table += (
        f"Total: {elapsed / 60:.1f} min wall, {cpu_seconds / 60:.1f} min CPU "
        "(training and analyses).\n"
    )
    figures = write_figures(runs, out)
    atomic.write_text(os.path.join(out, "table.md"), table)
    settings = {k: v for k, v in vars(args).items() if k != "vit"}
    settings["vit"] = dataclasses.asdict(args.vit)
    summary = {
        "settings": _to_json(settings),
        "rows": rows,
        "wall_seconds": elapsed,
        "cpu_seconds": cpu_seconds,
        "runs": runs,
    }
    atomic.write_json(os.path.join(out, "results.json"), summary)
    write_tensorboard(log_dir, table, figures, rows)
    print("\n" + table, flush=True)  # noqa: T201
    return summary


def main(argv=None) -> int:
    args = resolve(build_parser().parse_args(argv))
    cli.quiet_tensorflow(args.tf_logs)
    try:
        run(args)
    except RunFailed as error:
        cli.fail(str(error), cli.EXIT_FAILED)
    except (ValueError, OSError) as error:
        cli.fail(f"{type(error).__name__}: {error}", cli.EXIT_FAILED)
    return 0


if __name__ == "__main__":
    sys.exit(main())
