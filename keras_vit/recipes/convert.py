"""Converts a checkpoint into a Keras `.weights.h5` or `.keras` file, or a
model into a pretrained folder.

Usage:

    python -m recipes.convert in.npz out.weights.h5 --variant B/16
    python -m recipes.convert in.npz out.keras --variant B/16 --image-size 384
    python -m recipes.convert vit.safetensors out.weights.h5 --variant S/16
    keras-vit convert runs/flowers/final.keras flowers-vit/
    keras-vit convert vit_base_patch16_224.augreg2_in21k_ft_in1k vit.keras

An output without a suffix (or ending in `/`) is a pretrained folder
(`keras_vit.save_pretrained`: `config.json`, timm-layout `model.safetensors`,
a model card) that `keras_vit.from_pretrained` and timm read. The input is
then a `.keras` model (a run's `final.keras`: the run's `results.json` and
`config.json` beside it go into the model card) or a checkpoint name
(`keras_vit.from_pretrained`). A name converts to a `.keras` file too.

The model is built from the checkpoint's own shapes unless told otherwise:
its head width (`--num-classes`), `pre_logits` width
(`--representation-size`), class token (else `gap` pooling) and resolution
(`--image-size`; the position embedding is resampled when it differs). The
same checks as `keras_vit.weights.load_weights` apply, so a file converted
without error loads into a model built with the same arguments.
`--num-classes 0` converts the encoder alone (`include_top=False`), as in
every other command. An existing output is kept unless `--overwrite`; the
output is written whole or not at all. Argument errors are one line
(`error: ...`, exit status 2); a checkpoint that does not fit exits with 1.
"""

from __future__ import annotations

import argparse
import math
import os
import sys

# The command-line conventions every keras_vit command shares (sizes as 224,
# 224,320 or 224x320; class counts with 0 = no head; one-line errors).
from keras_vit.recipes import cli


def _optional_int(text: str) -> int | None:
    if text.lower() in ("none", "0"):
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a width: {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = cli.ArgumentParser(
        prog=cli.prog("convert"),
        description="Convert a ViT checkpoint (.npz or .safetensors) into a "
        "Keras .weights.h5 or .keras file.",
    )
    parser.add_argument(
        "checkpoint",
        help="input .npz or .safetensors file, a .keras model, or a checkpoint "
        "name (a timm name, hf://org/repo, a pretrained folder)",
    )
    parser.add_argument(
        "output",
        help="output .weights.h5 or .keras file, or a folder (save_pretrained)",
    )
    parser.add_argument(
        "--variant",
        help="model variant, e.g. B/16 or R50+B/16 (read off an .npz when "
        "omitted; required for .safetensors)",
    )
    parser.add_argument(
        "--image-size",
        type=cli.image_size_arg,
        help="model resolution: 224, 224,320 or 224x320 (default: the checkpoint's)",
    )
    parser.add_argument(
        "--num-classes",
        type=cli.num_classes_arg,
        help="head width (default: the checkpoint's; a different value "
        "gives a zero-initialised head; 0 converts no head: include_top=False)",
    )
    parser.add_argument(
        "--representation-size",
        type=_optional_int,
        default=-1,
        help="pre_logits width, or 'none' to drop it (default: the checkpoint's)",
    )
    parser.add_argument(
        "--resample-method",
        choices=("bilinear", "bicubic"),
        default="bilinear",
        help="position-embedding resampling (default: bilinear)",
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="replace an existing output file"
    )
    return parser


def _read(path: str, variant: str | None):
    """The checkpoint at `path` as a `keras_vit.weights.Checkpoint`."""
    from keras_vit.models.variants import parse_variant
    from keras_vit.weights import Checkpoint
    from keras_vit.weights import read_npz
    from keras_vit.weights import read_safetensors
    from keras_vit.weights import to_original_layout
    from keras_vit.weights.checkpoint import dialect_of

    if path.endswith(".safetensors"):
        if variant is None:
            cli.fail("--variant is required for a .safetensors checkpoint")
        heads = parse_variant(variant).variant.num_heads
        tensors = read_safetensors(path)
        dialect = dialect_of(tensors)
        return Checkpoint(
            to_original_layout(tensors, heads),
            source=path,
            heads_recorded=dialect is None or dialect.records_heads,
        )
    return Checkpoint(read_npz(path), source=path)


def variant_hint(checkpoint) -> str:
    """What to pass as `--variant` for `checkpoint`, from its shapes alone.

    A timm or Hugging Face file does not record its number of attention
    heads: the hint then says so instead of naming one.
    """
    from keras_vit.weights import architecture

    shapes = {k: tuple(v.shape) for k, v in checkpoint.params.items()}
    arch = architecture.describe(shapes, heads_recorded=checkpoint.heads_recorded)
    return f"Pass {arch.build_hint('--variant ')}."


def model_arguments(params: dict, args: argparse.Namespace) -> dict:
    """The `keras_vit.ViT` arguments for a checkpoint and the command line."""
    from keras_vit.models.variants import parse_variant
    from keras_vit.weights import architecture
    from keras_vit.weights import keys

    arch = architecture.describe({k: tuple(v.shape) for k, v in params.items()})
    variant = args.variant or arch.variant
    if variant is None:
        cli.fail(f"cannot name the checkpoint's variant ({arch.name}); pass --variant")
    spec = parse_variant(variant)
    class_token = "cls" in params
    image_size = args.image_size
    if image_size is None:
        table = params.get(keys.POSEMB_KEY)
        if table is None:
            cli.fail("the checkpoint has no position embedding; pass --image-size")
        side = math.isqrt(table.shape[1] - int(class_token))
        image_size = (side * spec.total_stride,) * 2
    head = params.get(keys.HEAD_KEYS[0])
    num_classes = args.num_classes
    if num_classes is None:  # The checkpoint's head, if it has one.
        num_classes = head.shape[-1] if head is not None else 0
    representation_size = args.representation_size
    if representation_size == -1:
        pre_logits = params.get(keys.PRE_LOGITS_KEYS[0])
        representation_size = None if pre_logits is None else pre_logits.shape[-1]
    return dict(
        variant=variant,
        image_size=image_size,
        num_classes=num_classes or 1000,
        include_top=num_classes > 0,
        representation_size=representation_size,
        class_token=class_token,
        pooling="token" if class_token else "gap",
    )


def convert(args: argparse.Namespace):
    """Runs the conversion described by parsed command-line `args`."""
    import keras

    from keras_vit.models.vit import ViT
    from keras_vit.weights.errors import VariantMismatchError
    from keras_vit.weights.loader import load_weights

    print(f"Reading {args.checkpoint}")
    checkpoint = _read(args.checkpoint, args.variant)
    params = checkpoint.params
    kwargs = model_arguments(params, args)
    print(
        "Building keras_vit.ViT("
        + ", ".join(f"{k}={v!r}" for k, v in kwargs.items())
        + ")"
    )
    model = ViT(kwargs.pop("variant"), **kwargs)
    progress = keras.utils.Progbar(len(model.weights), unit_name="weight")
    try:
        notes = load_weights(
            model,
            checkpoint,
            resample_method=args.resample_method,
            keep_pre_logits=False if kwargs["representation_size"] is None else None,
            progress=progress,
        )
    except VariantMismatchError as error:
        raise VariantMismatchError(
            f"{error}\n{variant_hint(checkpoint)}", mismatched=error.mismatched
        ) from None
    for note in notes:
        print(note)
    _write_file(model, args.output)
    return model


def _write_file(model, output: str) -> None:
    """`model` as a `.keras` or `.weights.h5` file, whole or absent."""
    from keras_vit import atomic

    if output.endswith(".keras"):
        atomic.save_model(model, output)
    else:
        atomic.save_weights(model, output)
    print(f"Wrote {output} ({model.count_params():,} parameters)")


def _is_file_output(path: str) -> bool:
    return path.endswith((".weights.h5", ".keras"))


def to_pretrained(args: argparse.Namespace):
    """Writes the model named by `args.checkpoint` as a pretrained folder,
    or a checkpoint name as a `.keras` file."""
    from keras_vit.pretrained import from_pretrained
    from keras_vit.pretrained import save_pretrained

    given = [
        flag
        for flag, value in (
            ("--variant", args.variant),
            ("--image-size", args.image_size),
            ("--num-classes", args.num_classes),
        )
        if value is not None
    ]  # fmt: skip
    if args.checkpoint.endswith(".keras"):
        print(f"Loading {args.checkpoint}")
        model = cli.load_model(args.checkpoint)
    elif os.path.isfile(args.checkpoint):
        cli.fail(
            "a checkpoint file converts to a .keras file first (keras-vit convert "
            f"{args.checkpoint} model.keras --variant ...), then to a folder"
        )
    else:
        if given:
            cli.fail(f"{', '.join(given)} do not apply to a checkpoint name")
        print(f"Loading {args.checkpoint}")
        model = from_pretrained(args.checkpoint)
    if _is_file_output(args.output):
        _write_file(model, args.output)
        return model
    run = os.path.dirname(os.path.abspath(args.checkpoint))
    metrics, recipe = _run_record(run)
    save_pretrained(
        model, args.output, metrics=metrics, recipe=recipe, overwrite=args.overwrite
    )
    print(f"Wrote {args.output}/ (config.json, model.safetensors, README.md)")
    return model


def _run_record(run: str) -> tuple[dict | None, dict | None]:
    """A run directory's test metrics and config, for the model card."""
    import json

    def read(name):
        try:
            with open(os.path.join(run, name), encoding="utf-8") as f:
                value = json.load(f)
        except (OSError, ValueError):
            return None
        return value if isinstance(value, dict) else None

    results = read("results.json") or {}
    test = results.get("test")
    metrics = (
        {k: v for k, v in test.items() if isinstance(v, int | float)}
        if isinstance(test, dict)
        else None
    )
    return metrics or None, read("config.json")


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    from keras_vit.weights import sources

    by_name = not os.path.exists(args.checkpoint) and sources.is_name(args.checkpoint)
    by_name = by_name or os.path.isdir(args.checkpoint)
    folder = (
        args.output.endswith(("/", os.sep))
        or not os.path.splitext(args.output.rstrip("/" + os.sep))[1]
    )
    if not folder and not _is_file_output(args.output):
        parser.error(
            "the output must end in .weights.h5 or .keras, or be a folder "
            "(no suffix) for a pretrained folder"
        )
    pretrained = by_name or folder
    if not pretrained and not os.path.isfile(args.checkpoint):
        parser.error(f"no checkpoint file at {args.checkpoint!r}")
    if pretrained and not by_name and not os.path.isfile(args.checkpoint):
        parser.error(f"no model file or checkpoint name {args.checkpoint!r}")
    if os.path.exists(args.output) and not args.overwrite:
        parser.error(f"{args.output} already exists; pass --overwrite to replace it")
    from keras_vit.weights.errors import CheckpointError

    try:
        to_pretrained(args) if pretrained else convert(args)
    except (CheckpointError, FileNotFoundError, ImportError) as error:
        cli.report_error(str(error))
        return cli.EXIT_FAILED
    except ValueError as error:  # A model argument that cannot be built.
        cli.fail(str(error))
    return 0


if __name__ == "__main__":
    from keras_vit.recipes.__main__ import exit_status

    sys.exit(exit_status(main(sys.argv[1:])))
