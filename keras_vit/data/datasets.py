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
- a name a plug-in registers (`register_source`, `keras_vit.plugins`),
  e.g. `"glyphs"`, the Park & Kim wing's typeset digits over photo patches
  (`keras_vit.parkkim.glyphs`). A name that is neither built in nor
  prefixed loads the installed plug-ins before it is taken for a TFDS name.
- `"folder:PATH"`: one sub-folder of images per class, the conventions of
  `keras.utils.image_dataset_from_directory`, either directly in `PATH` or
  in split sub-folders (`PATH/train/<class>/`, `PATH/test/<class>/`).
  Every split numbers its classes as the `train` split does, by name.
  Files that are not images TensorFlow decodes are skipped and listed
  (`source.skipped`), as are entries that are not regular files (a FIFO,
  a socket or a device with an image extension, which reading would wait
  on or stream forever; a broken link). `PATH` may be a URL
  (`folder:gs://bucket/flowers`) of any file system `tf.io.gfile` has
  (`keras_vit.paths`).
- anything else, optionally prefixed `"tfds:"`: a TensorFlow Datasets name
  such as `"cifar10"`, `"oxford_iiit_pet"` or `"imagenet2012"`, read from the
  user's `data_dir`. A dataset that is not prepared there fails at once
  when it cannot be downloaded, leaving no file behind.

Splits are a name with an optional slice, as in TFDS: `"train"`,
`"train[:90%]"`, `"test[100:]"`. A slice outside the split (`"train[:200%]"`,
`"test[5000:]"` of 360 examples) is an error, as in TFDS.

Splits never overlap silently:

- A folder split is the sub-folder of that name. A folder without split
  sub-folders holds only `"train"`; asking it (or a folder with split
  sub-folders) for a split it lacks, e.g. `"test"`, is an error naming the
  split and the folder, never the training images again.
- Hold-outs are explicit slices: `"train[:80%]"` and `"train[80%:]"` cut one
  fixed permutation of the split's files, drawn with `split_seed` (default
  0) from the full file listing. They are complementary, the same on every
  run and machine, do not move when a file turns out unreadable, and change
  only when `split_seed` does. An unsliced split keeps the files' sorted
  order. The digits' slices cut their fixed, seeded partition the same way;
  TFDS slices are TFDS's own.
- `check_disjoint(a, b)` refuses two sources that share an example: folder
  sources compare their files (`source.files`) by identity (a link, hard or
  symbolic, is the file it points to) and by content (a byte-identical
  copy is the same image), digits their indices, TFDS sources their example
  ranges. It also refuses two sources whose classes differ.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import shutil
import socket
import threading
from collections.abc import Callable
from stat import S_ISREG

import numpy as np
import tensorflow as tf

from keras_vit import paths
from keras_vit import plugins
from keras_vit._export import export
from keras_vit.data.source import ImageSource
from keras_vit.data.source import check_percentages
from keras_vit.data.source import parse_split
from keras_vit.data.source import slice_index

logger = logging.getLogger(__name__)

# The extensions of the formats `keras_vit.data.decode_image` reads (those
# `keras.utils.image_dataset_from_directory` accepts, and WebP). Other files
# in a class folder (e.g. `.tiff`, which TensorFlow does not decode) are
# listed in `ImageSource.skipped`.
IMAGE_EXTENSIONS = (".bmp", ".gif", ".jpeg", ".jpg", ".png", ".webp")

# The fixed train/test partition of the digits: 360 test images (20%),
# drawn once with this seed so that every run sees the same split.
DIGITS_TEST_SIZE = 360
DIGITS_SPLIT_SEED = 0

# Sub-folders that make an image folder a set of splits rather than classes.
SPLIT_FOLDERS = ("train", "validation", "test")

# The formats `keras_vit.data.decode_image` reads (as Pillow names them).
_DECODABLE_FORMATS = frozenset({"BMP", "GIF", "JPEG", "PNG", "WEBP"})

# Where `check_download` knocks to learn whether downloads can work.
_PROBE_ADDRESS = ("storage.googleapis.com", 443)
_PROBE_TIMEOUT_S = 3.0


@export("keras_vit.data.DatasetError")
class DatasetError(ValueError, RuntimeError):
    """A dataset that cannot be read: unknown, not prepared and impossible to
    download, or failing to load.

    Its message is one line saying what to do. A `RuntimeError`, and a
    `ValueError` like every other bad dataset argument (the commands answer
    those in one line, `error: ...`).
    """


@dataclasses.dataclass(frozen=True)
class NamedSource:
    """A dataset known by one name (`register_source`).

    Attributes:
        load: `split -> ImageSource` (a split such as `"train[:90%]"`).
        test_split: The split a classifier is evaluated on when no split is
            named (`keras-vit validate` without `--split`).
    """

    load: Callable[[str], ImageSource]
    test_split: str = "test"


# Datasets known by one name. Built in: "digits"; a plug-in adds its own
# with `register_source`.
NAMED_SOURCES: dict[str, NamedSource] = {}


def register_source(name: str, load, *, test_split: str = "test") -> None:
    """Makes `load_source(name, split)` call `load(split)`.

    Args:
        name: The dataset's name, as configs and `--data` give it; not one
            of the prefixed kinds (`folder:`, `tfds:`).
        load: `split -> ImageSource` (a split such as `"train[:90%]"`).
        test_split: The split to evaluate a classifier on when none is
            named. Defaults to `"test"`.

    Example:

    ```python
    register_source("glyphs", glyphs)
    load_source("glyphs", "test").num_classes  # 10
    ```
    """
    if not isinstance(name, str) or ":" in name or not name:
        raise ValueError(
            f"A dataset name has no ':' and is not empty. Received: {name!r}"
        )
    NAMED_SOURCES[name] = NamedSource(load, test_split)


def named_source(name: str) -> NamedSource | None:
    """The dataset registered as `name`, or `None` (a prefixed name, or a
    TFDS name).

    A name that is not registered yet loads the installed plug-ins first
    (`keras_vit.plugins.load_plugins`): it may be one of theirs.

    Example:

    ```python
    named_source("digits").test_split  # 'test'
    named_source("folder:flowers")  # None
    ```
    """
    if name not in NAMED_SOURCES and name and ":" not in name:
        plugins.load_plugins()
    return NAMED_SOURCES.get(name)


@export("keras_vit.data.load_source")
def load_source(
    dataset: str,
    split: str,
    data_dir: str | None = None,
    download: bool = True,
    seed: int = 0,
    split_seed: int = 0,
) -> ImageSource:
    """Returns the `ImageSource` named by `dataset` and `split`.

    Args:
        dataset: `"digits"`, a name a plug-in registers, `"folder:PATH"`, or
            a TFDS name (optionally `"tfds:NAME"`). See the module docstring.
        split: A split name with an optional slice, e.g. `"train[:90%]"`.
        data_dir: TFDS data directory. Defaults to TFDS's own default
            (`~/tensorflow_datasets` or `$TFDS_DATA_DIR`).
        download: Let TFDS download and prepare a missing dataset.
        seed: Seed of the TFDS file order (TFDS sources only).
        split_seed: Seed of the permutation a folder split's slices cut
            (folder sources only). Keep it fixed across a project's runs:
            a different seed gives a different hold-out.

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
    named = named_source(dataset)
    if named is not None:
        return named.load(split)
    if dataset.startswith("folder:"):
        return image_folder(dataset[len("folder:") :], split, split_seed=split_seed)
    name = dataset[len("tfds:") :] if dataset.startswith("tfds:") else dataset
    return tfds_source(name, split, data_dir=data_dir, download=download, seed=seed)


@export("keras_vit.data.digits")
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
    index = slice_index(parts[base], start, stop, split)
    dataset = tf.data.Dataset.from_tensor_slices((images[index], labels[index]))
    return ImageSource(
        dataset=dataset,
        num_examples=len(index),
        num_classes=10,
        class_names=tuple(str(d) for d in range(10)),
        name=f"digits:{split}",
        files=tuple(f"digits#{i}" for i in index),
    )


@export("keras_vit.data.image_folder")
def image_folder(
    directory: str, split: str = "train", validate: bool = True, split_seed: int = 0
) -> ImageSource:
    """Images in one sub-folder per class, as an `ImageSource`.

    The conventions of `keras.utils.image_dataset_from_directory`: each
    sub-folder is a class, classes are numbered in alphanumeric order of the
    folder names, files are found recursively and kept when their extension
    is one of `IMAGE_EXTENSIONS`.

    The split's name picks the sub-folder of that name (`PATH/train/<class>/`,
    `PATH/test/<class>/`). A folder without any of the `SPLIT_FOLDERS` is a
    single `"train"` split. A split the folder lacks is an error: carve a
    hold-out explicitly instead, e.g. `"train[:80%]"` to train on and
    `"train[80%:]"` to test on (see the module docstring).

    Classes are names, and the `train` split's names fix the numbering of
    every split: a `test/` or `validation/` split whose class folders are a
    subset of `train/`'s (a test split without one of the classes) keeps the
    `train` split's class names and indices, and says so once in the log; a
    split with a class folder that `train/` lacks is an error naming the
    classes found in one split only.

    A class folder without any image file, or whose image files are all
    unreadable, is an error naming the folder: the class would silently
    have no examples. Other unreadable files do not stop training. With
    `validate=True` every file is checked once per process (Pillow reads
    its header and structure, and the format must be one TensorFlow
    decodes); the ones that fail are left out, logged once by path and
    listed in `ImageSource.skipped`, as are the files of a class folder
    that are not images of a format TensorFlow decodes (e.g. `.tiff`,
    `.txt`; hidden files such as `.DS_Store` aside). Only regular files (and
    links to them) are read: a FIFO, socket or device node, or a broken
    link, is left out whatever its name and `validate`, logged once by path
    as not a regular file and listed in `ImageSource.skipped` (reading a
    FIFO would wait forever for a writer). A file that passes the
    check yet fails to decode is dropped (and logged) by `train_dataset`,
    whose epochs keep their length, and stops `eval_dataset`, whose results
    would otherwise cover fewer images than the split holds.

    Args:
        directory: The folder.
        split: A split name with an optional slice.
        validate: Check every file before use. Defaults to `True`.
        split_seed: Seed of the permutation slices cut. Defaults to 0.

    Returns:
        An `ImageSource` of encoded images, with its `files`.

    Raises:
        ValueError: when the folder, the split or its images are missing,
            when a class folder has no readable image, or when the split has
            a class the `train` split lacks.

    Example:

    ```python
    train = image_folder("flowers", "train[:80%]")
    test = image_folder("flowers", "train[80%:]")
    check_disjoint(train, test)  # Passes: the slices are complementary.
    ```
    """
    base, start, stop = parse_split(split)
    directory = paths.normalize(directory)
    if not paths.isdir(directory):
        raise ValueError(f"Image folder {directory!r} does not exist.")
    root = _split_root(directory, base, split)
    own_classes = _class_folders(root)
    if not own_classes:
        raise ValueError(
            f"Image folder {root!r} has no class sub-folders. Expected "
            "PATH/<class_name>/<image files>."
        )
    images, others, special = _list_class_files(root, own_classes)
    _check_no_empty_class(root, split, images, others, special)
    class_names = _training_classes(directory, root, split, own_classes)
    label_of = {name: index for index, name in enumerate(class_names)}
    image_paths = [path for name in own_classes for path in images[name]]
    labels = [label_of[name] for name in own_classes for _ in images[name]]
    index = np.arange(len(image_paths))
    if start is not None or stop is not None:
        index = np.random.default_rng(int(split_seed)).permutation(len(image_paths))
        index = slice_index(index, start, stop, split)
    skipped = []
    if validate:
        readable = [_is_readable_image(image_paths[i]) for i in index]
        skipped = [
            image_paths[i] for i, ok in zip(index, readable, strict=True) if not ok
        ]
        index = index[np.asarray(readable, bool)]
        found = {class_names[labels[i]] for i in index}
        _check_readable_classes(root, split, images, found)
    skipped += [path for name in own_classes for path in others[name]]
    _report_skipped(root, skipped)
    not_regular = [path for name in own_classes for path in special[name]]
    _report_skipped(
        root,
        not_regular,
        "are not regular files (a FIFO, a socket, a device or a broken link)",
    )
    skipped += not_regular
    if len(index) == 0:
        raise ValueError(f"No readable images in split {split!r} of {root!r}.")
    files = np.asarray(image_paths)[index]
    dataset = tf.data.Dataset.from_tensor_slices(
        (files, np.asarray(labels, np.int64)[index])
    ).map(lambda path, label: (tf.io.read_file(path), label))
    return ImageSource(
        dataset=dataset,
        num_examples=len(index),
        num_classes=len(class_names),
        class_names=tuple(class_names),
        encoded=True,
        may_fail_to_decode=True,
        skipped=tuple(skipped),
        name=f"folder:{root}:{split}",
        files=tuple(str(path) for path in files),
    )


def _split_root(directory: str, base: str, split: str) -> str:
    """The folder that holds `split`'s class sub-folders."""
    root = os.path.join(directory, base)
    if paths.isdir(root):
        return root
    splits = [
        name for name in SPLIT_FOLDERS if paths.isdir(os.path.join(directory, name))
    ]
    if base == "train" and not splits:
        return directory  # A plain class-per-folder dataset: all of it is "train".
    have = f"it has {', '.join(splits)}" if splits else "it is a single 'train' split"
    raise ValueError(
        f"Image folder {directory!r} has no {base!r} split (no sub-folder "
        f"{base}/; {have}). Hold out part of the training images explicitly, "
        "e.g. split 'train[80%:]' for evaluation and 'train[:80%]' for training."
    )


def _class_folders(root: str) -> list[str]:
    if paths.is_url(root):
        return [n for n in paths.listdir(root) if paths.isdir(os.path.join(root, n))]
    return sorted(entry.name for entry in os.scandir(root) if entry.is_dir())


# Splits whose missing classes were reported, by folder.
_REPORTED_SUBSETS: set[str] = set()


def _training_classes(
    directory: str, root: str, split: str, own_classes: list[str]
) -> list[str]:
    """The class names that number `split`'s labels: the `train` split's.

    A split's classes must be the `train` split's or a subset of them;
    anything else raises, naming the classes found in one split only.
    """
    train_root = os.path.join(directory, "train")
    if os.path.abspath(root) == os.path.abspath(train_root):
        return own_classes
    if not paths.isdir(train_root):
        return own_classes  # A single-split folder, or one without train/.
    reference = _class_folders(train_root)
    if reference == own_classes or not reference:
        return own_classes
    only_here = sorted(set(own_classes) - set(reference))
    only_train = sorted(set(reference) - set(own_classes))
    if only_here:
        raise ValueError(
            f"Image folder {directory!r}: split {split!r} and the 'train' split "
            f"have different class folders (only in {split!r}: "
            f"{', '.join(only_here)}; only in 'train': "
            f"{', '.join(only_train) or 'none'}). Labels are class names: give "
            "the splits the same class folders (a split may lack some of "
            "train's classes, never add one)."
        )
    if root not in _REPORTED_SUBSETS:
        _REPORTED_SUBSETS.add(root)
        logger.warning(
            "Split %r of image folder %s has %d of the 'train' split's %d "
            "classes (none of %s): its labels are the 'train' split's class "
            "indices, matched by name.",
            split,
            directory,
            len(own_classes),
            len(reference),
            ", ".join(only_train),
        )
    return reference


def _list_class_files(root: str, class_names: list[str]):
    """`({class: image paths}, {class: other files}, {class: not regular})`,
    each sorted.

    Image paths are the regular files with one of `IMAGE_EXTENSIONS`; other
    files are the rest, hidden files (`.DS_Store`, ...) aside; entries that
    are not regular files (FIFOs, sockets, devices, broken links; links are
    followed) are listed apart, never to be opened (hidden ones too when
    their extension is an image's).
    """
    images, others, special = {}, {}, {}
    for class_name in class_names:
        found, other = images[class_name], others[class_name] = [], []
        odd = special[class_name] = []
        for dirpath, dirnames, filenames in paths.walk(os.path.join(root, class_name)):
            dirnames.sort()
            for filename in sorted(filenames):
                path = os.path.join(dirpath, filename)
                is_image = filename.lower().endswith(IMAGE_EXTENSIONS)
                if not is_image and filename.startswith("."):
                    continue
                if not _is_regular_file(path):
                    odd.append(path)
                elif is_image:
                    found.append(path)
                else:
                    other.append(path)
    return images, others, special


def _is_regular_file(path: str) -> bool:
    """Whether `path` is a regular file, links followed (a URL always is).

    A FIFO named `x.png` would block the first read of it forever (no
    writer ever comes), and a device could stream without end: the folder
    reader opens regular files only.
    """
    if paths.is_url(path):
        return True
    try:
        return S_ISREG(os.stat(path).st_mode)
    except OSError:  # A broken link, or removed since it was listed.
        return False


def _check_no_empty_class(root, split, images, others, special) -> None:
    """Raises, naming the class folders that hold no image file."""
    empty = [name for name, paths in images.items() if not paths]
    if not empty:
        return
    other = [os.path.relpath(p, root) for name in empty for p in others[name]]
    odd = [os.path.relpath(p, root) for name in empty for p in special[name]]
    note = (
        f"; they hold only files of other formats, e.g. {', '.join(other[:3])}"
        if other
        else ""
    )
    if odd:
        note += (
            f"{'; and' if other else '; they hold only'} entries that are not "
            f"regular files, e.g. {', '.join(odd[:3])}"
        )
    raise ValueError(
        f"Image folder {root!r}, split {split!r}: class folder(s) "
        f"{', '.join(empty)} hold no image file ({', '.join(IMAGE_EXTENSIONS)})"
        f"{note}. Add images or remove the folder(s)."
    )


def _check_readable_classes(root, split, images, found) -> None:
    """Raises, naming the class folders none of whose images is readable.

    `found` holds the classes with a readable image in the split; a sliced
    split may miss a class whose readable images fall outside the slice,
    so the rest of such a class is checked until one readable image is
    found (each file is checked once per process).
    """
    unreadable = [
        name
        for name, paths in images.items()
        if name not in found and not any(_is_readable_image(p) for p in paths)
    ]
    if unreadable:
        example = os.path.relpath(images[unreadable[0]][0], root)
        raise ValueError(
            f"Image folder {root!r}, split {split!r}: no image of class "
            f"folder(s) {', '.join(unreadable)} can be read (e.g. {example}). "
            "Replace the files or remove the folder(s)."
        )


@export("keras_vit.data.tfds_source")
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

    A dataset already prepared in `data_dir` is read without any network
    access. One that is not is downloaded and prepared when `download=True`
    and the download servers answer (`check_download`); otherwise this fails
    at once, in one line naming the dataset, the `data_dir` and how to
    prepare it offline. A failed download removes what it wrote.

    Args:
        name: A TFDS name with an `image` and a `label` feature, e.g.
            `"cifar10"`, `"cifar100"`, `"oxford_iiit_pet"`,
            `"oxford_flowers102"`, `"imagenet2012"`, `"imagenet_v2"`.
        split: A TFDS split, e.g. `"train[:98%]"`.
        data_dir: The TFDS data directory. Defaults to `$TFDS_DATA_DIR` or
            `~/tensorflow_datasets`.
        download: Let TFDS download and prepare the dataset when missing.
            `imagenet2012` needs its archives placed by hand first (TFDS
            says where).
        seed: Seed of the file order.

    Returns:
        An `ImageSource` of encoded images, with its example `ranges`.

    Raises:
        ImportError: without TensorFlow Datasets.
        DatasetError: (a `RuntimeError` and a `ValueError`) when the dataset
            is unknown, not prepared and cannot be downloaded, or fails to
            load.
        ValueError: a percentage slice outside `[-100%, 100%]`.
    """
    check_percentages(split)
    try:
        import tensorflow_datasets as tfds
    except ImportError as error:
        raise ImportError(
            f"Dataset {name!r} needs TensorFlow Datasets: "
            "pip install tensorflow-datasets importlib_resources."
        ) from error
    root = data_dir or os.environ.get("TFDS_DATA_DIR") or tfds.core.constants.DATA_DIR
    where = f"TFDS dataset {name!r} (split {split!r}, data_dir {root!r})"
    options = dict(
        split=split,
        data_dir=data_dir,
        as_supervised=True,
        with_info=True,
        shuffle_files=True,
        read_config=tfds.ReadConfig(
            shuffle_seed=seed, shuffle_reshuffle_each_iteration=False
        ),
        decoders={"image": tfds.decode.SkipDecoding()},
    )
    try:
        dataset, info = _load_prepared(tfds, name, options)
    except tfds.core.registered.DatasetNotFoundError:
        raise DatasetError(
            f"Unknown {where}: see https://www.tensorflow.org/datasets/catalog."
        ) from None
    except Exception as error:  # TFDS raises many types; add the context.
        raise DatasetError(f"Could not load {where}: {_first_line(error)}") from error
    if dataset is None:
        offline = (
            f"prepare it where there is a network with `tfds build {name} "
            f"--data_dir DIR` and copy DIR/{name.split(':')[0].split('/')[0]} into "
            f"{root!r}, or point `data_dir` at a prepared copy"
        )
        if not download:
            raise DatasetError(
                f"{where} is not prepared and download=False: {offline}."
            )
        if not check_download():
            raise DatasetError(
                f"{where} is not prepared and {_PROBE_ADDRESS[0]} cannot be "
                f"reached to download it: {offline}."
            )
        dataset, info = _download_and_load(tfds, name, root, options, where)
    label = info.features["label"]
    try:
        num_examples = info.splits[split].num_examples
        ranges = _tfds_ranges(tfds, name, split, info.splits)
    except KeyError:  # e.g. under `tfds.testing.mock_data`: no split metadata.
        num_examples = int(dataset.cardinality())
        ranges = ()
    if num_examples <= 0:
        raise ValueError(f"TFDS split {name}:{split} has no known size.")
    return ImageSource(
        dataset=dataset,
        num_examples=int(num_examples),
        num_classes=int(label.num_classes),
        class_names=tuple(label.names),
        encoded=True,
        name=f"{name}:{split}",
        ranges=ranges,
    )


def _tfds_ranges(tfds, name, split, splits):
    """`split` as absolute `(name, split, start, stop)` example ranges."""
    ranges = []
    for part in tfds.core.ReadInstruction.from_spec(split).to_absolute(splits):
        size = splits[part.splitname].num_examples
        stop = size if part.to is None else part.to
        ranges.append((name, part.splitname, part.from_ or 0, stop))
    return tuple(ranges)


def check_download(
    address: tuple[str, int] = _PROBE_ADDRESS, timeout: float = _PROBE_TIMEOUT_S
) -> bool:
    """Whether a TCP connection to `address` opens within `timeout` seconds.

    TFDS retries a failing download for minutes; this answers in seconds
    whether trying makes sense. The default address is the Google Cloud
    Storage host most TFDS downloads and mirrors use.
    """
    result = []

    def knock():
        try:
            socket.create_connection(address, timeout=timeout).close()
            result.append(True)
        except OSError:
            pass

    # In a thread: name resolution has no timeout of its own.
    thread = threading.Thread(target=knock, daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    return bool(result)


def _load_prepared(tfds, name, options):
    """`(dataset, info)` when `name` is prepared (or mocked); `(None, None)`."""
    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.setLevel(logging.ERROR)  # "Variant folder ... has no dataset_info".
    try:
        return tfds.load(name, download=False, **options)
    except AssertionError as error:  # TFDS's "could not find data in ...".
        if "could not find data" not in str(error):
            raise
        return None, None
    finally:
        absl_logger.setLevel(level)


def _download_and_load(tfds, name, root, options, where):
    """Downloads, prepares and loads `name`; on failure removes what it wrote."""
    before = _tfds_paths(root, name)
    try:
        return tfds.load(name, download=True, **options)
    except BaseException as error:
        for path in sorted(_tfds_paths(root, name) - before, key=len):
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            elif os.path.lexists(path):
                os.remove(path)
        if isinstance(error, Exception):
            raise DatasetError(
                f"Could not download {where}: {_first_line(error)}"
            ) from error
        raise


def _tfds_paths(root: str, name: str) -> set[str]:
    """The paths a TFDS download may create: `root`, the dataset's folder and
    the download folder, three levels down (not the other datasets)."""
    folder = name.split(":")[0].split("/")[0]
    paths = set()
    if not os.path.lexists(root):
        return paths
    paths.add(root)
    for top in (os.path.join(root, folder), os.path.join(root, "downloads")):
        if not os.path.lexists(top):
            continue
        paths.add(top)
        for dirpath, dirnames, filenames in os.walk(top):
            depth = os.path.relpath(dirpath, top).count(os.sep)
            if depth >= 2:
                dirnames[:] = []
            paths.update(os.path.join(dirpath, entry) for entry in dirnames + filenames)
    return paths


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


# Files checked in this process, by (path, size, mtime), and files reported.
_READABLE: dict[tuple[str, int, int], bool] = {}
_REPORTED: set[str] = set()
_MAX_LOGGED = 100  # Skipped files named in the log line; all are in `skipped`.


def _is_readable_image(path: str) -> bool:
    """Whether `path` is an intact image TensorFlow decodes (cheap: no decode).

    Pillow reads the header and checks the structure; the format must be one
    `decode_image` reads. Each file version is checked once per process.
    """
    from PIL import Image

    try:
        info = paths.stat(path)
    except OSError:
        return False
    if not paths.is_url(path) and not S_ISREG(info.st_mode):
        return False  # Never opened: a FIFO would block (see _is_regular_file).
    key = (path, info.st_size, info.st_mtime_ns)
    if key not in _READABLE:
        try:
            with paths.open_file(path, "rb") as file, Image.open(file) as image:
                image.verify()
                _READABLE[key] = image.format in _DECODABLE_FORMATS
        except Exception:  # Pillow raises many types for bad files.
            _READABLE[key] = False
    return _READABLE[key]


def _report_skipped(
    root: str,
    skipped: list[str],
    why: str = "are not readable images of a format TensorFlow decodes",
) -> None:
    """Logs, in one line, the skipped files not reported before."""
    new = [path for path in skipped if path not in _REPORTED]
    if new:
        _REPORTED.update(new)
        shown = ", ".join(os.path.relpath(path, root) for path in new[:_MAX_LOGGED])
        more = len(new) - _MAX_LOGGED
        logger.warning(
            "Skipped %d file(s) under %s that %s: %s%s",
            len(new),
            root,
            why,
            shown,
            f" and {more} more (all in ImageSource.skipped)" if more > 0 else "",
        )


@export("keras_vit.data.check_disjoint")
def check_disjoint(a: ImageSource, b: ImageSource) -> None:
    """Raises when two sources share an example (e.g. train and test), or
    number their classes differently.

    Folder sources compare their files by identity and by content: a file,
    a link to it (symbolic or hard) and a byte-identical copy are one image.
    Only files of equal size are read, and those only as far as needed (a
    fingerprint of their first and last 8 KiB, then the whole file when the
    fingerprints agree). The digits compare their indices, TFDS sources
    their example ranges within each split. A TFDS source without split
    sizes (as under `tfds.testing.mock_data`) cannot be checked and passes.

    Args:
        a: A source, e.g. the training split.
        b: Another source, e.g. the test split.

    Raises:
        ValueError: in one line naming the two sources and either the
            classes found in one of them only, or how many examples they
            share and a few of them.

    Example:

    ```python
    check_disjoint(load_source("digits", "train"), load_source("digits", "test"))
    ```
    """
    _check_same_classes(a, b)
    if a.files is not None and b.files is not None:
        pairs = _shared_files(a.files, b.files)
        digits = bool(pairs) and pairs[0][0].startswith("digits#")
        what = "example(s)" if digits else "file(s)"
        if pairs and not digits:  # Paths under the folder both splits share.
            top = os.path.commonpath([p for pair in pairs[:3] for p in pair[:2]])
            what = f"file(s) under {top}"
            pairs = [
                (os.path.relpath(path, top), os.path.relpath(twin, top), how)
                for path, twin, how in pairs
            ]
        shared = [
            path if path == twin else f"{path} (same {how} as {twin})"
            for path, twin, how in pairs
        ]
        count = len(shared)
    else:
        overlaps = [
            (x[0], x[1], max(x[2], y[2]), min(x[3], y[3]))
            for x in a.ranges
            for y in b.ranges
            if x[:2] == y[:2] and max(x[2], y[2]) < min(x[3], y[3])
        ]
        shared = [f"{d}:{split}[{lo}:{hi}]" for d, split, lo, hi in overlaps]
        what = "example(s)"
        count = sum(hi - lo for _, _, lo, hi in overlaps)
    if shared:
        raise ValueError(
            f"Splits {a.name!r} and {b.name!r} share {count} {what}, e.g. "
            f"{', '.join(shared[:3])}."
        )


def _check_same_classes(a: ImageSource, b: ImageSource) -> None:
    if tuple(a.class_names) == tuple(b.class_names):
        return
    only_a = [name for name in a.class_names if name not in b.class_names]
    only_b = [name for name in b.class_names if name not in a.class_names]
    if only_a or only_b:
        detail = (
            f"only in {a.name!r}: {', '.join(only_a) or 'none'}; only in "
            f"{b.name!r}: {', '.join(only_b) or 'none'}"
        )
    else:
        detail = "the same names in another order"
    raise ValueError(
        f"Splits {a.name!r} and {b.name!r} have different classes ({detail}): "
        "a label would not name the same class in both."
    )


_SAMPLE_BYTES = 8192  # Read from each end of a file for its fingerprint.
# Digests of files, by (path, size, mtime, kind): each file read once.
_DIGESTS: dict[tuple[str, int, int, str], bytes] = {}


def _shared_files(a_files, b_files) -> list[tuple[str, str, str]]:
    """`(file of b, the file of a it is, "file" | "content")` for each file
    of b that is a file of a (same inode, e.g. a link) or a byte-identical
    copy of one, in b's order; digits identities compare as names."""
    a_by_id, a_by_size = {}, {}
    for path in dict.fromkeys(a_files):
        key, stat = _file_key(path)
        a_by_id.setdefault(key, path)
        if stat is not None:
            a_by_size.setdefault(stat.st_size, []).append((path, stat))
    pairs, candidates = [], []
    for path in dict.fromkeys(b_files):
        key, stat = _file_key(path)
        if key in a_by_id:
            twin = a_by_id[key]
            pairs.append((path, twin, "file"))
        elif stat is not None and stat.st_size in a_by_size:
            candidates.append((path, stat))
    # Byte-identical copies: only among files of one size, fingerprint first.
    a_by_sample = {}
    for size in sorted({stat.st_size for _, stat in candidates}):
        for twin, twin_stat in a_by_size[size]:
            sample = _digest(twin, twin_stat, "sample")
            a_by_sample.setdefault(sample, []).append((twin, twin_stat))
    for path, stat in candidates:
        for twin, twin_stat in a_by_sample.get(_digest(path, stat, "sample"), ()):
            if _digest(twin, twin_stat, "full") == _digest(path, stat, "full"):
                pairs.append((path, twin, "content"))
                break
    order = {path: i for i, path in enumerate(dict.fromkeys(b_files))}
    return sorted(pairs, key=lambda pair: order[pair[0]])


def _file_key(path: str):
    """`(identity, stat)`: `(device, inode)` for a file, the name otherwise."""
    if path.startswith("digits#"):
        return path, None
    if paths.is_url(path):  # No links in an object store: the name is the file.
        try:
            return path, paths.stat(path)
        except OSError:
            return path, None
    try:
        stat = os.stat(path)
    except OSError:
        return os.path.realpath(path), None
    return (stat.st_dev, stat.st_ino), stat


def _digest(path: str, stat: os.stat_result, kind: str) -> bytes:
    """BLAKE2b of the file (`"full"`) or of its first and last 8 KiB."""
    if stat.st_size <= 2 * _SAMPLE_BYTES:
        kind = "full"  # The sample would be the whole file.
    key = (path, stat.st_size, stat.st_mtime_ns, kind)
    if key not in _DIGESTS:
        digest = hashlib.blake2b(str(stat.st_size).encode())
        try:
            with paths.open_file(path, "rb") as file:
                if kind == "full":
                    for chunk in iter(lambda: file.read(1 << 20), b""):
                        digest.update(chunk)
                else:
                    digest.update(file.read(_SAMPLE_BYTES))
                    file.seek(-_SAMPLE_BYTES, os.SEEK_END)
                    digest.update(file.read(_SAMPLE_BYTES))
        except OSError:
            digest.update(os.fsencode(path))  # Unreadable: equal to no other.
        _DIGESTS[key] = digest.digest()
    return _DIGESTS[key]


register_source("digits", digits)
