"""Every use of a Keras implementation detail, in one place.

keras_vit relies on a few behaviours that Keras does not document as public
API. Each one lives here, with a probe in `tests/test_keras_internals.py`
that fails loudly, naming the installed Keras version, when a Keras release
changes the assumption.

- The HDF5 layout of `.weights.h5` files (and of the `model.weights.h5`
  inside a `.keras` archive): each layer's variables sit in a group
  `.../layers/<key>/vars` whose `name` attribute is the layer name, the
  variables numbered `"0"`, `"1"`, ... in `save_own_variables` order, and
  the variables of a sublayer in a nested group named after the attribute
  that holds it. `read_saved_layers` reads it without building a model, so
  that a file can be checked against a model before anything is assigned.
- The optimizer's clipping step (`ClipGradientsHook`): `apply_gradients`
  calls `self._clip_gradients(grads)` once per update, in each replica's
  context under a TensorFlow distribution strategy, before the replicas'
  gradients are summed.
- Variables whose allocation Keras defers (`deferred_variables`): a variable
  created in `keras.StatelessScope(initialize_variables=False)` waits on
  the global list `"uninitialized_variables"` of
  `keras.src.backend.common.global_state`, and the next symbolic call
  outside a stateless scope allocates every variable on it. The test suite
  uses this to keep parameter-count tests from allocating full-size models
  later.
- `model.fit` under a multi-worker strategy (keras-team/keras#20585,
  `build_for_fit` and `logs_with_batch_axis`): `Trainer._symbolic_build`
  builds the model, its compiled loss and metrics and the optimizer from
  one batch; TensorFlow's `fit` and `evaluate` first call the instance's
  `_maybe_symbolic_build`; and the TensorFlow trainer averages each step's
  logs across workers with `strategy.reduce("MEAN", value, axis=0)`.

- A built layer's locked state (`state_unlocked`): Keras locks a layer's
  variable tracker (`layer._tracker`) when `build` returns; `add_weight`
  afterwards raises unless it is unlocked, as `Dense.enable_lora` and
  Keras's wrapper of `quantize` do for the variables they add.
- The quantized flag (`mark_quantized`): Keras reads `layer._is_quantized`
  to refuse quantizing a layer twice and to tell whether assigning a
  quantized `dtype_policy` to a built layer must call `layer.quantize`.
  Keras then calls the public `layer.quantized_call(...)` instead of
  `layer.call(...)` (`Operation.__call__`), the hook the fused attention
  layer overrides.
- Every sublayer of a model (`flatten_layers`): Keras's
  `_flatten_layers(include_self=True, recursive=True)`, the walk that
  `model.quantize` itself makes.
- The kernel variable of a `keras.layers.Dense` (`dense_kernel_variable`):
  the variable named `"kernel"`; with LoRA enabled `Dense.kernel` is the
  merged tensor, not that variable.
- When `Dense.call` is one matmul and a bias add (`plain_dense_weights`): a
  float `Dense` with exactly the variables `kernel` and `bias`, a linear
  activation and no LoRA, quantization, regularizer or constraint. The
  block's hand-written GELU-then-dense backward pass bypasses `Dense.call`
  only then.
- A variable's slot in an optimizer (`optimizer_variable_index`): Keras's
  `Optimizer._get_variable_index(variable)`, the position of the variable
  in the list the optimizer was built with.

Checked against Keras's source history: all of them hold from Keras 3.8 (the
first release in the pinned range) to 3.15; `pyproject.toml` pins the
tested range.
"""

from __future__ import annotations

import contextlib
import dataclasses

import keras
import numpy as np


@dataclasses.dataclass
class SavedLayer:
    """The variables Keras saved for one layer, and those of its sublayers.

    Attributes:
        name: The layer name (the `name` attribute of its `vars` group).
        values: Its own variables, in `save_own_variables` order.
        children: `{attribute name: SavedLayer}` for each saved sublayer.
    """

    name: str
    values: list[np.ndarray]
    children: dict[str, SavedLayer]


def read_saved_layers(store) -> dict[str, list[SavedLayer]]:
    """Maps each saved layer's name to what was saved for it, at any depth.

    Args:
        store: An open `h5py.File` (or group) of a Keras weights file.

    Returns:
        `{layer name: [SavedLayer, ...]}`; a name saved more than once (two
        nested models with a layer of the same name) has several entries.
    """
    found: dict[str, list[SavedLayer]] = {}

    def visit(group):
        for key, child in group.items():
            if not hasattr(child, "items"):
                continue
            if key == "layers":
                for layer_group in child.values():
                    vars_group = layer_group.get("vars")
                    if vars_group is not None and "name" in vars_group.attrs:
                        name = vars_group.attrs["name"]
                        name = name.decode() if isinstance(name, bytes) else str(name)
                        found.setdefault(name, []).append(
                            _saved_layer(name, layer_group)
                        )
                    visit(layer_group)
            elif key not in ("vars", "optimizer"):
                visit(child)

    visit(store)
    return found


def _saved_layer(name: str, group) -> SavedLayer:
    vars_group = group.get("vars")
    values = []
    if vars_group is not None:
        values = [np.asarray(vars_group[str(i)]) for i in range(len(vars_group))]
    children = {
        key: _saved_layer(key, child)
        for key, child in group.items()
        if key not in ("vars", "layers") and hasattr(child, "items")
    }
    return SavedLayer(name, values, children)


def own_variables(layer: keras.layers.Layer) -> list[keras.Variable]:
    """The layer's own variables (not its sublayers'), in saving order.

    This is the order in which Keras numbers them in a weights file; it is
    read from `save_own_variables` itself, which stores the variables.
    """
    store: dict = {}
    layer.save_own_variables(store)
    return [store[str(i)] for i in range(len(store))]


def _missing(owner: str, name: str) -> RuntimeError:
    return RuntimeError(
        f"Keras {keras.__version__} has no {owner}.{name}, which keras_vit "
        "relies on (see keras_vit/keras_internals.py); install a Keras in the "
        "range pinned in keras_vit's pyproject.toml."
    )


# --- the optimizer's clipping step --------------------------------------------


class ClipGradientsHook:
    """Mixin for a Keras optimizer: `clip_gradients` replaces Keras's clipping.

    Keras applies `clipnorm`, `global_clipnorm` or `clipvalue` in a private
    step, `_clip_gradients(grads)`, that `apply_gradients` calls once per
    update, before the weight decay and the update. This mixin routes that
    step to `clip_gradients(grads)`, which a subclass overrides; the default
    is Keras's own clipping. Put it before the Keras optimizer in the bases.

    Example:

    ```python
    class NoClipping(ClipGradientsHook, keras.optimizers.SGD):
        def clip_gradients(self, grads):
            return grads
    ```
    """

    def _clip_gradients(self, grads):
        return self.clip_gradients(grads)

    def clip_gradients(self, grads: list) -> list:
        """Keras's clipping: `clipnorm`, `global_clipnorm` or `clipvalue`.

        Args:
            grads: One gradient (or `None`) per trainable variable.

        Returns:
            The clipped gradients, in the same order.
        """
        return super()._clip_gradients(grads)


# --- model.fit under a multi-worker strategy (keras-team/keras#20585) ---------


def build_for_fit(model: keras.Model, data_batch) -> None:
    """Builds the model for `fit` from one batch; `fit` then skips its build.

    Builds the model, its compiled loss and metrics and its optimizer with
    Keras's `_symbolic_build(data_batch=...)`, and replaces this instance's
    `_maybe_symbolic_build` (which TensorFlow's `fit` and `evaluate` call
    first, and which cannot reduce a nested distributed batch across
    workers) with a no-op. Call it under the strategy's scope.

    Args:
        model: A compiled model.
        data_batch: One undistributed `(inputs, targets)` batch.

    Raises:
        RuntimeError: If the installed Keras lacks either method.
    """
    for name in ("_symbolic_build", "_maybe_symbolic_build"):
        if not callable(getattr(model, name, None)):
            raise _missing("keras.Model", name)
    model._symbolic_build(data_batch=data_batch)
    model._maybe_symbolic_build = _already_built


def _already_built(iterator=None, data_batch=None):
    return None


def logs_with_batch_axis(model: keras.Model) -> None:
    """Makes this model's train and test steps return each log as shape `(1,)`.

    TensorFlow's trainer averages each step's logs across workers with
    `strategy.reduce("MEAN", value, axis=0)`, which fails on the scalar
    metric values; with a leading axis of length 1 that reduction returns
    the scalars again.

    Args:
        model: The model whose `train_step` and `test_step` are wrapped (this
            instance only).
    """
    model.train_step = _with_batch_axis(model.train_step)
    model.test_step = _with_batch_axis(model.test_step)


def _with_batch_axis(step):
    def wrapped(data):
        logs = step(data)
        return keras.tree.map_structure(lambda v: keras.ops.reshape(v, (1,)), logs)

    return wrapped


# --- variables whose allocation Keras defers -----------------------------------

_DEFERRED = "uninitialized_variables"


def deferred_variables() -> list:
    """The variables Keras will allocate at the next symbolic call.

    Variables created in `keras.StatelessScope(initialize_variables=False)`
    are not allocated; Keras keeps them on a global list and allocates all of
    them the next time a layer is called symbolically outside a stateless
    scope (`backend.compute_output_spec`), whatever model that call is for.

    Returns:
        A new list of those variables (empty when there are none).
    """
    from keras.src.backend.common import global_state

    return list(global_state.get_global_attribute(_DEFERRED) or [])


def set_deferred_variables(variables: list) -> None:
    """Replaces Keras's list of variables waiting to be allocated.

    `set_deferred_variables([])` forgets them (they stay unallocated for
    good); restoring an earlier `deferred_variables()` puts them back.
    """
    from keras.src.backend.common import global_state

    global_state.set_global_attribute(_DEFERRED, list(variables))


# --- a built layer's state: variables added after build ---------------------------


@contextlib.contextmanager
def state_unlocked(layer: keras.layers.Layer):
    """Lets a built layer create variables; the lock is restored on exit.

    Keras locks a layer's variable tracker when `build` returns, so that a
    later `add_weight` fails. Keras's own `Dense.enable_lora` unlocks it for
    the adapters; this does the same for a keras_vit layer.

    Args:
        layer: A Keras layer.

    Raises:
        RuntimeError: If the installed Keras has no such tracker.

    Example:

    ```python
    with state_unlocked(layer):
        layer.adapter = layer.add_weight(name="adapter", shape=(8, 2))
    ```
    """
    tracker = getattr(layer, "_tracker", None)
    if not all(callable(getattr(tracker, m, None)) for m in ("lock", "unlock")):
        raise _missing("keras.layers.Layer", "_tracker")
    was_locked = bool(tracker.locked)
    tracker.unlock()
    try:
        yield
    finally:
        if was_locked:
            tracker.lock()


def mark_quantized(layer: keras.layers.Layer) -> None:
    """Tells Keras that the layer's kernels are now quantized.

    Keras's own quantized layers set the flag in their quantized build: Keras
    then refuses to quantize the layer again, and assigning it a quantized
    dtype policy no longer calls `layer.quantize`.
    """
    layer._is_quantized = True


def flatten_layers(layer: keras.layers.Layer) -> list[keras.layers.Layer]:
    """The layer and all of its sublayers at any depth, the layer first.

    The walk `model.quantize` makes (Keras's `_flatten_layers`); unlike
    `model.layers` it reaches the sublayers of each block.
    """
    flatten = getattr(layer, "_flatten_layers", None)
    if not callable(flatten):
        raise _missing("keras.layers.Layer", "_flatten_layers")
    return list(flatten(include_self=True, recursive=True))


# --- keras.layers.Dense ---------------------------------------------------------

# The exact state in which `Dense.call(x)` is `x @ kernel + bias`.
_PLAIN_DENSE_VARIABLES = ["kernel", "bias"]
# Float dtype policies (`FloatDTypePolicy` is Keras's older name, a subclass).
_FLOAT_POLICIES = tuple(
    {
        keras.dtype_policies.DTypePolicy,
        getattr(
            keras.dtype_policies, "FloatDTypePolicy", keras.dtype_policies.DTypePolicy
        ),
    }
)


def dense_kernel_variable(layer: keras.layers.Dense) -> keras.Variable:
    """The kernel variable of a `keras.layers.Dense`, LoRA or not.

    With LoRA enabled `layer.kernel` is the kernel plus the adapters' update
    (a tensor); this is the variable itself, e.g. for its `path`.
    """
    found = [v for v in layer.weights if v.name == "kernel"]
    if len(found) != 1:
        raise _missing(f"keras.layers.Dense {layer.name!r}", "kernel variable")
    return found[0]


def plain_dense_weights(layer, dtype) -> tuple[keras.Variable, keras.Variable] | None:
    """`(kernel, bias)` if calling `layer` on `dtype` inputs is a matmul and a bias add.

    An allow-list of the one state in which a caller may compute
    `x @ cast(kernel) + cast(bias)` instead of calling the layer: an
    instance of `keras.layers.Dense` itself (not a subclass), a float dtype
    policy computing in `dtype`, exactly the variables `kernel` and `bias`,
    a linear activation, no LoRA, no quantization, no regularizer and no
    constraint. Any other state, including one that a later Keras adds,
    gives `None`: call the layer.

    Args:
        layer: Any layer.
        dtype: The dtype of the inputs the caller would multiply.

    Returns:
        The kernel and bias variables, or `None`.
    """
    if type(layer) is not keras.layers.Dense or not layer.built:
        return None
    policy = layer.dtype_policy
    if type(policy) not in _FLOAT_POLICIES or policy.quantization_mode is not None:
        return None
    if layer.compute_dtype != keras.backend.standardize_dtype(dtype):
        return None
    if getattr(layer, "lora_enabled", True) or layer.quantization_mode is not None:
        return None
    if not (layer.use_bias and layer.activation is keras.activations.linear):
        return None
    extras = (
        "kernel_regularizer",
        "bias_regularizer",
        "activity_regularizer",
        "kernel_constraint",
        "bias_constraint",
    )
    if any(getattr(layer, name, True) is not None for name in extras):
        return None
    if [v.name for v in layer.weights] != _PLAIN_DENSE_VARIABLES:
        return None
    kernel, bias = layer.weights
    return kernel, bias


# --- the optimizer's variables ----------------------------------------------------


def optimizer_variable_index(optimizer, variable) -> int:
    """The position of `variable` in the list `optimizer.build` was given.

    Keras's `Optimizer._get_variable_index`, which its own update steps use
    to find a variable's slots (e.g. SGD's momentum); under a TensorFlow
    distribution strategy it maps a replica's variable to its container.
    """
    index = getattr(optimizer, "_get_variable_index", None)
    if not callable(index):
        raise _missing("keras.optimizers.Optimizer", "_get_variable_index")
    return index(variable)
