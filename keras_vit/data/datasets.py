"""Labelled image sources: the embedded digits, image folders, TFDS by name.

A source is the raw material of a pipeline: a `tf.data.Dataset` of
`(image, label)` pairs in a fixed order, with its size and class names.
Images are either decoded `uint8 (height, width, channels)` arrays or encoded
bytes (`source.encoded`), which `keras_vit.data.pipeline` decodes after
shuffling, so a shuffle buffer holds small strings rather than pixels.

Dataset names understood by `load_source`:

- `"digits"`: scikit-learn's bundled handwritten digits (1,797 real 8x8
  grayscale images, 10 classes). Needs no download; the default of the
  README's main command.
- `"folder:PATH"`: one sub-folder of images per class, the conventions of
  `keras.utils.image_dataset_from_directory`. Unreadable files are skipped
  and counted (`source.skipped`).
- anything else, optionally prefixed `"tfds:"`: a TensorFlow Datasets name
  such as `"cifar10"`, `"oxford_iiit_pet"` or `"imagenet2012"`, read from the
  user's `data_dir`.

Splits are a name with an optional slice, as in TFDS: `"train"`,
`"train[:90%]"`, `"test[100:]"`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re

import numpy as np
import tensorflow as tf

logger = logging.getLogger(__name__)

# The extensions `keras.utils.image_dataset_from_directory` accepts.
IMAGE_EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png")

# The fixed train/test partition of the digits: 360 test images (20%),
# drawn once with this seed so that every run sees the same split.
DIGITS_TEST_SIZE = 360
DIGITS_SPLIT_SEED = 0

_SPLIT_PATTERN = re.compile(r"^(\w+)(?:\[(-?\d*)(%?):(-?\d*)(%?)\])?$")


@dataclasses.dataclass(frozen=True)
class ImageSource:
    """A labelled collection of images, before any preprocessing.

    Attributes:
        dataset: Elements `(image, label)`: `image` is `uint8 (height, width,
            channels)`, or a scalar `tf.string` of encoded bytes when
            `encoded`; `label` is an `int64` scalar. The order is fixed.
        num_examples: Number of elements.
        num_classes: Number of classes.
        class_names: One name per class index.
        encoded: Whether images are encoded bytes still to be decoded.
        may_fail_to_decode: Whether some images may not decode (files from
            a folder); pipelines then drop those instead of failing.
        skipped: Files left out because they could not be read as images.
        name: A short description, e.g. `"digits:train"`.
    """

    dataset: tf.data.Dataset
    num_examples: int
    num_classes: int
    class_names: tuple[str, ...]
    encoded: bool = False
    may_fail_to_decode: bool = False
    skipped: tuple[str, ...] = ()
    name: str = ""


def load_source(
    dataset: str,
    split: str,
    data_dir: str | None = None,
    download: bool = True,
    seed: int = 0,
) -> ImageSource:
    """Returns the `ImageSource` named by `dataset` and `split`.

    Args:
        dataset: `"digits"`, `"folder:PATH"`, or a TFDS name (optionally
            `"tfds:NAME"`). See the module docstring.
        split: A split name with an optional slice, e.g. `"train[:90%]"`.
        data_dir: TFDS data directory. Defaults to TFDS's own default
            (`~/tensorflow_datasets` or `$TFDS_DATA_DIR`).
        download: Let TFDS download and prepare a missing dataset.
        seed: Seed of the TFDS file order (TFDS sources only).

    Returns:
        An `ImageSource`.

    Example:

    ```python
    source = load_source("digits", "train")
    source.num_examples, source.num_classes  # (1437, 10)
    ```
    """
    if not isinstance(dataset, str) or not dataset:
        raise ValueError(f"`dataset` must be a non-empty string. Received: {dataset!r}")
    if dataset == "digits":
        return digits(split)
    if dataset.startswith("folder:"):
        return image_folder(dataset[len("folder:") :], split)
    name = dataset[len("tfds:") :] if dataset.startswith("tfds:") else dataset
    return tfds_source(name, split, data_dir=data_dir, download=download, seed=seed)


def digits(split: str = "train") -> ImageSource:
    """The handwritten digits bundled with scikit-learn, as an `ImageSource`.

    1,797 real 8x8 grayscale images of the digits 0-9 (the UCI "optdigits"
    test set), shipped inside scikit-learn: nothing is downloaded. Pixel
    values 0-16 are rescaled to 0-255. A fixed, seeded partition gives 1,437
    `"train"` and 360 `"test"` images; slices carve validation sets out of
    them (`"train[:90%]"`, `"train[90%:]"`).

    Args:
        split: `"train"` or `"test"`, with an optional slice.

    Returns:
        An `ImageSource` of `uint8 (8, 8, 1)` images.
    """
    from sklearn.datasets import load_digits

    base, start, stop = parse_split(split)
    bunch = load_digits()
    images = np.round(bunch.images * (255.0 / 16.0)).astype(np.uint8)[..., None]
    labels = bunch.target.astype(np.int64)
    order = np.random.default_rng(DIGITS_SPLIT_SEED).permutation(len(labels))
    parts = {
        "train": order[:-DIGITS_TEST_SIZE],
        "test": order[-DIGITS_TEST_SIZE:],
    }
    if base not in parts:
        raise ValueError(
            f"Unknown digits split {split!r}. Known splits: {sorted(parts)}, "
            "with an optional slice such as 'train[:90%]'."
        )
    index = _slice(parts[base], start, stop, split)
    dataset = tf.data.Dataset.from_tensor_slices((images[index], labels[index]))
    return ImageSource(
        dataset=dataset,
        num_examples=len(index),
        num_classes=10,
        class_names=tuple(str(d) for d in range(10)),
        name=f"digits:{split}",
    )


def image_folder(
    directory: str, split: str = "train", validate: bool = True
) -> ImageSource:
    """Images in one sub-folder per class, as an `ImageSource`.

    The conventions of `keras.utils.image_dataset_from_directory`: each
    sub-folder of `directory` is a class, classes are numbered in
    alphanumeric order of the folder names, files are found recursively and
    kept when their extension is one of `IMAGE_EXTENSIONS`.

    The split's name picks a sub-folder when one exists (`PATH/train/<class>/`
    and `PATH/test/<class>/`); otherwise the folder itself is the split and
    slices carve it up, after a fixed shuffle so that every slice holds every
    class: `"train[:90%]"` and `"train[90%:]"`.

    Unreadable files do not stop training. With `validate=True` every file is
    checked once (Pillow reads its header and structure); the ones that fail
    are left out, logged and listed in `ImageSource.skipped`. The pipeline
    drops any remaining file that TensorFlow cannot decode
    (`tf.data.Dataset.ignore_errors`, which logs each one).

    Args:
        directory: The folder.
        split: A sub-folder name or the folder's own split, with an optional
            slice.
        validate: Check every file before use. Defaults to `True`.

    Returns:
        An `ImageSource` of encoded images.
    """
    base, start, stop = parse_split(split)
    if not os.path.isdir(directory):
        raise ValueError(f"Image folder {directory!r} does not exist.")
    root = os.path.join(directory, base)
    sliced_root = not os.path.isdir(root)
    if sliced_root:
        root = directory
    class_names = sorted(entry.name for entry in os.scandir(root) if entry.is_dir())
    if not class_names:
        raise ValueError(
            f"Image folder {root!r} has no class sub-folders. Expected "
            "PATH/<class_name>/<image files>."
        )
    paths, labels = [], []
    for label, class_name in enumerate(class_names):
        for dirpath, dirnames, filenames in os.walk(os.path.join(root, class_name)):
            dirnames.sort()
            for filename in sorted(filenames):
                if filename.lower().endswith(IMAGE_EXTENSIONS):
                    paths.append(os.path.join(dirpath, filename))
                    labels.append(label)
    skipped = []
    if validate:
        keep = [_is_readable_image(path) for path in paths]
        skipped = [path for path, ok in zip(paths, keep, strict=True) if not ok]
        paths = [path for path, ok in zip(paths, keep, strict=True) if ok]
        labels = [label for label, ok in zip(labels, keep, strict=True) if ok]
        if skipped:
            logger.warning(
                "Skipped %d unreadable image file(s) in %s, e.g. %s",
                len(skipped),
                root,
                skipped[0],
            )
    if not paths:
        raise ValueError(f"No readable images under {root!r}.")
    index = np.arange(len(paths))
    if sliced_root:
        index = np.random.default_rng(0).permutation(len(paths))
    index = _slice(index, start, stop, split)
    paths = np.asarray(paths)[index]
    labels = np.asarray(labels, np.int64)[index]
    dataset = tf.data.Dataset.from_tensor_slices((paths, labels)).map(
        lambda path, label: (tf.io.read_file(path), label)
    )
    return ImageSource(
        dataset=dataset,
        num_examples=len(index),
        num_classes=len(class_names),
        class_names=tuple(class_names),
        encoded=True,
        may_fail_to_decode=True,
        skipped=tuple(skipped),
        name=f"folder:{root}:{split}",
    )


def tfds_source(
    name: str,
    split: str,
    data_dir: str | None = None,
    download: bool = True,
    seed: int = 0,
) -> ImageSource:
    """A TensorFlow Datasets image classification dataset, as an `ImageSource`.

    Images are kept encoded (`tfds.decode.SkipDecoding`). Files are read in a
    seeded order that is the same every epoch, so a run is reproducible and
    resumes exactly; the pipeline's shuffle buffer reorders examples each
    epoch.

    Args:
        name: A TFDS name with an `image` and a `label` feature, e.g.
            `"cifar10"`, `"cifar100"`, `"oxford_iiit_pet"`,
            `"oxford_flowers102"`, `"imagenet2012"`, `"imagenet_v2"`.
        split: A TFDS split, e.g. `"train[:98%]"`.
        data_dir: The TFDS data directory.
        download: Let TFDS download and prepare the dataset when missing.
            `imagenet2012` needs its archives placed by hand first (TFDS
            says where).
        seed: Seed of the file order.

    Returns:
        An `ImageSource` of encoded images.
    """
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:
        raise ImportError(
            f"Dataset {name!r} needs TensorFlow Datasets: "
            "pip install 'keras_vit[data]'."
        ) from error
    read_config = tfds.ReadConfig(
        shuffle_seed=seed, shuffle_reshuffle_each_iteration=False
    )
    try:
        dataset, info = tfds.load(
            name,
            split=split,
            data_dir=data_dir,
            download=download,
            as_supervised=True,
            with_info=True,
            shuffle_files=True,
            read_config=read_config,
            decoders={"image": tfds.decode.SkipDecoding()},
        )
    except Exception as error:  # TFDS raises many types; add the context.
        raise RuntimeError(
            f"Could not load TFDS dataset {name!r} (split {split!r}, data_dir="
            f"{data_dir!r}): {error}. Offline, prepare it beforehand with "
            f"`tfds build {name}` or point `data_dir` at a prepared copy."
        ) from error
    label = info.features["label"]
    try:
        num_examples = info.splits[split].num_examples
    except KeyError:  # e.g. under `tfds.testing.mock_data`: no split metadata.
        num_examples = int(dataset.cardinality())
    if num_examples <= 0:
        raise ValueError(f"TFDS split {name}:{split} has no known size.")
    return ImageSource(
        dataset=dataset,
        num_examples=int(num_examples),
        num_classes=int(label.num_classes),
        class_names=tuple(label.names),
        encoded=True,
        name=f"{name}:{split}",
    )


def parse_split(split: str) -> tuple[str, str | None, str | None]:
    """Splits `"train[10:90%]"` into `("train", "10", "90%")`.

    Args:
        split: A split name with an optional TFDS-style slice.

    Returns:
        `(name, start, stop)`; `start` and `stop` are `None` or strings with
        an optional `%`.
    """
    match = _SPLIT_PATTERN.match(split) if isinstance(split, str) else None
    if match is None:
        raise ValueError(
            f"Cannot parse split {split!r}. Expected a name with an optional "
            "slice, e.g. 'train', 'train[:90%]', 'test[100:]'."
        )
    name, start, start_pct, stop, stop_pct = match.groups()
    start = (start + start_pct) if start else None
    stop = (stop + stop_pct) if stop else None
    return name, start, stop


def _slice(index: np.ndarray, start: str | None, stop: str | None, split: str):
    def position(bound):
        if bound is None:
            return None
        if bound.endswith("%"):
            return int(round(len(index) * int(bound[:-1]) / 100))
        return int(bound)

    selected = index[position(start) : position(stop)]
    if len(selected) == 0:
        raise ValueError(f"Split {split!r} selects no examples (of {len(index)}).")
    return selected


def _is_readable_image(path: str) -> bool:
    """Whether Pillow recognises `path` as an intact image (cheap: no decode)."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            image.verify()
        return True
    except Exception:  # Pillow raises many types for bad files.
        return False
