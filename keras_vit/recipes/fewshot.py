r"""Few-shot linear evaluation of a frozen ViT: the paper's 1/5/10/25-shot table.

For each shot count, that many training images per class are drawn with a
seed; the frozen representation (`keras_vit.feature_extractor(model)
["pooled"]`) of those images is regressed onto `{-1, 1}^K` targets in closed
form, and the test split is classified (see `keras_vit.analysis.fewshot` and
`docs/self_supervision.md`).

```bash
# A model trained or pre-trained by our recipes (.keras):
python -m recipes.fewshot --model runs/digits/final.keras
python -m recipes.fewshot --model runs/masked_digits/encoder.keras --trials 5
# A pretrained checkpoint (pre-logits features for the i21k originals):
python -m recipes.fewshot --variant B/16 --weights imagenet21k \
    --dataset cifar100 --image-size 224 --trials 3 --out fewshot.json
# A randomly initialised baseline:
python -m recipes.fewshot --variant Ti/4 --image-size 16
```

Only the drawn training images (`max(shots) * classes` per trial) and the
test split are run through the model, streamed in batches: the training
split is read once for its labels, not decoded.
"""

from __future__ import annotations

import sys

from keras_vit.recipes import cli

SHOTS = (
    1,
    5,
    10,
    25,
)  # keras_vit.analysis.fewshot.SHOTS, without importing TensorFlow.


def load_model(
    model_path: str | None = None,
    variant: str | None = None,
    weights: str | None = None,
    image_size: int | tuple[int, int] | None = None,
    channels: int = 3,
    representation_size: int | None = None,
):
    """The model to evaluate: `recipes.cli.load_model`, headless for `variant`."""
    return cli.load_model(
        model_path,
        variant=variant,
        weights=weights,
        num_classes=0,
        image_size=image_size,
        channels=channels,
        representation_size=representation_size,
    )


def evaluate(
    model,
    dataset: str = "digits",
    *,
    train_split: str = "train",
    test_split: str = "test",
    shots=SHOTS,
    l2="auto",
    seed: int = 0,
    trials: int = 1,
    data_dir: str | None = None,
    max_test_examples: int | None = None,
    batch_size: int = 128,
) -> dict[str, float]:
    """Few-shot accuracies of `model` on `dataset`, averaged over `trials`.

    Images are resized and normalised by the model's input contract
    (`preprocessing_of(model)`: its checkpoint's mean, std and resize).
    """
    import numpy as np

    import keras_vit
    from keras_vit.analysis import fewshot
    from keras_vit.analysis.fewshot import few_shot_pools

    height, width, channels = model.input_shape[1:4]

    train, test, subsets = few_shot_pools(
        dataset,
        train_split=train_split,
        test_split=test_split,
        image_size=(height, width),
        channels=channels,
        shots=shots,
        seed=seed,
        trials=trials,
        data_dir=data_dir,
        max_test_examples=max_test_examples,
        batch_size=batch_size,
        preprocessing=_contract(model),
    )
    features = keras_vit.feature_extractor(model, blocks=None, include_tokens=False)
    train_x, train_y = fewshot.extract_features(features, train)
    test_x, test_y = fewshot.extract_features(features, test)
    totals: dict[str, float] = {}
    for trial, subset in enumerate(subsets):
        # This trial's drawn images: exactly max(shots) per class, from which
        # the same seed draws the nested 1/5/10/25-shot sets again.
        rows = np.sort(subset[max(subset)])  # in source order
        result = fewshot.few_shot_accuracy(
            train_x[rows],
            train_y[rows],
            test_x,
            test_y,
            shots=shots,
            l2=l2,
            seed=seed + trial,
        )
        for key, value in result.items():
            totals[key] = totals.get(key, 0.0) + value / len(subsets)
    return totals


def _contract(model):
    """The input contract the pools are prepared with: the model's, or for
    a model with its own `preprocessing` layer (which maps `[0, 255]`
    itself), one that leaves pixels in `[0, 255]` after the model's resize."""
    from keras_vit.models.layout import ViTLayout
    from keras_vit.models.preprocessing import preprocessing_of

    preprocessing = preprocessing_of(model)
    if ViTLayout.of(model).has_preprocessing:
        return preprocessing.replace(mean=(0.0, 0.0, 0.0), std=(1 / 255,) * 3)
    return preprocessing


def format_table(results: dict[str, float], title: str) -> str:
    """A small text table: one row per shot count."""
    lines = [title, f"{'shots':>6}  accuracy"]
    lines += [f"{key[:-4]:>6}  {value:.4f}" for key, value in results.items()]
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None):
    parser = cli.ArgumentParser(
        prog=cli.prog("fewshot"),
        description="Few-shot linear evaluation of a frozen ViT "
        "(see docs/self_supervision.md).",
    )
    what = parser.add_argument_group("model")
    what.add_argument(
        "--model", help="A .keras file (ours: classifier, encoder, pre-training)."
    )
    what.add_argument(
        "--variant", help="Build keras_vit.ViT(VARIANT) instead, e.g. B/16."
    )
    what.add_argument(
        "--weights", help="Pretrained weights for --variant: a tag or a file."
    )
    what.add_argument(
        "--representation-size",
        type=int,
        default=None,
        help="pre_logits width for --variant (default: the tag's).",
    )
    what.add_argument(
        "--image-size",
        type=cli.image_size_arg,
        default=None,
        help="Input size, 224 or 224x320 (default: the model's; 224 for --variant).",
    )
    what.add_argument("--channels", type=int, default=3)
    how = parser.add_argument_group("evaluation")
    how.add_argument(
        "--dataset",
        default="digits",
        help='"digits" (default, bundled), "folder:PATH" or a TFDS name.',
    )
    how.add_argument("--data-dir", default=None, help="TFDS data directory.")
    how.add_argument("--train-split", default="train")
    how.add_argument("--test-split", default="test")
    how.add_argument("--max-test-examples", type=int, default=None)
    how.add_argument(
        "--shots", default="1,5,10,25", help="Comma-separated shot counts."
    )
    how.add_argument(
        "--l2",
        default="auto",
        help='"auto" (leave-one-out over a grid) or a fixed regulariser.',
    )
    how.add_argument("--seed", type=int, default=0)
    how.add_argument("--trials", type=int, default=1, help="Draws to average.")
    how.add_argument("--batch-size", type=int, default=128)
    how.add_argument("--out", default=None, help="Also write the results as JSON here.")
    args = parser.parse_args(argv)
    try:
        args.shots = tuple(int(s) for s in args.shots.split(","))
        args.l2 = args.l2 if args.l2 == "auto" else float(args.l2)
    except ValueError:
        parser.error("--shots takes counts like 1,5,10 and --l2 'auto' or a number")
    if min(args.shots) < 1 or args.trials < 1 or args.batch_size < 1:
        parser.error("--shots, --trials and --batch-size must be positive")
    if not args.model and not args.variant:
        parser.error("pass --model FILE.keras, or --variant (and --weights)")
    return args


def main(argv: list[str] | None = None) -> dict:
    """Command-line entry point; returns the results dict.

    Exits with status 2 and one line on an argument or data error, and
    with status 1 and one line when `--out` cannot be written (a full or
    read-only disk: checked before the evaluation where it can be, and the
    table is printed before the file is written). `--out` may be a URL
    (`gs://bucket/fewshot.json`), written through `tf.io.gfile`.
    """
    import time

    from keras_vit import atomic

    args = parse_args(argv)
    if args.out:
        _check_out(args.out)
    started = time.time()
    try:
        model = load_model(
            args.model,
            args.variant,
            args.weights,
            args.image_size,
            args.channels,
            args.representation_size,
        )
        results = evaluate(
            model,
            args.dataset,
            train_split=args.train_split,
            test_split=args.test_split,
            shots=args.shots,
            l2=args.l2,
            seed=args.seed,
            trials=args.trials,
            data_dir=args.data_dir,
            max_test_examples=args.max_test_examples,
            batch_size=args.batch_size,
        )
    except ValueError as error:
        cli.fail(str(error))
    seconds = time.time() - started
    name = args.model or f"{args.variant} ({args.weights or 'random init'})"
    title = (
        f"Few-shot linear accuracy: {name} on {args.dataset} "
        f"({args.trials} trial(s), seed {args.seed}, {seconds:.0f} s)"
    )
    print(format_table(results, title))  # noqa: T201
    if args.out:
        record = {
            "model": name,
            "dataset": args.dataset,
            "trials": args.trials,
            "seed": args.seed,
            "l2": args.l2,
            "seconds": round(seconds, 1),
            "accuracy": results,
        }
        try:
            atomic.write_json(args.out, record)
        except OSError as error:  # Whole or absent: nothing partial is left.
            cli.fail(
                f"--out: {atomic.file_error_text(error, args.out)}", cli.EXIT_FAILED
            )
    return results


def _check_out(out: str) -> None:
    """Refuses, in one line and before the evaluation, an `--out` that
    cannot be written (`keras_vit.atomic.check_output`)."""
    from keras_vit import atomic
    from keras_vit import paths

    try:
        atomic.check_output(out, "--out")
    except paths.UnsupportedPath as error:
        cli.fail(str(error))
    except OSError as error:
        cli.fail(f"--out: {atomic.file_error_text(error, out)}", cli.EXIT_FAILED)


if __name__ == "__main__":
    from keras_vit.recipes.__main__ import exit_status

    sys.exit(exit_status(main(sys.argv[1:])))
