"""Rebuilds `imagenet2012_classes.tsv` from files tensorflow-datasets ships.

`tensorflow_datasets/datasets/imagenet2012/labels.txt` lists the 1000
WordNet ids in class-index order, and `tensorflow_datasets.datasets.siscore.
labels.IMAGENET_LABELS_LIST` the WordNet synonyms in the same order. Neither
needs a download. Run `python -m keras_vit.imagenet._regenerate`.
"""

from __future__ import annotations

import importlib
import os


def main() -> None:
    imagenet = importlib.import_module("tensorflow_datasets.datasets.imagenet2012")
    labels = importlib.import_module("tensorflow_datasets.datasets.siscore.labels")
    with open(os.path.join(os.path.dirname(imagenet.__file__), "labels.txt")) as f:
        wnids = f.read().split()
    names = list(labels.IMAGENET_LABELS_LIST)
    if len(wnids) != 1000 or len(names) != 1000 or len(set(wnids)) != 1000:
        raise RuntimeError("Unexpected label files in tensorflow-datasets.")
    path = os.path.join(os.path.dirname(__file__), "imagenet2012_classes.tsv")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(
            f"{wnid}\t{name}\n" for wnid, name in zip(wnids, names, strict=True)
        )
    print(f"Wrote {path}")


if __name__ == "__main__":
    main()
