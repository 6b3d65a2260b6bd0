"""Exports a ViT to `saved_models/<name>/<version>/` for TF Serving.

The SavedModel has the signatures `serving_default` (uint8 images),
`serving_float`, `serving_bytes` (JPEG/PNG bytes) and `features`; see
`docs/serving.md`. Optionally also a LiteRT (`.tflite`) and an ONNX file,
written next to the version directory as `<base>/<name>/<version>.tflite`
and `<version>.onnx` (TF Serving only loads numeric directories), and the
int8 LiteRT file `<version>.int8.tflite`, the fastest way to serve on a CPU
(`docs/performance.md`).

Usage:

```bash
python -m recipes.export --model digits_vit.keras --name digits_vit --version 1
python -m recipes.export --variant B/16 --weights vit_b16.weights.h5 \
    --num-classes 10 --class-names classes.txt --name vit_b16 --version 2 \
    --image-size 384 --tflite --onnx
python -m recipes.export --model digits_vit.keras --name digits_vit --version 1 \
    --tflite-int8
```
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import json
import os
import pathlib
import sys

from keras_vit import atomic
from keras_vit import paths
from keras_vit.recipes import cli


def build_parser() -> cli.ArgumentParser:
    parser = cli.ArgumentParser(
        prog=cli.prog("export"),
        description=__doc__.split("\n\n")[0],
    )
    cli.add_model_arguments(parser, "--model-image-size")
    parser.add_argument("--name", required=True, help="model name: the directory")
    parser.add_argument(
        "--version", type=int, required=True, help="a positive integer version"
    )
    parser.add_argument(
        "--base-dir", default="saved_models", help="default: saved_models"
    )
    parser.add_argument(
        "--image-size",
        type=cli.image_size_arg,
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
        default=None,
        help="central crop of decoded images (timm's crop_pct; default: the "
        "model's input contract's, 1.0 = the whole image for the paper's ViT)",
    )
    parser.add_argument(
        "--max-pixels",
        type=_max_pixels_arg,
        default=None,
        help="serving_bytes refuses, before decoding, an image of more pixels "
        "(width x height, read from its header); default: Pillow's limit, "
        "89478485",
    )
    parser.add_argument("--overwrite", action="store_true", help="replace the version")
    parser.add_argument(
        "--tflite", action="store_true", help="also write <version>.tflite"
    )
    parser.add_argument("--onnx", action="store_true", help="also write <version>.onnx")
    parser.add_argument(
        "--tflite-int8",
        action="store_true",
        help="also write <version>.int8.tflite: int8 weights, activations "
        "quantized at run time (the fastest CPU model; docs/performance.md)",
    )
    return parser


def read_class_names(path: str) -> list[str]:
    """The class names in a UTF-8 text file (local or a URL), one per line.

    Raises:
        OSError: the file cannot be read.
        ValueError: it is not a text file (binary, a FIFO, a folder).
    """
    from keras_vit.recipes.predict import class_names_file

    return class_names_file(path)


# `keras_vit.export.pixel_limit.LARGEST_MAX_PIXELS`, here without importing
# TensorFlow (tests/test_hostile_serving.py checks they agree).
LARGEST_MAX_PIXELS = 2**30


def _max_pixels_arg(text: str) -> int:
    """`--max-pixels`: an integer from 1 to 2**30, as an argparse `type=`."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if not 1 <= value <= LARGEST_MAX_PIXELS:
        raise argparse.ArgumentTypeError(
            f"not an integer from 1 to {LARGEST_MAX_PIXELS}: {text!r}"
        )
    return value


def main(argv: list[str] | None = None) -> pathlib.Path | str:
    """Command-line entry point; returns the SavedModel directory.

    Every argument error is one line (`error: ...`, exit status 2), checked
    before TensorFlow is imported where it can be. `--base-dir`, `--model`
    and `--class-names` may be URLs (`gs://bucket/models`; see
    `keras_vit.paths`), checked once TensorFlow is loaded.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.version <= 0:
        parser.error(f"--version must be a positive integer, not {args.version}")
    if args.model and args.weights:
        parser.error("--weights goes with --variant, not --model")
    for flag, value in (
        ("--base-dir", args.base_dir),
        ("--model", args.model),
        ("--class-names", args.class_names),
    ):  # A URL's file system is TensorFlow's; `gs:/b` lacks a slash.
        try:
            paths.check(value, flag)
        except paths.UnsupportedPath as error:
            cli.fail(str(error))
    if paths.is_url(args.base_dir):
        model_dir = os.path.join(args.base_dir, args.name)
    else:
        model_dir = pathlib.Path(args.base_dir) / args.name
    version_dir = os.path.join(model_dir, str(args.version))
    # Fail before loading a model that cannot be written.
    try:
        exists = _is_export(version_dir)
    except OSError as error:
        _fail_on_os_error(error, version_dir)
    if exists and not args.overwrite:
        cli.fail(
            f"not exported: {version_dir} already exists; "
            "use a new --version, or --overwrite"
        )
    try:  # A read-only disk: before the model is loaded.
        atomic.check_writable(os.fspath(version_dir))
    except OSError as error:
        _fail_on_os_error(error, version_dir)
    if args.onnx and importlib.util.find_spec("tf2onnx") is None:
        cli.fail("--onnx needs tf2onnx: pip install tf2onnx onnxruntime")
    class_names = None
    if args.class_names:
        try:
            class_names = read_class_names(args.class_names)
        except OSError as error:
            cli.fail(f"--class-names: {error.strerror}: {args.class_names}")
        except ValueError as error:  # E.g. a binary file.
            cli.fail(f"--class-names: {error}: {args.class_names}")
        if args.variant and args.num_classes and len(class_names) != args.num_classes:
            cli.fail(
                f"--class-names lists {len(class_names)} names for "
                f"--num-classes {args.num_classes}"
            )
    written = []  # What is complete, for the line an interruption prints.
    with cli.handle_termination():  # SIGTERM as Ctrl-C: one line, cleaned up.
        try:
            return _export(args, model_dir, version_dir, class_names, written)
        except KeyboardInterrupt as error:
            if written:
                error.stopped_at = f"after {', '.join(map(str, written))}"
                error.resume_hint = (
                    "what was written is whole: rerun the same command with "
                    "--overwrite to write the rest"
                )
            else:
                error.stopped_at = f"before {version_dir} was written"
                error.resume_hint = "nothing was written: rerun the same command"
            cli.interrupted(error)


def _export(args, model_dir, version_dir, class_names, written: list):
    """Loads the model and writes the SavedModel, then the other formats
    asked for, appending each path to `written` once it is complete.

    A file-system error (a full or read-only disk, a bucket out of reach)
    is one line, exit status 1; nothing partial is left, nor the folders
    made for a version that could not be written.
    """
    import tensorflow as tf

    from keras_vit.export import export
    from keras_vit.export import export_onnx
    from keras_vit.export import export_tflite
    from keras_vit.export.savedmodel import METADATA_FILE

    local = not paths.is_url(version_dir)
    max_pixels = {} if args.max_pixels is None else {"max_pixels": args.max_pixels}
    try:
        model = cli.model_from_args(args)
        made = atomic.new_folders_removed_on_error(model_dir) if local else None
        with made or contextlib.nullcontext():
            path = export(
                model,
                pathlib.Path(version_dir) if local else version_dir,
                class_names=class_names,
                top_k=args.top_k,
                overwrite=args.overwrite,
                image_size=args.image_size,
                crop_fraction=args.crop_fraction,
                **max_pixels,
            )
    except FileExistsError as error:  # Appeared while the model loaded.
        cli.fail(f"not exported: {error}")
    except ValueError as error:  # E.g. a class-names count the model lacks.
        cli.fail(str(error))
    except (OSError, tf.errors.OpError) as error:  # E.g. a full disk.
        _fail_on_os_error(error, version_dir)
    written.append(path)
    with paths.open_file(os.path.join(path, METADATA_FILE)) as f:
        info = json.load(f)
    print(
        f"SavedModel: {path}  (image size {info['image_size']}, signatures "
        f"{', '.join(info['signatures'])})"
    )
    others = []  # (label, writer, target, its options)
    if args.tflite:
        target = _sibling(model_dir, f"{args.version}.tflite")
        others.append(("LiteRT:     ", export_tflite, target, {}))
    if args.tflite_int8:
        target = _sibling(model_dir, f"{args.version}.int8.tflite")
        others.append(("LiteRT int8:", export_tflite, target, {"quantize": "int8"}))
    if args.onnx:
        target = _sibling(model_dir, f"{args.version}.onnx")
        others.append(("ONNX:       ", export_onnx, target, {}))
    for label, write, target, options in others:
        try:
            result = write(path, target, overwrite=args.overwrite, **options)
        except (OSError, tf.errors.OpError) as error:
            _fail_on_os_error(error, target, written)
        written.append(result)
        print(f"{label} {result}")
    return path


def _is_export(version_dir: str) -> bool:
    """Whether a version is there (at a URL: one with its `saved_model.pb`;
    what a killed upload left is replaced)."""
    if paths.is_url(version_dir):
        return paths.exists(os.path.join(version_dir, "saved_model.pb"))
    return os.path.exists(version_dir)


def _fail_on_os_error(error, path, written=()) -> None:
    """`error: not exported: REASON` in one line (exit status 1).

    `error`: an `OSError` or a TensorFlow file-system error; a full disk
    and a read-only one are named as such (`keras_vit.atomic`). `written`:
    what was already written whole, named in the line.
    """
    text = atomic.file_error_text(error, os.fspath(path))
    kept = f"; {', '.join(map(str, written))} was written whole" if written else ""
    cli.fail(f"not exported: {text}{kept}", cli.EXIT_FAILED)


def _sibling(model_dir, name: str):
    """`model_dir/name`: a `pathlib.Path`, or for a URL a `str`."""
    if paths.is_url(model_dir):
        return os.path.join(model_dir, name)
    return pathlib.Path(model_dir) / name


if __name__ == "__main__":
    from keras_vit.recipes.__main__ import exit_status

    sys.exit(exit_status(main(sys.argv[1:])))
