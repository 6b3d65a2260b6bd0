"""Loss landscapes along filter-normalised random directions (Park & Kim,
ICLR 2022, Fig. 1a; Li et al., "Visualizing the Loss Landscape of Neural
Nets", NeurIPS 2018).

The weights are moved in a plane through the trained point,
`θ(x, y) = θ + x d1 + y d2`, and the loss, accuracy and calibration are
measured on a grid of `(x, y)`. This ports the authors' `ops/loss_landscapes.py`,
`ops/tests.py` and `losslandscape.ipynb` (xxxnell/how-do-vits-work at
9571ff1):

- **Directions** (`create_bases`, lines 11-62): one standard-normal tensor
  per weight, rescaled by `normalize_filter` so that along PyTorch's first
  axis (a layer's *output* units) it has the weight's norm:
  `d <- ||W||_dim0 / (||d||_dim0 + 1e-7) * d`, norms taken over the output
  units separately for every input unit (and kernel position). Keras keeps
  the output units on the *last* axis of a `Dense` or convolution kernel
  (on axes 1 to 3 of the fused `(D, 3, heads, head_dim)` attention
  projection), so the norms run over those axes here. Tensors that are 1-D
  in PyTorch, biases, normalisation scales and shifts, BatchNorm statistics
  (`ignore_bn`), and the position embeddings and relative-position tables
  (the notebook's `kws=["pos_embed", "relative_position"]`, line 241) are
  not moved. `normalization="filter"` normalises per output unit instead,
  the per-filter normalisation of Li et al.'s paper.
- **Grid** (`get_loss_landscape`): `x` and `y` each from -1 to 1; the
  authors' published landscapes use 21 × 21 points, `x` varying fastest.
- **Metrics** (`ops/tests.py`, `test`): the model in eval mode
  (`training=False`) over every batch of the *augmented training set*; per
  point the weights' `l1 = sum_k ||W_k||_1` and `l2 = sum_k ||W_k||_2` (over
  the trainable variables, PyTorch's `model.parameters()`), the NLL (the
  mean over batches of each batch's mean loss), accuracy, unconfidence,
  mean IoU and frequency at confidence cut-offs 0 and 0.9, top-5 accuracy,
  Brier score, ECE and signed ECE (10 confidence bins). The plotted loss is
  `NLL + weight_decay * l2` (`losslandscape.ipynb`, line 286).

`write_landscape_csv` writes the rows with exactly the columns of the authors'
`resources/results/cifar100_vit_ti_losslandscape.csv`, in the same order
(`COLUMNS`, the names the notebook gives them) and, by default, without a
header, as that file; `keras_vit.analysis.plotting.plot_loss_landscape`
draws it.

A long sweep can be resumed: with `rows_path`, `loss_landscape` replaces
that file (atomically: whole or absent) by every row computed so far after
each grid point, in the same layout, and a later call with the same grid,
directions and weights continues after the rows it finds there.

One deliberate difference: by default the augmented batches are drawn once
and reused at every grid point (`fixed_augmentation=True`), so that points
differ only by their weights; the authors' loader draws fresh augmentations
(and order) at each point. `fixed_augmentation=False` does the same (and
holds no copy of the data).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from collections.abc import Iterable

import keras
import numpy as np
import tensorflow as tf

from keras_vit import atomic
from keras_vit import paths
from keras_vit._export import export
from keras_vit.analysis.hessian import default_loss
from keras_vit.models import layout as names

COLUMNS = (
    "x", "y", "l1", "l2", "NLL", "Cutoff1", "Cutoff2", "Acc", "Acc-90",
    "Unc", "Unc-90", "IoU", "IoU-90", "Freq", "Freq-90", "Top-5", "Brier",
    "ECE", "ECSE",
)  # fmt: skip
CUTOFFS = (0.0, 0.9)
NORMALIZATIONS = ("authors", "filter")
# The notebook's `kws`: position embeddings and relative-position tables.
DEFAULT_EXCLUDE = (names.POSEMB, "pos_embed", "relative_position")
# Tensors PyTorch keeps 1-D (biases, norm scales and shifts, BN statistics).
_ONE_D_NAMES = ("bias", "beta", "gamma", "moving_mean", "moving_variance", "scale")
# Projections laid out (D_in, ...outputs): every axis after the first is output.
_INPUT_FIRST = ("qkv_kernel", "kv_kernel", "query_kernel")
# Learned tokens (1, N, D): PyTorch's first axis is the first axis here too.
_TOKENS = ("token", "tokens", "probe")


def _is_float(variable) -> bool:
    return "float" in str(keras.backend.standardize_dtype(variable.dtype))


def output_axes(variable, exclude: Iterable[str] = DEFAULT_EXCLUDE):
    """The axes of `variable` that hold PyTorch's first axis, or `None`.

    `None` marks a weight the directions leave still: non-float, 1-D in
    PyTorch (biases, normalisation parameters, statistics), or matched by
    one of the `exclude` regular expressions (searched in its path).

    Args:
        variable: A Keras variable of a keras_vit model.
        exclude: Regular expressions of the paths to leave still.

    Returns:
        A tuple of axes, or `None`.
    """
    path, name = variable.path, variable.name
    if not _is_float(variable) or len(variable.shape) < 2:
        return None
    if any(name == n or name.endswith("_" + n) for n in _ONE_D_NAMES):
        return None
    if any(re.search(pattern, path) for pattern in exclude):
        return None
    if name in _INPUT_FIRST:
        return tuple(range(1, len(variable.shape)))
    if name in _TOKENS:
        return (0,)
    return (len(variable.shape) - 1,)


def _normalize(direction, weight, axes, normalization):
    if normalization == "filter":  # Li et al.: one norm per output unit
        axes = tuple(a for a in range(weight.ndim) if a not in axes)
        if not axes:
            axes = tuple(range(weight.ndim))
    weight_norm = np.sqrt((weight**2).sum(axis=axes, keepdims=True))
    direction_norm = np.sqrt((direction**2).sum(axis=axes, keepdims=True))
    return weight_norm / (direction_norm + 1e-7) * direction


@export("keras_vit.analysis.filter_normalized_directions")
def filter_normalized_directions(
    model: keras.Model,
    count: int = 2,
    seed: int | np.random.Generator | None = 0,
    normalization: str = "authors",
    exclude: Iterable[str] = DEFAULT_EXCLUDE,
) -> list[list]:
    """Random directions in weight space, filter-normalised (see module).

    Args:
        model: Any Keras model; keras_vit's layer names decide which axes
            are output units (`output_axes`).
        count: How many directions. Defaults to 2 (a plane).
        seed: An int seed or a `numpy.random.Generator`. One standard-normal
            tensor is drawn per weight of `model.weights`, in order.
        normalization: `"authors"` (default): norms over the output units,
            for each input unit, as `ops/loss_landscapes.py`. `"filter"`:
            one norm per output unit (Li et al.).
        exclude: Regular expressions of the weight paths to leave still.
            Defaults to the position embeddings and relative-position tables.

    Returns:
        `count` lists, one array per weight of `model.weights` (float64),
        zero for the weights left still.

    Example:

    ```python
    d1, d2 = filter_normalized_directions(model, seed=0)
    ```
    """
    if normalization not in NORMALIZATIONS:
        raise ValueError(
            f"`normalization` must be one of {NORMALIZATIONS}. Received: "
            f"{normalization!r}"
        )
    if int(count) < 1:
        raise ValueError(f"`count` must be >= 1. Received: {count}")
    exclude = tuple(exclude)
    rng = np.random.default_rng(seed)
    directions = []
    for _ in range(int(count)):
        parts = []
        for variable in model.weights:
            raw = rng.standard_normal(tuple(variable.shape))
            axes = output_axes(variable, exclude)
            if axes is None:
                parts.append(np.zeros_like(raw))
                continue
            weight = np.asarray(keras.ops.convert_to_numpy(variable), "float64")
            parts.append(_normalize(raw, weight, axes, normalization))
        directions.append(parts)
    return directions


def parameter_norms(model: keras.Model) -> tuple[float, float]:
    """`(sum_k ||W_k||_1, sum_k ||W_k||_2)` over the trainable variables.

    The authors' `ops/norm.py` `l1` and `l2`, over PyTorch's
    `model.parameters()`: here the trainable variables (BatchNorm statistics,
    buffers in PyTorch, are not trainable).
    """
    l1 = l2 = 0.0
    for variable in model.trainable_variables:
        value = np.asarray(keras.ops.convert_to_numpy(variable), "float64")
        l1 += float(np.abs(value).sum())
        l2 += float(np.sqrt((value**2).sum()))
    return l1, l2


class _Metrics:
    """Accumulates `ops/tests.py`'s metrics over batches."""

    def __init__(self, num_classes: int):
        self.classes = num_classes
        self.batch_losses = []
        self.top5, self.brier, self.count = 0.0, 0.0, 0
        self.cms = [[np.zeros((num_classes,) * 2) for _ in range(2)] for _ in CUTOFFS]
        self.edges = np.linspace(0.0, 1.0, 11)
        self.cms_bin = [np.zeros((num_classes,) * 2) for _ in self.edges[1:]]
        self.conf_sum = np.zeros(len(self.edges) - 1)

    def _cm(self, labels, probs, low=0.0, high=1.0):
        confidence, predicted = probs.max(axis=1), probs.argmax(axis=1)
        keep = (confidence > low) & (confidence <= high)
        keep &= (labels >= 0) & (labels < self.classes)
        flat = self.classes * labels[keep] + predicted[keep]
        counts = np.bincount(flat, minlength=self.classes**2)
        return counts.reshape(self.classes, self.classes)

    def update(self, batch_loss, labels, probs):
        self.batch_losses.append(float(batch_loss))
        top = probs.argsort(axis=1)[:, -5:]
        self.top5 += float((top == labels[:, None]).any(axis=1).sum())
        onehot = np.eye(self.classes)[labels]
        self.brier += float(((onehot - probs) ** 2).sum())
        self.count += len(labels)
        for cutoff, group in zip(CUTOFFS, self.cms, strict=True):
            group[0] += self._cm(labels, probs, low=cutoff)
            group[1] += self._cm(labels, probs, high=cutoff)
        confidence = probs.max(axis=1)
        for i, (start, end) in enumerate(
            zip(self.edges[:-1], self.edges[1:], strict=True)
        ):
            self.cms_bin[i] += self._cm(labels, probs, low=start, high=end)
            inside = (confidence >= start) & (confidence < end)  # as ops/tests.py
            self.conf_sum[i] += confidence[inside].sum()

    def row(self) -> list[float]:
        accs = [_gacc(certain) for certain, _ in self.cms]
        uncs = [_unconfidence(*group) for group in self.cms]
        ious = [_miou(certain) for certain, _ in self.cms]
        freqs = [
            certain.sum() / (certain.sum() + uncertain.sum() + 1e-7)
            for certain, uncertain in self.cms
        ]
        counts = np.array([cm.sum() for cm in self.cms_bin])
        accuracy = np.array([_gacc(cm) for cm in self.cms_bin])
        confidence = self.conf_sum / (counts + 1e-7)
        share = np.nan_to_num(counts / (counts.sum() + 1e-7))
        return [
            float(np.mean(self.batch_losses)),
            *CUTOFFS,
            *accs,
            *uncs,
            *ious,
            *freqs,
            self.top5 / self.count,
            self.brier / self.count,
            float(np.sum(np.abs(accuracy - confidence) * share)),
            float(np.sum((confidence - accuracy) * share)),
        ]


def _gacc(cm) -> float:
    total = cm.sum()
    return float(np.trace(cm) / total) if total else 0.0


def _unconfidence(certain, uncertain) -> float:
    wrong_certain = certain.sum() - np.trace(certain)
    wrong_uncertain = uncertain.sum() - np.trace(uncertain)
    return float(wrong_uncertain / (wrong_certain + wrong_uncertain + 1e-7))


def _miou(cm) -> float:
    present = cm.sum(axis=1) > 0
    if not present.any():
        return 0.0
    union = cm.sum(axis=1) + cm.sum(axis=0) - np.diag(cm)
    ious = np.divide(
        np.diag(cm), union, out=np.zeros(len(cm)), where=union != 0
    )  # (classes,)
    return float(ious[present].mean())


def landscape_metrics(batch_losses, labels, probabilities) -> list[float]:
    """`ops/tests.py`'s metrics of predictions, in `COLUMNS` order from NLL.

    Args:
        batch_losses: The mean loss of each batch (the NLL is their mean).
        labels: A list of `(B_i,)` integer labels, one per batch.
        probabilities: A list of `(B_i, classes)` predicted probabilities.

    Returns:
        `[NLL, 0.0, 0.9, Acc, Acc-90, Unc, Unc-90, IoU, IoU-90, Freq,
        Freq-90, Top-5, Brier, ECE, ECSE]`.
    """
    classes = np.asarray(probabilities[0]).shape[-1]
    metrics = _Metrics(classes)
    for loss, y, p in zip(batch_losses, labels, probabilities, strict=True):
        metrics.update(
            loss, np.asarray(y).astype("int64"), np.asarray(p, dtype="float64")
        )
    return metrics.row()


def _grid(values, name):
    try:
        low, high, points = (float(values[0]), float(values[1]), int(values[2]))
        ok = len(values) == 3 and np.isfinite(low) and np.isfinite(high)
    except (TypeError, ValueError, IndexError):
        ok = False
    if not ok or not low < high or points < 2:
        raise ValueError(
            f"`{name}` must be (low, high, points) with low < high and points "
            f">= 2. Received: {values!r}"
        )
    return np.linspace(low, high, points)


@export("keras_vit.analysis.loss_landscape")
def loss_landscape(
    model: keras.Model,
    batches: Iterable,
    loss: Callable | None = None,
    transform: Callable | None = None,
    weight_decay: float = 0.0,
    x: tuple[float, float, int] = (-1.0, 1.0, 21),
    y: tuple[float, float, int] = (-1.0, 1.0, 21),
    directions: list | None = None,
    seed: int = 0,
    normalization: str = "authors",
    exclude: Iterable[str] = DEFAULT_EXCLUDE,
    fixed_augmentation: bool = True,
    from_logits: bool = True,
    verbose: int = 1,
    rows_path: str | None = None,
) -> dict:
    """The loss on a 2-D grid of filter-normalised directions (Fig. 1a).

    The weights are restored exactly afterwards, also when the sweep fails
    or is interrupted.

    Args:
        model: A classifier (any keras_vit model), run with
            `training=False`.
        batches: An iterable of `(inputs, targets)`: the training set, e.g.
            one epoch of the training pipeline (already augmented) or
            clean batches with a `transform`. Targets are integer labels or
            one-hot/soft `(B, classes)`; accuracies use their argmax.
        loss: `loss(targets, outputs) -> scalar`, the training loss (e.g.
            cross-entropy with label smoothing 0.1). Defaults to
            cross-entropy on logits (`keras_vit.analysis.hessian.default_loss`).
        transform: `transform(inputs, targets) -> (inputs, targets)`, the
            batch augmentation (e.g. a `keras_vit.data.BatchMixer`).
        weight_decay: The training's weight decay; the plotted loss is
            `NLL + weight_decay * l2`. Defaults to 0.
        x: `(low, high, points)` of the first direction. Defaults to
            `(-1, 1, 21)`, the authors' published grid.
        y: `(low, high, points)` of the second direction. Defaults to
            `(-1, 1, 21)`.
        directions: Two lists of arrays, one per weight of `model.weights`
            (as from `filter_normalized_directions`). Defaults to new ones
            drawn with `seed`.
        seed: Seed of the directions.
        normalization: `"authors"` (default) or `"filter"`; see
            `filter_normalized_directions`.
        exclude: Weight paths (regular expressions) the directions leave
            still. Defaults to position embeddings and relative positions.
        fixed_augmentation: `True` (default): the (transformed) batches of
            the first point are kept in memory and reused at every point.
            `False`: `batches` is read and transformed again at every point
            (it must then be re-iterable: a list or a `tf.data.Dataset`).
        from_logits: The model outputs logits (default) rather than
            probabilities.
        verbose: 1 shows a `keras.utils.Progbar` over the grid points.
        rows_path: A CSV file that keeps the rows as they are computed, to
            resume an interrupted sweep: after each grid point it is
            replaced, atomically, by every row so far (`write_landscape_csv`'s
            layout, no header). Rows already there are kept rather than
            measured again when they are this grid's first points and the
            weight norms (`l1`, `l2`) of the last one are those of this
            call's directions and weights; otherwise the sweep starts over.
            The data and the loss are not checked: a caller that changes
            them deletes the file. Defaults to `None` (no file).

    Returns:
        A dict with `"columns"` (`COLUMNS`), `"rows"` (`(points, 19)`, one
        row per grid point in the authors' order, `x` fastest), `"x"`,
        `"y"` (`(ny, nx)` grids), `"nll"`, `"l2"`, `"accuracy"` and
        `"loss"` (`(ny, nx)`; `loss = nll + weight_decay * l2`) and
        `"weight_decay"`.

    Example:

    ```python
    result = loss_landscape(
        model, train_batches,
        loss=keras.losses.CategoricalCrossentropy(from_logits=True,
                                                  label_smoothing=0.1),
        weight_decay=0.05, x=(-1, 1, 11), y=(-1, 1, 11))
    write_landscape_csv(result, "landscape.csv")
    ```
    """
    loss = loss or default_loss
    xs, ys = _grid(x, "x"), _grid(y, "y")
    weight_decay = float(weight_decay)
    if not np.isfinite(weight_decay) or weight_decay < 0:
        raise ValueError(f"`weight_decay` must be >= 0. Received: {weight_decay}")
    weights = list(model.weights)
    if directions is None:
        directions = filter_normalized_directions(
            model, 2, seed, normalization, tuple(exclude)
        )
    _check_directions(directions, weights)
    moving = [
        i
        for i, (a, b) in enumerate(zip(*directions, strict=True))
        if np.any(a) or np.any(b)
    ]
    if not moving:
        raise ValueError("The directions move no weight.")
    original = [np.array(keras.ops.convert_to_numpy(w)) for w in weights]
    cache = [] if fixed_augmentation else None
    grid = [(a, b) for b in ys for a in xs]  # x fastest, as the authors'
    progbar = keras.utils.Progbar(
        len(grid), verbose=verbose, stateful_metrics=["NLL"], unit_name="point"
    )
    predict = _predictor(model)

    def move_to(a, b):
        for i in moving:
            step = original[i] + a * directions[0][i] + b * directions[1][i]
            weights[i].assign(step.astype(original[i].dtype))
        return parameter_norms(model)

    try:
        rows = _kept_rows(rows_path, grid, move_to)
        if rows:
            progbar.add(len(rows))
        for a, b in grid[len(rows) :]:
            l1, l2 = move_to(a, b)
            metrics = _evaluate(predict, batches, loss, transform, cache, from_logits)
            rows.append([a, b, l1, l2, *metrics])
            if rows_path:
                atomic.write_text(rows_path, _csv_text(rows))
            progbar.add(1, values=[("NLL", metrics[0])])
    finally:
        for weight, value in zip(weights, original, strict=True):
            weight.assign(value)
    rows = np.asarray(rows, dtype="float64")
    shape = (len(ys), len(xs))
    nll = rows[:, COLUMNS.index("NLL")].reshape(shape)
    l2 = rows[:, COLUMNS.index("l2")].reshape(shape)
    return {
        "columns": COLUMNS,
        "rows": rows,
        "x": rows[:, 0].reshape(shape),
        "y": rows[:, 1].reshape(shape),
        "nll": nll,
        "l2": l2,
        "accuracy": rows[:, COLUMNS.index("Acc")].reshape(shape),
        "loss": nll + weight_decay * l2,
        "weight_decay": weight_decay,
    }


def _kept_rows(path, grid, move_to) -> list:
    """The rows an interrupted sweep left in `path` that this one can keep
    (see `loss_landscape`'s `rows_path`), or `[]`."""
    if not path:
        return []
    try:
        with paths.open_file(path) as f:
            rows = [[float(v) for v in line.split(",")] for line in f if line.strip()]
    except (OSError, ValueError):
        return []
    if not rows or len(rows) > len(grid):
        return []
    if any(
        len(row) != len(COLUMNS) or (row[0], row[1]) != point
        for row, point in zip(rows, grid, strict=False)
    ):
        return []
    # The last row's weights: the same directions from the same weights.
    l1, l2 = move_to(*grid[len(rows) - 1])
    if not np.allclose((l1, l2), rows[-1][2:4], rtol=1e-9, atol=0.0):
        return []
    return rows


def _check_directions(directions, weights):
    if len(directions) != 2 or any(len(d) != len(weights) for d in directions):
        raise ValueError(
            f"`directions` must be two lists of {len(weights)} arrays, one per "
            "weight of `model.weights`."
        )
    for direction in directions:
        for part, weight in zip(direction, weights, strict=True):
            if tuple(np.shape(part)) != tuple(weight.shape):
                raise ValueError(
                    f"The direction of {weight.path} has shape {np.shape(part)}, "
                    f"the weight {tuple(weight.shape)}."
                )
            if not np.all(np.isfinite(part)):
                raise ValueError(f"The direction of {weight.path} is not finite.")


def _predictor(model):
    @tf.function(reduce_retracing=True)
    def predict(inputs):
        return model(inputs, training=False)

    return predict


def _evaluate(predict, batches, loss, transform, cache, from_logits):
    """One grid point's metrics over every batch."""

    def stream():
        if cache:
            yield from cache
            return
        for batch in batches:
            if not isinstance(batch, (tuple, list)) or len(batch) < 2:
                raise ValueError("Each batch must be a pair (inputs, targets).")
            inputs, targets = batch[0], batch[1]
            if transform is not None:
                inputs, targets = transform(inputs, targets)
            pair = (
                np.asarray(keras.ops.convert_to_numpy(inputs)),
                np.asarray(keras.ops.convert_to_numpy(targets)),
            )
            if cache is not None:
                cache.append(pair)
            yield pair

    losses, labels, probabilities = [], [], []
    for inputs, targets in stream():
        outputs = predict(tf.convert_to_tensor(inputs))
        value = loss(tf.convert_to_tensor(targets), outputs)
        losses.append(float(keras.ops.convert_to_numpy(value)))
        outputs = np.asarray(keras.ops.convert_to_numpy(outputs), "float32")
        # float32 probabilities, as the authors' (a confident prediction can
        # round to exactly 1, which their calibration bins treat specially).
        probs = _softmax(outputs) if from_logits else outputs
        hard = targets.argmax(axis=-1) if targets.ndim > 1 else targets
        labels.append(hard.astype("int64"))
        probabilities.append(probs)
    if not losses:
        raise ValueError(
            "`batches` yielded no batch; with fixed_augmentation=False it must "
            "be re-iterable (a list or a tf.data.Dataset)."
        )
    return landscape_metrics(losses, labels, probabilities)


def _softmax(logits):
    shifted = logits - logits.max(axis=-1, keepdims=True)
    weights = np.exp(shifted)
    return weights / weights.sum(axis=-1, keepdims=True)


@export("keras_vit.analysis.write_landscape_csv")
def write_landscape_csv(result: dict, path: str, header: bool = False) -> str:
    """Writes a landscape's rows as the authors' CSV, whole or not at all.

    Args:
        result: From `loss_landscape`.
        path: The `.csv` file.
        header: Write `COLUMNS` as a first line. Defaults to `False`, as
            the authors' published files (read them with
            `pandas.read_csv(path, names=COLUMNS)`).

    Returns:
        `path`.
    """
    return atomic.write_text(path, _csv_text(result["rows"], header))


def _csv_text(rows, header: bool = False) -> str:
    rows = np.asarray(rows, dtype="float64")
    if rows.ndim != 2 or rows.shape[1] != len(COLUMNS):
        raise ValueError(
            f"Expected rows of {len(COLUMNS)} columns. Received: shape {rows.shape}"
        )
    lines = [",".join(COLUMNS)] if header else []
    lines += [",".join(repr(float(v)) for v in row) for row in rows]
    return "\n".join(lines) + "\n"


@export("keras_vit.analysis.read_landscape_csv")
def read_landscape_csv(path: str) -> dict:
    """Reads a landscape CSV (ours or the authors'), with or without header.

    Returns:
        `{column: (points,) array}` for every name of `COLUMNS`.
    """
    with open(path, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()]
    if lines and lines[0].split(",")[0] == COLUMNS[0]:
        lines = lines[1:]
    rows = np.array([[float(v) for v in line.split(",")] for line in lines])
    if rows.ndim != 2 or rows.shape[1] != len(COLUMNS):
        raise ValueError(
            f"{path!r} is not a loss-landscape CSV of {len(COLUMNS)} columns."
        )
    return {name: rows[:, i] for i, name in enumerate(COLUMNS)}
