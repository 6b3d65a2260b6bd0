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

Checked against Keras's source history: all of them hold from Keras 3.6 (the
`name` attribute of the `vars` groups) to 3.15; `pyproject.toml` pins the
tested range.
"""

from __future__ import annotations

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
