"""Top eigenvalues of the loss Hessian (Park & Kim, ICLR 2022, Fig. 1c and 4).

Park & Kim compare the "Hessian max-eigenvalue spectra" of ViTs and CNNs:
the top eigenvalues of the training loss's Hessian, estimated mini-batch by
mini-batch. Multi-head self-attention flattens the landscape (eigenvalues
near 0), and negative eigenvalues betray non-convexity.

**The authors' protocol.** Their script is unreleased; the author describes
it in xxxnell/how-do-vits-work#12: PyHessian's power iteration, the
top-k (e.g. 5) eigenvalues of **every mini-batch of the training set**, each
batch passed through the training's **augmentation** (timm's MixUp/CutMix
with label smoothing, `losslandscape.ipynb` at 9571ff1, line 134) and the
loss including the **L2 term**; the README's "Investigate Loss Landscapes
and Hessians With L2 Regularization on Augmented Datasets" says that
measuring without L2 on clean data "would give incorrect results". PyHessian
puts the model in eval mode (here `training=False`: no dropout, BN with its
moving statistics) and iterates up to 100 times per eigenvalue, stopping at
a relative change of 1e-3. `hessian_spectrum` follows it:

- `loss(targets, outputs)` is the training loss (e.g. cross-entropy with
  label smoothing 0.1), `transform(inputs, targets)` the batch
  augmentation, applied **once per batch** (the Hessian of one batch is of
  one fixed augmented batch, as PyHessian's single-batch mode);
- the L2 term is `weight_decay * sum_k ||W_k||_2` over every trainable
  variable (PyTorch's `model.parameters()`), the **unsquared** norm of
  `ops/norm.py` (lines 14-21), the L2 that `losslandscape.ipynb` (line 286)
  adds to the NLL. Its Hessian, `weight_decay (I - w w^T) / ||W||`, is
  large for a tensor of small norm (`l2_max_curvature` reports the
  largest). `l2="squared"` uses `weight_decay / 2 * sum_k ||W_k||²`
  instead, whose gradient is the coupled weight decay `weight_decay * W`
  (what the open PyHessian pull request #24, "add support for
  weight_decay", adds to the gradient);
- every batch of `batches` (all of them by default), `top_k=5`;
- the loss of each batch (data term and L2 term) is reported beside its
  eigenvalues, so that models can be compared at matched training loss;
- so is whether each eigenvalue's iteration reached the tolerance
  (`"converged"`): one stopped by `max_iterations` is the last iterate's
  estimate.

The clean protocol (clean images with hard labels, no L2, a few batches)
is the same function with `transform=None`, `weight_decay=0` and a plain
cross-entropy.

The Hessian is never formed. Power iteration only needs Hessian-vector
products `Hv = d(g . v)/dθ`, the gradient of the dot product of the gradient
`g` with a fixed vector `v`, which two nested gradient tapes compute at the
cost of about two backward passes. Further eigenvalues come from deflation:
each new iterate is kept orthogonal to the eigenvectors already found.
Power iteration converges to the eigenvalues of largest **magnitude**, so a
strongly negative eigenvalue is found as readily as a positive one.

Unlike the rest of `keras_vit`, this module uses TensorFlow directly
(`tf.GradientTape`): second derivatives have no backend-neutral Keras API.
Hessian-vector products cost memory like a double backward pass; keep the
batches small (8 to 64 images) for large models, or restrict `variables`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from collections.abc import Iterable

import keras
import numpy as np
import tensorflow as tf

from keras_vit._export import export

L2_FORMS = ("norm", "squared")


def _check_pair(batch) -> tuple:
    if not isinstance(batch, (tuple, list)) or len(batch) < 2:
        raise ValueError(
            "Each batch must be a pair (inputs, targets); received "
            f"{type(batch).__name__}."
        )
    return batch[0], batch[1]


def _iter_batches(batches, num_batches: int | None, transform: Callable | None):
    """Yields `(inputs, targets)` tensors, each transformed once."""
    taken = 0
    for batch in batches:
        if num_batches is not None and taken >= num_batches:
            return
        inputs, targets = _check_pair(batch)
        if transform is not None:
            inputs, targets = _check_pair(transform(inputs, targets))
        taken += 1
        yield tf.convert_to_tensor(inputs), tf.convert_to_tensor(targets)
    if not taken:
        raise ValueError("`batches` yielded no batch.")


def default_loss(targets, outputs):
    """Cross-entropy on logits: sparse for integer labels, else categorical.

    One-hot or soft targets (MixUp/CutMix, label smoothing applied by a
    transform) go through `keras.losses.categorical_crossentropy`.
    """
    if len(targets.shape) == len(outputs.shape):
        return keras.ops.mean(
            keras.losses.categorical_crossentropy(targets, outputs, from_logits=True)
        )
    return keras.ops.mean(
        keras.losses.sparse_categorical_crossentropy(targets, outputs, from_logits=True)
    )


def _safe_norm(value):
    """`||value||_2` with gradient (and Hessian) 0 at 0, as `torch.norm`'s."""
    squares = tf.reduce_sum(tf.square(tf.cast(value, tf.float32)))
    positive = squares > 0
    return tf.where(positive, tf.sqrt(tf.where(positive, squares, 1.0)), 0.0)


def _check_l2(weight_decay, l2) -> float:
    if l2 not in L2_FORMS:
        raise ValueError(f"`l2` must be one of {L2_FORMS}. Received: {l2!r}")
    weight_decay = float(weight_decay)
    if not np.isfinite(weight_decay) or weight_decay < 0:
        raise ValueError(f"`weight_decay` must be >= 0. Received: {weight_decay}")
    return weight_decay


@export("keras_vit.analysis.l2_term")
def l2_term(variables, weight_decay: float, l2: str = "norm"):
    """The L2 term of the authors' protocol, as a scalar tensor.

    Args:
        variables: The weights it sums over (the model's trainable
            variables, PyTorch's `model.parameters()`).
        weight_decay: Its factor.
        l2: `"norm"` (default): `weight_decay * sum_k ||W_k||_2`, the
            unsquared norm of the authors' `ops/norm.py`. `"squared"`:
            `weight_decay / 2 * sum_k ||W_k||²`.

    Returns:
        A float32 scalar tensor.

    Example:

    ```python
    l2_term(model.trainable_variables, weight_decay=0.05)
    ```
    """
    weight_decay = _check_l2(weight_decay, l2)
    variables = list(variables)
    if not weight_decay or not variables:
        return tf.constant(0.0)
    if l2 == "norm":
        total = tf.add_n([_safe_norm(v) for v in variables])
        return weight_decay * total
    total = tf.add_n(
        [tf.reduce_sum(tf.square(tf.cast(v, tf.float32))) for v in variables]
    )
    return 0.5 * weight_decay * total


def l2_max_curvature(variables, weight_decay: float, l2: str = "norm") -> float:
    """The largest eigenvalue of the L2 term's own Hessian.

    For `l2="squared"` it is `weight_decay`. For the authors' unsquared
    `"norm"` the Hessian of `weight_decay * ||W||` is `weight_decay (I - w
    w^T) / ||W||` (`w = W / ||W||`), so the tensor of smallest nonzero norm
    sets it: `weight_decay / min_k ||W_k||`. A bias initialised near 0 (a
    norm of 1e-5, say) then puts eigenvalues of `weight_decay * 1e5` into
    the spectrum; compare this number with the eigenvalues found.

    Args:
        variables: The variables the Hessian is taken with respect to.
        weight_decay: Factor of the L2 term.
        l2: `"norm"` (default) or `"squared"`.

    Returns:
        A float (0 without an L2 term).
    """
    weight_decay = _check_l2(weight_decay, l2)
    if not weight_decay:
        return 0.0
    if l2 == "squared":
        return weight_decay
    norms = [
        float(np.linalg.norm(np.asarray(keras.ops.convert_to_numpy(v), "float64")))
        for v in variables
    ]
    norms = [n for n in norms if n > 0]
    return weight_decay / min(norms) if norms else 0.0


class _HessianVectorProduct:
    """`v -> H v` for a model's loss on one batch, with flat NumPy vectors."""

    def __init__(self, model, loss_fn, variables, weight_decay=0.0, l2="norm"):
        self.variables = list(variables)
        self.shapes = [tuple(v.shape) for v in self.variables]
        self.sizes = [int(np.prod(shape)) for shape in self.shapes]
        self.size = int(sum(self.sizes))
        weights = list(model.trainable_variables)

        def total_loss(inputs, targets):
            data = loss_fn(targets, model(inputs, training=False))
            return tf.cast(data, tf.float32) + l2_term(weights, weight_decay, l2)

        @tf.function(reduce_retracing=True)
        def product(inputs, targets, vector):
            # Both tapes watch the trainable variables the model reads.
            with tf.GradientTape() as outer:
                with tf.GradientTape() as inner:
                    loss = total_loss(inputs, targets)
                grads = inner.gradient(
                    loss,
                    self.variables,
                    unconnected_gradients=tf.UnconnectedGradients.ZERO,
                )
                dot = tf.add_n(
                    [
                        tf.reduce_sum(g * tf.cast(v, g.dtype))
                        for g, v in zip(grads, vector, strict=True)
                    ]
                )
            return outer.gradient(
                dot, self.variables, unconnected_gradients=tf.UnconnectedGradients.ZERO
            )

        @tf.function(reduce_retracing=True)
        def losses(inputs, targets):
            data = loss_fn(targets, model(inputs, training=False))
            return tf.cast(data, tf.float32), l2_term(weights, weight_decay, l2)

        self._product = product
        self.losses = losses

    def __call__(self, batch, vector: np.ndarray) -> np.ndarray:
        parts = np.split(vector.astype("float32"), np.cumsum(self.sizes)[:-1])
        parts = [
            tf.constant(p.reshape(s)) for p, s in zip(parts, self.shapes, strict=True)
        ]
        result = self._product(batch[0], batch[1], parts)
        return np.concatenate(
            [np.asarray(r, dtype="float64").reshape(-1) for r in result]
        )


def _top_eigenvalues(hvp, size, top_k, max_iterations, tolerance, rng, on_value):
    """`(eigenvalues, converged)`: power iteration with deflation, `top_k` times.

    `converged[i]` says whether eigenvalue `i` met the tolerance before
    `max_iterations` (the first iteration has nothing to compare with, so
    one iteration never converges).
    """
    eigenvalues, eigenvectors, flags = [], [], []
    for _ in range(top_k):
        vector = rng.standard_normal(size)
        value, converged = None, False
        for _ in range(max_iterations):
            for found in eigenvectors:  # deflation: stay orthogonal to them
                vector -= (found @ vector) * found
            vector /= np.linalg.norm(vector)
            product = hvp(vector)
            new_value = float(vector @ product)  # Rayleigh quotient
            vector = product
            converged = value is not None and abs(new_value - value) <= tolerance * (
                abs(value) + 1e-12
            )
            value = new_value
            if converged:
                break
        for found in eigenvectors:
            vector -= (found @ vector) * found
        norm = np.linalg.norm(vector)
        if norm == 0:
            raise ValueError("The Hessian-vector product vanished; the loss is flat.")
        eigenvectors.append(vector / norm)
        eigenvalues.append(value)
        flags.append(bool(converged))
        on_value(value)
    return eigenvalues, flags


def _smallest_eigenvalue(hvp, size, steps, tolerance, rng) -> tuple:
    """`(smallest eigenvalue, residual bound, converged)` by Lanczos.

    `steps` Hessian-vector products build a Krylov basis (fully
    re-orthogonalised); the smallest eigenvalue of its tridiagonal matrix
    (its Ritz value) approaches the Hessian's most negative eigenvalue from
    above, much faster than power iteration on a shifted operator, whose
    rate is `1 - gap / (largest - smallest)`. The residual bound
    `beta_m |s_m|` is free: an eigenvalue of the Hessian lies within it of
    the estimate. Written here rather than with `scipy.sparse.linalg.eigsh`
    because ARPACK restarts without a bound on the number of products, and
    each product is a double backward pass: this costs exactly `steps`.
    """
    from scipy.linalg import eigh_tridiagonal

    steps = max(1, min(int(steps), int(size)))
    vector = rng.standard_normal(size)
    vector /= np.linalg.norm(vector)
    basis, alphas, betas = [], [], []
    previous, beta = np.zeros(size), 0.0
    for _ in range(steps):
        basis.append(vector)
        product = hvp(vector)
        alpha = float(vector @ product)
        product = product - alpha * vector - beta * previous
        for found in basis:  # full re-orthogonalisation: no ghost copies
            product -= (found @ product) * found
        alphas.append(alpha)
        beta = float(np.linalg.norm(product))
        betas.append(beta)
        if beta <= 1e-12 * max(abs(alpha), 1.0):  # an invariant subspace
            break
        previous, vector = vector, product / beta
    if len(alphas) == 1:
        values, vectors = np.array(alphas), np.ones((1, 1))
    else:
        values, vectors = eigh_tridiagonal(np.array(alphas), np.array(betas[:-1]))
    smallest = float(values[0])
    residual = float(betas[-1] * abs(vectors[-1, 0]))
    return smallest, residual, residual <= tolerance * max(abs(smallest), 1e-12)


def _by_magnitude(values, flags) -> tuple[list, list]:
    """Eigenvalues sorted by decreasing magnitude, their flags alongside."""
    order = sorted(range(len(values)), key=lambda i: abs(values[i]), reverse=True)
    return [values[i] for i in order], [flags[i] for i in order]


def _check_settings(model, variables, top_k, max_iterations, weight_decay, l2):
    if int(top_k) < 1:
        raise ValueError(f"`top_k` must be >= 1. Received: top_k={top_k}")
    if int(max_iterations) < 1:
        raise ValueError(f"`max_iterations` must be >= 1. Received: {max_iterations}")
    _check_l2(weight_decay, l2)
    variables = list(model.trainable_variables if variables is None else variables)
    if not variables:
        raise ValueError("There are no variables to differentiate with respect to.")
    if not all(getattr(v, "trainable", False) for v in variables):
        raise ValueError("`variables` must be trainable variables of the model.")
    return variables


@export("keras_vit.analysis.hessian_spectrum")
def hessian_spectrum(
    model: keras.Model,
    batches: Iterable,
    loss: Callable | None = None,
    transform: Callable | None = None,
    weight_decay: float = 0.0,
    l2: str = "norm",
    top_k: int = 5,
    num_batches: int | None = None,
    max_iterations: int = 100,
    tolerance: float = 1e-3,
    variables: list | None = None,
    seed: int = 0,
    verbose: int = 1,
    smallest: bool = False,
) -> dict:
    """Top Hessian eigenvalues of every batch, with the loss beside them.

    The authors' protocol (see module): pass the training loss, the
    training's batch augmentation (or batches that are already augmented,
    e.g. one epoch of the training pipeline) and the training's weight
    decay.

    Args:
        model: Any Keras model, run with `training=False`.
        batches: An iterable of `(inputs, targets)` pairs, e.g. a batched
            `tf.data.Dataset` or a list of NumPy pairs. Read once, batch by
            batch.
        loss: `loss(targets, outputs) -> scalar`, the training loss.
            Defaults to cross-entropy on logits (`default_loss`: sparse for
            integer labels, categorical for one-hot or soft targets).
        transform: `transform(inputs, targets) -> (inputs, targets)`,
            applied once to each batch before its Hessian, e.g. a
            `keras_vit.data.BatchMixer` (MixUp/CutMix on one-hot targets).
        weight_decay: Factor of the L2 term. The authors' protocol: the
            weight decay of the training (0.05 in their configs). Defaults
            to 0 (no L2 term).
        l2: `"norm"` (default, the authors' `ops/norm.py`) or `"squared"`;
            see `l2_term`.
        top_k: Eigenvalues per batch. Defaults to 5.
        num_batches: Batches to take from `batches`; `None` (default): all.
        max_iterations: Power iterations per eigenvalue. Defaults to 100
            (PyHessian's).
        tolerance: Stop when the Rayleigh quotient changes by less than this
            fraction. Defaults to 1e-3 (PyHessian's).
        variables: Trainable variables to differentiate with respect to
            (e.g. one block's, to save memory). Defaults to
            `model.trainable_variables`. The L2 term always sums over all
            trainable variables.
        seed: Seed of the random starting vectors.
        verbose: 1 shows a `keras.utils.Progbar`, 0 is silent.
        smallest: Also measure each batch's most negative (smallest)
            eigenvalue directly, by `max_iterations` Lanczos steps, so that
            models whose top eigenvalues differ in size are compared on the
            negative side like with like. The top-k by magnitude only
            show a negative eigenvalue when it outweighs the positive ones.

    Returns:
        A dict with `"eigenvalues"` (`(batches, top_k)`, each row sorted by
        decreasing magnitude, float64), `"converged"` (`(batches, top_k)`
        bools, in the same order: whether the power iteration of that
        eigenvalue reached `tolerance` before `max_iterations`; an
        unconverged one is the last iterate's Rayleigh quotient), `"loss"`
        (`(batches,)`, the loss of each (transformed) batch including the
        L2 term), `"data_loss"` (`(batches,)`, without it), `"l2"` (float,
        the L2 term), `"batch_sizes"` (`(batches,)`), `"mean_loss"` (float,
        the loss averaged over images), `"l2_max_curvature"` (the largest
        eigenvalue the L2 term alone contributes, see `l2_max_curvature`),
        and the settings `"weight_decay"`, `"l2_form"` and `"top_k"`. With
        `smallest`, also `"smallest"` (`(batches,)`, the smallest
        eigenvalue's Lanczos estimate, an upper bound of it),
        `"smallest_residual"` (`(batches,)`, a bound on its distance to an
        eigenvalue) and `"smallest_converged"` (`(batches,)`, the residual
        within `tolerance` of it).

    Example:

    ```python
    spectrum = hessian_spectrum(
        model, train_batches,  # one epoch of augmented training batches
        loss=keras.losses.CategoricalCrossentropy(from_logits=True,
                                                  label_smoothing=0.1),
        weight_decay=0.05)
    spectrum["eigenvalues"], spectrum["mean_loss"]
    ```
    """
    variables = _check_settings(
        model, variables, top_k, max_iterations, weight_decay, l2
    )
    hvp = _HessianVectorProduct(
        model, loss or default_loss, variables, weight_decay, l2
    )
    if int(top_k) > hvp.size:
        raise ValueError(f"`top_k`={top_k} exceeds the {hvp.size} parameters.")
    rng = np.random.default_rng(seed)
    known = _known_length(batches, num_batches)
    progbar = keras.utils.Progbar(
        None if known is None else known * int(top_k),
        verbose=verbose,
        stateful_metrics=["eigenvalue"],
        unit_name="eigenvalue",
    )

    def on_value(value):
        progbar.add(1, values=[("eigenvalue", value)])

    eigenvalues, converged, data_losses, sizes = [], [], [], []
    bottom = []  # (smallest, residual, converged) per batch
    l2_value = 0.0
    for batch in _iter_batches(batches, num_batches, transform):
        data, penalty = hvp.losses(*batch)
        data_losses.append(float(data))
        l2_value = float(penalty)
        sizes.append(int(batch[0].shape[0]))
        values, flags = _by_magnitude(
            *_top_eigenvalues(
                lambda vector, batch=batch: hvp(batch, vector),
                hvp.size,
                int(top_k),
                int(max_iterations),
                tolerance,
                rng,
                on_value,
            )
        )
        eigenvalues.append(values)
        converged.append(flags)
        if smallest:
            bottom.append(
                _smallest_eigenvalue(
                    lambda vector, batch=batch: hvp(batch, vector),
                    hvp.size,
                    int(max_iterations),
                    tolerance,
                    rng,
                )
            )
    data_losses, sizes = np.asarray(data_losses), np.asarray(sizes)
    losses = data_losses + l2_value
    extremes = {}
    if smallest:
        low, residual, done = zip(*bottom, strict=True)
        extremes = {
            "smallest": np.asarray(low, dtype="float64"),
            "smallest_residual": np.asarray(residual, dtype="float64"),
            "smallest_converged": np.asarray(done, dtype=bool),
        }
    return {
        "l2_max_curvature": l2_max_curvature(variables, weight_decay, l2),
        "eigenvalues": np.asarray(eigenvalues, dtype="float64"),
        "converged": np.asarray(converged, dtype=bool),
        "loss": losses,
        "data_loss": data_losses,
        "l2": l2_value,
        "batch_sizes": sizes,
        "mean_loss": float((losses * sizes).sum() / sizes.sum()),
        "weight_decay": float(weight_decay),
        "l2_form": l2,
        "top_k": int(top_k),
        **extremes,
    }


def _known_length(batches, num_batches):
    try:
        length = len(batches)
    except TypeError:
        length = None
    if length is not None and length < 0:  # tf.data with unknown cardinality
        length = None
    if num_batches is None:
        return length
    return int(num_batches) if length is None else min(int(num_batches), length)


@export("keras_vit.analysis.hessian_eigenvalues")
def hessian_eigenvalues(
    model: keras.Model,
    batches: Iterable,
    loss: Callable | None = None,
    top_k: int = 5,
    num_batches: int | None = None,
    per_batch: bool = True,
    max_iterations: int = 100,
    tolerance: float = 1e-3,
    variables: list | None = None,
    seed: int = 0,
    verbose: int = 1,
    transform: Callable | None = None,
    weight_decay: float = 0.0,
    l2: str = "norm",
) -> np.ndarray:
    """Top eigenvalues of the loss Hessian, by power iteration with deflation.

    The eigenvalues of `hessian_spectrum` alone (see it and the module for
    the authors' protocol), or, with `per_batch=False`, those of the mean
    loss over the batches.

    Args:
        model: Any Keras model (run with `training=False`).
        batches: An iterable of `(inputs, targets)` pairs, e.g. a batched
            `tf.data.Dataset` or a list of NumPy pairs.
        loss: `loss(targets, outputs) -> scalar`. Defaults to cross-entropy
            on logits (`default_loss`).
        top_k: Eigenvalues per Hessian. Defaults to 5.
        num_batches: How many batches to take from `batches`; `None`
            (default): all, the authors' protocol.
        per_batch: `True` (default): one Hessian per batch (Park & Kim's
            spectra). `False`: the Hessian of the mean loss over the batches
            (all held in memory).
        max_iterations: Power iterations per eigenvalue. Defaults to 100.
        tolerance: Stop when the Rayleigh quotient changes by less than this
            fraction. Defaults to 1e-3.
        variables: Trainable variables to differentiate with respect to.
            Defaults to `model.trainable_variables`.
        seed: Seed of the random starting vectors.
        verbose: 1 shows a `keras.utils.Progbar`, 0 is silent.
        transform: Batch augmentation, applied once per batch.
        weight_decay: Factor of the L2 term. Defaults to 0.
        l2: `"norm"` (default) or `"squared"`; see `l2_term`.

    Returns:
        `(num_batches, top_k)` with `per_batch`, else `(top_k,)`: eigenvalues
        sorted by decreasing magnitude (float64). When the two extreme
        eigenvalues have nearly equal magnitudes and opposite signs, power
        iteration converges slowly; raise `max_iterations`.

    Example:

    ```python
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(16)
    spectrum = hessian_eigenvalues(model, data, top_k=3, num_batches=4)
    ```
    """
    if per_batch:
        return hessian_spectrum(
            model, batches, loss=loss, transform=transform,
            weight_decay=weight_decay, l2=l2, top_k=top_k,
            num_batches=num_batches, max_iterations=max_iterations,
            tolerance=tolerance, variables=variables, seed=seed, verbose=verbose,
        )["eigenvalues"]  # fmt: skip
    variables = _check_settings(
        model, variables, top_k, max_iterations, weight_decay, l2
    )
    taken = list(_iter_batches(batches, num_batches, transform))
    hvp = _HessianVectorProduct(
        model, loss or default_loss, variables, weight_decay, l2
    )
    if int(top_k) > hvp.size:
        raise ValueError(f"`top_k`={top_k} exceeds the {hvp.size} parameters.")
    progbar = keras.utils.Progbar(
        int(top_k),
        verbose=verbose,
        stateful_metrics=["eigenvalue"],
        unit_name="eigenvalue",
    )

    def mean_hvp(vector):
        return sum(hvp(batch, vector) for batch in taken) / len(taken)

    values, _ = _top_eigenvalues(
        mean_hvp,
        hvp.size,
        int(top_k),
        int(max_iterations),
        tolerance,
        np.random.default_rng(seed),
        lambda value: progbar.add(1, values=[("eigenvalue", value)]),
    )
    return np.asarray(sorted(values, key=abs, reverse=True), dtype="float64")


def hessian_vector_product_seconds(
    model: keras.Model,
    batch,
    loss: Callable | None = None,
    weight_decay: float = 0.0,
    l2: str = "norm",
    repeats: int = 1,
) -> float:
    """Seconds one power iteration of `hessian_spectrum` takes on `batch`.

    One Hessian-vector product on the model and batch (about two backward
    passes), timed after a first call that traces it: what each of the
    `top_k x max_iterations` iterations of a batch costs at most, to plan a
    long measurement.

    Args:
        model: Any Keras model (run with `training=False`).
        batch: One `(inputs, targets)` pair.
        loss: The training loss; defaults to `default_loss`.
        weight_decay: Factor of the L2 term.
        l2: `"norm"` or `"squared"`; see `l2_term`.
        repeats: Timed products; their mean is returned.

    Returns:
        Seconds per Hessian-vector product (wall time).
    """
    variables = _check_settings(model, None, 1, 1, weight_decay, l2)
    hvp = _HessianVectorProduct(
        model, loss or default_loss, variables, weight_decay, l2
    )
    inputs, targets = _check_pair(batch)
    pair = (tf.convert_to_tensor(inputs), tf.convert_to_tensor(targets))
    vector = np.random.default_rng(0).standard_normal(hvp.size)
    vector /= np.linalg.norm(vector)
    hvp(pair, vector)  # Traced here, not timed.
    started = time.perf_counter()
    for _ in range(max(int(repeats), 1)):
        product = hvp(pair, vector)
        float(vector @ product)  # The Rayleigh quotient, as an iteration.
    return (time.perf_counter() - started) / max(int(repeats), 1)
