"""`keras-vit predict`: classify image files with a model, top-k per image.

```bash
keras-vit predict --model vit_base_patch16_224.augreg2_in21k_ft_in1k cat.jpg
keras-vit predict --model runs/digits/final.keras --top-k 3 a.png b.png
keras-vit predict --model model.keras --json *.jpg > predictions.json
```

`--model` is a `.keras` file or a name `keras_vit.from_pretrained` loads
(a timm name, a weights tag, `hf://org/repo`, a folder). Each image is
prepared by the model's own input contract (`model.preprocessing`: resize,
crop, mean/std) at the model's input size; see `keras_vit.predict`. Labels
are `--class-names` (one per line), else the model's, else ImageNet-1k's for
a 1000-class model, else the class indices.

Every image is checked before the model runs: a file that does not exist or
is not an image fails the command (exit status 1) with one line naming every
such file. Argument errors (a bad `--top-k`, a `--model` that cannot be
loaded, a model without a head) exit with status 2; so does a checkpoint
name whose files cannot be found (not on the Hub, or not in the Hub cache
when offline: offline, a name that exists nowhere cannot be told from one
not yet downloaded).
"""

from __future__ import annotations

import argparse
import codecs
import json
import os
import stat
import sys

from keras_vit.recipes import cli


def build_parser() -> argparse.ArgumentParser:
    parser = cli.ArgumentParser(
        prog=cli.prog("predict"),
        description="Classify images with a keras_vit model: the top-k classes "
        "of each image, with probabilities. Images are prepared by the model's "
        "own input contract (resize, crop, mean/std).",
    )
    parser.add_argument(
        "images", nargs="+", help="image files (JPEG, PNG, GIF, BMP, WebP)"
    )
    cli.add_pretrained_model_argument(parser)
    parser.add_argument(
        "--top-k",
        type=cli.positive_int_arg,
        default=5,
        help="classes per image (default 5)",
    )
    parser.add_argument(
        "--class-names",
        help="a text file with one class name per line, in class-index order "
        "(default: the model's, ImageNet-1k's for 1000 classes, else indices)",
    )
    parser.add_argument(
        "--batch-size",
        type=cli.positive_int_arg,
        default=32,
        help="images per batch (default 32)",
    )
    parser.add_argument(
        "--json", action="store_true", help="print the predictions as JSON"
    )
    return parser


def load_named_model(name: str, force_download: bool = False):
    """The model `--model` names: a `.keras` file (`cli.load_model`) or a
    name for `keras_vit.from_pretrained`.

    A model that cannot be loaded is a one-line error, exit status 2: a
    file that does not exist or cannot be read, an unknown name, and a
    checkpoint name whose files cannot be found (`WeightsNotFoundError`:
    not on the Hub, not downloadable, or not in the Hub cache offline,
    where a name that exists nowhere cannot be told from one not yet
    downloaded). Another file system error (a bucket out of reach) exits
    with 1. `force_download` fetches a named checkpoint's files again.
    """
    from keras_vit import inference
    from keras_vit.weights.errors import WeightsNotFoundError

    try:
        if name.endswith(".keras"):
            if force_download:
                cli.fail(f"--force-download is for checkpoint names, not {name!r}")
            return cli.load_model(name)
        return inference.load_model(name, force_download=force_download)
    except (ValueError, WeightsNotFoundError, ImportError) as error:
        cli.fail(f"--model {name!r}: {_one_line(error)}")
    except OSError as error:
        cli.fail(f"--model {name!r}: {_one_line(error)}", cli.EXIT_FAILED)


def class_names_file(path: str) -> list[str]:
    """The class names in a UTF-8 text file (local or a URL), one per line.

    Blank lines and the spaces around names are dropped, as is a UTF-8
    byte-order mark.

    Raises:
        OSError: the file cannot be opened or read.
        ValueError: it is not a text file: not a regular file (a folder, a
            FIFO, a device), not UTF-8, or holding NUL bytes. The message
            is the problem alone, e.g. `not UTF-8 text (byte 0x89 at
            offset 0)`; the caller names the file.

    Example:

    ```python
    names = class_names_file("classes.txt")  # ["cat", "dog", ...]
    ```
    """
    from keras_vit import paths

    if not paths.is_url(path) and os.path.exists(path):
        if not stat.S_ISREG(os.stat(path).st_mode):  # A FIFO would hang.
            raise ValueError("not a regular file")
    with paths.open_file(path, "rb") as f:
        data = f.read()
    bom = len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0
    try:
        text = data[bom:].decode("utf-8")
    except UnicodeDecodeError as error:
        at = bom + error.start
        raise ValueError(
            f"not UTF-8 text (byte 0x{data[at]:02x} at offset {at})"
        ) from None
    nul = data.find(b"\x00")
    if nul >= 0:
        raise ValueError(f"not a text file (a NUL byte at offset {nul})")
    return [line.strip() for line in text.splitlines() if line.strip()]


def read_class_names(path: str) -> list[str]:
    """`class_names_file(path)`, or a one-line error (exit status 2)."""
    try:
        return class_names_file(path)
    except OSError as error:
        cli.fail(f"--class-names: {error.strerror or error}: {path}")
    except ValueError as error:
        cli.fail(f"--class-names: {error}: {path}")


def _one_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def format_table(images: list[str], predictions) -> str:
    """Each image's top-k as a readable table."""
    lines = []
    for image, top in zip(images, predictions, strict=True):
        width = max([len("class")] + [len(p.label) for p in top])
        lines.append(image)
        lines.append(f"  {'#':>2}  {'class':<{width}}  {'index':>5}  probability")
        for rank, p in enumerate(top, 1):
            lines.append(
                f"  {rank:>2}  {p.label:<{width}}  {p.index:>5}  {p.probability:11.4f}"
            )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> dict:
    """Classifies `args.images`; returns the JSON record (also printed)."""
    from keras_vit import inference
    from keras_vit.models.preprocessing import preprocessing_of

    try:  # Every image checked before the model is loaded or run.
        inference.check_images(args.images)
    except ValueError as error:  # Every bad file, named in one line.
        cli.fail(_one_line(error), cli.EXIT_FAILED)
    class_names = read_class_names(args.class_names) if args.class_names else None
    model = load_named_model(args.model, args.force_download)
    try:
        num_classes = inference.check_classifier(model)
        inference.class_names_of(model, class_names, num_classes)
        size = inference.image_size_of(model)
    except ValueError as error:
        cli.fail(_one_line(error))
    contract = preprocessing_of(model)
    try:
        predictions = inference.predict(
            model,
            list(args.images),
            top_k=args.top_k,
            class_names=class_names,
            batch_size=args.batch_size,
        )
    except ValueError as error:  # An image that passed the check, undecodable.
        cli.fail(_one_line(error), cli.EXIT_FAILED)
    record = {
        "model": args.model,
        "image_size": list(size),
        "preprocessing": contract.describe(),
        "include_preprocessing": inference.takes_pixels(model),
        "images": [
            {"image": image, "top_k": [p.as_dict() for p in top]}
            for image, top in zip(args.images, predictions, strict=True)
        ],
    }
    if args.json:
        print(json.dumps(record, indent=2))  # noqa: T201
    else:
        print(  # noqa: T201
            f"Model {args.model} ({num_classes} classes); images prepared at "
            f"{size[0]}x{size[1]}: {contract.describe()}"
        )
        print(format_table(list(args.images), predictions))  # noqa: T201
    return record


def main(argv: list[str] | None = None) -> dict:
    """Command-line entry point; returns the JSON record of the predictions.

    Exits with status 1 and one line for images that are missing or not
    images (every one named), 2 for an argument error.
    """
    args = build_parser().parse_args(argv)
    return run(args)


if __name__ == "__main__":
    from keras_vit.recipes.__main__ import exit_status

    sys.exit(exit_status(main(sys.argv[1:])))
