"""ImageNet-1k (ILSVRC-2012) class names and `decode_predictions`.

The 1000 classes are shipped in `imagenet2012_classes.tsv` (WordNet id, then
the comma-separated WordNet synonyms), in the standard class-index order of
the ImageNet-1k checkpoints (sorted WordNet ids: 0 is `n01440764` "tench").
The file was generated offline from the label files that
`tensorflow-datasets` ships; `python -m keras_vit.imagenet._regenerate`
rebuilds it.

Example:

```python
model = keras_vit.ViT_B16(weights="augreg_in21k_ft_in1k")
preds = model.predict(images)
keras_vit.imagenet.decode_predictions(preds, top=3)  # logits -> softmax
# [[('n02123045', 'tabby', 0.61), ('n02123159', 'tiger cat', 0.2), ...]]
```
"""

from __future__ import annotations

import functools
from importlib import resources

import numpy as np

NUM_CLASSES = 1000
_DATA_FILE = "imagenet2012_classes.tsv"


@functools.cache
def _table() -> tuple[tuple[str, str], ...]:
    text = resources.files(__name__).joinpath(_DATA_FILE).read_text("utf-8")
    rows = tuple(tuple(line.split("\t")) for line in text.splitlines() if line)
    if len(rows) != NUM_CLASSES or any(len(row) != 2 for row in rows):
        raise RuntimeError(
            f"The packaged {_DATA_FILE} is damaged: reinstall keras_vit."
        )
    return rows


def synsets() -> list[str]:
    """The WordNet ids of the 1000 classes, in class-index order.

    Example:

    >>> keras_vit.imagenet.synsets()[0]
    'n01440764'
    """
    return [wnid for wnid, _ in _table()]


def class_names(full: bool = False) -> list[str]:
    """The names of the 1000 classes, in class-index order.

    Args:
        full: `False` (default) for the first WordNet synonym (`"tench"`);
            `True` for all of them (`"tench, Tinca tinca"`).

    Returns:
        A list of 1000 strings.

    Example:

    >>> keras_vit.imagenet.class_names()[:2]
    ['tench', 'goldfish']
    """
    return [names if full else names.split(", ")[0] for _, names in _table()]


def looks_like_logits(preds, atol: float = 1e-3) -> bool:
    """Whether scores of shape `(batch, classes)` are logits, not probabilities.

    Probabilities are all in `[0, 1]` and every row sums to 1 (within
    `atol`); anything else (a negative score, one above 1, a row summing to
    0.3 or 2.5) is taken for logits. Sigmoid outputs of a multi-label head
    are in `[0, 1]` but need not sum to 1: pass `from_logits=False` to
    `decode_predictions` for them.

    Example:

    >>> looks_like_logits(np.array([[2.0, -1.0, 0.5]]))
    True
    >>> looks_like_logits(np.array([[0.7, 0.2, 0.1]]))
    False
    """
    preds = np.asarray(preds, dtype=np.float64)
    if preds.size == 0:
        return False
    if np.any(preds < 0.0) or np.any(preds > 1.0):
        return True
    return bool(np.any(np.abs(preds.sum(axis=-1) - 1.0) > atol))


def softmax(logits) -> np.ndarray:
    """Row-wise softmax of `(..., classes)` scores, in float64 then float32.

    Example:

    >>> softmax(np.array([[0.0, 0.0]]))
    array([[0.5, 0.5]], dtype=float32)
    """
    logits = np.asarray(logits, dtype=np.float64)
    shifted = logits - np.max(logits, axis=-1, keepdims=True)
    exp = np.exp(shifted)
    return (exp / np.sum(exp, axis=-1, keepdims=True)).astype(np.float32)


def decode_predictions(
    preds, top: int = 5, from_logits: bool | None = None
) -> list[list[tuple[str, str, float]]]:
    """Decodes ImageNet-1k predictions, like `keras.applications`.

    The scores reported are probabilities. A keras_vit classifier outputs
    logits (its head has no activation): those are detected and turned into
    probabilities with a softmax first, so that the scores of a row sum to
    at most 1 whether `preds` came from a logits model or a softmax one.
    Scores are taken for logits when any value is outside `[0, 1]` or a row
    does not sum to 1 (`looks_like_logits`); `from_logits` overrides the
    detection.

    Args:
        preds: Scores of shape `(batch, 1000)` (logits or probabilities), a
            NumPy array or a tensor.
        top: How many classes to return per image. Defaults to 5.
        from_logits: `None` (default) to detect logits as above; `True` to
            always apply the softmax; `False` to report `preds` as they are
            (e.g. sigmoid scores of a multi-label head).

    Returns:
        One list per image of `(wordnet_id, class_name, probability)`
        tuples, highest first.

    Raises:
        ValueError: if `preds` is not of shape `(batch, 1000)`.

    Example:

    >>> preds = np.zeros((1, 1000)); preds[0, 1] = 1.0
    >>> keras_vit.imagenet.decode_predictions(preds, top=1)  # probabilities
    [[('n01443537', 'goldfish', 1.0)]]
    >>> logits = np.zeros((1, 1000)); logits[0, 1] = 10.0
    >>> keras_vit.imagenet.decode_predictions(logits, top=1)  # softmax applied
    [[('n01443537', 'goldfish', 0.9566...)]]
    """
    if not isinstance(preds, np.ndarray):
        import keras

        preds = keras.ops.convert_to_numpy(preds)
    preds = np.asarray(preds)
    if preds.ndim != 2 or preds.shape[1] != NUM_CLASSES:
        raise ValueError(
            "`decode_predictions` expects a batch of ImageNet-1k predictions "
            f"of shape (samples, {NUM_CLASSES}). Received: shape={preds.shape}"
        )
    if int(top) < 1:
        raise ValueError(f"`top` must be a positive int. Received: top={top}")
    if from_logits is None:
        from_logits = looks_like_logits(preds)
    if from_logits:
        preds = softmax(preds)
    table = _table()
    top = min(int(top), NUM_CLASSES)
    results = []
    for row in preds:
        order = np.argsort(-row, kind="stable")[:top]
        results.append(
            [(table[i][0], table[i][1].split(", ")[0], float(row[i])) for i in order]
        )
    return results
