"""What every image source is: `ImageSource`, and the split syntax they share.

`keras_vit.data.datasets` (digits, folders, TFDS) and
`keras_vit.parkkim.glyphs` build their sources from these:

- `ImageSource`: a labelled `tf.data.Dataset` in a fixed order, with its
  size, class names and the identities of its examples.
- `parse_split`: `"train[10:90%]"` into `("train", "10", "90%")`, as TFDS
  writes splits.
- `slice_index`: the examples such a slice selects from a split's index;
  `check_percentages`: its percentage bounds, checked alone.

Example:

```python
import numpy as np

from keras_vit.data.source import parse_split
from keras_vit.data.source import slice_index

name, start, stop = parse_split("train[:50%]")  # ("train", None, "50%")
slice_index(np.arange(10), start, stop, "train[:50%]")  # array([0, 1, 2, 3, 4])
```
"""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import tensorflow as tf

from keras_vit._export import export

_SPLIT_PATTERN = re.compile(r"^(\w+)(?:\[(-?\d*)(%?):(-?\d*)(%?)\])?$")


@export("keras_vit.data.ImageSource")
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
            a folder): `train_dataset` then replaces those, `eval_dataset`
            fails on them.
        skipped: Files left out, by path, each listed once: the split's
            unreadable images, and the files of its class folders that are
            not images of a format TensorFlow decodes (listed by every
            slice of the split).
        name: A short description, e.g. `"digits:train"`.
        files: The examples' identities in the dataset's order: file paths
            for folders, `"digits#<index>"` for the digits; `None` for TFDS.
        ranges: For TFDS, the examples as `(dataset, split, start, stop)`
            index ranges; empty when TFDS records no split sizes.

    Example:

    ```python
    images = np.zeros((4, 8, 8, 1), np.uint8)
    labels = np.array([0, 1, 0, 1], np.int64)
    source = ImageSource(
        dataset=tf.data.Dataset.from_tensor_slices((images, labels)),
        num_examples=4,
        num_classes=2,
        class_names=("a", "b"),
        name="toy:train",
    )
    ```
    """

    dataset: tf.data.Dataset
    num_examples: int
    num_classes: int
    class_names: tuple[str, ...]
    encoded: bool = False
    may_fail_to_decode: bool = False
    skipped: tuple[str, ...] = ()
    name: str = ""
    files: tuple[str, ...] | None = None
    ranges: tuple[tuple[str, str, int, int], ...] = ()


@export("keras_vit.data.parse_split")
def parse_split(split: str) -> tuple[str, str | None, str | None]:
    """Splits `"train[10:90%]"` into `("train", "10", "90%")`.

    Args:
        split: A split name with an optional TFDS-style slice.

    Returns:
        `(name, start, stop)`; `start` and `stop` are `None` or strings with
        an optional `%`.

    Raises:
        ValueError: not a split name with an optional slice, or a
            percentage bound outside `[-100%, 100%]`.

    Example:

    ```python
    parse_split("train[10:90%]")  # ("train", "10", "90%")
    parse_split("test")  # ("test", None, None)
    ```
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
    check_percentages(split)
    return name, start, stop


def check_percentages(split: str) -> None:
    """Refuses a percentage slice bound outside `[-100%, 100%]`, as TFDS does.

    Raises:
        ValueError: `split` slices at a percentage beyond 100.

    Example:

    ```python
    check_percentages("train[:90%]")  # fine
    check_percentages("train[:200%]")  # ValueError
    ```
    """
    for bound in re.findall(r"(-?\d+)%", split):
        if abs(int(bound)) > 100:
            raise ValueError(
                f"Split {split!r} slices at {bound}%: a percentage slice bound "
                "must be within -100% and 100%."
            )


def slice_index(
    index: np.ndarray, start: str | None, stop: str | None, split: str
) -> np.ndarray:
    """The part of a split's `index` that the slice `[start:stop]` selects.

    Args:
        index: The split's examples, in the order the slice cuts.
        start: A bound from `parse_split`: `None`, `"10"` or `"10%"`.
        stop: The same, for the end.
        split: The split as written, for the errors.

    Returns:
        `index[start:stop]`; a percentage is of `len(index)`, rounded.

    Raises:
        ValueError: a bound outside the split (no silent clipping, as in
            TFDS), or a slice that selects no example.

    Example:

    ```python
    slice_index(np.arange(10), "20%", None, "train[20%:]")  # array([2, ..., 9])
    ```
    """

    def position(bound):
        if bound is None:
            return None
        if bound.endswith("%"):
            return int(round(len(index) * int(bound[:-1]) / 100))
        if abs(int(bound)) > len(index):  # As TFDS: no silent clipping.
            raise ValueError(
                f"Split {split!r} slices at example {bound}, outside the "
                f"{len(index)} examples of the split."
            )
        return int(bound)

    selected = index[position(start) : position(stop)]
    if len(selected) == 0:
        raise ValueError(f"Split {split!r} selects no examples (of {len(index)}).")
    return selected
