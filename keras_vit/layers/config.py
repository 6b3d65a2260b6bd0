"""Public speed switches: which of two equivalent code paths the layers take.

Each switch picks between a faster formulation and the plain Keras op for
one computation. Both paths compute the same function; they differ in
rounding only (the tolerances are listed per switch and in
`docs/performance.md`, "Speed switches"). A switch is resolved, in order,
from:

1. the value given to its setter (`set_fused_attention(True)`) or context
   manager (`with fused_attention(False): ...`);
2. its environment variable (`KERAS_VIT_FUSED_ATTENTION=0` or `1`; also
   `true`/`false`, `yes`/`no`, `on`/`off`; empty means unset);
3. its default for the Keras backend in use.

The layers read the switches each time they are called, so a change takes
effect at the next eager call or the next trace. A function already traced
(a `tf.function`, a compiled `model.fit` step, an exported SavedModel) keeps
the path it was traced with: set the switch before the first call. The
state is process-wide and not thread-local.

| switch | environment variable | TensorFlow | JAX, PyTorch |
|---|---|---|---|
| `fused_attention` | `KERAS_VIT_FUSED_ATTENTION` | off | on |
| `bfloat16_softmax` | `KERAS_VIT_BFLOAT16_SOFTMAX` | on | on |
| `closed_form_layer_norm` | `KERAS_VIT_CLOSED_FORM_LAYER_NORM` | on | off |
| `erf_gelu` | `KERAS_VIT_ERF_GELU` | on | on |
| `recompute_activations` | `KERAS_VIT_RECOMPUTE_ACTIVATIONS` | on | off |

`recompute_activations` is the one switch that does not change rounding: it
trades a little time for memory (the attention probabilities and the MLP's
GELU output are computed again in the backward pass instead of being kept).

Example:

>>> keras_vit.layers.use_fused_attention()  # TensorFlow backend
False
>>> with keras_vit.layers.fused_attention(True):
...     y = model(x)  # through `keras.ops.dot_product_attention`
>>> keras_vit.layers.set_closed_form_layer_norm(False)  # Keras' own op
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable
from collections.abc import Iterator

import keras

from keras_vit._export import export

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def _on_tensorflow() -> bool:
    return keras.backend.backend() == "tensorflow"


def _off_tensorflow() -> bool:
    return keras.backend.backend() != "tensorflow"


def _always() -> bool:
    return True


@dataclasses.dataclass
class _Switch:
    """One switch: an explicit value, else its environment variable, else
    its backend default."""

    name: str
    env: str
    default: Callable[[], bool]
    value: bool | None = None

    def get(self) -> bool:
        if self.value is not None:
            return self.value
        raw = os.environ.get(self.env, "")
        word = raw.strip().lower()
        if not word:
            return self.default()
        if word in _TRUE:
            return True
        if word in _FALSE:
            return False
        raise ValueError(f"{self.env} must be 0 or 1. Received: {self.env}={raw!r}")

    def set(self, enable: bool | None) -> None:
        if enable is not None and not isinstance(enable, bool):
            raise TypeError(
                f"set_{self.name}: `enable` must be True, False or None. "
                f"Received: enable={enable!r}"
            )
        self.value = enable

    @contextlib.contextmanager
    def temporarily(self, enable: bool | None) -> Iterator[None]:
        previous = self.value
        self.set(enable)
        try:
            yield
        finally:
            self.value = previous


_FUSED_ATTENTION = _Switch(
    "fused_attention", "KERAS_VIT_FUSED_ATTENTION", _off_tensorflow
)
_BFLOAT16_SOFTMAX = _Switch("bfloat16_softmax", "KERAS_VIT_BFLOAT16_SOFTMAX", _always)
_CLOSED_FORM_LAYER_NORM = _Switch(
    "closed_form_layer_norm", "KERAS_VIT_CLOSED_FORM_LAYER_NORM", _on_tensorflow
)
_ERF_GELU = _Switch("erf_gelu", "KERAS_VIT_ERF_GELU", _always)
_RECOMPUTE_ACTIVATIONS = _Switch(
    "recompute_activations", "KERAS_VIT_RECOMPUTE_ACTIVATIONS", _on_tensorflow
)
_SWITCHES = (
    _FUSED_ATTENTION,
    _BFLOAT16_SOFTMAX,
    _CLOSED_FORM_LAYER_NORM,
    _ERF_GELU,
    _RECOMPUTE_ACTIVATIONS,
)


# --- fused attention ----------------------------------------------------------


@export("keras_vit.layers.use_fused_attention")
def use_fused_attention() -> bool:
    """Whether `MultiHeadSelfAttention` calls `keras.ops.dot_product_attention`.

    On: when no attention scores are requested and no attention dropout is
    active, the attention core is `keras.ops.dot_product_attention`, which
    reaches fused (flash) kernels on JAX and PyTorch. Off: explicit
    head-major einsums and a softmax, which on TensorFlow save four
    transposes (+5-6% for a ViT-B/16 forward pass on the CPU). Outputs agree
    within 1e-5 in float32. Defaults to on except on TensorFlow;
    environment variable `KERAS_VIT_FUSED_ATTENTION`.

    Returns:
        The switch's current value.
    """
    return _FUSED_ATTENTION.get()


@export("keras_vit.layers.set_fused_attention")
def set_fused_attention(enable: bool | None) -> None:
    """Sets `use_fused_attention()`; `None` returns to the environment/default.

    Example:

    >>> keras_vit.layers.set_fused_attention(True)
    """
    _FUSED_ATTENTION.set(enable)


@export("keras_vit.layers.fused_attention")
def fused_attention(enable: bool | None) -> contextlib.AbstractContextManager:
    """Context manager: `set_fused_attention(enable)`, restored on exit.

    Example:

    >>> with keras_vit.layers.fused_attention(False):
    ...     y = layer(x)
    """
    return _FUSED_ATTENTION.temporarily(enable)


# --- bfloat16 softmax ---------------------------------------------------------


@export("keras_vit.layers.use_bfloat16_softmax")
def use_bfloat16_softmax() -> bool:
    """Whether the attention softmax of a bfloat16 model runs in bfloat16.

    Applies to the explicit attention path under a bfloat16 compute dtype
    when no attention scores are requested (scores are always float32). On:
    no casts of the `(B, H, N, N)` logits, +7% for a ViT-Ti/16 bfloat16
    training step on TensorFlow (oneDNN's bfloat16 softmax accumulates in
    float32). Off: the softmax in float32, as for every other dtype. The
    forward values are the same (float32's probabilities rounded to
    bfloat16); the backward pass rounds more (0.28% instead of 0.14% mean
    relative error of the logits' gradient against float64). Defaults to
    on; environment variable `KERAS_VIT_BFLOAT16_SOFTMAX`.

    Returns:
        The switch's current value.
    """
    return _BFLOAT16_SOFTMAX.get()


@export("keras_vit.layers.set_bfloat16_softmax")
def set_bfloat16_softmax(enable: bool | None) -> None:
    """Sets `use_bfloat16_softmax()`; `None` returns to the environment/default.

    Example:

    >>> keras_vit.layers.set_bfloat16_softmax(False)
    """
    _BFLOAT16_SOFTMAX.set(enable)


@export("keras_vit.layers.bfloat16_softmax")
def bfloat16_softmax(enable: bool | None) -> contextlib.AbstractContextManager:
    """Context manager: `set_bfloat16_softmax(enable)`, restored on exit.

    Example:

    >>> with keras_vit.layers.bfloat16_softmax(False):
    ...     y = model(x)
    """
    return _BFLOAT16_SOFTMAX.temporarily(enable)


# --- closed-form LayerNorm gradient -------------------------------------------


@export("keras_vit.layers.use_closed_form_layer_norm")
def use_closed_form_layer_norm() -> bool:
    """Whether `LayerNorm` in training uses its closed-form gradient.

    On: a training call computes the normalization in float32 with a
    hand-written backward pass, `dx = (g - mean(g) - x_hat * mean(g * x_hat))
    / sigma`, 20-30% less time per layer norm and +4% for a ViT-Ti/16
    bfloat16 training step on TensorFlow. Off: Keras' op, differentiated by
    the backend. Values agree within 2e-6 and gradients within 1e-4 in
    float32; inference calls always use Keras' op. Defaults to on for
    TensorFlow only (XLA on JAX fuses Keras' op anyway, and Keras calls
    PyTorch's fused `layer_norm`); environment variable
    `KERAS_VIT_CLOSED_FORM_LAYER_NORM`.

    Returns:
        The switch's current value.
    """
    return _CLOSED_FORM_LAYER_NORM.get()


@export("keras_vit.layers.set_closed_form_layer_norm")
def set_closed_form_layer_norm(enable: bool | None) -> None:
    """Sets `use_closed_form_layer_norm()`; `None` returns to the default.

    Example:

    >>> keras_vit.layers.set_closed_form_layer_norm(False)
    """
    _CLOSED_FORM_LAYER_NORM.set(enable)


@export("keras_vit.layers.closed_form_layer_norm")
def closed_form_layer_norm(enable: bool | None) -> contextlib.AbstractContextManager:
    """Context manager: `set_closed_form_layer_norm(enable)`, restored on exit.

    Example:

    >>> model.compile(optimizer="adamw", loss="mse")  # a fresh train step
    >>> with keras_vit.layers.closed_form_layer_norm(False):
    ...     model.fit(x, y)  # traced, and kept, with Keras' op
    """
    return _CLOSED_FORM_LAYER_NORM.temporarily(enable)


# --- float32-erf GELU in training ---------------------------------------------


@export("keras_vit.layers.use_erf_gelu")
def use_erf_gelu() -> bool:
    """Whether the exact GELU in training is computed with a float32 `erf`.

    On: in a training call, `x * (1 + erf(x / sqrt(2))) / 2` with the `erf`
    in float32, +5-7% for a ViT-S/16 or Ti/16 bfloat16 training step on
    TensorFlow (whose `gelu` uses a slow bfloat16 `erfc`). Off:
    `keras.ops.gelu` in training too. The two agree within 5e-7 in float32;
    inference calls and the tanh approximation always use `keras.ops.gelu`.
    Defaults to on; environment variable `KERAS_VIT_ERF_GELU`.

    Returns:
        The switch's current value.
    """
    return _ERF_GELU.get()


@export("keras_vit.layers.set_erf_gelu")
def set_erf_gelu(enable: bool | None) -> None:
    """Sets `use_erf_gelu()`; `None` returns to the environment/default.

    Example:

    >>> keras_vit.layers.set_erf_gelu(False)
    """
    _ERF_GELU.set(enable)


@export("keras_vit.layers.erf_gelu")
def erf_gelu(enable: bool | None) -> contextlib.AbstractContextManager:
    """Context manager: `set_erf_gelu(enable)`, restored on exit.

    Example:

    >>> model.compile(optimizer="adamw", loss="mse")  # a fresh train step
    >>> with keras_vit.layers.erf_gelu(False):
    ...     model.fit(x, y)  # traced, and kept, with `keras.ops.gelu`
    """
    return _ERF_GELU.temporarily(enable)


# --- attention probabilities recomputed in the backward pass -------------------


@export("keras_vit.layers.use_recompute_activations")
def use_recompute_activations() -> bool:
    """Whether training recomputes cheap activations instead of keeping them.

    On, a training call keeps fewer tensors for the backward pass, which
    computes them again from what it keeps:

    - the attention probabilities `softmax(q k^T)` (of the explicit attention
      core: no scores returned, no attention dropout, `fused_attention` off);
    - the MLP's GELU output, which the second dense layer's kernel gradient
      needs (exact GELU with `erf_gelu` on, no MLP dropout, and a plain float
      `mlp_dense_2`: no LoRA, no quantization; see
      `keras_internals.plain_dense_weights`).

    For a ViT-S/16 step at batch 32 on TensorFlow: 0.36 GB and 0.46 GB less
    peak memory, for about 3% of the step's time (docs/performance.md).
    Gradients are the same either way: the same ops on the same inputs.
    Defaults to on with TensorFlow, off with JAX and PyTorch (whose
    compilers and fused kernels make their own choices); environment
    variable `KERAS_VIT_RECOMPUTE_ACTIVATIONS`.

    Returns:
        The switch's current value.
    """
    return _RECOMPUTE_ACTIVATIONS.get()


@export("keras_vit.layers.set_recompute_activations")
def set_recompute_activations(enable: bool | None) -> None:
    """Sets `use_recompute_activations()`; `None` returns to the environment/default.

    Example:

    >>> keras_vit.layers.set_recompute_activations(False)  # speed over memory
    """
    _RECOMPUTE_ACTIVATIONS.set(enable)


@export("keras_vit.layers.recompute_activations")
def recompute_activations(enable: bool | None) -> contextlib.AbstractContextManager:
    """Context manager: `set_recompute_activations(enable)`, restored on exit.

    Example:

    >>> model.compile(optimizer="adamw", loss="mse")  # a fresh train step
    >>> with keras_vit.layers.recompute_activations(False):
    ...     model.fit(x, y)  # traced, and kept, with the activations stored
    """
    return _RECOMPUTE_ACTIVATIONS.temporarily(enable)


@export("keras_vit.layers.speed_switches")
def speed_switches() -> dict[str, bool]:
    """The current value of every switch, e.g. to record with a benchmark.

    Returns:
        `{"fused_attention": ..., "bfloat16_softmax": ...,
        "closed_form_layer_norm": ..., "erf_gelu": ...,
        "recompute_activations": ...}`.

    Example:

    >>> keras_vit.layers.speed_switches()["closed_form_layer_norm"]
    True
    """
    return {switch.name: switch.get() for switch in _SWITCHES}
