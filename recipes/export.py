"""Exports a ViT to `saved_models/<name>/<version>/` for TF Serving.

The SavedModel has the signatures `serving_default` (uint8 images),
`serving_float`, `serving_bytes` (JPEG/PNG bytes) and `features`; see
`docs/serving.md`. Optionally also a LiteRT (`.tflite`) and an ONNX file,
written next to the version directory as `<base>/<name>/<version>.tflite`
and `<version>.onnx` (TF Serving only loads numeric directories).

Usage:

```bash
python -m recipes.export --model digits_vit.keras --name digits_vit --version 1
python -m recipes.export --variant B/16 --weights vit_b16.weights.h5 \
    --num-classes 10 --class-names classes.txt --name vit_b16 --version 2 \
    --image-size 384 --tflite --onnx
```
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import keras

import keras_vit
from keras_vit.export import export
from keras_vit.export import export_onnx
from keras_vit.export import export_tflite
from keras_vit.export.savedmodel import METADATA_FILE


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m recipes.export",
        description=__doc__.split("\n\n")[0],
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a saved .keras model")
    source.add_argument("--variant", help='a variant to build, e.g. "B/16"')
    parser.add_argument(
        "--weights",
        help="weights for --variant: a .weights.h5 file, or a checkpoint/tag "
        "for keras_vit.weights.load_weights",
    )
    parser.add_argument(
        "--num-classes",
        type=int,
        default=1000,
        help="classes of --variant's head; 0 builds a headless feature model",
    )
    parser.add_argument(
        "--model-image-size",
        type=_size,
        default=(224, 224),
        help="resolution --variant is built (and its weights trained) at: "
        "224 or 224x320 (default 224)",
    )
    parser.add_argument("--name", required=True, help="model name: the directory")
    parser.add_argument(
        "--version", type=int, required=True, help="a positive integer version"
    )
    parser.add_argument(
        "--base-dir", default="saved_models", help="default: saved_models"
    )
    parser.add_argument(
        "--image-size",
        type=_size,
        default=None,
        help="serve at another resolution, e.g. 384 or 384x512 (position "
        "embeddings resampled); default: the model's",
    )
    parser.add_argument(
        "--class-names", help="a text file with one class name per line"
    )
    parser.add_argument("--top-k", type=int, default=5, help="default: 5")
    parser.add_argument(
        "--crop-fraction",
        type=float,
        default=1.0,
        help="central crop of decoded images before resizing (default 1.0: "
        "plain resize)",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the version")
    parser.add_argument(
        "--tflite", action="store_true", help="also write <version>.tflite"
    )
    parser.add_argument("--onnx", action="store_true", help="also write <version>.onnx")
    return parser


def _size(text: str) -> tuple[int, int]:
    parts = text.lower().split("x")
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r}") from None
    if len(values) == 1:
        values = values * 2
    if len(values) != 2 or min(values) <= 0:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (use 384 or 384x512)")
    return values


def load_model(args) -> keras.Model:
    """The model named on the command line: a `.keras` file or a variant."""
    if args.model:
        if args.weights:
            raise SystemExit("--weights goes with --variant, not --model.")
        return keras.saving.load_model(args.model)
    # `weights=` goes through keras_vit.weights.load_weights, which also
    # loads .weights.h5 files (with model.load_weights).
    return keras_vit.ViT(
        args.variant,
        num_classes=max(args.num_classes, 1),
        include_top=args.num_classes > 0,
        image_size=args.model_image_size,
        weights=args.weights or None,
    )


def read_class_names(path: str) -> list[str]:
    lines = pathlib.Path(path).read_text(encoding="utf-8").splitlines()
    return [line.strip() for line in lines if line.strip()]


def main(argv: list[str] | None = None) -> pathlib.Path:
    args = build_parser().parse_args(argv)
    if args.version <= 0:
        raise SystemExit(f"--version must be a positive integer, not {args.version}.")
    model_dir = pathlib.Path(args.base_dir) / args.name
    # Fail before loading a model that cannot be written.
    if (model_dir / str(args.version)).exists() and not args.overwrite:
        raise SystemExit(
            f"Not exported: {model_dir / str(args.version)} already exists. "
            "Use a new --version, or --overwrite."
        )
    if args.onnx:
        try:
            import tf2onnx  # noqa: F401
        except ImportError:
            raise SystemExit(
                "--onnx needs tf2onnx: pip install tf2onnx onnxruntime"
            ) from None
    class_names = read_class_names(args.class_names) if args.class_names else None
    model = load_model(args)
    try:
        path = export(
            model,
            model_dir / str(args.version),
            class_names=class_names,
            top_k=args.top_k,
            overwrite=args.overwrite,
            image_size=args.image_size,
            crop_fraction=args.crop_fraction,
        )
    except FileExistsError as error:  # Appeared while the model loaded.
        raise SystemExit(f"Not exported: {error}") from None
    info = json.loads((path / METADATA_FILE).read_text())
    print(
        f"SavedModel: {path}  (image size {info['image_size']}, signatures "
        f"{', '.join(info['signatures'])})"
    )
    if args.tflite:
        tflite = export_tflite(
            path, model_dir / f"{args.version}.tflite", overwrite=args.overwrite
        )
        print(f"LiteRT:     {tflite}")
    if args.onnx:
        onnx = export_onnx(
            path, model_dir / f"{args.version}.onnx", overwrite=args.overwrite
        )
        print(f"ONNX:       {onnx}")
    return path


if __name__ == "__main__":
    main(sys.argv[1:])
