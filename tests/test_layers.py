"""Behaviour and numbers of each layer, checked against NumPy."""

from pathlib import Path

import keras
import numpy as np
import pytest
import reference
from helpers import assert_config_is_constructor_args
from helpers import images

from keras_vit import layers
from keras_vit.layers.transformer_block import gelu
from keras_vit.parkkim import layers as parkkim_layers

FIXTURES = Path(__file__).parent / "fixtures"


def _random(shape, seed=0, scale=1.0):
    return np.random.default_rng(seed).normal(0, scale, shape).astype("float32")


# --- PatchEmbedding ---------------------------------------------------------


def test_patch_embedding_matches_reference_on_non_square_images():
    layer = layers.PatchEmbedding(hidden_dim=6, patch_size=(4, 2))
    x = images(batch=2, size=(8, 6))
    layer.build(x.shape)
    kernel, bias = _random((4, 2, 3, 6)), _random((6,), 1)
    layer.set_weights([kernel, bias])
    expected, grid = reference.patch_embed(x.astype("float64"), kernel, bias)
    assert grid == (2, 3)
    np.testing.assert_allclose(layer(x), expected, atol=1e-5)


def test_patch_embedding_shapes_with_unknown_batch():
    layer = layers.PatchEmbedding(8, 4)
    symbolic = layer(keras.KerasTensor((None, 16, 12, 3)))
    assert symbolic.shape == (None, 12, 8)
    assert layer.compute_output_shape((None, 16, 12, 3)) == (None, 12, 8)


def test_patch_embedding_rejects_indivisible_images():
    with pytest.raises(ValueError, match=r"height \(30\) is not divisible .* \(8\)"):
        layers.PatchEmbedding(8, 8)(np.zeros((1, 30, 32, 3), "float32"))


def test_patch_embedding_rejects_wrong_channel_count_once_built():
    layer = layers.PatchEmbedding(8, 4)
    layer(np.zeros((1, 8, 8, 3), "float32"))
    with pytest.raises(ValueError, match="incompatible"):
        layer(np.zeros((1, 8, 8, 1), "float32"))


def test_patch_embedding_rejects_bad_patch_size():
    with pytest.raises(ValueError, match="patch_size"):
        layers.PatchEmbedding(8, (4, 0))


# --- ClassToken and AddPositionEmbedding ------------------------------------


def test_class_token_is_prepended_and_zero_initialised():
    layer = layers.ClassToken()
    x = _random((3, 5, 4))
    out = keras.ops.convert_to_numpy(layer(x))
    assert out.shape == (3, 6, 4)
    np.testing.assert_array_equal(out[:, 0], 0.0)
    np.testing.assert_array_equal(out[:, 1:], x)
    layer.set_weights([np.arange(4, dtype="float32").reshape(1, 1, 4)])
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(layer(x))[2, 0], [0, 1, 2, 3]
    )
    assert layer.compute_output_shape((None, None, 4)) == (None, None, 4)
    assert layer.compute_output_shape((None, 5, 4)) == (None, 6, 4)


def test_position_embedding_adds_table_and_checks_length():
    layer = layers.AddPositionEmbedding(grid_size=(2, 3))
    x = _random((2, 7, 4))
    out = keras.ops.convert_to_numpy(layer(x))
    np.testing.assert_allclose(out, x + layer.embedding.numpy(), atol=1e-6)
    std = layer.embedding.numpy().std()
    assert 0.005 < std < 0.05  # normal(0.02) initialisation
    with pytest.raises(ValueError, match="expects 7 tokens"):
        layers.AddPositionEmbedding(grid_size=(2, 3))(_random((2, 6, 4)))


def test_position_embedding_resampled_keeps_class_row():
    layer = layers.AddPositionEmbedding(grid_size=(2, 2))
    layer.build((None, 5, 3))
    table = _random((1, 5, 3))
    layer.set_weights([table])
    new = layer.resampled((3, 3))
    assert new.shape == (1, 10, 3)
    np.testing.assert_array_equal(new[0, 0], table[0, 0])
    grid = new[0, 1:].reshape(3, 3, 3)
    old = table[0, 1:].reshape(2, 2, 3)
    np.testing.assert_allclose(grid[0, 0], old[0, 0], atol=1e-6)  # corners aligned
    np.testing.assert_allclose(grid[1, 1], old.mean(axis=(0, 1)), atol=1e-6)


# --- attention and the Transformer block -------------------------------------


def _reference_block_params(dim=8, heads=2, mlp=16, seed=0, qkv_bias=True):
    params = reference.make_vit_checkpoint(
        hidden_dim=dim,
        depth=1,
        mlp_dim=mlp,
        num_heads=heads,
        patch_size=4,
        image_size=(8, 8),
        seed=seed,
        qkv_bias=qkv_bias,
    )
    return params


def _set_block(block, params):
    p = "Transformer/encoderblock_0/"
    mha = p + "MultiHeadDotProductAttention_1/"
    block.norm_1.set_weights(
        [params[p + "LayerNorm_0/scale"], params[p + "LayerNorm_0/bias"]]
    )
    qkv = ("query", "key", "value")
    attention = [np.stack([params[mha + n + "/kernel"] for n in qkv], 1)]
    if block.attention.qkv_bias is not None:
        attention.append(np.stack([params[mha + n + "/bias"] for n in qkv], 0))
    block.attention.set_weights(
        [*attention, params[mha + "out/kernel"], params[mha + "out/bias"]]
    )
    block.norm_2.set_weights(
        [params[p + "LayerNorm_2/scale"], params[p + "LayerNorm_2/bias"]]
    )
    block.mlp_dense_1.set_weights(
        [params[p + "MlpBlock_3/Dense_0/kernel"], params[p + "MlpBlock_3/Dense_0/bias"]]
    )
    block.mlp_dense_2.set_weights(
        [params[p + "MlpBlock_3/Dense_1/kernel"], params[p + "MlpBlock_3/Dense_1/bias"]]
    )


@pytest.mark.parametrize("gelu_approximate", [False, True])
def test_transformer_block_matches_reference(gelu_approximate):
    params = _reference_block_params()
    block = layers.TransformerBlock(
        num_heads=2, mlp_dim=16, gelu_approximate=gelu_approximate
    )
    x = _random((2, 5, 8))
    block.build(x.shape)
    _set_block(block, params)
    gelu = "tanh" if gelu_approximate else "exact"
    expected, _ = reference.encoder_block(
        x.astype("float64"), params, 0, num_heads=2, gelu=gelu
    )
    np.testing.assert_allclose(block(x), expected, atol=1e-5)
    # Training computes the exact GELU another way (see `layers.gelu`).
    np.testing.assert_allclose(block(x, training=True), expected, atol=1e-5)
    other = "exact" if gelu_approximate else "tanh"
    wrong, _ = reference.encoder_block(
        x.astype("float64"), params, 0, num_heads=2, gelu=other
    )
    assert np.abs(np.asarray(block(x)) - wrong).max() > 1e-5  # the switch matters


def test_attention_scores_path_equals_fused_path_and_reference():
    params = _reference_block_params()
    block = layers.TransformerBlock(num_heads=2, mlp_dim=16)
    x = _random((2, 5, 8))
    block.build(x.shape)
    _set_block(block, params)
    fast = block(x)
    slow, scores = block(x, return_attention_scores=True)
    np.testing.assert_allclose(fast, slow, atol=1e-5)
    assert scores.shape == (2, 2, 5, 5)
    np.testing.assert_allclose(np.asarray(scores).sum(-1), 1.0, atol=1e-5)
    normed = reference.layer_norm(
        x.astype("float64"),
        params["Transformer/encoderblock_0/LayerNorm_0/scale"],
        params["Transformer/encoderblock_0/LayerNorm_0/bias"],
    )
    _, expected_scores = reference.attention(
        normed,
        params,
        "Transformer/encoderblock_0/MultiHeadDotProductAttention_1",
        num_heads=2,
        return_weights=True,
    )
    np.testing.assert_allclose(scores, expected_scores, atol=1e-5)


@pytest.mark.parametrize("training", [False, True])
def test_block_without_qkv_bias_matches_reference(training):
    params = _reference_block_params(qkv_bias=False)
    assert not [k for k in params if k.endswith(("query/bias", "value/bias"))]
    block = layers.TransformerBlock(num_heads=2, mlp_dim=16, qkv_bias=False)
    x = _random((2, 5, 8))
    block.build(x.shape)
    attention = block.attention
    assert attention.qkv_bias is None
    assert [w.name for w in attention.weights] == [
        "qkv_kernel",
        "out_kernel",
        "out_bias",
    ]
    _set_block(block, params)
    expected, _ = reference.encoder_block(
        x.astype("float64"), params, 0, num_heads=2, gelu="exact"
    )
    np.testing.assert_allclose(block(x, training=training), expected, atol=1e-5)
    out, scores = attention(_random((2, 5, 8)), return_attention_scores=True)
    assert out.shape == (2, 5, 8) and scores.shape == (2, 2, 5, 5)


def test_qkv_bias_false_has_the_parameter_count_of_park_and_kim_vit_ti():
    # Park & Kim's CIFAR ViT-Ti block (xxxnell/how-do-vits-work at 020e1cd,
    # models/attentions.py `Transformer` with `to_qkv = nn.Linear(dim,
    # 3 * inner, bias=False)`; models/vit.py `tiny`: dim 192, 3 heads of 64,
    # MLP 768): 2 LayerNorms 4 * 192, qkv 192 * 576, out 192 * 192 + 192,
    # MLP 192 * 768 + 768 + 768 * 192 + 192.
    counts = {}
    for qkv_bias in (False, True):
        block = layers.TransformerBlock(3, 768, qkv_bias=qkv_bias)
        block.build((None, 257, 192))
        counts[qkv_bias] = block.count_params()
    assert counts[False] == 4 * 192 + 192 * 576 + 192 * 193 + 192 * 768 * 2 + 960
    assert counts[False] == 444_288
    assert counts[True] - counts[False] == 3 * 192


def test_keras_file_saved_before_the_attention_split_gives_its_outputs():
    # Saved by the code at 9e6c203 (tests/fixtures/make_attention_keras_fixture.py):
    # plain, qk_norm, LoRA (merged), int8, int4 and LoRA-on-int8 attention.
    model = keras.saving.load_model(FIXTURES / "attention_layers_9e6c203.keras")
    with np.load(FIXTURES / "attention_layers_9e6c203.npz") as data:
        x, expected, unmerged = data["inputs"], data["outputs"], data["before_save"]
    # The outputs were computed on another CPU, whose matmul kernels add in
    # another order: equal to float32 rounding (7e-7 on an AMD Zen 3, the
    # largest output 3.9), far from the outputs before the LoRA layers were
    # merged on saving (0.02 apart).
    tolerance = dict(rtol=1e-5, atol=2e-6 * np.abs(expected).max())
    np.testing.assert_allclose(model(x, training=False), expected, **tolerance)
    assert not np.allclose(unmerged, expected, **tolerance)
    assert model.get_layer("qk_norm").attention.qk_norm
    assert model.get_layer("lora").lora_enabled
    assert model.get_layer("int8").attention.quantization_mode == "int8"
    assert model.get_layer("int4").mlp_dense_2.quantization_mode == "int4"
    assert model.get_layer("int8_lora").quantization_mode == "int8"
    assert model.get_layer("int8_lora").qkv_bias.shape == (3, 2, 4)


def test_attention_rejects_heads_not_dividing_width():
    with pytest.raises(ValueError, match="not divisible by num_heads=3"):
        layers.MultiHeadSelfAttention(3)(_random((1, 4, 8)))


def test_block_is_deterministic_at_inference_and_stochastic_in_training():
    block = layers.TransformerBlock(
        num_heads=2,
        mlp_dim=16,
        dropout_rate=0.3,
        attention_dropout_rate=0.3,
        drop_path_rate=0.3,
    )
    x = _random((4, 5, 8))
    np.testing.assert_array_equal(block(x, training=False), block(x, training=False))
    assert (
        np.abs(
            np.asarray(block(x, training=True)) - np.asarray(block(x, training=False))
        ).max()
        > 1e-3
    )


def test_drop_path_drops_whole_examples_and_rescales():
    layer = layers.DropPath(0.5, seed=1)
    x = np.ones((64, 3, 2), "float32")
    out = keras.ops.convert_to_numpy(layer(x, training=True))
    per_example = out.reshape(64, -1)
    assert set(np.unique(per_example)) <= {0.0, 2.0}
    assert np.all(per_example.min(1) == per_example.max(1))  # all or nothing
    assert 10 < (per_example[:, 0] == 0).sum() < 54
    np.testing.assert_array_equal(layer(x, training=False), x)


def test_pooling_modes():
    x = np.arange(24, dtype="float32").reshape(2, 3, 4)
    np.testing.assert_array_equal(layers.TokenPooling("token")(x), x[:, 0])
    np.testing.assert_array_equal(layers.TokenPooling("gap")(x), x[:, 1:].mean(1))
    np.testing.assert_array_equal(
        layers.TokenPooling("gap", num_prefix_tokens=0)(x), x.mean(1)
    )
    with pytest.raises(ValueError, match="needs a class token"):
        layers.TokenPooling("token", num_prefix_tokens=0)
    with pytest.raises(ValueError, match="mode"):
        layers.TokenPooling("max")


def test_std_conv_standardises_and_matches_reference():
    layer = layers.StdConv2D(4, 3, strides=2)
    x = images(batch=1, size=(9, 7))
    layer.build(x.shape)
    kernel = _random((3, 3, 3, 4)) + 0.5
    layer.set_weights([kernel])
    w = np.asarray(layer.standardized_kernel())
    np.testing.assert_allclose(w.mean((0, 1, 2)), 0, atol=1e-5)
    np.testing.assert_allclose(w.std((0, 1, 2)), 1, atol=1e-3)
    expected = reference.std_conv(x.astype("float64"), kernel, stride=2)
    np.testing.assert_allclose(layer(x), expected, atol=1e-4)
    assert layer.compute_output_shape((None, 9, 7, 3)) == (None, 5, 4, 4)


# --- configs and precision ----------------------------------------------------

ALL_LAYERS = [
    layers.PatchEmbedding(16, (4, 2)),
    layers.TokenGrid(5, (16, 8)),
    layers.ClassToken(),
    layers.AddPositionEmbedding((2, 3), num_prefix_tokens=0),
    layers.AddPositionEmbedding(
        (2, 3), dynamic=True, patch_size=(4, 2), resample_method="timm"
    ),
    layers.MultiHeadSelfAttention(4, attention_dropout_rate=0.1),
    layers.TransformerBlock(4, 32, 0.1, 0.1, 0.2, 1e-5, True),
    layers.TransformerBlock(4, 32, layer_scale_init=1e-5, qk_norm=True, mlp="swiglu"),
    layers.MultiHeadSelfAttention(4, qk_norm=True),
    layers.MultiHeadSelfAttention(4, qkv_bias=False),
    layers.MultiHeadSelfAttention(
        4, lora_rank=2, lora_alpha=4.0, lora_targets=("query", "out")
    ),
    layers.TransformerBlock(4, 32, sublayer_dtypes={"attention": "int8_from_float32"}),
    layers.TransformerBlock(4, 32, qkv_bias=False),
    layers.LayerScale(1e-6),
    layers.RegisterTokens(4, num_leading=2),
    layers.MAPHead(4, 32, num_prefix_tokens=1, gelu_approximate=True),
    layers.DropPath(0.2, seed=3),
    layers.TokenPooling("gap", 2),
    layers.TokenPooling("token", 2, index=1),
    layers.StdConv2D(8, 3, 2, epsilon=1e-4),
    layers.LayerNorm(epsilon=1e-6),
    layers.PadToMultiple((16, 8)),
]
# The Park & Kim wing's layers (`keras_vit.parkkim.layers`), held to the same
# rule.
PARKKIM_LAYERS = [
    parkkim_layers.PreActBlock(4, 2, False, 0.1),
    parkkim_layers.PostActBlock(4, 2, True, 0.1),
    parkkim_layers.PaddedMaxPooling2D(3, 2, 0),
    parkkim_layers.WindowAttention2D(2, 4, 8, 4, 0.1),
    parkkim_layers.PreActAttentionBlock(4, 2, 8, 4, False, 0.1, 0.1),
]


@pytest.mark.parametrize(
    "module, listed", [(layers, ALL_LAYERS), (parkkim_layers, PARKKIM_LAYERS)]
)
def test_every_public_layer_is_listed_here(module, listed):
    names = {type(layer).__name__ for layer in listed}
    classes = {
        name for name in module.__all__ if isinstance(getattr(module, name), type)
    }
    assert names == classes


@pytest.mark.parametrize(
    "layer", ALL_LAYERS + PARKKIM_LAYERS, ids=lambda layer: type(layer).__name__
)
def test_config_is_exactly_the_constructor_arguments(layer):
    assert_config_is_constructor_args(layer)
    clone = type(layer).from_config(layer.get_config())
    assert clone.get_config() == layer.get_config()
    restored = keras.saving.deserialize_keras_object(
        keras.saving.serialize_keras_object(layer)
    )
    assert type(restored) is type(layer)
    assert restored.get_config() == layer.get_config()


@pytest.mark.parametrize("policy", ["mixed_bfloat16", "mixed_float16"])
def test_block_under_mixed_precision(policy):
    keras.config.set_dtype_policy(policy)
    block = layers.TransformerBlock(num_heads=2, mlp_dim=16)
    # Values whose squares overflow float16 (max 65504): LayerNorm and the
    # softmax must run in float32 to stay finite.
    x = _random((2, 5, 8), scale=300.0)
    out, scores = block(x, return_attention_scores=True)
    compute = policy.split("_")[1]
    assert keras.backend.standardize_dtype(out.dtype) == compute
    assert keras.backend.standardize_dtype(scores.dtype) == "float32"
    assert all(w.dtype == "float32" for w in block.weights)
    assert np.all(np.isfinite(np.asarray(keras.ops.cast(out, "float32"))))
    np.testing.assert_allclose(np.asarray(scores).sum(-1), 1.0, atol=1e-3)
    normed = block.norm_1(keras.ops.cast(x, compute))
    normed = np.asarray(keras.ops.cast(normed, "float32"))
    assert np.all(np.isfinite(normed))
    np.testing.assert_allclose(normed.std(-1), 1.0, atol=0.05)


def test_fused_backend_attention_path_equals_explicit_path():
    # JAX and PyTorch take `ops.dot_product_attention`; TensorFlow runs the
    # same computation explicitly. Force each branch here to check it.
    layer = layers.MultiHeadSelfAttention(num_heads=2)
    x = _random((2, 5, 8))
    layer.build(x.shape)
    layer.set_weights(
        [_random(w.shape, seed=i, scale=0.3) for i, w in enumerate(layer.weights)]
    )
    with layers.fused_attention(False):
        explicit = np.asarray(layer(x))
    with layers.fused_attention(True):
        np.testing.assert_allclose(layer(x), explicit, atol=1e-5)


def _gradients(layer, x, training):
    import tensorflow as tf

    x = tf.constant(x)
    weights = tf.constant(_random((*x.shape[:-1], layer.weights[-1].shape[-1]), seed=9))
    with tf.GradientTape() as tape:
        tape.watch(x)
        loss = tf.reduce_sum(layer(x, training=training) * weights)
    return tape.gradient(loss, [x, *layer.trainable_variables])


def test_training_gelu_has_the_exact_gelu_values_and_gradients():
    x = keras.ops.convert_to_tensor(np.linspace(-6, 6, 101, dtype="float32"))
    # `1 + erf` loses the far negative tail to rounding: 5e-7 absolute at most.
    exact = reference.gelu_exact(np.asarray(x, "float64"))
    np.testing.assert_allclose(gelu(x, training=True), exact, atol=5e-7)
    np.testing.assert_allclose(gelu(x, training=True), gelu(x), atol=5e-7)
    # In training the block's gradients equal those through keras.ops.gelu.
    block = layers.TransformerBlock(num_heads=2, mlp_dim=16)
    x = _random((2, 5, 8))
    block.build(x.shape)
    block.set_weights(
        [_random(w.shape, seed=i, scale=0.5) for i, w in enumerate(block.weights)]
    )
    for train, infer in zip(
        _gradients(block, x, True), _gradients(block, x, False), strict=True
    ):
        np.testing.assert_allclose(train, infer, atol=1e-5)


def test_training_gelu_under_bfloat16_stays_close_to_float32():
    x = np.linspace(-6, 6, 101, dtype="float32")
    exact = reference.gelu_exact(x.astype("float64"))
    bf16 = keras.ops.convert_to_tensor(x, "bfloat16")
    for training in (True, False):
        out = np.asarray(keras.ops.cast(gelu(bf16, training=training), "float32"))
        np.testing.assert_allclose(out, exact, atol=0.04, rtol=0.01)


def test_attention_gradients_equal_the_fused_path_gradients():
    # The explicit path unstacks q, k and v; its gradients must equal those of
    # `ops.dot_product_attention` on slices, an independent formulation.
    layer = layers.MultiHeadSelfAttention(num_heads=2)
    x = _random((2, 5, 8))
    layer.build(x.shape)
    layer.set_weights(
        [_random(w.shape, seed=i, scale=0.3) for i, w in enumerate(layer.weights)]
    )
    with layers.fused_attention(False):
        explicit = _gradients(layer, x, True)
    with layers.fused_attention(True):
        fused = _gradients(layer, x, True)
    for got, want in zip(explicit, fused, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_layer_norm_training_path_has_keras_values_and_gradients():
    x = _random((3, 5, 8), scale=4.0) + 2.0
    ours = layers.LayerNorm(epsilon=1e-6)
    keras_norm = keras.layers.LayerNormalization(epsilon=1e-6)
    for layer in (ours, keras_norm):
        layer.build(x.shape)
        layer.set_weights([_random((8,), seed=1), _random((8,), seed=2)])
    np.testing.assert_allclose(ours(x, training=True), keras_norm(x), atol=2e-6)
    np.testing.assert_array_equal(ours(x), keras_norm(x))  # inference: Keras' op
    # Closed-form gradients equal TensorFlow's differentiation of Keras' op
    # (whose call takes no `training`: Keras drops the argument).
    for got, want in zip(
        _gradients(ours, x, True), _gradients(keras_norm, x, True), strict=True
    ):
        np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-5)


def test_layer_norm_under_mixed_precision_and_bad_axis():
    keras.config.set_dtype_policy("mixed_bfloat16")
    norm = layers.LayerNorm(epsilon=1e-6)
    x = keras.ops.convert_to_tensor(_random((2, 4, 8), scale=300.0), "bfloat16")
    out = norm(x, training=True)
    assert keras.backend.standardize_dtype(out.dtype) == "bfloat16"
    assert all(w.dtype == "float32" for w in norm.weights)
    np.testing.assert_allclose(
        np.asarray(keras.ops.cast(out, "float32")).std(-1), 1.0, atol=0.05
    )
    with pytest.raises(ValueError, match="last axis only"):
        layers.LayerNorm(axis=1)


def test_bfloat16_softmax_path_matches_the_float32_scores_path():
    # Under bfloat16 the softmax runs in bfloat16 unless scores are returned
    # (then in float32): the two paths agree to bfloat16 rounding.
    keras.config.set_dtype_policy("mixed_bfloat16")
    block = layers.TransformerBlock(num_heads=2, mlp_dim=16)
    x = _random((2, 7, 8), scale=3.0)
    block.build(x.shape)
    block.set_weights(
        [_random(w.shape, seed=i, scale=0.5) for i, w in enumerate(block.weights)]
    )
    fast = np.asarray(keras.ops.cast(block(x), "float32"))
    slow, _ = block(x, return_attention_scores=True)
    np.testing.assert_allclose(
        fast, np.asarray(keras.ops.cast(slow, "float32")), atol=0.05, rtol=0.02
    )
