"""Top eigenvalues of the loss Hessian (Park & Kim, ICLR 2022, Fig. 1c and 4).

Park & Kim compare the "Hessian max-eigenvalue spectra" of ViTs and CNNs:
the top eigenvalues of the training loss's Hessian, estimated on several
mini-batches. Multi-head self-attention flattens the landscape (eigenvalues
near 0), and negative eigenvalues betray non-convexity.

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
batches small (8 to 32 images) for large models, or restrict `variables`.
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Iterable

import keras
import numpy as np
import tensorflow as tf


def _take_batches(batches, num_batches: int | None) -> list:
    taken = []
    for batch in batches:
        if num_batches is not None and len(taken) >= num_batches:
            break
        if not isinstance(batch, (tuple, list)) or len(batch) < 2:
            raise ValueError(
                "Each batch must be a pair (inputs, targets); received "
                f"{type(batch).__name__}."
            )
        taken.append((tf.convert_to_tensor(batch[0]), tf.convert_to_tensor(batch[1])))
    if not taken:
        raise ValueError("`batches` yielded no batch.")
    return taken


class _HessianVectorProduct:
    """`v -> H v` for a model's loss on one batch, with flat NumPy vectors."""

    def __init__(self, model, loss_fn, variables):
        self.variables = list(variables)
        self.shapes = [tuple(v.shape) for v in self.variables]
        self.sizes = [int(np.prod(shape)) for shape in self.shapes]
        self.size = int(sum(self.sizes))

        @tf.function(reduce_retracing=True)
        def product(inputs, targets, vector):
            # Both tapes watch the trainable variables the model reads.
            with tf.GradientTape() as outer:
                with tf.GradientTape() as inner:
                    loss = loss_fn(targets, model(inputs, training=False))
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

        self._product = product

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
    eigenvalues, eigenvectors = [], []
    for _ in range(top_k):
        vector = rng.standard_normal(size)
        value = None
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
        on_value(value)
    return eigenvalues


def hessian_eigenvalues(
    model: keras.Model,
    batches: Iterable,
    loss: Callable | None = None,
    top_k: int = 5,
    num_batches: int | None = 4,
    per_batch: bool = True,
    max_iterations: int = 50,
    tolerance: float = 1e-4,
    variables: list | None = None,
    seed: int = 0,
    verbose: int = 1,
) -> np.ndarray:
    """Top eigenvalues of the loss Hessian, by power iteration with deflation.

    Args:
        model: Any Keras model (for a ViT, dropout is off: `training=False`).
        batches: An iterable of `(inputs, targets)` pairs, e.g. a batched
            `tf.data.Dataset` or a list of NumPy pairs.
        loss: `loss(targets, outputs) -> scalar`. Defaults to sparse
            categorical cross-entropy on logits (what `keras_vit.ViT`
            outputs by default).
        top_k: Eigenvalues per Hessian. Defaults to 5.
        num_batches: How many batches to take from `batches` (`None`: all).
            Defaults to 4.
        per_batch: `True` (default): one Hessian per batch (Park & Kim's
            spectra). `False`: the Hessian of the mean loss over the batches.
        max_iterations: Power iterations per eigenvalue. Defaults to 50.
        tolerance: Stop when the Rayleigh quotient changes by less than this
            fraction. Defaults to 1e-4.
        variables: Trainable variables to differentiate with respect to
            (e.g. one block's, to save memory). Defaults to
            `model.trainable_variables`.
        seed: Seed of the random starting vectors.
        verbose: 1 shows a `keras.utils.Progbar`, 0 is silent.

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
    if int(top_k) < 1:
        raise ValueError(f"`top_k` must be >= 1. Received: top_k={top_k}")
    if int(max_iterations) < 1:
        raise ValueError(f"`max_iterations` must be >= 1. Received: {max_iterations}")
    variables = list(model.trainable_variables if variables is None else variables)
    if not variables:
        raise ValueError("There are no variables to differentiate with respect to.")
    if not all(getattr(v, "trainable", False) for v in variables):
        raise ValueError("`variables` must be trainable variables of the model.")
    if loss is None:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    taken = _take_batches(batches, num_batches)
    hvp = _HessianVectorProduct(model, loss, variables)
    if int(top_k) > hvp.size:
        raise ValueError(f"`top_k`={top_k} exceeds the {hvp.size} parameters.")
    rng = np.random.default_rng(seed)
    groups = [[batch] for batch in taken] if per_batch else [taken]
    progbar = keras.utils.Progbar(
        len(groups) * int(top_k),
        verbose=verbose,
        stateful_metrics=["eigenvalue"],
        unit_name="eigenvalue",
    )

    def on_value(value):
        progbar.add(1, values=[("eigenvalue", value)])

    results = []
    for group in groups:

        def group_hvp(vector, group=group):
            return sum(hvp(batch, vector) for batch in group) / len(group)

        values = _top_eigenvalues(
            group_hvp,
            hvp.size,
            int(top_k),
            int(max_iterations),
            tolerance,
            rng,
            on_value,
        )
        results.append(sorted(values, key=abs, reverse=True))
    results = np.asarray(results, dtype="float64")
    return results if per_batch else results[0]
