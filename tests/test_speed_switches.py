"""The public speed switches: resolution, parsing, scoping and effect.

Each switch must change which code path a layer runs (seen by a spy on the
op that only one path calls) while the outputs stay within the tolerance
that `keras_vit/layers/config.py` and docs/performance.md state.
"""

from pathlib import Path
from unittest import mock

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_vit import layers
from keras_vit.layers import custom_grads
from keras_vit.layers.transformer_block import gelu

# (name, environment variable, default on the TensorFlow backend)
SWITCHES = [
    ("fused_attention", "KERAS_VIT_FUSED_ATTENTION", False),
    ("bfloat16_softmax", "KERAS_VIT_BFLOAT16_SOFTMAX", True),
    ("closed_form_layer_norm", "KERAS_VIT_CLOSED_FORM_LAYER_NORM", True),
    ("erf_gelu", "KERAS_VIT_ERF_GELU", True),
    ("recompute_activations", "KERAS_VIT_RECOMPUTE_ACTIVATIONS", True),
]
NAMES = [name for name, _, _ in SWITCHES]


@pytest.fixture(autouse=True)
def _clean_switches(monkeypatch):
    for _, env, _ in SWITCHES:
        monkeypatch.delenv(env, raising=False)
    for name in NAMES:
        getattr(layers, f"set_{name}")(None)
    yield
    for name in NAMES:
        getattr(layers, f"set_{name}")(None)


def _get(name):
    return getattr(layers, f"use_{name}")()


def _random(shape, seed=0, scale=1.0):
    return np.random.default_rng(seed).normal(0, scale, shape).astype("float32")


def _randomized(layer, shape):
    layer.build(shape)
    layer.set_weights(
        [_random(w.shape, seed=i, scale=0.3) for i, w in enumerate(layer.weights)]
    )
    return layer


def _gradients(layer, x, **kwargs):
    x = tf.constant(x)
    weights = tf.constant(_random(x.shape, seed=9))
    with tf.GradientTape() as tape:
        tape.watch(x)
        outputs = tf.cast(layer(x, training=True, **kwargs), "float32")
        loss = tf.reduce_sum(outputs * weights)
    grads = tape.gradient(loss, [x, *layer.trainable_variables])
    return [np.asarray(g, "float32") for g in grads]


def _spy(owner, attribute):
    return mock.patch.object(owner, attribute, wraps=getattr(owner, attribute))


# --- resolution: setter, environment, default -------------------------------


def test_defaults_on_tensorflow_are_documented_ones():
    assert layers.speed_switches() == {name: on for name, _, on in SWITCHES}


@pytest.mark.parametrize("name, env, default", SWITCHES)
@pytest.mark.parametrize(
    "raw, expected",
    [("1", True), ("true", True), (" ON ", True), ("yes", True)]
    + [("0", False), ("False", False), ("off", False), ("no", False)],
)
def test_environment_variable_is_read_at_call_time(
    monkeypatch, name, env, default, raw, expected
):
    monkeypatch.setenv(env, raw)
    assert _get(name) is expected
    monkeypatch.setenv(env, "")  # empty means unset
    assert _get(name) is default


@pytest.mark.parametrize("name, env, default", SWITCHES)
def test_bad_environment_value_is_a_one_line_error_naming_the_variable(
    monkeypatch, name, env, default
):
    monkeypatch.setenv(env, "maybe")
    with pytest.raises(ValueError) as error:
        _get(name)
    assert str(error.value) == f"{env} must be 0 or 1. Received: {env}='maybe'"
    # An explicit value wins over the environment, bad or not.
    getattr(layers, f"set_{name}")(not default)
    assert _get(name) is (not default)


def test_bad_environment_value_fails_the_layer_call(monkeypatch):
    layer = _randomized(layers.MultiHeadSelfAttention(num_heads=2), (1, 3, 4))
    monkeypatch.setenv("KERAS_VIT_FUSED_ATTENTION", "2")
    with pytest.raises(ValueError, match="KERAS_VIT_FUSED_ATTENTION must be 0 or 1"):
        layer(_random((1, 3, 4)))


@pytest.mark.parametrize("name, env, default", SWITCHES)
def test_setter_wins_over_environment_and_none_returns_to_it(
    monkeypatch, name, env, default
):
    monkeypatch.setenv(env, "0")
    setter = getattr(layers, f"set_{name}")
    setter(True)
    assert _get(name) is True
    setter(None)
    assert _get(name) is False
    monkeypatch.delenv(env)
    assert _get(name) is default


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("bad", ["1", 1, 0.0, np.bool_(True)])
def test_setter_rejects_non_booleans_and_keeps_the_value(name, bad):
    setter = getattr(layers, f"set_{name}")
    setter(False)
    with pytest.raises(TypeError) as error:
        setter(bad)
    assert str(error.value) == (
        f"set_{name}: `enable` must be True, False or None. Received: enable={bad!r}"
    )
    assert _get(name) is False


@pytest.mark.parametrize("name, env, default", SWITCHES)
def test_context_manager_restores_the_previous_state_on_exception(
    monkeypatch, name, env, default
):
    scope = getattr(layers, name)
    with pytest.raises(RuntimeError, match="inside"):
        with scope(not default):
            assert _get(name) is (not default)
            raise RuntimeError("inside")
    assert _get(name) is default
    # The state restored is "unset", not the value read before: the
    # environment still governs after the block.
    monkeypatch.setenv(env, "0" if default else "1")
    assert _get(name) is (not default)
    # Nested scopes unwind in order; an explicit outer value is kept.
    getattr(layers, f"set_{name}")(True)
    with scope(False):
        with scope(True):
            assert _get(name) is True
        assert _get(name) is False
    assert _get(name) is True


def test_context_manager_rejects_non_booleans_and_changes_nothing():
    with pytest.raises(TypeError, match="set_erf_gelu: `enable`"):
        with layers.erf_gelu("off"):
            pass
    assert layers.use_erf_gelu() is True


# --- each switch picks the code path, outputs within tolerance ---------------


def test_fused_attention_calls_dot_product_attention_only_when_on():
    layer = _randomized(layers.MultiHeadSelfAttention(num_heads=2), (2, 5, 8))
    x = _random((2, 5, 8))
    with _spy(keras.ops, "dot_product_attention") as spy:
        with layers.fused_attention(False):
            explicit = np.asarray(layer(x))
            explicit_grads = _gradients(layer, x)
        assert spy.call_count == 0
        with layers.fused_attention(True):
            fused = np.asarray(layer(x))
            assert spy.call_count == 1
            fused_grads = _gradients(layer, x)
            assert spy.call_count == 2
            layer(x, return_attention_scores=True)  # scores: always explicit
            assert spy.call_count == 2
    np.testing.assert_allclose(fused, explicit, atol=1e-5)
    for got, want in zip(fused_grads, explicit_grads, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_fused_attention_environment_variable_reaches_the_layer(monkeypatch):
    layer = _randomized(layers.MultiHeadSelfAttention(num_heads=2), (2, 5, 8))
    monkeypatch.setenv("KERAS_VIT_FUSED_ATTENTION", "1")
    with _spy(keras.ops, "dot_product_attention") as spy:
        layer(_random((2, 5, 8)))
    assert spy.call_count == 1


def _softmax_dtypes(layer, x):
    dtypes = []
    softmax = keras.ops.softmax

    def recording(logits, axis=-1):
        dtypes.append(keras.backend.standardize_dtype(logits.dtype))
        return softmax(logits, axis=axis)

    with mock.patch.object(keras.ops, "softmax", recording):
        grads = _gradients(layer, x)
    return dtypes, grads


def test_bfloat16_softmax_switch_picks_the_softmax_dtype():
    keras.config.set_dtype_policy("mixed_bfloat16")
    layer = _randomized(layers.MultiHeadSelfAttention(num_heads=2), (2, 17, 32))
    x = _random((2, 17, 32))
    with layers.bfloat16_softmax(True):
        on_dtypes, on_grads = _softmax_dtypes(layer, x)
        on = np.asarray(keras.ops.cast(layer(x), "float32"))
    with layers.bfloat16_softmax(False):
        off_dtypes, off_grads = _softmax_dtypes(layer, x)
        off = np.asarray(keras.ops.cast(layer(x), "float32"))
    # Forward, then the backward pass's recomputation of the probabilities.
    assert on_dtypes == ["bfloat16", "bfloat16"]
    assert off_dtypes == ["float32", "float32"]
    # Forward: float32's probabilities rounded to bfloat16 either way.
    np.testing.assert_allclose(on, off, atol=1e-2 * np.abs(off).max())
    # Backward: bfloat16 rounding, within 2% of each gradient's largest entry.
    for got, want in zip(on_grads, off_grads, strict=True):
        np.testing.assert_allclose(got, want, atol=2e-2 * np.abs(want).max())


def test_bfloat16_softmax_switch_leaves_float32_models_in_float32():
    layer = _randomized(layers.MultiHeadSelfAttention(num_heads=2), (2, 5, 8))
    with layers.bfloat16_softmax(True):
        dtypes, _ = _softmax_dtypes(layer, _random((2, 5, 8)))
    assert dtypes == ["float32", "float32"]


def test_closed_form_layer_norm_switch_picks_the_gradient():
    norm = layers.LayerNorm(epsilon=1e-6)
    norm.build((3, 5, 8))
    norm.set_weights([_random((8,), seed=1), _random((8,), seed=2)])
    x = _random((3, 5, 8), scale=4.0) + 2.0
    with _spy(custom_grads, "layer_norm") as spy:
        with layers.closed_form_layer_norm(True):
            closed = np.asarray(norm(x, training=True))
            closed_grads = _gradients(norm, x)
            assert spy.call_count == 2
            norm(x, training=False)  # inference: Keras' op whatever the switch
            assert spy.call_count == 2
        with layers.closed_form_layer_norm(False):
            keras_values = np.asarray(norm(x, training=True))
            keras_grads = _gradients(norm, x)
        assert spy.call_count == 2
    np.testing.assert_allclose(closed, keras_values, atol=2e-6)
    for got, want in zip(closed_grads, keras_grads, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-5)


def test_erf_gelu_switch_picks_the_training_form():
    x = keras.ops.convert_to_tensor(np.linspace(-6, 6, 101, dtype="float32"))
    with _spy(keras.ops, "erf") as erf, _spy(keras.ops, "gelu") as ops_gelu:
        with layers.erf_gelu(True):
            erf_form = np.asarray(gelu(x, training=True))
            assert (erf.call_count, ops_gelu.call_count) == (1, 0)
            gelu(x, training=False)  # inference: always keras.ops.gelu
            assert (erf.call_count, ops_gelu.call_count) == (1, 1)
        with layers.erf_gelu(False):
            keras_form = np.asarray(gelu(x, training=True))
        assert (erf.call_count, ops_gelu.call_count) == (1, 2)
    np.testing.assert_allclose(erf_form, keras_form, atol=5e-7)


def test_block_gradients_agree_with_every_switch_flipped():
    block = layers.TransformerBlock(num_heads=2, mlp_dim=16)
    block.build((2, 5, 8))
    block.set_weights(
        [_random(w.shape, seed=i, scale=0.5) for i, w in enumerate(block.weights)]
    )
    x = _random((2, 5, 8))
    default = _gradients(block, x)
    flipped = {name: not on for name, _, on in SWITCHES}
    with (
        layers.fused_attention(flipped["fused_attention"]),
        layers.bfloat16_softmax(flipped["bfloat16_softmax"]),
        layers.closed_form_layer_norm(flipped["closed_form_layer_norm"]),
        layers.erf_gelu(flipped["erf_gelu"]),
        layers.recompute_activations(flipped["recompute_activations"]),
    ):
        assert layers.speed_switches() == flipped
        other = _gradients(block, x)
    for got, want in zip(other, default, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-5)


# --- documentation -----------------------------------------------------------


def test_every_switch_is_exported_and_documented():
    doc = (Path(__file__).parents[1] / "docs" / "performance.md").read_text()
    section = doc.split("## Speed switches", 1)[1].split("\n## ", 1)[0]
    for name, env, _ in SWITCHES:
        for public in (name, f"use_{name}", f"set_{name}"):
            assert public in layers.__all__
        assert f"`{env}`" in section, env
        assert f"`{name}`" in section, name
