"""Backward passes that recompute instead of keeping forward tensors alive.

`gelu` (training form) keeps only its input, and the attention core keeps
only q, k and v: their backward passes recompute the CDF and the attention
probabilities. These tests check that the gradients are the true ones, and
that TensorFlow's graph optimiser really keeps the recomputation (it would
otherwise merge it with the forward ops and keep their outputs alive, which
is what `keras_vit.layers.custom_grads.after` prevents).
"""

from unittest import mock

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import tiny_model
from scipy.special import erf
from tensorflow.core.protobuf import config_pb2
from tensorflow.python.grappler import tf_optimizer

from keras_vit import layers
from keras_vit.layers import custom_grads
from keras_vit.layers.transformer_block import gelu


def _random(shape, seed=0, scale=1.0):
    return np.random.default_rng(seed).normal(0, scale, shape).astype("float32")


def _gradients(layer, x, training):
    x = tf.constant(x)
    weights = tf.constant(_random(x.shape, seed=9))
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(tf.cast(layer(x, training=training), "float32") * weights)
    return [np.asarray(g) for g in tape.gradient(loss, [x, *layer.trainable_variables])]


def test_gelu_gradient_is_the_derivative_of_x_phi_x():
    x64 = np.linspace(-8, 8, 401)
    x = tf.constant(x64.astype("float32"))
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = gelu(x, training=True)
    got = np.asarray(tape.gradient(y, x))
    cdf = 0.5 * (1 + erf(x64 / np.sqrt(2)))
    pdf = np.exp(-0.5 * x64**2) / np.sqrt(2 * np.pi)
    np.testing.assert_allclose(np.asarray(y), x64 * cdf, atol=5e-7, rtol=1e-6)
    np.testing.assert_allclose(got, cdf + x64 * pdf, atol=1e-6, rtol=1e-6)


def test_gelu_gradient_in_bfloat16_keeps_the_input_dtype():
    x = tf.constant(np.linspace(-4, 4, 33), "bfloat16")
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = gelu(x, training=True)
    grad = tape.gradient(y, x)
    assert (y.dtype, grad.dtype) == (tf.bfloat16, tf.bfloat16)
    want = np.asarray(grad, "float32")
    x64 = np.asarray(x, "float64")
    exact = 0.5 * (1 + erf(x64 / np.sqrt(2))) + x64 * np.exp(-0.5 * x64**2) / np.sqrt(
        2 * np.pi
    )
    np.testing.assert_allclose(want, exact, atol=1e-2)


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_attention_gradients_equal_the_stored_probabilities_path(policy):
    # training=True recomputes the probabilities in the backward pass;
    # training=False (no dropout here) differentiates the stored ones.
    layer = layers.MultiHeadSelfAttention(num_heads=2, dtype=policy)
    layer.build((2, 17, 32))
    layer.set_weights(
        [_random(w.shape, seed=i, scale=0.3) for i, w in enumerate(layer.weights)]
    )
    x = _random((2, 17, 32))
    with layers.fused_attention(False):
        recomputed = _gradients(layer, x, training=True)
        stored = _gradients(layer, x, training=False)
    # bfloat16 keeps 8 significant bits: 2e-2 of the largest gradient is two
    # units in its last place, the rounding that differs between CPUs with
    # bfloat16 instructions and those without (AVX2).
    tolerance = 1e-6 if policy == "float32" else 2e-2
    for got, want in zip(recomputed, stored, strict=True):
        np.testing.assert_allclose(got, want, atol=tolerance * np.abs(want).max())


def _optimized_op_counts(block, x):
    """Op types of a training step's graph after TensorFlow's optimiser."""

    # The loss weights are an input, as a real loss's gradient is: a constant
    # upstream gradient would let the optimiser fold the ties away.
    @tf.function
    def gradients(x, weights):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(block(x, training=True) * weights)
        return loss, tape.gradient(loss, [x, *block.trainable_variables])

    spec = tf.TensorSpec(x.shape)
    graph = gradients.get_concrete_function(spec, spec).graph
    meta = tf.compat.v1.train.export_meta_graph(
        graph_def=graph.as_graph_def(), graph=graph
    )
    fetches = meta.collection_def["train_op"].node_list.value
    fetches.extend(t.name for t in graph.outputs)
    optimized = tf_optimizer.OptimizeGraph(config_pb2.ConfigProto(), meta)
    counts = {}
    for node in optimized.node:
        counts[node.op] = counts.get(node.op, 0) + 1
    return counts


def test_graph_optimizer_keeps_the_recomputation_apart():
    block = layers.TransformerBlock(num_heads=2, mlp_dim=16)
    block.build((2, 5, 8))
    with layers.fused_attention(False):
        counts = _optimized_op_counts(block, _random((2, 5, 8)))
        # Without the dependency on the upstream gradient, the optimiser merges
        # the recomputed softmax and erf with the forward ones.
        with mock.patch.object(custom_grads, "after", lambda _, *t: t):
            merged = _optimized_op_counts(block, _random((2, 5, 8)))
    softmax = [k for k in counts if "Softmax" in k]
    assert sum(counts[k] for k in softmax) == 2, counts
    assert counts.get("Erf", 0) == 2, counts
    assert sum(merged.get(k, 0) for k in softmax) == 1, merged
    assert merged.get("Erf", 0) == 1, merged


def test_ties_are_zero_even_for_a_nan_or_infinite_gradient():
    x = tf.constant([[1.5, -2.0], [0.0, 3.0]])
    for upstream in ([np.nan, 1.0], [np.inf, 0.0], [-np.inf, 2.0], [0.0, 0.0]):
        (again,) = custom_grads.after(tf.constant(upstream), x)
        np.testing.assert_array_equal(np.asarray(again), np.asarray(x))
        assert float(custom_grads.tied_zero(tf.constant(upstream))) == 0.0


# --- the optimizer built before the first step ----------------------------------


def _compiled(model):
    model.compile(optimizer="adamw", loss="sparse_categorical_crossentropy")
    return model


def _compiled_tiny_vit():
    return _compiled(tiny_model())


def _plain_functional_copy(model):
    """The same graph as a plain `keras.Model` (Keras's own training path)."""
    return keras.Model(model.inputs, model.outputs)


def _traces_of_first_step(model):
    traced = []
    step = type(model).train_step

    def counting(self, data):
        traced.append(1)
        return step(self, data)

    x = np.zeros((2, 32, 32, 3), "float32")
    y = np.zeros((2,), "int32")
    with mock.patch.object(type(model), "train_step", counting):
        model.train_on_batch(x, y)
    return len(traced)


def test_build_optimizer_makes_the_first_step_one_trace():
    from keras_vit.training import build_optimizer

    # Keras alone: the slot variables are created inside the traced step,
    # so TensorFlow traces it twice.
    assert _traces_of_first_step(_compiled(_plain_functional_copy(tiny_model()))) == 2
    model = _compiled(_plain_functional_copy(tiny_model()))
    assert build_optimizer(model) is model
    assert model.optimizer.built
    assert _traces_of_first_step(model) == 1


def test_vit_traces_its_first_step_once_without_build_optimizer():
    # The user's path: compile, then train_on_batch (or fit).
    model = _compiled_tiny_vit()
    assert not model.optimizer.built
    assert _traces_of_first_step(model) == 1
    assert model.optimizer.built
    # Built from the trainable variables of the first step, not of compile:
    # a layer frozen in between gets no slot variables.
    model = _compiled_tiny_vit()
    model.get_layer("head").trainable = False
    assert _traces_of_first_step(model) == 1
    head = {id(v) for v in model.get_layer("head").weights}
    assert not head & {id(v) for v in model.optimizer._trainable_variables}
    # A recompiled model builds its new optimizer the same way.
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    assert _traces_of_first_step(model) == 1


def test_build_optimizer_refuses_an_uncompiled_model():
    from keras_vit.training import build_optimizer

    with pytest.raises(ValueError, match="not compiled"):
        build_optimizer(tiny_model())


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_block_gradients_with_and_without_recomputed_activations(policy):
    block = layers.TransformerBlock(num_heads=2, mlp_dim=16, dtype=policy)
    block.build((2, 5, 8))
    block.set_weights(
        [_random(w.shape, seed=i, scale=0.5) for i, w in enumerate(block.weights)]
    )
    x = _random((2, 5, 8))
    with mock.patch.object(
        custom_grads, "gelu_then_dense", wraps=custom_grads.gelu_then_dense
    ) as fused:
        with layers.recompute_activations(True):
            recomputed = _gradients(block, x, training=True)
        assert fused.call_count == 1
        with layers.recompute_activations(False):
            kept = _gradients(block, x, training=True)
        assert fused.call_count == 1
    # bfloat16 keeps 8 significant bits: 2e-2 of the largest gradient is two
    # units in its last place, the rounding that differs between CPUs with
    # bfloat16 instructions and those without (AVX2).
    tolerance = 1e-6 if policy == "float32" else 2e-2
    for got, want in zip(recomputed, kept, strict=True):
        np.testing.assert_allclose(got, want, atol=tolerance * np.abs(want).max())


@pytest.mark.parametrize(
    "kwargs",
    [{"gelu_approximate": True}, {"dropout_rate": 0.1}, {"mlp": "swiglu"}],
)
def test_gelu_stays_apart_from_the_dense_layer_where_it_must(kwargs):
    block = layers.TransformerBlock(num_heads=2, mlp_dim=16, **kwargs)
    block.build((2, 5, 8))
    with (
        mock.patch.object(custom_grads, "gelu_then_dense") as fused,
        layers.recompute_activations(True),
    ):
        block(_random((2, 5, 8)), training=True)
    assert fused.call_count == 0


# --- which MLP path a training call takes ------------------------------------------
#
# With `recompute_activations` on, the block computes GELU and `mlp_dense_2`
# in one function (`custom_grads.gelu_then_dense`) that reads the layer's
# kernel and bias instead of calling it. Every other state of the layer must
# go through its own call, or its mode (LoRA, quantization) would be dropped.


def _random_block(policy="float32"):
    block = layers.TransformerBlock(num_heads=2, mlp_dim=16, dtype=policy)
    block.build((2, 5, 8))
    block.set_weights(
        [_random(w.shape, seed=i, scale=0.5) for i, w in enumerate(block.weights)]
    )
    return block


def _mlp_branch(block, x, training):
    """The block's MLP branch, and the same computed by calling the layers."""
    _, parts = block(x, training=training, return_intermediates=True)
    y = block.norm_2(parts["after_attention"], training=training)
    hidden = gelu(block.mlp_dense_1(tf.reshape(y, (-1, 8))), training=training)
    expected = block.mlp_dense_2(hidden)  # the layer's own call, whatever its mode
    got = tf.reshape(parts["mlp"], (-1, 8))
    return np.asarray(got, "float32"), np.asarray(tf.cast(expected, "float32"))


def _path_spies(block):
    dense = block.mlp_dense_2
    return (
        mock.patch.object(
            custom_grads, "gelu_then_dense", wraps=custom_grads.gelu_then_dense
        ),
        mock.patch.object(dense, "call", wraps=dense.call),
        mock.patch.object(dense, "quantized_call", wraps=dense.quantized_call),
    )


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_plain_float_mlp_takes_the_fused_path_without_calling_the_dense(policy):
    block = _random_block(policy)
    x = _random((2, 5, 8))
    fused_spy, call_spy, quantized_spy = _path_spies(block)
    with layers.recompute_activations(True), fused_spy as fused:
        with call_spy as call, quantized_spy as quantized:
            block(x, training=True)
    assert (fused.call_count, call.call_count, quantized.call_count) == (1, 0, 0)
    with layers.recompute_activations(True):
        got, expected = _mlp_branch(block, x, training=True)
    tolerance = 1e-5 if policy == "float32" else 2e-2
    np.testing.assert_allclose(got, expected, atol=tolerance * np.abs(expected).max())


def test_lora_mlp_in_training_calls_the_dense_and_trains_its_adapters():
    block = _random_block()
    dense = block.mlp_dense_2
    dense.enable_lora(2)
    dense.lora_kernel_b.assign(_random(dense.lora_kernel_b.shape, seed=7))
    x = _random((2, 5, 8))
    fused_spy, call_spy, _ = _path_spies(block)
    with layers.recompute_activations(True), fused_spy as fused, call_spy as call:
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(block(x, training=True) * _random((2, 5, 8), 9))
        grads = tape.gradient(loss, [dense.lora_kernel_a, dense.lora_kernel_b])
    assert (fused.call_count, call.call_count) == (0, 1)
    for grad in grads:
        assert grad is not None and np.abs(np.asarray(grad)).max() > 1e-3
    with layers.recompute_activations(True):
        got, expected = _mlp_branch(block, x, training=True)
    np.testing.assert_allclose(got, expected, atol=1e-6 * np.abs(expected).max())
    # The adapters change the outputs: a path that dropped them would differ.
    dense.lora_kernel_b.assign(np.zeros(dense.lora_kernel_b.shape, "float32"))
    without, _ = _mlp_branch(block, x, training=True)
    assert np.abs(without - got).max() > 1e-2 * np.abs(got).max()


@pytest.mark.parametrize("mode", ["int8", "int4"])
@pytest.mark.parametrize("training", [True, False])
def test_quantized_mlp_runs_keras_quantized_call(mode, training):
    block = _random_block()
    block.mlp_dense_2.quantize(mode)
    x = _random((2, 5, 8))
    fused_spy, _, quantized_spy = _path_spies(block)
    with layers.recompute_activations(True), fused_spy as fused:
        with quantized_spy as quantized:
            with tf.GradientTape() as tape:
                inputs = tf.constant(x)
                tape.watch(inputs)
                loss = tf.reduce_sum(block(inputs, training=training))
            grad = tape.gradient(loss, inputs)
    assert (fused.call_count, quantized.call_count) == (0, 1)
    assert np.all(np.isfinite(np.asarray(grad)))
    with layers.recompute_activations(True):
        got, expected = _mlp_branch(block, x, training=training)
    # The same quantized call on the same inputs: equal to float32 rounding.
    np.testing.assert_allclose(got, expected, atol=1e-6 * np.abs(expected).max())
