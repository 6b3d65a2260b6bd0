"""Probes of every Keras implementation detail in `keras_vit/keras_internals.py`.

Each test checks one exact assumption against the installed Keras and, when
a Keras release breaks it, fails with a message that names the Keras
version, what changed and which keras_vit function relies on it.
"""

import inspect
import io
import json
import os
import subprocess
import sys
import textwrap
import zipfile
from unittest import mock

import h5py
import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import images
from helpers import randomize
from helpers import tiny_model

from keras_vit import keras_internals
from keras_vit.keras_internals import ClipGradientsHook

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _probe(holds: bool, assumption: str, user: str, where: str | None = None) -> None:
    if not holds:
        where = where or f"keras_vit.keras_internals.{user}"
        pytest.fail(
            f"Keras {keras.__version__}: {assumption} no longer holds; "
            f"{where} relies on it.",
            pytrace=False,
        )


def _parameters(function) -> list[str]:
    return list(inspect.signature(function).parameters)


# --- the HDF5 weights layout (read_saved_layers, own_variables) --------------


@pytest.fixture(scope="module")
def saved():
    keras.config.set_dtype_policy("float32")
    model = tiny_model()
    randomize(model, seed=3)
    return model


def _vars_groups(store) -> dict[str, str]:
    """`{path: name attribute}` of every `.../vars` group in the file."""
    found = {}

    def visit(path, item):
        if path.split("/")[-1] == "vars" and isinstance(item, h5py.Group):
            name = item.attrs.get("name")
            found[path] = name.decode() if isinstance(name, bytes) else name

    store.visititems(visit)
    return found


def _layers_with_variables(model):
    return [layer for layer in model.layers if layer.weights]


def test_weights_file_keeps_each_layer_under_layers_key_vars_with_its_name(
    saved, tmp_path
):
    path = tmp_path / "model.weights.h5"
    saved.save_weights(path)
    with h5py.File(path, "r") as store:
        groups = _vars_groups(store)
        for layer in _layers_with_variables(saved):
            named = [p for p, name in groups.items() if name == layer.name]
            _probe(
                len(named) == 1,
                f"one `vars` group with attribute name={layer.name!r} (found {named})",
                "read_saved_layers",
            )
            parts = named[0].split("/")
            _probe(
                parts[-3] == "layers" and parts[-1] == "vars",
                f"the group path `.../layers/<key>/vars` (found {named[0]!r})",
                "read_saved_layers",
            )
            own = keras_internals.own_variables(layer)
            keys = sorted(store[named[0]].keys(), key=int)
            _probe(
                keys == [str(i) for i in range(len(own))],
                f"variables numbered '0'...'{len(own) - 1}' in {named[0]!r} "
                f"(found {keys})",
                "read_saved_layers",
            )


def _compare_tree(saved_layer, layer, where):
    own = keras_internals.own_variables(layer)
    values = [np.asarray(v) for v in own]
    _probe(
        len(saved_layer.values) == len(values)
        and all(  # The file's datasets, read while it is open.
            a.dataset.shape == b.shape and np.array_equal(a.dataset[()], b)
            for a, b in zip(saved_layer.values, values, strict=False)
        ),
        f"the file's `vars` of {where} in `save_own_variables` order",
        "own_variables",
    )
    count = len(values)
    for key, child in saved_layer.children.items():
        sublayer = getattr(layer, key, None)
        _probe(
            isinstance(sublayer, keras.layers.Layer),
            f"a nested group of {where} named after the attribute holding the "
            f"sublayer (no attribute {key!r})",
            "read_saved_layers",
        )
        count += _compare_tree(child, sublayer, f"{where}.{key}")
    return count


def test_saved_values_follow_own_variables_order_at_every_depth(saved, tmp_path):
    path = tmp_path / "model.weights.h5"
    saved.save_weights(path)
    with h5py.File(path, "r") as store:
        found = keras_internals.read_saved_layers(store)
        for layer in _layers_with_variables(saved):
            _probe(
                len(found.get(layer.name, [])) == 1,
                f"layer {layer.name!r} saved once",
                "read_saved_layers",
            )
            count = _compare_tree(found[layer.name][0], layer, layer.name)
            _probe(
                count == len(layer.weights),
                f"all {len(layer.weights)} variables of {layer.name!r} in its group "
                f"and its sublayers' groups (found {count})",
                "read_saved_layers",
            )


def test_keras_archive_holds_the_same_layout(saved, tmp_path):
    path = tmp_path / "model.keras"
    saved.save(path)
    with zipfile.ZipFile(path) as archive:
        _probe(
            "model.weights.h5" in archive.namelist(),
            "`model.weights.h5` inside a `.keras` archive",
            "read_saved_layers",
        )
        data = io.BytesIO(archive.read("model.weights.h5"))
    with h5py.File(data, "r") as store:
        found = keras_internals.read_saved_layers(store)
        for layer in _layers_with_variables(saved):
            _compare_tree(found[layer.name][0], layer, layer.name)


def test_own_variables_excludes_sublayers_and_matches_save_own_variables(saved):
    block = saved.get_layer("encoderblock_0")
    _probe(
        keras_internals.own_variables(block) == [],
        "a TransformerBlock stores no variables of its own (all in sublayers)",
        "own_variables",
    )
    attention = block.attention
    store = {}
    attention.save_own_variables(store)
    _probe(
        list(store) == [str(i) for i in range(len(store))],
        f"`save_own_variables` keys '0', '1', ... (found {list(store)})",
        "own_variables",
    )
    names = [v.path.split("/")[-1] for v in keras_internals.own_variables(attention)]
    assert names == ["qkv_kernel", "qkv_bias", "out_kernel", "out_bias"]


# --- the optimizer's clipping step (ClipGradientsHook) -------------------------


def test_keras_optimizer_has_the_private_clipping_step():
    clip = getattr(keras.optimizers.Optimizer, "_clip_gradients", None)
    _probe(
        callable(clip) and _parameters(clip) == ["self", "grads"],
        "`Optimizer._clip_gradients(self, grads)`",
        "ClipGradientsHook",
    )


def test_apply_gradients_routes_through_the_clipping_step():
    seen = []

    class Zeroing(ClipGradientsHook, keras.optimizers.SGD):
        def clip_gradients(self, grads):
            seen.append([np.asarray(g) for g in grads])
            return [g * 0 for g in grads]

    w = keras.Variable(np.ones(2, "float32"))
    Zeroing(learning_rate=1.0).apply_gradients([(np.array([3.0, 4.0], "float32"), w)])
    _probe(
        len(seen) == 1 and np.array_equal(seen[0][0], [3.0, 4.0]),
        "`apply_gradients` calls `_clip_gradients(grads)` once per update",
        "ClipGradientsHook",
    )
    _probe(
        np.array_equal(np.asarray(w), [1.0, 1.0]),
        "the update uses what `_clip_gradients` returns",
        "ClipGradientsHook",
    )


def test_default_clip_gradients_is_keras_clipping():
    w = keras.Variable(np.zeros(2, "float32"))

    class Plain(ClipGradientsHook, keras.optimizers.SGD):
        pass

    Plain(learning_rate=1.0, global_clipnorm=1.0).apply_gradients(
        [(np.array([3.0, 4.0], "float32"), w)]
    )
    np.testing.assert_allclose(np.asarray(w), [-0.6, -0.8], rtol=1e-6)


_CLIP_SCRIPT = """
import json
import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2
)
import keras
from keras_vit.training import optimizers


def run(make):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    with strategy.scope():
        w = keras.Variable(np.zeros(2, "float32"), name="w")
        optimizer = make()
        optimizer.build([w])
    per_replica = tf.constant([[3.0, 0.0], [0.0, 4.0]])

    @tf.function
    def step():
        def replica():
            context = tf.distribute.get_replica_context()
            grad = tf.gather(per_replica, context.replica_id_in_sync_group)
            optimizer.apply_gradients([(grad, w)])

        strategy.run(replica)

    step()
    return np.asarray(w).tolist()


print("RESULT " + json.dumps({
    "keras_vit": run(lambda: optimizers.SGD(learning_rate=1.0, global_clipnorm=1.0)),
    "keras": run(lambda: keras.optimizers.SGD(learning_rate=1.0, global_clipnorm=1.0)),
}))
"""


def test_clipping_applies_to_the_gradient_summed_over_replicas():
    # Two CPU replicas with gradients (3, 0) and (0, 4): their sum (3, 4) has
    # norm 5, so clipping it to 1 gives the update (0.6, 0.8). Keras clips
    # each replica's share, (1, 0) + (0, 1): the reason for the override.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND="tensorflow")
    process = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_CLIP_SCRIPT)],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    line = [s for s in process.stdout.splitlines() if s.startswith("RESULT ")][-1]
    out = json.loads(line[len("RESULT ") :])
    _probe(
        np.allclose(out["keras_vit"], [-0.6, -0.8], rtol=1e-6),
        "`_clip_gradients` runs in each replica's context, where an all-reduce "
        f"of the gradients is possible (keras_vit's update: {out['keras_vit']})",
        "ClipGradientsHook",
    )
    _probe(
        np.allclose(out["keras"], [-1.0, -1.0], rtol=1e-6),
        "Keras clips each replica's gradient before the sum (now "
        f"{out['keras']}: the override in training/optimizers.py may be "
        "unnecessary)",
        "ClipGradientsHook",
    )


# --- model.fit under a multi-worker strategy (keras-team/keras#20585) ---------


def _compiled(model=None):
    model = model or tiny_model()
    model.compile(
        optimizer=keras.optimizers.SGD(0.1),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    return model


def _batch():
    x = images(batch=4)
    return x, np.arange(4) % 3


def test_symbolic_build_builds_model_loss_metrics_and_optimizer():
    method = getattr(keras.Model, "_symbolic_build", None)
    _probe(
        callable(method) and "data_batch" in _parameters(method),
        "`Model._symbolic_build(..., data_batch=...)`",
        "build_for_fit",
    )
    model = _compiled(tiny_model(num_classes=3))
    keras_internals.build_for_fit(model, _batch())
    _probe(
        model.built and model.optimizer.built,
        "`_symbolic_build` builds the model and the optimizer",
        "build_for_fit",
    )
    names = [v.path for v in model.metrics_variables]
    _probe(
        {"accuracy/total", "accuracy/count"} <= set(names),
        f"`_symbolic_build` builds the compiled metrics (variables: {names})",
        "build_for_fit",
    )


def test_fit_and_evaluate_call_the_instance_maybe_symbolic_build():
    method = getattr(keras.Model, "_maybe_symbolic_build", None)
    _probe(
        callable(method) and _parameters(method) == ["self", "iterator", "data_batch"],
        "`Model._maybe_symbolic_build(self, iterator=None, data_batch=None)`",
        "build_for_fit",
    )
    model = _compiled(tiny_model(num_classes=3))
    x, y = _batch()
    keras_internals.build_for_fit(model, (x, y))
    spy = mock.Mock(wraps=model._maybe_symbolic_build)
    model._maybe_symbolic_build = spy
    model.fit(x, y, epochs=1, verbose=0)
    model.evaluate(x, y, verbose=0)
    _probe(
        spy.call_count == 2,
        "`fit` and `evaluate` call `self._maybe_symbolic_build` once each "
        f"(called {spy.call_count} times)",
        "build_for_fit",
    )


def test_build_for_fit_refuses_a_keras_without_the_methods_and_changes_nothing():
    model = _compiled(tiny_model(num_classes=3))
    with mock.patch.object(keras.Model, "_maybe_symbolic_build", None):
        with pytest.raises(RuntimeError) as error:
            keras_internals.build_for_fit(model, _batch())
    assert str(error.value) == (
        f"Keras {keras.__version__} has no keras.Model._maybe_symbolic_build, "
        "which keras_vit relies on (see keras_vit/keras_internals.py); install "
        "a Keras in the range pinned in keras_vit's pyproject.toml."
    )
    assert not model.optimizer.built
    assert "_maybe_symbolic_build" not in vars(model)


def test_trainer_averages_multi_worker_logs_over_axis_0():
    from keras.src.backend.tensorflow import trainer as tf_trainer

    for name in ("reduce_per_replica", "_collective_all_reduce_multi_worker"):
        _probe(
            callable(getattr(tf_trainer, name, None)),
            f"`keras.src.backend.tensorflow.trainer.{name}`",
            "logs_with_batch_axis",
        )
    strategy = mock.Mock()
    value = tf.constant([2.0])
    with mock.patch.object(
        tf_trainer, "_collective_all_reduce_multi_worker", return_value=True
    ):
        tf_trainer.reduce_per_replica({"loss": value}, strategy, "auto")
    _probe(
        strategy.reduce.call_args_list == [mock.call("MEAN", value, axis=0)],
        "multi-worker logs reduced by `strategy.reduce('MEAN', value, axis=0)` "
        f"(calls: {strategy.reduce.call_args_list})",
        "logs_with_batch_axis",
    )


def test_logs_with_batch_axis_gives_each_log_one_leading_axis():
    model = _compiled(tiny_model(num_classes=3))
    x, y = _batch()
    keras_internals.build_for_fit(model, (x, y))
    keras_internals.logs_with_batch_axis(model)
    batch = (tf.constant(x), tf.constant(y))
    for logs in (model.train_step(batch), model.test_step(batch)):
        assert set(logs) >= {"loss", "accuracy"}
        assert all(tuple(v.shape) == (1,) for v in logs.values())
        # What the multi-worker reduction does to them: scalars again.
        assert all(tf.reduce_mean(v, axis=0).shape == () for v in logs.values())


def test_deferred_variables_are_those_of_a_stateless_scope_and_can_be_set():
    before = keras_internals.deferred_variables()
    with keras.StatelessScope(initialize_variables=False):
        layer = keras.layers.Dense(3)
        layer.build((None, 2))
    after = keras_internals.deferred_variables()
    try:
        added = [v for v in after if all(v is not b for b in before)]
        assert {id(v) for v in added} == {id(v) for v in layer.weights}, (
            f"Keras {keras.__version__}: variables created in "
            "StatelessScope(initialize_variables=False) are no longer kept on "
            "global_state 'uninitialized_variables'; keras_internals."
            "deferred_variables (used by tests/conftest.py and tests/doc_blocks.py "
            "to stop a later symbolic call from allocating them) must follow."
        )
        keras_internals.set_deferred_variables([])
        assert keras_internals.deferred_variables() == []
    finally:
        keras_internals.set_deferred_variables(before)


# --- a built layer's state (state_unlocked, mark_quantized) -------------------------


def _built_dense(units=3, inputs=2, **kwargs):
    layer = keras.layers.Dense(units, **kwargs)
    layer.build((None, inputs))
    return layer


def test_state_unlocked_lets_a_built_layer_add_tracked_variables():
    layer = _built_dense()
    with pytest.raises(ValueError):
        layer.add_weight(name="extra", shape=(2,))  # Keras locks a built layer.
    with keras_internals.state_unlocked(layer):
        extra = layer.add_weight(name="extra", shape=(2,))
    _probe(
        any(v is extra for v in layer.weights),
        "a variable added while `layer._tracker` is unlocked is tracked",
        "state_unlocked",
    )
    locked = False
    try:
        layer.add_weight(name="more", shape=(2,))
    except ValueError:
        locked = True
    _probe(locked, "`layer._tracker.lock()` locks the state again", "state_unlocked")


def test_state_unlocked_keeps_an_unlocked_state_unlocked_and_refuses_no_tracker():
    class Building(keras.layers.Layer):
        def build(self, input_shape):
            with keras_internals.state_unlocked(self):
                self.a = self.add_weight(name="a", shape=(2,))
            self.b = self.add_weight(name="b", shape=(2,))  # still unlocked

    layer = Building()
    layer.build((None, 2))
    assert [v.name for v in layer.weights] == ["a", "b"]
    with pytest.raises(RuntimeError, match=f"Keras {keras.__version__} has no"):
        with keras_internals.state_unlocked(object()):
            pass


class _Recording(keras.layers.Layer):
    """A layer whose quantize and quantized call only record that they ran."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.quantized = []

    def build(self, input_shape):
        self.kernel = self.add_weight(name="kernel", shape=(input_shape[-1], 2))
        if self.quantization_mode is not None:
            keras_internals.mark_quantized(self)

    def call(self, inputs):
        return keras.ops.matmul(inputs, self.kernel)

    def quantize(self, mode=None, type_check=True, config=None):
        self.quantized.append(mode)
        keras_internals.mark_quantized(self)

    def quantized_call(self, inputs):
        return keras.ops.zeros((inputs.shape[0], 2)) - 1.0


def test_mark_quantized_is_what_keras_reads_before_quantizing_a_layer():
    layer = _Recording()
    layer.build((None, 3))
    layer.dtype_policy = "int8_from_float32"  # a built float layer: quantized
    _probe(
        layer.quantized == ["int8"],
        "assigning a quantized dtype policy to a built layer that is not "
        f"`_is_quantized` calls `layer.quantize(mode)` (calls: {layer.quantized})",
        "mark_quantized",
    )
    marked = _Recording(dtype="int8_from_float32")
    marked.build((None, 3))
    marked.dtype_policy = "int8_from_float32"
    _probe(
        marked.quantized == [],
        "a layer with `_is_quantized = True` is not quantized again when its "
        "dtype policy is assigned",
        "mark_quantized",
    )
    with pytest.raises(ValueError, match="already quantized"):
        marked.quantize("int8")  # Keras's wrapper of `quantize` reads the flag


def test_keras_calls_quantized_call_for_a_layer_with_a_quantized_policy():
    x = np.ones((2, 3), "float32")
    plain, quantized = _Recording(), _Recording(dtype="int8_from_float32")
    _probe(
        np.all(np.asarray(plain(x)) != -1.0)
        and np.array_equal(np.asarray(quantized(x)), -np.ones((2, 2))),
        "`Layer.__call__` runs `quantized_call` instead of `call` when the "
        "layer's dtype policy has a quantization mode",
        "mark_quantized",
        where="MultiHeadSelfAttention.quantized_call (layers/attention_adapters.py)",
    )


# --- every sublayer (flatten_layers) ------------------------------------------------


def test_flatten_layers_reaches_every_sublayer_once():
    model = tiny_model(qk_norm=True)
    found = keras_internals.flatten_layers(model)
    block = model.get_layer("encoderblock_0")
    wanted = [model, block, block.attention, block.attention.query_norm]
    _probe(
        found[0] is model and all(any(f is w for f in found) for w in wanted),
        "`_flatten_layers(include_self=True, recursive=True)` yields the model "
        "first, then every layer at any depth",
        "flatten_layers",
    )
    own = [v for layer in found for v in keras_internals.own_variables(layer)]
    assert sorted(id(v) for v in own) == sorted(id(v) for v in model.weights)
    assert len({id(layer) for layer in found}) == len(found)


# --- keras.layers.Dense (dense_kernel_variable, plain_dense_weights) ------------------


def test_dense_kernel_variable_is_the_variable_under_the_lora_merged_kernel():
    layer = _built_dense(units=4, inputs=3)
    plain = keras_internals.dense_kernel_variable(layer)
    _probe(
        isinstance(plain, keras.Variable) and plain is layer.kernel,
        "`Dense.kernel` is the variable named 'kernel' without LoRA",
        "dense_kernel_variable",
    )
    layer.enable_lora(2, lora_alpha=4)
    layer.lora_kernel_b.assign(np.ones((2, 4), "float32"))
    kernel = keras_internals.dense_kernel_variable(layer)
    merged = np.asarray(kernel) + 2.0 * np.asarray(layer.lora_kernel_a) @ np.ones(
        (2, 4)
    )
    _probe(
        kernel is plain and np.allclose(np.asarray(layer.kernel), merged, atol=1e-6),
        "with LoRA, `Dense.kernel` is the variable plus (alpha / rank) A B",
        "dense_kernel_variable",
    )
    with pytest.raises(RuntimeError, match="kernel variable"):
        keras_internals.dense_kernel_variable(keras.layers.Dropout(0.1))


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_plain_dense_call_is_one_matmul_and_a_bias_add(policy):
    layer = _built_dense(units=4, inputs=3, dtype=policy)
    layer.bias.assign(np.arange(4, dtype="float32"))
    dtype = layer.compute_dtype
    weights = keras_internals.plain_dense_weights(layer, dtype)
    _probe(
        weights is not None and [v.name for v in weights] == ["kernel", "bias"],
        "a built `keras.layers.Dense` has exactly the variables 'kernel' and "
        f"'bias' (found {[v.name for v in layer.weights]})",
        "plain_dense_weights",
    )
    x = keras.ops.convert_to_tensor(np.random.default_rng(0).normal(size=(5, 3)), dtype)
    kernel, bias = (keras.ops.cast(v, dtype) for v in weights)
    by_hand = keras.ops.add(keras.ops.matmul(x, kernel), bias)
    _probe(
        np.array_equal(
            np.asarray(keras.ops.cast(layer(x), "float32")),
            np.asarray(keras.ops.cast(by_hand, "float32")),
        ),
        "`Dense.call` on a plain float Dense is `x @ kernel + bias` in the "
        "compute dtype",
        "plain_dense_weights",
    )


def _dense_states():
    """Dense layers in every state the fused MLP path must not bypass."""

    def lora():
        layer = _built_dense()
        layer.enable_lora(1)
        return layer

    def quantized(mode):
        def make():
            layer = _built_dense(units=4, inputs=4)
            layer.quantize(mode)
            return layer

        return make

    def future_mode():
        # A state a later Keras might add: one more variable that `call` reads.
        layer = _built_dense()
        with keras_internals.state_unlocked(layer):
            layer.add_weight(name="future_scale", shape=(3,))
        return layer

    class Subclass(keras.layers.Dense):
        pass

    def subclass():
        layer = Subclass(3)
        layer.build((None, 2))
        return layer

    return {
        "lora": lora,
        "int8": quantized("int8"),
        "int4": quantized("int4"),
        "float8": quantized("float8"),
        "future_mode": future_mode,
        "subclass": subclass,
        "unbuilt": lambda: keras.layers.Dense(3),
        "relu": lambda: _built_dense(activation="relu"),
        "no_bias": lambda: _built_dense(use_bias=False),
        "regularizer": lambda: _built_dense(kernel_regularizer="l2"),
        "constraint": lambda: _built_dense(bias_constraint="non_neg"),
        "bfloat16_inputs": lambda: _built_dense(dtype="float32"),
    }


@pytest.mark.parametrize("state", sorted(_dense_states()))
def test_plain_dense_weights_refuses_every_other_state(state):
    layer = _dense_states()[state]()
    dtype = "bfloat16" if state == "bfloat16_inputs" else "float32"
    assert keras_internals.plain_dense_weights(layer, dtype) is None


# --- the optimizer's variables (optimizer_variable_index) ----------------------------


def test_optimizer_variable_index_is_the_position_in_the_built_list():
    variables = [
        keras.Variable(np.zeros(n, "float32"), name=f"v{n}") for n in (1, 2, 3)
    ]
    optimizer = keras.optimizers.SGD(momentum=0.9)
    optimizer.build(variables)
    found = [keras_internals.optimizer_variable_index(optimizer, v) for v in variables]
    _probe(
        found == [0, 1, 2],
        f"`Optimizer._get_variable_index` gives the build order (found {found})",
        "optimizer_variable_index",
    )
    with pytest.raises(RuntimeError, match="_get_variable_index"):
        keras_internals.optimizer_variable_index(object(), variables[0])
