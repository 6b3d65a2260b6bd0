"""Few-shot linear evaluation of frozen representations (paper §4).

For each shot count `s`, `s` training images per class are drawn with a seed,
their frozen representations (`keras_vit.feature_extractor(model)["pooled"]`)
are regressed onto `{-1, 1}^K` targets by regularised least squares, solved in
closed form, and the test images are classified by the largest regression
output. The accuracy is reported per shot count: `{"1shot": ..., "5shot":
..., "10shot": ..., "25shot": ...}`.

Design (documented in `docs/self_supervision.md`):
- Shots are **nested**: one permutation per class and trial, the `s`-shot set
  being its first `s` images, so 1 ⊂ 5 ⊂ 10 ⊂ 25 and only `25 * K` training
  images are ever passed through the model.
- Features are standardised with the mean and standard deviation of the
  support set (the sampled shots), so the regulariser does not depend on the
  scale of a model's features.
- Ridge with an unpenalised bias: `min ||X W + b - Y||^2 + l2 ||W||^2`. With
  `l2="auto"` the regulariser is picked from `L2_GRID` by the exact
  leave-one-out squared error on the support set itself (closed form, one
  SVD for the whole grid): no labels beyond the `s` shots, and nothing from
  the test split, are used.

Example:

```python
accuracies = few_shot_evaluate(
    model, (train_images, train_labels), (test_images, test_labels)
)  # {"1shot": ..., "5shot": ..., "10shot": ..., "25shot": ...}
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from collections.abc import Sequence

import keras
import numpy as np
import tensorflow as tf

from keras_vit.data.datasets import check_disjoint
from keras_vit.data.datasets import load_source
from keras_vit.data.pipeline import eval_dataset
from keras_vit.models.features import feature_extractor

SHOTS = (1, 5, 10, 25)
# Candidate regularisers for l2="auto": 2^-4 ... 2^20, a factor 4 apart. On
# standardised features the squared singular values are about `n * D / r`,
# so this covers interpolation through near-prototype classifiers.
L2_GRID = tuple(2.0**k for k in range(-4, 21, 2))


def ridge_regression(
    features: np.ndarray, targets: np.ndarray, l2: float
) -> tuple[np.ndarray, np.ndarray]:
    """Regularised least squares with an unpenalised bias, in closed form.

    Minimises `||features @ W + b - targets||^2 + l2 * ||W||^2` through the
    singular value decomposition of the centred features.

    Args:
        features: `(n, dim)` inputs.
        targets: `(n, k)` regression targets.
        l2: The regulariser, `>= 0`. With 0 the minimum-norm least-squares
            solution is returned.

    Returns:
        `(weights, bias)` of shapes `(dim, k)` and `(k,)`, float64.

    Example:

    >>> w, b = ridge_regression(np.eye(3), -np.ones((3, 2)), l2=1.0)
    >>> np.allclose(w, 0), b
    (True, array([-1., -1.]))
    """
    x, y = _check_regression_inputs(features, targets)
    if not l2 >= 0:
        raise ValueError(f"`l2` must be >= 0. Received: l2={l2}")
    svd = _CentredSVD(x, y)
    return svd.solve(float(l2))


def loo_squared_error(
    features: np.ndarray, targets: np.ndarray, l2_grid: Sequence[float]
) -> np.ndarray:
    """Exact leave-one-out mean squared error of `ridge_regression`.

    For a linear smoother with hat matrix `H`, the residual of example `i`
    when the model is refit without it is `(y_i - f(x_i)) / (1 - H_ii)`; one
    SVD gives `H` for every regulariser.

    Args:
        features: `(n, dim)` inputs, `n >= 2`.
        targets: `(n, k)` targets.
        l2_grid: Regularisers to score, each `> 0`.

    Returns:
        `(len(l2_grid),)` mean squared leave-one-out residuals.
    """
    x, y = _check_regression_inputs(features, targets)
    if len(x) < 2:
        raise ValueError("Leave-one-out needs at least 2 examples.")
    if any(not l2 > 0 for l2 in l2_grid):
        raise ValueError(f"Every l2 must be > 0. Received: {list(l2_grid)}")
    svd = _CentredSVD(x, y)
    return np.array([svd.loo_error(float(l2)) for l2 in l2_grid])


def sample_shots(
    labels: np.ndarray, shots: Sequence[int] = SHOTS, seed: int = 0
) -> dict[int, np.ndarray]:
    """Draws nested few-shot training subsets, `s` examples of each class.

    Args:
        labels: `(n,)` integer labels of the training pool.
        shots: Examples per class, e.g. `(1, 5, 10, 25)`.
        seed: Seed of the draw.

    Returns:
        `{s: indices}` into `labels`, class by class; the `s`-shot subset is
        the first `s` of one random permutation of each class.

    Raises:
        ValueError: if a class has fewer than `max(shots)` examples.
    """
    labels = np.asarray(labels).reshape(-1)
    shots = _check_shots(shots)
    rng = np.random.default_rng(seed)
    chosen = []
    for label in np.unique(labels):
        pool = np.flatnonzero(labels == label)
        if len(pool) < max(shots):
            raise ValueError(
                f"Class {label} has {len(pool)} training examples, fewer than "
                f"the {max(shots)} shots asked for. Use fewer shots."
            )
        chosen.append(rng.permutation(pool)[: max(shots)])
    return {s: np.concatenate([c[:s] for c in chosen]) for s in shots}


def few_shot_accuracy(
    train_features: np.ndarray,
    train_labels: np.ndarray,
    test_features: np.ndarray,
    test_labels: np.ndarray,
    *,
    shots: Sequence[int] = SHOTS,
    l2: float | str | Sequence[float] = "auto",
    seed: int = 0,
    trials: int = 1,
) -> dict[str, float]:
    """Few-shot linear accuracy of precomputed features.

    Args:
        train_features: `(n, dim)` representations of the training pool.
        train_labels: `(n,)` integer labels; every class must have at least
            `max(shots)` examples.
        test_features: `(m, dim)` representations of the test split.
        test_labels: `(m,)` integer labels.
        shots: Examples per class. Defaults to `(1, 5, 10, 25)`.
        l2: `"auto"` (default: chosen from `L2_GRID` by leave-one-out on the
            support set), a sequence of candidates to choose from the same
            way, or one fixed value.
        seed: Seed of the draws. Trial `t` uses seed `seed + t`.
        trials: Independent draws to average. Defaults to 1.

    Returns:
        `{"1shot": accuracy, "5shot": ...}`, test accuracies in `[0, 1]`.

    Example:

    ```python
    accuracies = few_shot_accuracy(x_train, y_train, x_test, y_test)
    ```
    """
    l2 = _check_l2(l2)
    train_features, train_labels = _check_features(
        train_features, train_labels, "train"
    )
    test_features, test_labels = _check_features(test_features, test_labels, "test")
    if train_features.shape[1] != test_features.shape[1]:
        raise ValueError(
            f"Train features have dim {train_features.shape[1]}, test features "
            f"{test_features.shape[1]}."
        )
    subsets = [
        sample_shots(train_labels, shots, seed + t)
        for t in range(_check_trials(trials))
    ]
    return _accuracies(
        train_features, train_labels, subsets, test_features, test_labels, l2
    )


def extract_features(
    model: keras.Model,
    data,
    feature: str = "pooled",
    batch_size: int = 64,
    steps: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Runs `model` over labelled images and collects features and labels.

    Args:
        model: A model returning the features, or a dict holding them under
            `feature` (such as `keras_vit.feature_extractor(vit)`).
        data: `(images, labels)` NumPy arrays, or an iterable of
            `(images, labels, ...)` batches (e.g. a finite `tf.data.Dataset`).
            Labels are class indices `(batch,)` or one-hot (or soft)
            `(batch, classes)`, read as their argmax.
        feature: Key of the feature in a dict output. Defaults to `"pooled"`.
        batch_size: Batch size for array inputs. Defaults to 64.
        steps: Stop after this many batches (needed for an endless dataset).

    Returns:
        `(features, labels)`: float32 `(n, dim)` and `(n,)` arrays.
    """
    features, labels = [], []
    full_size = None
    for step, (images, batch_labels) in enumerate(_batches(data, batch_size)):
        if steps is not None and step >= steps:
            break
        images = np.asarray(images)
        count = len(images)
        full_size = full_size or count
        if count < full_size:
            # Pad a short last batch: one traced predict function, not two.
            padding = np.zeros((full_size - count, *images.shape[1:]), images.dtype)
            images = np.concatenate([images, padding])
        outputs = model.predict_on_batch(images)
        if isinstance(outputs, dict):
            if feature not in outputs:
                raise ValueError(
                    f"The model's outputs {sorted(outputs)} have no {feature!r}."
                )
            outputs = outputs[feature]
        outputs = np.asarray(outputs, dtype="float32")[:count]
        features.append(outputs.reshape(count, -1))
        labels.append(_class_indices(batch_labels, count))
    if not features:
        raise ValueError("The data gave no batches.")
    return np.concatenate(features), np.concatenate(labels)


def few_shot_evaluate(
    model: keras.Model,
    train_data,
    test_data,
    *,
    shots: Sequence[int] = SHOTS,
    l2: float | str | Sequence[float] = "auto",
    seed: int = 0,
    trials: int = 1,
    batch_size: int = 64,
) -> dict[str, float]:
    """Few-shot linear accuracy of a ViT's frozen representation.

    The representation is `keras_vit.feature_extractor(model)["pooled"]`: the
    pooled token after the final LayerNorm (and `pre_logits` if present).

    Args:
        model: A `keras_vit.ViT` (with or without its head), or a
            `masked_patch_model`.
        train_data: The labelled pool the shots are drawn from:
            `(images, labels)` arrays (only the drawn images are run through
            the model) or an iterable of batches (all of it is run).
        test_data: `(images, labels)` arrays or an iterable of batches.
        shots: Examples per class. Defaults to `(1, 5, 10, 25)`.
        l2: See `few_shot_accuracy`. Defaults to `"auto"`.
        seed: Seed of the draws. Defaults to 0.
        trials: Independent draws to average. Defaults to 1.
        batch_size: Batch size for array inputs. Defaults to 64.

    Returns:
        `{"1shot": accuracy, ...}`.

    Example:

    ```python
    model = keras_vit.ViT_B16(weights="augreg_in21k")
    few_shot_evaluate(model, (x_train, y_train), (x_test, y_test))
    ```
    """
    return _evaluate_model(
        _feature_model(model),
        train_data,
        test_data,
        shots,
        l2,
        seed,
        trials,
        batch_size,
    )


class FewShotCallback(keras.callbacks.Callback):
    """Runs the few-shot evaluation during `fit` and logs the accuracies.

    After epoch `e` (0-based) with `e % every_n_epochs == 0` (so after the
    first epoch too), the accuracies are added to the epoch's `logs` as
    `fewshot_1shot`, `fewshot_5shot`, ... Callbacks after this one in the
    list (`TensorBoard`, `CSVLogger`, `ModelCheckpoint` monitoring one of
    them, `History`) see them: put it **before** them. `CSVLogger` fixes its
    columns at the first epoch, which is why that epoch is always evaluated.

    Keep the pools small: with array inputs only the `max(shots) * K` drawn
    training images and the test images are run each time.

    Args:
        train_data: `(images, labels)` arrays or a finite iterable of batches.
        test_data: `(images, labels)` arrays or a finite iterable of batches.
        shots: Examples per class. Defaults to `(1, 5, 10, 25)`.
        l2: See `few_shot_accuracy`. Defaults to `"auto"`.
        every_n_epochs: Evaluate every this many epochs. Defaults to 1.
        seed: Seed of the draws (the same shots every epoch). Defaults to 0.
        trials: Independent draws to average. Defaults to 1.
        batch_size: Batch size for array inputs. Defaults to 64.
        prefix: Prefix of the log keys. Defaults to `"fewshot_"`.
        verbose: Print the accuracies when evaluated. Defaults to 0.

    Example:

    ```python
    fewshot = FewShotCallback((x_train, y_train), (x_test, y_test), shots=(1, 5))
    model.fit(data, epochs=10, callbacks=[fewshot, keras.callbacks.TensorBoard()])
    ```
    """

    def __init__(
        self,
        train_data,
        test_data,
        shots: Sequence[int] = SHOTS,
        l2: float | str | Sequence[float] = "auto",
        every_n_epochs: int = 1,
        seed: int = 0,
        trials: int = 1,
        batch_size: int = 64,
        prefix: str = "fewshot_",
        verbose: int = 0,
    ):
        super().__init__()
        if int(every_n_epochs) < 1:
            raise ValueError(
                f"`every_n_epochs` must be >= 1. Received: {every_n_epochs}"
            )
        self.train_data = train_data
        self.test_data = test_data
        self.shots = _check_shots(shots)
        self.l2 = _check_l2(l2)
        self.every_n_epochs = int(every_n_epochs)
        self.seed = seed
        self.trials = _check_trials(trials)
        self.batch_size = int(batch_size)
        self.prefix = prefix
        self.verbose = verbose
        self._features = None

    def on_train_begin(self, logs=None):
        self._features = _feature_model(self.model)

    def on_epoch_end(self, epoch, logs=None):
        if epoch % self.every_n_epochs:
            return
        if self._features is None:
            self._features = _feature_model(self.model)
        results = _evaluate_model(
            self._features,
            self.train_data,
            self.test_data,
            self.shots,
            self.l2,
            self.seed,
            self.trials,
            self.batch_size,
        )
        if logs is not None:
            logs.update({self.prefix + key: value for key, value in results.items()})
        if self.verbose:
            text = ", ".join(f"{k} {v:.4f}" for k, v in results.items())
            print(f"Epoch {epoch + 1}: few-shot accuracy: {text}")  # noqa: T201


# -- internals ---------------------------------------------------------------


class _CentredSVD:
    """SVD of centred features, shared by every regulariser of a grid."""

    def __init__(self, x: np.ndarray, y: np.ndarray):
        self.n = len(x)
        self.x_mean = x.mean(axis=0)
        self.y_mean = y.mean(axis=0)
        self.u, self.s, self.vt = np.linalg.svd(x - self.x_mean, full_matrices=False)
        self.uty = self.u.T @ (y - self.y_mean)  # (r, k)
        self.y_centred = y - self.y_mean
        # Singular values below round-off are treated as exact zeros.
        tol = self.s.max(initial=0.0) * max(x.shape) * np.finfo(float).eps
        self.s = np.where(self.s > tol, self.s, 0.0)

    def _filter(self, l2: float, power: int) -> np.ndarray:
        # s^power / (s^2 + l2), 0 where s is 0 (also when l2 is 0).
        denominator = self.s**2 + l2
        safe = np.where(denominator > 0, denominator, 1.0)
        return np.where(self.s > 0, self.s**power / safe, 0.0)

    def solve(self, l2: float) -> tuple[np.ndarray, np.ndarray]:
        weights = self.vt.T @ (self._filter(l2, 1)[:, None] * self.uty)  # (D, k)
        bias = self.y_mean - self.x_mean @ weights
        return weights, bias

    def loo_error(self, l2: float) -> float:
        shrink = self._filter(l2, 2)  # eigenvalues of the hat matrix, (r,)
        fitted = self.u @ (shrink[:, None] * self.uty)  # centred fit, (n, k)
        leverage = 1.0 / self.n + (self.u**2) @ shrink  # diag(H), (n,)
        residual = (self.y_centred - fitted) / np.maximum(1.0 - leverage, 1e-12)[
            :, None
        ]
        return float(np.mean(residual**2))


def _fit_classifier(features, labels, classes, l2):
    """Standardises on the support set, picks l2, fits; returns a predictor."""
    mean = features.mean(axis=0)
    std = features.std(axis=0)
    scale = np.where(std > 1e-6 * std.max(initial=0.0), std, 1.0)
    x = (features - mean) / scale
    y = np.where(labels[:, None] == classes[None, :], 1.0, -1.0)  # {-1, 1}^K
    svd = _CentredSVD(x, y)
    if isinstance(l2, tuple):
        errors = [svd.loo_error(value) for value in l2]
        # Ties go to the larger, more regularised, value.
        l2 = l2[len(l2) - 1 - int(np.argmin(errors[::-1]))]
    weights, bias = svd.solve(l2)
    return lambda f: classes[np.argmax((f - mean) / scale @ weights + bias, axis=1)]


def _accuracies(train_features, train_labels, subsets, test_features, test_labels, l2):
    l2 = _check_l2(l2)
    classes = np.unique(train_labels)
    totals = {}
    for subset in subsets:
        for shots, indices in subset.items():
            predict = _fit_classifier(
                train_features[indices], train_labels[indices], classes, l2
            )
            accuracy = float(np.mean(predict(test_features) == test_labels))
            totals[shots] = totals.get(shots, 0.0) + accuracy
    return {f"{shots}shot": totals[shots] / len(subsets) for shots in sorted(totals)}


def _evaluate_model(
    features_model, train_data, test_data, shots, l2, seed, trials, batch_size
):
    shots = _check_shots(shots)
    trials = _check_trials(trials)
    l2 = _check_l2(l2)
    if _is_array_pair(train_data):
        # Draw first, then run only the drawn images through the model.
        images, labels = train_data
        labels = np.asarray(labels).reshape(-1)
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} training images but {len(labels)} labels.")
        subsets = [sample_shots(labels, shots, seed + t) for t in range(trials)]
        used = np.unique(np.concatenate([i for s in subsets for i in s.values()]))
        train_features, _ = extract_features(
            features_model,
            (np.asarray(images)[used], labels[used]),
            batch_size=batch_size,
        )
        train_labels = labels[used]
        subsets = [{s: np.searchsorted(used, i) for s, i in d.items()} for d in subsets]
    else:
        train_features, train_labels = extract_features(
            features_model, train_data, batch_size=batch_size
        )
        subsets = [sample_shots(train_labels, shots, seed + t) for t in range(trials)]
    test_features, test_labels = extract_features(
        features_model, test_data, batch_size=batch_size
    )
    return _accuracies(
        train_features.astype("float64"),
        train_labels,
        subsets,
        test_features.astype("float64"),
        test_labels,
        l2,
    )


def _feature_model(model: keras.Model) -> keras.Model:
    return feature_extractor(
        model, blocks=None, include_pooled=True, include_tokens=False
    )


def _is_array_pair(data) -> bool:
    return (
        isinstance(data, tuple)
        and len(data) == 2
        and all(hasattr(part, "shape") and hasattr(part, "__len__") for part in data)
    )


def _batches(data, batch_size: int) -> Iterable:
    if _is_array_pair(data):
        images, labels = data
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels.")
        for start in range(0, len(images), batch_size):
            yield images[start : start + batch_size], labels[start : start + batch_size]
        return
    for batch in data:
        if not isinstance(batch, (tuple, list)) or len(batch) < 2:
            raise ValueError(
                "Few-shot evaluation needs labelled data: `(images, labels)` "
                "arrays or batches of `(images, labels)`."
            )
        yield batch[0], batch[1]


def _class_indices(labels, count: int) -> np.ndarray:
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] > 1:
        labels = np.argmax(labels, axis=1)  # one-hot, as keras_vit.data gives
    labels = labels.reshape(-1)
    if len(labels) != count:
        raise ValueError(f"A batch has {count} images but {len(labels)} labels.")
    return labels


def _check_regression_inputs(features, targets):
    x = np.asarray(features, dtype="float64")
    y = np.asarray(targets, dtype="float64")
    if x.ndim != 2 or y.ndim != 2 or len(x) != len(y) or len(x) == 0:
        raise ValueError(
            "Expected features (n, dim) and targets (n, k) with n > 0. "
            f"Received: {x.shape} and {y.shape}"
        )
    return x, y


def _check_features(features, labels, split):
    features = np.asarray(features, dtype="float64")
    labels = np.asarray(labels).reshape(-1)
    if features.ndim != 2 or len(features) != len(labels):
        raise ValueError(
            f"Expected {split} features (n, dim) and n labels. "
            f"Received: {features.shape} and {labels.shape}"
        )
    return features, labels


def _check_shots(shots) -> tuple[int, ...]:
    shots = tuple(int(s) for s in shots)
    if not shots or min(shots) < 1:
        raise ValueError(f"`shots` must be positive ints. Received: {shots}")
    return tuple(sorted(set(shots)))


def _check_trials(trials) -> int:
    if int(trials) < 1:
        raise ValueError(f"`trials` must be >= 1. Received: trials={trials}")
    return int(trials)


def _check_l2(l2) -> float | tuple[float, ...]:
    if isinstance(l2, str):
        if l2 != "auto":
            raise ValueError(
                f"`l2` must be 'auto', a number or a list. Received: {l2!r}"
            )
        return L2_GRID
    if np.ndim(l2) == 0:
        if not float(l2) >= 0:
            raise ValueError(f"`l2` must be >= 0. Received: l2={l2}")
        return float(l2)
    grid = tuple(float(v) for v in l2)
    if not grid or min(grid) <= 0:
        raise ValueError(f"Candidate `l2` values must be > 0. Received: {list(l2)}")
    return grid


# -- the pools of an evaluation, from a dataset name ---------------------------
def source_labels(source):
    """The labels of a source, in order, without decoding any image."""
    labels = source.dataset.map(lambda image, label: label).batch(4096)
    return np.concatenate([np.asarray(batch) for batch in labels]).astype("int64")


def select(source, indices):
    """The sub-source holding the elements at `indices` (in source order)."""
    keep = tf.constant(np.unique(indices), tf.int64)

    def wanted(index, element):
        return tf.reduce_any(tf.equal(index, keep))

    dataset = (
        source.dataset.enumerate().filter(wanted).map(lambda index, element: element)
    )
    return dataclasses.replace(
        source, dataset=dataset, num_examples=len(keep), name=f"{source.name} (drawn)"
    )


def few_shot_pools(
    dataset: str,
    *,
    train_split: str,
    test_split: str,
    image_size: int | tuple[int, int],
    channels: int,
    shots=SHOTS,
    seed: int = 0,
    trials: int = 1,
    data_dir: str | None = None,
    max_test_examples: int | None = None,
    batch_size: int = 128,
    preprocessing=None,
):
    """The labelled pools of a few-shot evaluation, as `tf.data` pipelines.

    Images are prepared as `eval_dataset` prepares them for a model whose
    input contract is `preprocessing` (`preprocessing_of(model)`; `None`
    for the paper's `[-1, 1]`).

    Returns:
        `(train, test, subsets)`: `train` yields the drawn training images
        (the union of every trial's `max(shots)` per class) with their labels,
        in source order; `test` the test split (cut to `max_test_examples`);
        `subsets[t]` gives trial `t`'s `{shots: positions}` into `train`.
    """
    train_source = load_source(dataset, train_split, data_dir)
    labels = source_labels(train_source)
    draws = [sample_shots(labels, shots, seed + t) for t in range(trials)]
    used = np.unique(np.concatenate([i for draw in draws for i in draw.values()]))
    subsets = [{s: np.searchsorted(used, i) for s, i in d.items()} for d in draws]
    options = dict(
        image_size=image_size,
        global_batch_size=batch_size,
        channels=channels,
        preprocessing=preprocessing,
    )
    train = eval_dataset(select(train_source, used), **options)
    test_source = load_source(dataset, test_split, data_dir)
    check_disjoint(train_source, test_source)  # No test image drawn as a shot.
    if max_test_examples:
        test_source = dataclasses.replace(
            test_source,
            dataset=test_source.dataset.take(max_test_examples),
            num_examples=min(max_test_examples, test_source.num_examples),
        )
    test = eval_dataset(test_source, **options)
    return train, test, subsets
