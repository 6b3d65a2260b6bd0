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
  that holds it, every group and dataset by one plain (hard) link.
  `read_saved_layers` reads that structure without building a model or
  reading any array, so that each dataset can be checked against a model
  before its data is read and before anything is assigned.
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

import h5py
import keras
import ml_dtypes
import numpy as np
from keras.src.backend.common import global_state

# Keras nests one group per sublayer (keras_vit models are a few levels
# deep); a deeper file is refused rather than walked, so that a hand-made
# file nesting thousands of groups cannot exhaust Python's stack.
_MAX_GROUP_DEPTH = 64
# The attributes read (a layer's name, a variable's dtype) are short
# strings; their declared size is checked before h5py allocates them.
_MAX_ATTRIBUTE_BYTES = 1 << 16


class StoredLayoutError(ValueError):
    """A weights file whose structure is not what Keras writes.

    Raised for a soft, external or user-defined link (Keras writes plain
    hard links only; none is followed), a group reachable twice (a cycle),
    nesting deeper than `_MAX_GROUP_DEPTH` groups, or a `vars` group whose
    entries are not the datasets `"0"`, `"1"`, ... . The message names the
    path in the file.
    """


@dataclasses.dataclass(frozen=True)
class StoredArray:
    """One saved variable: its dataset, found but not read.

    Attributes:
        path: The dataset's path in the file, e.g. `"/layers/dense/vars/0"`.
        dataset: The open `h5py.Dataset`, usable while the file is open;
            none of its data has been read (the caller checks its shape and
            storage first: `keras_vit.weights.formats.keras_h5`).
        dtype: The variable's dtype: the dataset's, or bfloat16 for the
            2-byte opaque data Keras writes for a bfloat16 variable (marked
            by the attribute `dtype="bfloat16"`).
    """

    path: str
    dataset: object
    dtype: np.dtype


@dataclasses.dataclass
class SavedLayer:
    """The variables Keras saved for one layer, and those of its sublayers.

    Attributes:
        name: The layer name (the `name` attribute of its `vars` group).
        values: Its own variables, in `save_own_variables` order, unread.
        children: `{attribute name: SavedLayer}` for each saved sublayer.
    """

    name: str
    values: list[StoredArray]
    children: dict[str, SavedLayer]


def read_saved_layers(store) -> dict[str, list[SavedLayer]]:
    """Maps each saved layer's name to what was saved for it, at any depth.

    Only the file's structure and the layers' names are read; each variable
    is a `StoredArray` whose data the caller reads once it has checked the
    dataset. Links are inspected without being followed.

    Args:
        store: An open `h5py.File` (or group) of a Keras weights file.

    Returns:
        `{layer name: [SavedLayer, ...]}`; a name saved more than once (two
        nested models with a layer of the same name) has several entries.

    Raises:
        StoredLayoutError: see its docstring; nothing has been read then.

    Example:

    ```python
    with h5py.File("model.weights.h5", "r") as store:
        saved = read_saved_layers(store)
        saved["head"][0].values[0].dataset.shape  # (768, 1000)
    ```
    """
    found: dict[str, list[SavedLayer]] = {}
    walked, named = set(), set()  # groups reached, by the walk and by layers

    def visit(group, path, depth):
        for key, where, kind in _members(group, path, walked, depth):
            if kind is not h5py.Group:
                continue
            child = group[key]
            if key == "layers":
                for layer_key, layer_path, layer_kind in _members(
                    child, where, walked, depth + 1
                ):
                    if layer_kind is not h5py.Group:
                        continue
                    layer_group = child[layer_key]
                    name = _layer_name(layer_group, layer_path)
                    if name is not None:
                        found.setdefault(name, []).append(
                            _saved_layer(name, layer_group, layer_path, named, depth)
                        )
                    visit(layer_group, layer_path, depth + 2)
            elif key not in ("vars", "optimizer"):
                visit(child, where, depth + 1)

    visit(store, store.name, 0)
    return found


def stored_datasets(store):
    """Every dataset of a Keras weights file, wherever it sits, unread.

    The whole file is walked (with a list, not recursion), every link
    inspected before it is followed, as `read_saved_layers` does: what
    Keras's loader might read is a subset of this. The datasets are
    yielded one at a time, so that a file of many need not be held open.

    Args:
        store: An open `h5py.File`.

    Yields:
        A `StoredArray` for each dataset.

    Raises:
        StoredLayoutError: see its docstring; nothing has been read then.

    Example:

    ```python
    with h5py.File("model.weights.h5", "r") as store:
        sizes = [a.dataset.shape for a in stored_datasets(store)]
    ```
    """
    seen, pending = set(), [(store, store.name, 0)]
    while pending:
        group, path, depth = pending.pop()
        for key, where, kind in _members(group, path, seen, depth):
            if kind is h5py.Group:
                pending.append((group[key], where, depth + 1))
            elif kind is h5py.Dataset:
                dataset = group[key]
                yield StoredArray(where, dataset, _saved_dtype(dataset, where))


def _members(group, path: str, seen: set, depth: int) -> list[tuple[str, str, type]]:
    """`(key, path, h5py class)` of each member of `group`, links checked.

    Each link's kind is read without following it (a soft or external link
    could lead anywhere, even to a FIFO that blocks the open); only the
    object behind a hard link is looked at, and only its class.
    """
    if depth > _MAX_GROUP_DEPTH:
        raise StoredLayoutError(
            f"'{path}' is nested {depth} groups deep; Keras files nest a few "
            "levels (one per sublayer)"
        )
    if group.id in seen:  # h5py compares object identities (file, address)
        raise StoredLayoutError(
            f"the group '{path}' is reached twice (it is linked into itself or "
            "into two places); Keras links each group once"
        )
    seen.add(group.id)
    members = []
    for key in group.keys():  # the link names only: nothing is followed
        where = f"{path.rstrip('/')}/{key}"
        link = group.get(key, getlink=True)
        if not isinstance(link, h5py.HardLink):
            raise StoredLayoutError(f"'{where}' is {_link_text(link)}")
        members.append((key, where, group.get(key, getclass=True)))
    return members


def _link_text(link) -> str:

    if isinstance(link, h5py.ExternalLink):
        return f"an external link (to '{link.path}' in the file {link.filename!r})"
    if isinstance(link, h5py.SoftLink):
        return f"a soft link (to '{link.path}')"
    return "a user-defined link"


def _layer_name(layer_group, path: str) -> str | None:
    """The `name` attribute of a layer group's `vars` group, or `None`.

    Its declared size is checked before it is read.
    """
    if "vars" not in layer_group:  # looks the link up; follows nothing
        return None
    link = layer_group.get("vars", getlink=True)
    if not isinstance(link, h5py.HardLink):
        raise StoredLayoutError(f"'{path}/vars' is {_link_text(link)}")
    if layer_group.get("vars", getclass=True) is not h5py.Group:
        return None
    vars_group = layer_group["vars"]
    if "name" not in vars_group.attrs:
        return None
    name = _small_attribute(vars_group, "name", f"{path}/vars")
    return name.decode(errors="replace") if isinstance(name, bytes) else str(name)


def _saved_layer(name: str, group, path: str, seen: set, depth: int) -> SavedLayer:

    values, children = [], {}
    for key, where, kind in _members(group, path, seen, depth):
        if kind is not h5py.Group or key == "layers":
            continue
        if key == "vars":
            values = _stored_arrays(group[key], where, seen, depth + 1)
        else:
            children[key] = _saved_layer(key, group[key], where, seen, depth + 1)
    return SavedLayer(name, values, children)


def _stored_arrays(vars_group, path: str, seen: set, depth: int) -> list[StoredArray]:
    """The datasets `"0"`, `"1"`, ... of a `vars` group, in that order."""
    members = _members(vars_group, path, seen, depth)
    keys = sorted(key for key, _, _ in members)
    expected = sorted(str(i) for i in range(len(members)))
    if keys != expected or any(kind is not h5py.Dataset for _, _, kind in members):
        shown = [
            (key, getattr(kind, "__name__", str(kind))) for key, _, kind in members
        ]
        raise StoredLayoutError(
            f"'{path}' holds {shown[:8]}; Keras stores a layer's variables as "
            "the datasets '0', '1', ..."
        )
    arrays = []
    for i in range(len(members)):
        dataset = vars_group[str(i)]
        where = f"{path}/{i}"
        arrays.append(StoredArray(where, dataset, _saved_dtype(dataset, where)))
    return arrays


def _saved_dtype(dataset, path: str) -> np.dtype:
    """The dataset's dtype, or bfloat16 where Keras marked it so.

    Keras writes a bfloat16 variable as 2-byte opaque data and sets the
    dataset's attribute `dtype` to `"bfloat16"` (`H5IOStore.__setitem__`).
    """
    dtype = dataset.dtype
    if dtype.kind != "V" or dtype.itemsize != 2 or "dtype" not in dataset.attrs:
        return dtype
    if _small_attribute(dataset, "dtype", path) in ("bfloat16", b"bfloat16"):
        return np.dtype(ml_dtypes.bfloat16)
    return dtype


def _small_attribute(obj, name: str, path: str):
    """An attribute holding one short string, its declared size checked first
    (h5py allocates an attribute's whole declared size to read it)."""
    attribute = obj.attrs.get_id(name)
    size = attribute.get_storage_size()
    if attribute.shape != () or size > _MAX_ATTRIBUTE_BYTES:
        raise StoredLayoutError(
            f"the attribute {name!r} of '{path}' has shape {attribute.shape} and "
            f"{size} bytes; Keras stores one short string"
        )
    return obj.attrs[name]


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
    return list(global_state.get_global_attribute(_DEFERRED) or [])


def set_deferred_variables(variables: list) -> None:
    """Replaces Keras's list of variables waiting to be allocated.

    `set_deferred_variables([])` forgets them (they stay unallocated for
    good); restoring an earlier `deferred_variables()` puts them back.
    """
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
