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

An input file is told by its content, not its name (`input_kind`): an
`.npz`, `.safetensors` or `torch.save` (`.pth`) checkpoint, a `.keras`
model (loaded by Keras and written again; `--image-size` resamples it, the
other model options do not apply), or a `.weights.h5` file, whose sizes are
read off the file against `--variant`. Keras files are checked before any
of their data is read (`keras_vit.weights.formats.keras_h5`), also before
Keras's own loader reads a `.keras` model.

The model is built from the checkpoint's own shapes unless told otherwise:
its head width (`--num-classes`), `pre_logits` width
(`--representation-size`), class token (else `gap` pooling) and resolution
(`--image-size`; the position embedding is resampled when it differs). The
same checks as `keras_vit.weights.load_weights` apply, so a file converted
without error loads into a model built with the same arguments.
`--num-classes 0` converts the encoder alone (`include_top=False`), as in
every other command. An existing output is kept unless `--overwrite`; the
output is written whole or not at all, and what a killed conversion left
next to it is removed by the next one. The output may be a URL
(`gs://bucket/my-vit`, written through `tf.io.gfile`); `gs:/bucket` (a
slash missing) is refused, never made a local folder. Argument errors are
one line (`error: ...`, exit status 2), among them a checkpoint name that
names nothing or whose files cannot be found (not on the Hub, or not in the
Hub cache when offline, where the two cannot be told apart); a checkpoint
that does not fit, a full or read-only disk or a bucket out of reach exits
with 1, Ctrl-C with 130 (SIGTERM 143), in one line, leaving the output as
it was.
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
        description="Convert a ViT checkpoint (.npz, .safetensors, .pth or "
        ".weights.h5) or a .keras model into a Keras .weights.h5 or .keras file, "
        "or a pretrained folder.",
    )
    parser.add_argument(
        "checkpoint",
        help="input .npz, .safetensors, .pth or .weights.h5 file, a .keras "
        "model, or a checkpoint name (a timm name, hf://org/repo, a pretrained "
        "folder); a file is told by its content",
    )
    parser.add_argument(
        "output",
        help="output .weights.h5 or .keras file, or a folder (save_pretrained)",
    )
    parser.add_argument(
        "--variant",
        help="model variant, e.g. B/16 or R50+B/16 (read off an .npz when "
        "omitted; required for .safetensors, .pth and .weights.h5)",
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
    parser.add_argument(
        "--force-download",
        action="store_true",
        help="download a named checkpoint's files again even when cached (a "
        "cached file cut short or corrupt)",
    )
    return parser


# What an input file is, told by its content (`input_kind`), for messages.
KERAS_MODEL = "a Keras model (.keras archive)"
KERAS_WEIGHTS = "a Keras weights file (.weights.h5)"
LEGACY_KERAS = "a legacy Keras 2 HDF5 file (.h5)"


def input_kind(path: str):
    """What the file at `path` is, from its content, whatever its name.

    A zip holding `config.json` and `model.weights.h5` is a Keras model; an
    HDF5 file is Keras weights (or Keras 2's legacy format); otherwise the
    checkpoint formats are asked as `weights=` asks them (a `torch.save`
    zip before an `.npz`, as both are zips).

    Returns:
        `(description, format)`: e.g. `(KERAS_MODEL, None)`, or
        `("a safetensors checkpoint", Format)`; `(None, None)` for a file
        of no kind that convert reads.

    Example:

    ```python
    input_kind("final.keras")  # ("a Keras model (.keras archive)", None)
    ```
    """
    from keras_vit import plugins
    from keras_vit.weights.formats import FORMATS
    from keras_vit.weights.formats import keras_h5

    plugins.load_plugins()  # A plug-in's format is told by content too (.pth).
    if keras_h5.is_keras_archive(path):
        return KERAS_MODEL, None
    if keras_h5.is_hdf5(path):
        return (LEGACY_KERAS if keras_h5.is_legacy_file(path) else KERAS_WEIGHTS), None
    with open(path, "rb") as f:
        head = f.read(16)
    for fmt in FORMATS:
        if fmt.recognizes is not None and fmt.recognizes(path):
            return f"a {fmt.name} checkpoint", fmt
    for fmt in FORMATS:
        if fmt.looks_like(head):
            return f"a {fmt.name} checkpoint", fmt
    return None, None


def _read(path: str, variant: str | None):
    """The checkpoint at `path` as a `keras_vit.weights.Checkpoint`.

    Its format is told by its content (`input_kind`), not its name. A
    format whose attention weights do not record the number of heads
    (timm's and Hugging Face's fused projections, in a `.safetensors` or
    `torch.save` file), and Keras weights (which record no architecture),
    need `--variant`.
    """
    from keras_vit.models.variants import parse_variant
    from keras_vit.weights import Checkpoint
    from keras_vit.weights import to_original_layout
    from keras_vit.weights.checkpoint import dialect_of

    kind, fmt = input_kind(path)
    if kind == LEGACY_KERAS:
        cli.fail(
            f"{path} is {kind}, which keras_vit does not read: load it with the "
            "Keras that wrote it and save it with model.save('x.keras')"
        )
    if kind is None:
        cli.fail(
            f"{path} is not a checkpoint convert reads: expected an .npz, "
            ".safetensors or torch.save (.pth) checkpoint, a .keras model or a "
            ".weights.h5 file (told by their content, not their names)"
        )
    print(f"Reading {path}: {kind}")
    if kind == KERAS_WEIGHTS:
        return _read_keras_weights(path, variant)
    tensors = fmt.read(path)
    dialect = dialect_of(tensors)
    if fmt.original_layout and dialect is None:
        return Checkpoint(tensors, source=path)
    if variant is None and dialect is not None and not dialect.records_heads:
        cli.fail(
            f"--variant is required for {path}, {kind} in {dialect.name}'s "
            "layout, whose fused attention weights do not record the number of "
            "heads"
        )
    heads = parse_variant(variant).variant.num_heads if variant else None
    return Checkpoint(
        to_original_layout(tensors, heads, what=fmt.name),
        source=path,
        heads_recorded=dialect is None or dialect.records_heads,
    )


def _read_keras_weights(path: str, variant: str | None):
    """A `.weights.h5` file, read by layer name against a `--variant` model.

    The file records no architecture: its layers are named after those of
    a one-patch model of `variant` (whose sizes do not matter), and the
    file's own shapes then give the classes, `pre_logits` and resolution,
    as for any checkpoint.
    """
    from keras_vit.models.variants import parse_variant
    from keras_vit.models.vit import ViT
    from keras_vit.weights import from_keras_file

    if variant is None:
        cli.fail(
            f"--variant is required for {path}, {KERAS_WEIGHTS}, which records "
            "no architecture (its sizes are read off the file)"
        )
    stride = parse_variant(variant).total_stride
    namer = ViT(variant, image_size=stride, num_classes=1)
    return from_keras_file(path, namer)


def _load_saved_model(args: argparse.Namespace):
    """A `.keras` model file, loaded by Keras, for writing again.

    The file records its architecture: `--variant`, `--num-classes` and
    `--representation-size` are refused; `--image-size` rebuilds it at that
    resolution (`--resample-method`). `cli.load_model` checks the file as
    keras_vit checks every Keras file (nothing from outside it, nothing past
    a budget) before Keras reads it.
    """
    from keras_vit.models.resize import with_image_size

    path = args.checkpoint
    given = [
        flag
        for flag, unset, value in (
            ("--variant", None, args.variant),
            ("--num-classes", None, args.num_classes),
            ("--representation-size", -1, args.representation_size),
        )
        if value != unset
    ]  # fmt: skip
    if given:
        cli.fail(
            f"{', '.join(given)} do not apply to {path}, {KERAS_MODEL}, which "
            "records its own architecture (--image-size does: it resamples the "
            "position embedding)"
        )
    if not path.endswith(".keras"):
        cli.fail(
            f"{path} is {KERAS_MODEL} under another name; Keras loads it only "
            "with the suffix .keras: rename it"
        )
    print(f"Loading {path}: {KERAS_MODEL}")
    model = cli.load_model(path)
    if args.image_size is not None:
        size = args.image_size
        size = (size, size) if isinstance(size, int) else tuple(size)
        if tuple(model.input_shape[1:3]) != size:
            model = with_image_size(model, size, method=args.resample_method)
    return model


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

    if input_kind(args.checkpoint)[0] == KERAS_MODEL:  # a model, not weights
        return to_pretrained(args)
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
    if (
        os.path.isfile(args.checkpoint)
        and input_kind(args.checkpoint)[0] == KERAS_MODEL
    ):
        model = _load_saved_model(args)
    elif os.path.isfile(args.checkpoint):
        cli.fail(
            "a checkpoint file converts to a .keras file first (keras-vit convert "
            f"{args.checkpoint} model.keras --variant ...), then to a folder"
        )
    else:
        if given:
            cli.fail(f"{', '.join(given)} do not apply to a checkpoint name")
        print(f"Loading {args.checkpoint}")
        model = from_pretrained(args.checkpoint, force_download=args.force_download)
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
    with cli.handle_termination():  # SIGTERM as Ctrl-C: one line, cleaned up.
        try:
            return _write_output(args, parser, pretrained)
        except KeyboardInterrupt as error:
            error.stopped_at = f"before {args.output} was written"
            error.resume_hint = (
                f"{args.output} was left as it was: rerun the same command"
            )
            cli.interrupted(error)


def _write_output(args, parser, pretrained: bool) -> int:
    """Checks that `args.output` can be written, then converts into it.

    Every output goes through `keras_vit.paths` and `keras_vit.atomic`: a
    URL is written through `tf.io.gfile` or refused in one line before any
    work (never a local folder named after it), and a read-only or full
    disk is one line (exit status 1), leaving nothing behind.
    """
    from keras_vit import atomic
    from keras_vit import paths

    try:
        paths.check(args.output, "output")
    except paths.UnsupportedPath as error:
        cli.fail(str(error))
    from keras_vit.weights.errors import CheckpointError
    from keras_vit.weights.errors import WeightsNotFoundError

    try:
        if paths.exists(args.output) and not args.overwrite:
            parser.error(
                f"{args.output} already exists; pass --overwrite to replace it"
            )
        atomic.check_writable(args.output)
        to_pretrained(args) if pretrained else convert(args)
    except WeightsNotFoundError as error:  # A name whose files are not found.
        cli.fail(" ".join(str(error).split()))
    except (CheckpointError, FileNotFoundError, ImportError) as error:
        cli.report_error(str(error))
        return cli.EXIT_FAILED
    except FileExistsError:  # Appeared (or was put back) while converting.
        cli.fail(f"{args.output} already exists; pass --overwrite to replace it")
    except OSError as error:  # A full or read-only disk, a bucket out of reach.
        cli.fail(atomic.file_error_text(error, args.output), cli.EXIT_FAILED)
    except ValueError as error:  # A model argument that cannot be built.
        cli.fail(str(error))
    return 0


if __name__ == "__main__":
    from keras_vit.recipes.__main__ import exit_status

    sys.exit(exit_status(main(sys.argv[1:])))
