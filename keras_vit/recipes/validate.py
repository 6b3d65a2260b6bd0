"""`keras-vit validate`: a classifier's accuracy on a dataset, as timm's
`validate.py`.

```bash
keras-vit validate --model vit_base_patch16_224.augreg2_in21k_ft_in1k \\
    --data tfds:imagenet2012 --split validation --batch-size 128 --out val.json
keras-vit validate --model runs/flowers/final.keras --data folder:flowers \\
    --split "train[80%:]"
keras-vit validate --model vit.keras --data folder:imagenette/val --class-map imagenet
```

Reports top-1 and top-5 accuracy (percent; top-5 only for models of at least
5 classes), the mean cross-entropy loss, images per second (the whole loop:
reading, decoding, preparing and the model), the number of images, and the
preprocessing used. The results are printed, and written as JSON to `--out`
(whole or not at all) when given.

Images are prepared by the model's own input contract (`model.preprocessing`:
`keras_vit.data.transforms.resize_and_crop`, then `normalize` unless the
model was built with `include_preprocessing=True`) at the model's input size:
the same preparation as `keras_vit.predict`, through the evaluation pipeline
of training (`keras_vit.data.eval_dataset` with the model's contract).

`--data` is `folder:DIR` (one sub-folder of images per class; classes in
sorted folder-name order, or split sub-folders `DIR/validation/<class>/`),
`tfds:NAME` (a TensorFlow Datasets name), or a dataset known by name
(`digits`, or one a plug-in registers). Without `--split`: a folder's
`validation` (else `test`) split if it has one, else its images (a folder
whose only split is `train/` is refused: its training images are validated
with `--split train` only); `validation` for TFDS; a named dataset's test
split (`test` for digits). A folder that is no dataset (missing, empty,
images without class sub-folders) is one line saying what it holds and the
layouts read (`FOLDER_LAYOUTS`), exit status 2.

The dataset's classes must be the model's: as many, in the same order. A
dataset with another number of classes is refused (exit status 1) naming
both counts, unless `--class-map` maps each dataset class to a model class:
`--class-map imagenet` for folders named by ImageNet-1k WordNet ids
(`n01440764`) or class names (`tench`) and a 1000-class model, or
`--class-map map.json` holding `{"folder name": model class index}`.
Argument errors exit with status 2, among them a `--model` name that cannot
be loaded (unknown, or not found: not on the Hub, or not in the Hub cache
offline; see `keras_vit.recipes.predict.load_named_model`).
"""

from __future__ import annotations

import argparse
import json
import os
import stat
import sys
import time

from keras_vit.recipes import cli
from keras_vit.recipes.predict import load_named_model


def build_parser() -> argparse.ArgumentParser:
    parser = cli.ArgumentParser(
        prog=cli.prog("validate"),
        description="Evaluate a keras_vit classifier on a dataset (as timm's "
        "validate.py): top-1, top-5, cross-entropy loss and images/s, with the "
        "model's own input contract (resize, crop, mean/std).",
    )
    cli.add_pretrained_model_argument(parser)
    parser.add_argument(
        "--data",
        required=True,
        help="folder:DIR (one sub-folder of images per class), tfds:NAME, "
        "or a dataset known by name (digits, or one a plug-in registers)",
    )
    parser.add_argument(
        "--split",
        help="the split, with an optional slice (e.g. validation, "
        "'train[80%%:]'); default: a folder's validation (else test) split or "
        "its images, validation for TFDS, a named dataset's test split",
    )
    parser.add_argument(
        "--batch-size",
        type=cli.positive_int_arg,
        default=64,
        help="images per batch (default 64)",
    )
    parser.add_argument(
        "--out", help="write the results as JSON to this file (a path or a URL)"
    )
    parser.add_argument(
        "--class-map",
        help="map the dataset's classes to the model's: 'imagenet' (folders "
        "named by ImageNet-1k WordNet ids or names) or a JSON file "
        '{"class name": model index}; default: the same classes in order',
    )
    parser.add_argument(
        "--data-dir", help="the TFDS data directory (default: TFDS's own)"
    )
    return parser


# The image folders `--data folder:DIR` reads, for the errors.
FOLDER_LAYOUTS = (
    "validate reads folder:DIR as DIR/<class>/<image files> (all its images) or "
    "as split sub-folders DIR/validation/<class>/<image files> (or test/, "
    "train/; --split picks one)"
)


def default_split(data: str) -> str:
    """The split `--data` is evaluated on without `--split`.

    A folder's `validation` (else `test`) split; a folder without split
    sub-folders is one split of all its images, which the data module calls
    `"train"`.

    Raises:
        ValueError: a folder whose only split is `train/`: its training
            images are not validated without `--split train`.
    """
    from keras_vit import paths
    from keras_vit.data.datasets import named_source

    if data.startswith("folder:"):
        directory = data[len("folder:") :]
        for split in ("validation", "test"):
            if paths.isdir(os.path.join(directory, split)):
                return split
        if paths.isdir(os.path.join(directory, "train")):
            others = sorted(
                name
                for name in _entries(directory)
                if name != "train" and paths.isdir(os.path.join(directory, name))
            )
            elsewhere = (
                f", or --data folder:{os.path.join(directory, others[0])} to "
                f"validate on the images in {others[0]}/"
                if others
                else ""
            )
            raise ValueError(
                f"--data {data} has a train/ split but no validation/ or test/ "
                f"one: pass --split train to validate on its training images"
                f"{elsewhere}"
            )
        return "train"
    named = named_source(data)  # "digits", or a plug-in's dataset
    return named.test_split if named is not None else "validation"


def data_error(data: str, split: str, given: bool, error: Exception) -> str:
    """One line: why `--data` (at `split`) cannot be read.

    For a folder that is no dataset (missing, empty, image files without
    class sub-folders) the line says what the folder holds and the layouts
    `validate` reads (`FOLDER_LAYOUTS`), naming the split only where
    `--split` gave it (`given`): the default split of a folder without
    split sub-folders is all its images. Other errors keep their own words.
    """
    if not data.startswith("folder:"):
        return f"--data {data} split {split!r}: {error}"
    directory = data[len("folder:") :]
    problem = folder_problem(directory)
    if problem is not None:
        where = f"--data {data}" + (f" split {split!r}" if given else "")
        return f"{where}: {problem}; {FOLDER_LAYOUTS}"
    return f"--data {data} split {split!r}: {error}"


def folder_problem(directory: str) -> str | None:
    """What keeps `directory` from being an image folder, or `None`: it does
    not exist, is empty, or holds files but no class sub-folders."""
    from keras_vit import paths

    if not paths.isdir(directory):
        if paths.exists(directory):
            return f"{directory!r} is a file, not a folder"
        return f"there is no folder {directory!r}"
    names = _entries(directory)
    if any(paths.isdir(os.path.join(directory, n)) for n in names):
        return None
    if not names:
        return f"{directory!r} is an empty folder"
    images = [n for n in names if n.lower().endswith(_image_extensions())]
    count, kind = (len(images), "image file") if images else (len(names), "file")
    held = f"{count} {kind}{'' if count == 1 else 's'}"
    return f"{directory!r} holds {held} but no class sub-folders to label them"


def _entries(directory: str) -> list[str]:
    """The names in `directory`, hidden ones (`.DS_Store`) aside."""
    from keras_vit import paths

    try:
        names = paths.listdir(directory)
    except OSError:
        return []
    return sorted(n.rstrip("/") for n in names if not n.startswith("."))


def _image_extensions() -> tuple[str, ...]:
    from keras_vit.data.datasets import IMAGE_EXTENSIONS

    return IMAGE_EXTENSIONS


def class_mapping(spec: str, dataset_classes, num_classes: int):
    """`int64` model class index per dataset class, from `--class-map`.

    Raises:
        ValueError: an unreadable map, a class it does not map, an index
            outside the model's classes.
    """
    import numpy as np

    from keras_vit import imagenet
    from keras_vit import paths

    if spec == "imagenet":
        if num_classes != imagenet.NUM_CLASSES:
            raise ValueError(
                f"--class-map imagenet needs a model of {imagenet.NUM_CLASSES} "
                f"classes; the model has {num_classes}"
            )
        table = {name: i for i, name in enumerate(imagenet.class_names())}
        table.update({wnid: i for i, wnid in enumerate(imagenet.synsets())})
    else:
        try:
            if not paths.is_url(spec) and os.path.exists(spec):
                if not stat.S_ISREG(os.stat(spec).st_mode):  # A FIFO would hang.
                    raise ValueError("not a regular file")
            with paths.open_file(spec) as f:
                table = json.load(f)
        except (OSError, ValueError) as error:
            raise ValueError(f"--class-map {spec!r}: cannot be read: {error}") from None
        if not isinstance(table, dict) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in table.values()
        ):
            raise ValueError(
                f"--class-map {spec!r} must be a JSON object of class name -> "
                "model class index"
            )
    unmapped = [name for name in dataset_classes if name not in table]
    if unmapped:
        shown = ", ".join(unmapped[:10]) + (" ..." if len(unmapped) > 10 else "")
        raise ValueError(
            f"--class-map {spec!r} maps {len(unmapped)} of the dataset's "
            f"classes to no model class: {shown}"
        )
    mapping = np.asarray([table[name] for name in dataset_classes], np.int64)
    bad = [int(i) for i in mapping if not 0 <= i < num_classes]
    if bad:
        raise ValueError(
            f"--class-map {spec!r} maps to class indices outside the model's "
            f"{num_classes} classes: {bad[:10]}"
        )
    return mapping


def eval_stream(source, model, batch_size: int, mapping=None):
    """`(inputs, labels)` batches of `source` prepared by `model`'s contract,
    labels (class indices) mapped to the model's classes by `mapping`.

    A model that takes normalised inputs gets the evaluation pipeline of
    training (`keras_vit.data.eval_dataset` with its contract); a model built
    with `include_preprocessing=True` gets the same resize and crop
    (`keras_vit.inference.prepare`) without the normalisation.
    """
    import tensorflow as tf

    from keras_vit import inference
    from keras_vit.data.pipeline import eval_dataset
    from keras_vit.data.transforms import decode_image
    from keras_vit.models.preprocessing import preprocessing_of

    contract = preprocessing_of(model)
    size = inference.image_size_of(model)
    channels = int(model.inputs[0].shape[-1])
    table = None if mapping is None else tf.constant(mapping, tf.int64)

    def to_model_classes(label):
        return label if table is None else tf.gather(table, label)

    if not inference.takes_pixels(model):
        dataset = eval_dataset(
            source,
            image_size=size,
            global_batch_size=batch_size,
            channels=channels,
            preprocessing=contract,
        )
        return dataset.map(
            lambda x, y: (x, to_model_classes(tf.argmax(y, axis=-1))),
            num_parallel_calls=tf.data.AUTOTUNE,
        )

    def transform(image, label):
        if source.encoded:
            image = decode_image(image)
        inputs = inference.prepare(image, contract, size, True, channels)
        return inputs, to_model_classes(label)

    dataset = source.dataset.map(transform, num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.batch(batch_size).prefetch(tf.data.AUTOTUNE)


def cross_entropy(outputs, labels, activation: str):
    """Per-example cross-entropy of the true class: `-log p(label)`, from the
    logits (log-softmax) for a model that outputs logits."""
    import numpy as np

    outputs = np.asarray(outputs, np.float64)
    rows = np.arange(len(labels))
    if activation == "linear":
        shifted = outputs - outputs.max(axis=-1, keepdims=True)
        log_sum = np.log(np.exp(shifted).sum(axis=-1))
        return log_sum - shifted[rows, labels]
    if activation == "log_softmax":
        return -outputs[rows, labels]
    return -np.log(np.clip(outputs[rows, labels], 1e-12, 1.0))


def evaluate(model, source, batch_size: int, mapping=None, progress: bool = True):
    """Top-1, top-5, loss and speed of `model` on `source` (an `ImageSource`).

    Returns:
        A dict: `num_images`, `top1`, `top5` (percent; `None` below 5
        classes), `loss` (mean cross-entropy), `seconds`, `images_per_second`.
    """
    import keras
    import numpy as np

    from keras_vit import inference

    num_classes = inference.check_classifier(model)
    activation = inference.output_activation(model)
    stream = eval_stream(source, model, batch_size, mapping)
    steps = -(-source.num_examples // batch_size)
    bar = None
    if progress:  # A live bar on a terminal; one line at the end in a log.
        bar = keras.utils.Progbar(
            steps,
            verbose=1 if sys.stdout.isatty() else 2,
            stateful_metrics=["top1", "loss"],
            unit_name="batch",
        )
    top1 = top5 = count = 0
    loss = 0.0
    started = time.perf_counter()
    for step, (inputs, labels) in enumerate(stream, 1):
        outputs = keras.ops.convert_to_numpy(model(inputs, training=False))
        outputs = outputs.astype(np.float32)
        labels = labels.numpy()
        ranked = np.argsort(-outputs, axis=-1, kind="stable")[:, :5]
        top1 += int(np.sum(ranked[:, 0] == labels))
        top5 += int(np.sum(np.any(ranked == labels[:, None], axis=-1)))
        loss += float(np.sum(cross_entropy(outputs, labels, activation)))
        count += len(labels)
        if bar is not None:
            bar.update(
                step,
                values=[("top1", 100.0 * top1 / count), ("loss", loss / count)],
                finalize=step == steps,
            )
    seconds = time.perf_counter() - started
    if count == 0:
        raise ValueError(f"{source.name} has no images")
    return {
        "num_images": count,
        "top1": round(100.0 * top1 / count, 4),
        "top5": round(100.0 * top5 / count, 4) if num_classes >= 5 else None,
        "loss": round(loss / count, 6),
        "seconds": round(seconds, 3),
        "images_per_second": round(count / seconds, 2),
    }


def undecodable(source, error) -> str:
    """One line for an image of `source` that could not be read, naming its
    file where it can be found (`keras_vit.data.pipeline`'s search)."""
    from keras_vit.data import pipeline

    find = getattr(pipeline, "_undecodable", None)
    if find is not None:
        return find(source, error)
    reason = (error.message or "").strip().splitlines()
    return (
        f"{source.name} could not be read: "
        f"{reason[0] if reason else type(error).__name__}"
    )


def format_results(record: dict) -> str:
    """The results, printed."""
    top5 = (
        "n/a (fewer than 5 classes)"
        if record["top5"] is None
        else f"{record['top5']:.3f} %  (error {100 - record['top5']:.3f} %)"
    )
    size = "x".join(str(s) for s in record["image_size"])
    by = (
        "the model's preprocessing layer"
        if record["include_preprocessing"]
        else "keras_vit before the model"
    )
    return "\n".join(
        [
            f"Validated {record['model']} on {record['data']} split "
            f"{record['split']!r}: {record['num_images']} images, "
            f"{record['num_classes']} classes",
            f"  top-1   {record['top1']:.3f} %  (error {100 - record['top1']:.3f} %)",
            f"  top-5   {top5}",
            f"  loss    {record['loss']:.4f}  (mean cross-entropy)",
            f"  speed   {record['images_per_second']:.1f} images/s  "
            f"({record['seconds']:.2f} s, batch {record['batch_size']})",
            f"  inputs  {size}: {record['preprocessing']['description']}; "
            f"normalised by {by}",
        ]
    )


def run(args: argparse.Namespace) -> dict:
    """Runs the validation described by parsed `args`; returns the record."""
    import tensorflow as tf

    from keras_vit import inference
    from keras_vit.data import load_source
    from keras_vit.models.preprocessing import preprocessing_of

    try:
        split = args.split or default_split(args.data)
    except ValueError as error:  # A folder whose only split is train/.
        cli.fail(str(error))
    try:
        source = load_source(args.data, split, data_dir=args.data_dir)
    except ValueError as error:  # Also `DatasetError`.
        cli.fail(data_error(args.data, split, args.split is not None, error))
    model = load_named_model(args.model, args.force_download)
    try:
        num_classes = inference.check_classifier(model)
        size = inference.image_size_of(model)
        mapping = (
            class_mapping(args.class_map, source.class_names, num_classes)
            if args.class_map
            else None
        )
    except ValueError as error:
        cli.fail(str(error))
    if mapping is None and source.num_classes != num_classes:
        cli.fail(
            f"the dataset {args.data} (split {split!r}) has {source.num_classes} "
            f"classes but the model {args.model} has {num_classes}; pass "
            "--class-map to map the dataset's classes to the model's",
            cli.EXIT_FAILED,
        )
    contract = preprocessing_of(model)
    with cli.handle_termination():
        try:
            results = evaluate(model, source, args.batch_size, mapping)
        except tf.errors.OpError as error:  # E.g. an image that cannot be decoded.
            cli.fail(undecodable(source, error), cli.EXIT_FAILED)
        except KeyboardInterrupt as error:
            cli.interrupted(error)
    record = {
        "model": args.model,
        "model_name": model.name,
        "data": args.data,
        "split": split,
        "source": source.name,
        "num_classes": num_classes,
        **results,
        "batch_size": args.batch_size,
        "image_size": list(size),
        "include_preprocessing": inference.takes_pixels(model),
        "preprocessing": {
            "description": contract.describe(),
            "config": contract.get_config(),
        },
        "class_map": args.class_map,
        "skipped_files": len(source.skipped),
    }
    print(format_results(record))  # noqa: T201
    if args.out:
        from keras_vit import atomic

        try:
            atomic.write_json(args.out, record)
        except OSError as error:
            cli.fail(f"--out {args.out}: {error.strerror or error}", cli.EXIT_FAILED)
        print(f"Wrote {args.out}")  # noqa: T201
    return record


def main(argv: list[str] | None = None) -> dict:
    """Command-line entry point; returns the results record.

    Exits with status 2 and one line on an argument error (a dataset or
    model that cannot be loaded, a bad `--class-map`), 1 when the dataset's
    classes are not the model's or an image cannot be read.
    """
    args = build_parser().parse_args(argv)
    return run(args)


if __name__ == "__main__":
    from keras_vit.recipes.__main__ import exit_status

    sys.exit(exit_status(main(sys.argv[1:])))
