"""How much quantization changes a keras_vit model's outputs (issue 16).

Two measurements, each against the same model in float32:

- a ViT-B/16 at 224 px with seeded random weights (its zero-initialised head
  given random values too) on fixed random inputs: max and mean absolute
  logit difference, and top-1 agreement;
- the digits model (`python -m recipes.train --config digits`, its
  `final.keras`): test accuracy.

Modes: `"int8"` and `"int4"` through `keras_vit.finetune.quantize` (head in
float, as exported), and `"litert-int8"`: the model exported and converted
with `keras_vit.export.export_tflite(quantize="int8")` (int8 weights,
activations quantized at run time), run by LiteRT's interpreter through its
`serving_float` signature on the same pixels. Usage:

    python benchmarks/quantization.py --digits runs/digits/final.keras
    python benchmarks/quantization.py --modes litert-int8 --batch 64 \
        --digits runs/digits/final.keras

Prints a Markdown table and writes it, with the raw figures as JSON, to
`--out` (complete files only: temporary file, fsync, rename).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

MODES = ("int8", "int4", "litert-int8")


def _quantized(build, mode):
    from keras_vit import finetune

    model = build()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Keras names every weightless layer.
        finetune.quantize(model, mode)
    return model


class LiteRTInt8:
    """A model exported as int8 LiteRT; `predict_on_batch` of `[-1, 1]` images."""

    def __init__(self, model):
        import tempfile

        import tensorflow as tf

        from keras_vit.export import export
        from keras_vit.export import export_tflite

        with tempfile.TemporaryDirectory() as folder:
            saved = export(model, f"{folder}/m/1", warmup=False)
            path = export_tflite(
                saved,
                f"{folder}/m.tflite",
                quantize="int8",
                signatures=["serving_float"],
            )
            self.file_mb = path.stat().st_size / 2**20
            self.interpreter = tf.lite.Interpreter(
                model_path=str(path), num_threads=len(os.sched_getaffinity(0))
            )
        self.runner = self.interpreter.get_signature_runner("serving_float")

    def predict_on_batch(self, images):
        pixels = (np.asarray(images, np.float32) + 1.0) * 127.5  # [0, 255]
        return self.runner(images=pixels)["logits"]


def _converted(build, mode):
    if mode == "litert-int8":
        return LiteRTInt8(build())
    return _quantized(build, mode)


def _weights_mb(model) -> float:
    if isinstance(model, LiteRTInt8):
        return model.file_mb
    """Bytes held by the model's variables (int4 packed two per byte), MiB."""
    return sum(np.asarray(v.numpy()).nbytes for v in model.weights) / 2**20


def b16_rows(batch: int, seed: int = 0, modes=MODES) -> list[dict]:
    import keras_vit

    def build():
        keras.utils.set_random_seed(seed)
        model = keras_vit.ViT("B/16", num_classes=1000)
        rng = np.random.default_rng(seed)
        head = keras_vit.models.ViTLayout.of(model).head
        head.kernel.assign(rng.normal(0, 0.02, head.kernel.shape))
        return model

    rng = np.random.default_rng(seed + 1)
    images = rng.uniform(-1, 1, (batch, 224, 224, 3)).astype("float32")
    model = build()
    reference = np.asarray(model.predict_on_batch(images))
    rows = [
        {
            "model": f"B/16@224, random weights, {batch} random images",
            "mode": "float32",
            "weights_mb": _weights_mb(model),
        }
    ]
    for mode in modes:
        model = _converted(build, mode)
        logits = np.asarray(model.predict_on_batch(images))
        diff = np.abs(logits - reference)
        rows.append(
            {
                "model": f"B/16@224, random weights, {batch} random images",
                "mode": mode,
                "max_abs_logit_diff": float(diff.max()),
                "mean_abs_logit_diff": float(diff.mean()),
                "logit_range": float(np.abs(reference).max()),
                "top1_agreement": float(
                    np.mean(logits.argmax(-1) == reference.argmax(-1))
                ),
                "weights_mb": _weights_mb(model),
            }
        )
    return rows


def digits_rows(path: str, modes=MODES) -> list[dict]:
    from keras_vit import data

    source = data.load_source("digits", "test")
    stream = data.eval_dataset(source, image_size=16, global_batch_size=360)
    images, labels = next(iter(stream))
    labels = np.asarray(labels)
    labels = labels.argmax(-1) if labels.ndim == 2 else labels

    def build():
        return keras.saving.load_model(path)

    def accuracy(model):
        return float(
            np.mean(np.asarray(model.predict_on_batch(images)).argmax(-1) == labels)
        )

    rows = [{"model": "digits (test/2, 16 px)", "mode": "float32",
             "test_accuracy": accuracy(build())}]  # fmt: skip
    for mode in modes:
        rows.append(
            {
                "model": "digits (test/2, 16 px)",
                "mode": mode,
                "test_accuracy": accuracy(_converted(build, mode)),
            }
        )
    return rows


def table(rows: list[dict]) -> str:
    lines = [
        "| model | mode | max / mean abs logit diff (of max abs logit) "
        "| top-1 agreement | test accuracy | weights (MiB) |",
        "|---|---|---|---|---|---|",
    ]
    for row in rows:
        diff = (
            f"{row['max_abs_logit_diff']:.4f} / {row['mean_abs_logit_diff']:.4f} "
            f"(of {row['logit_range']:.3f})"
            if "max_abs_logit_diff" in row
            else ""
        )
        agree = f"{row['top1_agreement']:.1%}" if "top1_agreement" in row else ""
        acc = f"{row['test_accuracy']:.2%}" if "test_accuracy" in row else ""
        size = f"{row['weights_mb']:.0f}" if "weights_mb" in row else ""
        lines.append(
            f"| {row['model']} | {row['mode']} | {diff} | {agree} | {acc} | {size} |"
        )
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--digits", help="the digits model's final.keras")
    parser.add_argument("--batch", type=int, default=16, help="B/16 random images")
    parser.add_argument("--skip-b16", action="store_true")
    parser.add_argument(
        "--modes",
        default=",".join(MODES),
        help=f"comma-separated, of {', '.join(MODES)} (default: all)",
    )
    parser.add_argument("--out", default=os.path.join("benchmarks", "results"))
    args = parser.parse_args(argv)
    if args.digits and not os.path.isfile(args.digits):
        parser.error(f"--digits: no such file: {args.digits}")
    modes = [m for m in args.modes.split(",") if m]
    unknown = sorted(set(modes) - set(MODES))
    if unknown or not modes:
        parser.error(f"--modes: unknown {unknown}; choose from {', '.join(MODES)}")
    rows = [] if args.skip_b16 else b16_rows(args.batch, modes=modes)
    if args.digits:
        rows += digits_rows(args.digits, modes=modes)
    if not rows:
        parser.error("nothing to measure (--skip-b16 without --digits)")
    text = table(rows)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    from keras_vit import atomic

    atomic.write_text(os.path.join(args.out, "quantization.md"), text + "\n")
    atomic.write_text(
        os.path.join(args.out, "quantization.json"), json.dumps(rows, indent=1)
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
