"""What a panel of analyses will cost, measured before it is run.

The analyses of `keras_vit.parkkim.panel` are a few steps repeated by the
budget of `PanelSettings`: a loss landscape is `landscape_points²` grid
points of `landscape_batches` forward passes each (plus moving the weights
and taking their norms), a Hessian spectrum at most `hessian_batches x
hessian_top_k x hessian_iterations` Hessian-vector products (twice with
`clean_hessian`). `measure` times one of each step on the model itself;
`estimate` multiplies them out; `describe` writes the plan `keras-vit
compare` prints before the long work, with the settings that change it.

Example:

```python
timings = measure(model, batch, loss=loss, weight_decay=0.05)
cost = estimate(settings, timings, hessian_batches_available=520, landscape=True)
cost.total  # seconds, an upper bound for the Hessian
```
"""

from __future__ import annotations

import dataclasses
import math
import textwrap
import time

# The `PanelSettings` fields that set the cost, most costly first.
BUDGET = (
    "landscape_points",
    "landscape_batches",
    "landscape_seeds",
    "hessian_batches",
    "hessian_top_k",
    "hessian_iterations",
    "hessian_batch_size",
    "clean_hessian",
    "images",
    "noise_images",
)
# Passes over the analysed test images (`images`): the feature maps (Fourier
# and variance, about two passes) and the attention distances.
_MAP_PASSES = 3


@dataclasses.dataclass(frozen=True)
class Timings:
    """Seconds of the analyses' steps on one model.

    Attributes:
        forward: One forward pass of a batch (`training=False`).
        hessian_vector_product: One Hessian-vector product on a batch: one
            power iteration.
        move: Moving every weight and taking the norms: a landscape grid
            point besides its forward passes.
        batch_size: Images per batch.
        forward_tracing: Tracing the forward pass (each analysis traces
            its own, once).
        hessian_tracing: Tracing the Hessian-vector product (once per
            Hessian column).
    """

    forward: float
    hessian_vector_product: float
    move: float
    batch_size: int
    forward_tracing: float = 0.0
    hessian_tracing: float = 0.0


@dataclasses.dataclass(frozen=True)
class Estimate:
    """What a panel will take (`estimate`).

    Attributes:
        hessian_batches: Batches whose Hessians are taken.
        hessian_products: Hessian-vector products at most (both columns).
        hessian: Their seconds, at most (an iteration stops once converged).
        landscape_forwards: Forward passes of the landscape (0: none).
        landscape: Their seconds, with moving the weights.
        other: Seconds of the rest: Fourier/variance, noise, distances and
            the test accuracy.
    """

    hessian_batches: int
    hessian_products: int
    hessian: float
    landscape_forwards: int
    landscape: float
    other: float

    @property
    def total(self) -> float:
        return self.hessian + self.landscape + self.other


def measure(model, batch, *, loss, weight_decay: float, l2: str = "norm") -> Timings:
    """Times one forward pass, one Hessian-vector product and one landscape
    move of `model` on `batch` (each after a first, untimed call that traces
    it).

    Args:
        model: The model the analyses will measure (its weights' values do
            not change the time: a freshly built model of the same
            architecture does).
        batch: One `(inputs, targets)` pair of the size the analyses use.
        loss: The training loss of the Hessian.
        weight_decay: The L2 term's factor.
        l2: The L2 term's form (`"norm"` or `"squared"`).
    """
    import keras
    import numpy as np
    import tensorflow as tf

    from keras_vit.analysis.hessian import hessian_vector_product_seconds
    from keras_vit.analysis.landscape import parameter_norms

    inputs = tf.convert_to_tensor(np.asarray(batch[0]))

    @tf.function(reduce_retracing=True)
    def forward(x):
        return model(x, training=False)

    def move():
        for weight in model.weights:
            weight.assign(keras.ops.convert_to_numpy(weight))
        parameter_norms(model)

    first, steady = _seconds(lambda: np.asarray(forward(inputs)))
    started = time.perf_counter()
    product = hessian_vector_product_seconds(
        model, batch, loss=loss, weight_decay=weight_decay, l2=l2
    )
    whole = time.perf_counter() - started  # Traced, then one timed product.
    return Timings(
        forward=steady,
        hessian_vector_product=product,
        move=_seconds(move)[1],
        batch_size=int(inputs.shape[0]),
        forward_tracing=max(first - steady, 0.0),
        hessian_tracing=max(whole - 2 * product, 0.0),
    )


def _seconds(step) -> tuple[float, float]:
    """`(first call, each later call)` of `step` in seconds; the later calls
    repeated while short."""
    started = time.perf_counter()
    step()
    first = time.perf_counter() - started
    calls, started = 0, time.perf_counter()
    while True:
        step()
        calls += 1
        elapsed = time.perf_counter() - started
        if elapsed > 0.2 or calls == 10:
            return first, elapsed / calls


def estimate(
    settings,
    timings: Timings,
    *,
    hessian_batches_available: int,
    landscape: bool,
    test_images: int = 0,
    noise_images: int | None = None,
) -> Estimate:
    """What one panel with `settings` (a `PanelSettings`) will take.

    Args:
        settings: The panel's `PanelSettings`.
        timings: From `measure`, on batches of `settings.hessian_batch_size`.
        hessian_batches_available: Batches in one epoch of the training
            stream (what `hessian_batches=None` takes).
        landscape: Whether this panel draws a landscape.
        test_images: Test images whose accuracy is measured besides (the
            authors' models); 0 for none.
        noise_images: The noise analysis's images (and the accuracy's):
            `settings.noise_images` resolved against the test split; `None`
            for `settings.noise_images` or, when that is `None` too,
            `settings.images`.
    """
    s = settings
    batches = min(s.hessian_batches or hessian_batches_available,
                  hessian_batches_available)  # fmt: skip
    columns = 2 if s.clean_hessian else 1
    # Per batch: the top-k by power iteration and the smallest by as many
    # Lanczos steps; the clean column, the top-k again.
    eigenvalues = s.hessian_top_k + 1 + (s.hessian_top_k if s.clean_hessian else 0)
    products = batches * eigenvalues * s.hessian_iterations
    points = s.landscape_points**2 if landscape else 0
    forwards = points * s.landscape_batches
    per_image = timings.forward / timings.batch_size
    noisy = noise_images or s.noise_images or s.images
    # The clean pass and each band, and the accuracy on the same images.
    noise_passes = 2 + s.noise_frequencies + (6 if s.equal_energy_noise else 0)
    traced = timings.forward_tracing  # Once per analysis.
    return Estimate(
        hessian_batches=batches,
        hessian_products=products,
        hessian=products * timings.hessian_vector_product
        + columns * timings.hessian_tracing,
        landscape_forwards=forwards,
        landscape=forwards * timings.forward
        + points * timings.move
        + (traced if points else 0.0),
        other=(_MAP_PASSES * s.images + noise_passes * noisy + test_images) * per_image
        + 3 * traced,
    )


def describe(rows: list, settings, defaults, training: bool = False) -> list[str]:
    """The plan's lines.

    Args:
        rows: `(title, runs, timings, estimate of one run, runs with a
            landscape)` per model.
        settings: The `PanelSettings` of the command: its budget.
        defaults: The `PanelSettings` of the config class's defaults.
        training: Some model is still to train (not estimated).
    """
    s = settings
    lines = ["plan, timed on each model (the Hessian at most: a power "
             "iteration stops once converged):"]  # fmt: skip
    total = 0.0
    for title, runs, timings, cost, drawn in rows:
        hessian, landscape = cost.hessian * runs, cost.landscape * drawn
        other = cost.other * runs
        total += hessian + landscape + other
        clean = f" + {s.hessian_top_k} clean" if s.clean_hessian else ""
        lines += [
            f"  {title}, {_count(runs, 'run')}: forward pass "
            f"{_short(timings.forward)}, Hessian-vector product "
            f"{_short(timings.hessian_vector_product)} (batches of "
            f"{timings.batch_size})",
            f"    Hessian <= {duration(hessian)}: "
            f"{_count(cost.hessian_batches, 'batch')} x "
            f"{_count(s.hessian_iterations, 'iteration')} x "
            f"({s.hessian_top_k} top + the smallest{clean} eigenvalues) = "
            f"{cost.hessian_products:,} products a run",
        ]
        if drawn:
            lines.append(
                f"    landscape {duration(landscape)}: {s.landscape_points} x "
                f"{s.landscape_points} points x "
                f"{_count(s.landscape_batches, 'batch')} = "
                f"{cost.landscape_forwards:,} forward passes a run, "
                f"{_count(drawn, 'run')}"
            )
        lines.append(
            f"    the rest (Fourier/variance, noise, distances) {duration(other)}"
        )
    lines.append(
        f"  total: at most {duration(total)}" + (" plus training" if training else "")
    )
    knobs = ", ".join(
        f"analysis.{name}={getattr(s, name)!r}"
        + (f" (default {getattr(defaults, name)!r})"
           if getattr(s, name) != getattr(defaults, name) else "")
        for name in BUDGET
    )  # fmt: skip
    return lines + textwrap.wrap(
        f"budget (--set KEY=VALUE; the default where it differs): {knobs}; "
        "hessian_batches=None takes every batch; --help says what each is",
        88,
        subsequent_indent="  ",
    )


def _count(number: int, word: str) -> str:
    plural = word + ("es" if word.endswith("ch") else "s")
    return f"{number} {word if number == 1 else plural}"


def _short(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms" if seconds < 1 else f"{seconds:.3g} s"


def duration(seconds: float) -> str:
    """`"45 s"`, `"12 min"`, `"3.4 h"`."""
    if not math.isfinite(seconds):
        return "?"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 90 * 60:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
