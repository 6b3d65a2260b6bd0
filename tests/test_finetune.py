"""Fine-tuning add-ons: LoRA, quantization, layer-wise rates, remat (issue 16)."""

from __future__ import annotations

import json
import os
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf

import keras_vit
from keras_vit import finetune
from keras_vit.layers import MultiHeadSelfAttention
from keras_vit.models import ViTLayout
from keras_vit.training import make_optimizer
from tests.helpers import images
from tests.helpers import randomize

SIZE, CLASSES = 16, 3
X = images(batch=4, size=(SIZE, SIZE))


def _model(seed=0, **kwargs):
    keras.utils.set_random_seed(seed)
    model = keras_vit.ViT("test/4", image_size=SIZE, num_classes=CLASSES, **kwargs)
    randomize(model, seed=seed)  # Also the zero-initialised head.
    return model


def _perturb_adapters(model, seed=1):
    rng = np.random.default_rng(seed)
    for variable in model.trainable_weights:
        variable.assign(rng.normal(0, 0.1, variable.shape))


def _predict(model, x=X):
    return keras.ops.convert_to_numpy(model(x, training=False))


# -- LoRA ------------------------------------------------------------------------


def test_lora_trains_adapters_and_head_only_with_the_expected_counts():
    model = _model()
    dim, mlp, depth, rank = 32, 64, 2, 4
    layout = ViTLayout.of(model)
    assert layout.depth == depth and layout.block(0).mlp_dim == mlp
    before = _predict(model)
    finetune.enable_lora(model, rank=rank, alpha=8)
    # q, k, v and out: A (D, r) + B (r, D) each; MLP: (D, r)+(r, mlp), (mlp, r)+(r, D).
    per_block = 4 * 2 * dim * rank + (dim + mlp) * rank * 2
    head = dim * CLASSES + CLASSES
    counted = sum(int(np.prod(v.shape)) for v in model.trainable_weights)
    assert counted == depth * per_block + head
    # B starts at zero: the outputs are unchanged.
    np.testing.assert_array_equal(_predict(model), before)

    frozen = {v.path: v.numpy() for v in model.non_trainable_weights}
    adapters = {v.path: v.numpy() for v in model.trainable_weights}
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss="mse")
    model.fit(X, np.ones((4, CLASSES)), epochs=1, verbose=0)
    for variable in model.non_trainable_weights:
        np.testing.assert_array_equal(variable.numpy(), frozen[variable.path])
    changed = [
        v.path
        for v in model.trainable_weights
        if not np.array_equal(v.numpy(), adapters[v.path])
    ]
    assert any("lora_kernel_b" in p for p in changed)
    assert not np.allclose(_predict(model), before)


def test_lora_targets_choose_the_projections():
    model = _model()
    finetune.enable_lora(model, rank=2, alpha=2, targets=("query", "value"))
    names = {v.name for v in model.trainable_weights}
    assert names == {"qkv_lora_kernel_a", "qkv_lora_kernel_b", "kernel", "bias"}
    attention = ViTLayout.of(model).block(0).attention
    assert attention.qkv_lora_kernel_a.shape == (2, 32, 2)
    # The key slice of the fused kernel gets no update.
    _perturb_adapters(model)
    qkv_delta, out_delta = attention.lora_deltas()
    delta = keras.ops.convert_to_numpy(qkv_delta).reshape(32, 3, 32)
    assert out_delta is None
    assert np.abs(delta[:, 1]).max() == 0
    assert np.abs(delta[:, 0]).max() > 0 and np.abs(delta[:, 2]).max() > 0
    with pytest.raises(ValueError, match="targets"):
        finetune.enable_lora(_model(), targets=("qkv", "fc"))
    with pytest.raises(ValueError, match="already enabled"):
        finetune.enable_lora(model)


def test_attention_built_with_lora_rank_has_adapters_from_its_config():
    layer = MultiHeadSelfAttention(2, lora_rank=3, lora_alpha=6.0, lora_targets=["key"])
    clone = MultiHeadSelfAttention.from_config(layer.get_config())
    clone.build((None, 5, 8))
    assert [w.name for w in clone.trainable_weights] == [
        "qkv_bias",
        "out_bias",
        "qkv_lora_kernel_a",
        "qkv_lora_kernel_b",
    ]
    assert clone.qkv_lora_kernel_a.shape == (1, 8, 3)
    assert clone.lora_alpha == 6.0 and not clone.qkv_kernel.trainable


def test_lora_adapter_file_round_trip_gives_identical_outputs(tmp_path):
    model = _model(seed=0)
    finetune.enable_lora(model, rank=4, alpha=8)
    _perturb_adapters(model)
    expected = _predict(model)
    path = str(tmp_path / "adapters.npz")
    finetune.save_lora_weights(model, path)

    fresh = _model(seed=0)  # The same base, built the same way.
    finetune.enable_lora(fresh, rank=4, alpha=8)
    assert not np.allclose(_predict(fresh), expected)
    finetune.load_lora_weights(fresh, path)
    np.testing.assert_array_equal(_predict(fresh), expected)
    # Adapters and head alone: a small fraction of the model.
    full = sum(v.numpy().nbytes for v in model.weights)
    assert os.path.getsize(path) < 0.5 * full
    assert [f for f in os.listdir(tmp_path)] == ["adapters.npz"]


def test_lora_adapter_file_faults_leave_the_model_unchanged(tmp_path):
    model = _model()
    finetune.enable_lora(model, rank=4, alpha=8)
    _perturb_adapters(model)
    good = str(tmp_path / "good.npz")
    finetune.save_lora_weights(model, good)

    target = _model()
    finetune.enable_lora(target, rank=4, alpha=8)
    before = _predict(target)
    # Truncated file.
    truncated = str(tmp_path / "truncated.npz")
    with open(good, "rb") as src, open(truncated, "wb") as dst:
        dst.write(src.read()[:200])
    with pytest.raises(ValueError, match="truncated.npz"):
        finetune.load_lora_weights(target, truncated)
    # Another rank: shapes differ, the key is named.
    other = _model()
    finetune.enable_lora(other, rank=2, alpha=8)
    other_path = str(tmp_path / "rank2.npz")
    finetune.save_lora_weights(other, other_path)
    with pytest.raises(ValueError, match="lora_kernel_a.*shape"):
        finetune.load_lora_weights(target, other_path)
    # Another target set: keys missing.
    other = _model()
    finetune.enable_lora(other, rank=4, alpha=8, targets=("qkv",))
    finetune.save_lora_weights(other, other_path)
    with pytest.raises(ValueError, match="missing .*mlp_dense"):
        finetune.load_lora_weights(target, other_path)
    # A NaN in one adapter.
    with np.load(good) as file:
        arrays = dict(file)
    key = sorted(arrays)[-1]
    arrays[key][0] = np.nan
    nan_path = str(tmp_path / "nan.npz")
    np.savez(nan_path, **arrays)
    with pytest.raises(ValueError, match="non-finite"):
        finetune.load_lora_weights(target, nan_path)
    np.testing.assert_array_equal(_predict(target), before)


def _adapter_file(path, seed=0, variant="test/4", size=SIZE, **lora):
    lora = {"rank": 4, "alpha": 8, **lora}
    keras.utils.set_random_seed(seed)
    model = keras_vit.ViT(variant, image_size=size, num_classes=CLASSES)
    randomize(model, seed=seed)
    finetune.enable_lora(model, **lora)
    _perturb_adapters(model)
    finetune.save_lora_weights(model, str(path))
    return model


def test_lora_adapters_refuse_another_base_model(tmp_path):
    """Adapters whose shapes fit but whose base model differs are refused."""
    cases = {
        # Same width, same 4x4 grid, another patch: every shape fits.
        "patch": (
            dict(variant="test/8", size=2 * SIZE),
            "patch_size: file (8, 8), model (4, 4)",
        ),
        "grid": (dict(size=2 * SIZE), "grid_size: file (8, 8), model (4, 4)"),
        "alpha": (dict(alpha=16), "lora alpha: file 16.0, model 8.0"),
        "targets": (
            dict(targets=("query", "value")),
            "lora targets: file ('query', 'value'), model ('query', 'key')",
        ),
    }
    for name, (saved_as, difference) in cases.items():
        path = tmp_path / f"{name}.npz"
        _adapter_file(path, **saved_as)
        targets = ("query", "key") if name == "targets" else ("qkv", "out", "mlp")
        target = _model()
        finetune.enable_lora(target, rank=4, alpha=8, targets=targets)
        before = [w.numpy().copy() for w in target.weights]
        with pytest.raises(ValueError) as info:
            finetune.load_lora_weights(target, str(path))
        message = str(info.value)
        assert "was saved from another base model" in message, name
        assert difference in message, (name, message)
        assert "No weight was changed" in message and "\n" not in message
        for old, new in zip(before, target.weights, strict=True):
            np.testing.assert_array_equal(old, new.numpy())


def test_lora_adapters_on_other_base_weights_load_with_a_warning(tmp_path):
    path = tmp_path / "adapters.npz"
    source = _adapter_file(path, seed=0)
    other = _model(seed=5)  # same architecture, other base weights
    finetune.enable_lora(other, rank=4, alpha=8)
    with pytest.warns(UserWarning, match="base weights .* differ"):
        finetune.load_lora_weights(other, str(path))
    for a, b in zip(
        finetune.lora_variables(other).values(),
        finetune.lora_variables(source).values(),
        strict=True,
    ):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    same = _model(seed=0)
    finetune.enable_lora(same, rank=4, alpha=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # the same base: no warning
        finetune.load_lora_weights(same, str(path))
    np.testing.assert_array_equal(_predict(same), _predict(source))


def test_adapter_files_without_a_record_load_with_a_warning(tmp_path):
    path = tmp_path / "adapters.npz"
    source = _adapter_file(path)
    with np.load(path) as file:  # the variables alone (their paths hold "/")
        arrays = {k: file[k] for k in file.files if "/" in k}
    older = tmp_path / "older.npz"
    np.savez(older, **arrays)  # a file without the base-model record
    target = _model()
    finetune.enable_lora(target, rank=4, alpha=8)
    with pytest.warns(UserWarning, match="does not record the base model"):
        finetune.load_lora_weights(target, str(older))
    np.testing.assert_array_equal(_predict(target), _predict(source))
    # What the record holds.
    with np.load(path) as file:
        record = json.loads(str(file[finetune.lora.RECORD_KEY]))
    assert record["architecture"] == {
        "name": "ViT-test/4", "hidden_dim": 32, "depth": 2, "num_heads": 2,
        "mlp_dim": 64, "patch_size": [4, 4], "backbone": None,
    }  # fmt: skip
    assert record["grid_size"] == [4, 4] and record["num_prefix_tokens"] == 1
    assert record["lora"] == {
        "rank": 4, "alpha": 8.0, "targets": ["query", "key", "value", "out", "mlp"]
    }  # fmt: skip
    # A record that is not one is refused, not ignored.
    np.savez(older, **arrays, **{finetune.lora.RECORD_KEY: np.array("[1, 2]")})
    with pytest.raises(ValueError, match="not a readable adapter file"):
        finetune.load_lora_weights(target, str(older))


def test_lora_save_is_complete_or_absent(tmp_path, monkeypatch):
    model = _model()
    finetune.enable_lora(model, rank=4, alpha=8)
    path = str(tmp_path / "adapters.npz")
    finetune.save_lora_weights(model, path)
    old = open(path, "rb").read()

    def broken(file, **arrays):
        file.write(b"partial")
        raise OSError("disk full")

    _perturb_adapters(model)
    monkeypatch.setattr(np, "savez", broken)
    with pytest.raises(OSError, match="disk full"):
        finetune.save_lora_weights(model, path)
    assert open(path, "rb").read() == old
    assert os.listdir(tmp_path) == ["adapters.npz"]


def test_merge_lora_equals_the_adapted_model_and_exports(tmp_path):
    model = _model()
    finetune.enable_lora(model, rank=4, alpha=8)
    _perturb_adapters(model)
    expected = _predict(model)
    plain = finetune.merge_lora(model)
    assert not [v for v in plain.weights if "lora" in v.path]
    assert len(plain.trainable_weights) == len(_model().trainable_weights)
    np.testing.assert_allclose(_predict(plain), expected, atol=1e-5, rtol=0)
    # A .keras file of the adapted model stores the merged kernels (as Dense).
    model.save(tmp_path / "adapted.keras")
    loaded = keras.saving.load_model(tmp_path / "adapted.keras")
    np.testing.assert_allclose(_predict(loaded), expected, atol=1e-5, rtol=0)

    from keras_vit.export import export

    out = export(plain, tmp_path / "merged" / "1", warmup=False)
    served = tf.saved_model.load(str(out)).signatures["serving_float"]
    pixels = (X + 1.0) * 127.5  # The export's graph maps [0, 255] to [-1, 1].
    logits = served(images=tf.constant(pixels))["logits"].numpy()
    np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=0)


# -- quantization -------------------------------------------------------------


def _quantized(mode, **kwargs):
    model = _model(**kwargs)
    reference = _predict(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model.quantize(mode)
    return model, reference


@pytest.mark.parametrize(("mode", "tolerance"), [("int8", 0.03), ("int4", 0.35)])
def test_quantize_reaches_the_attention_and_stays_within_tolerance(mode, tolerance):
    model, reference = _quantized(mode)
    layout = ViTLayout.of(model)
    for i in range(layout.depth):
        block = layout.block(i)
        for layer in (block.attention, block.mlp_dense_1, block.mlp_dense_2):
            assert layer.quantization_mode == mode, layer.path
        assert block.attention.qkv_kernel.dtype == "int8"
    out = _predict(model)
    # Stated tolerance: max |logit change| relative to the largest |logit|.
    error = np.abs(out - reference).max() / np.abs(reference).max()
    assert 0 < error < tolerance, error


def test_quantized_model_saves_reloads_and_exports(tmp_path):
    model = _model()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        finetune.quantize(model, "int8")  # The head stays float.
    assert ViTLayout.of(model).head.quantization_mode is None
    out = _predict(model)
    model.save(tmp_path / "int8.keras")
    loaded = keras.saving.load_model(tmp_path / "int8.keras")
    attention = ViTLayout.of(loaded).block(0).attention
    assert attention.quantization_mode == "int8"
    np.testing.assert_array_equal(_predict(loaded), out)

    from keras_vit.export import export

    path = export(model, tmp_path / "int8" / "1", warmup=False)
    served = tf.saved_model.load(str(path)).signatures["serving_float"]
    logits = served(images=tf.constant((X + 1.0) * 127.5))["logits"].numpy()
    np.testing.assert_allclose(logits, out, atol=1e-4, rtol=0)


def test_int4_model_reloads_identically(tmp_path):
    model, _ = _quantized("int4")
    out = _predict(model)
    attention = ViTLayout.of(model).block(0).attention
    assert attention.qkv_kernel.shape == (16, 96)  # Two int4 values per byte.
    model.save(tmp_path / "int4.keras")
    np.testing.assert_array_equal(
        _predict(keras.saving.load_model(tmp_path / "int4.keras")), out
    )


def test_float8_is_refused_by_the_attention_layer_with_a_reason():
    layer = MultiHeadSelfAttention(2)
    layer.build((None, 5, 8))
    with pytest.raises(NotImplementedError, match="no 'float8' mode"):
        layer.quantize("float8")
    assert layer.quantization_mode is None and layer.qkv_kernel.dtype == "float32"


def test_quantize_helper_covers_attention_with_qk_norm(tmp_path):
    model, reference = _quantized("int8", qk_norm=True)
    attention = ViTLayout.of(model).block(0).attention
    assert attention.quantization_mode is None  # Keras skips a layer with sublayers.
    model = _model(qk_norm=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        finetune.quantize(model, "int8")
    assert ViTLayout.of(model).block(1).attention.quantization_mode == "int8"
    out = _predict(model)
    error = np.abs(out - reference).max() / np.abs(reference).max()
    assert 0 < error < 0.03
    model.save(tmp_path / "qk_norm.keras")
    loaded = keras.saving.load_model(tmp_path / "qk_norm.keras")
    assert ViTLayout.of(loaded).block(0).attention.query_norm.quantization_mode is None
    np.testing.assert_array_equal(_predict(loaded), out)


def test_lora_on_a_quantized_model_trains_and_saves_merged(tmp_path):
    model, _ = _quantized("int8")
    finetune.enable_lora(model, rank=2, alpha=4, targets=("qkv", "out"))
    _perturb_adapters(model)
    out = _predict(model)
    model.save(tmp_path / "qlora.keras")
    loaded = _predict(keras.saving.load_model(tmp_path / "qlora.keras"))
    # Merged and quantized again: int8 rounding of the merged kernels.
    error = np.abs(loaded - out).max() / np.abs(out).max()
    assert error < 0.03, error


# -- attention without query/key/value biases ---------------------------------------


def _attention_model(seed=0):
    keras.utils.set_random_seed(seed)
    inputs = keras.Input((5, 8))
    outputs = MultiHeadSelfAttention(2, qkv_bias=False, name="attention")(inputs)
    model = keras.Model(inputs, outputs)
    randomize(model, seed=seed)
    return model


TOKENS = np.random.default_rng(5).normal(size=(3, 5, 8)).astype("float32")


def test_lora_and_merge_without_qkv_bias(tmp_path):
    model = _attention_model()
    layer = model.get_layer("attention")
    layer.enable_lora(2, 4.0)
    assert [w.name for w in layer.trainable_weights] == [
        "out_bias",
        "qkv_lora_kernel_a",
        "qkv_lora_kernel_b",
        "out_lora_kernel_a",
        "out_lora_kernel_b",
    ]
    before = _predict(model, TOKENS)
    _perturb_adapters(model)
    adapted = _predict(model, TOKENS)
    assert np.abs(adapted - before).max() > 1e-2
    plain = finetune.merge_lora(model)
    assert [w.name for w in plain.weights] == ["qkv_kernel", "out_kernel", "out_bias"]
    np.testing.assert_allclose(_predict(plain, TOKENS), adapted, atol=1e-5, rtol=0)
    model.save(tmp_path / "adapted.keras")
    loaded = keras.saving.load_model(tmp_path / "adapted.keras")
    assert loaded.get_layer("attention").qkv_bias is None
    np.testing.assert_allclose(_predict(loaded, TOKENS), adapted, atol=1e-5, rtol=0)


@pytest.mark.parametrize(("mode", "tolerance"), [("int8", 0.03), ("int4", 0.35)])
def test_quantize_without_qkv_bias_saves_and_takes_lora(tmp_path, mode, tolerance):
    model = _attention_model()
    reference = _predict(model, TOKENS)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # The input layer has no quantize.
        model.quantize(mode)
    layer = model.get_layer("attention")
    assert layer.quantization_mode == mode and layer.qkv_bias is None
    assert sorted(w.name for w in layer.weights) == [
        "out_bias",
        "out_kernel",
        "out_kernel_scale",
        "qkv_kernel",
        "qkv_kernel_scale",
    ]
    out = _predict(model, TOKENS)
    error = np.abs(out - reference).max() / np.abs(reference).max()
    assert 0 < error < tolerance, error
    model.save(tmp_path / "quantized.keras")
    loaded = keras.saving.load_model(tmp_path / "quantized.keras")
    np.testing.assert_array_equal(_predict(loaded, TOKENS), out)
    layer.enable_lora(2, 4.0, targets=("query", "out"))
    _perturb_adapters(model)
    adapted = _predict(model, TOKENS)
    model.save(tmp_path / "qlora.keras")
    merged = _predict(keras.saving.load_model(tmp_path / "qlora.keras"), TOKENS)
    error = np.abs(merged - adapted).max() / np.abs(adapted).max()
    assert error < tolerance, error


# -- layer-wise learning-rate decay ----------------------------------------------


def _one_step(model, optimizer):
    before = {v.path: v.numpy() for v in model.trainable_weights}
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(tf.square(model(X, training=True)))
    grads = tape.gradient(loss, model.trainable_weights)
    optimizer.apply_gradients(zip(grads, model.trainable_weights, strict=True))
    return {v.path: v.numpy() - before[v.path] for v in model.trainable_weights}


@pytest.mark.parametrize("name", ["sgd", "adamw"])
def test_layer_decay_scales_each_layers_update_as_configured(name):
    decay = 0.5
    model = _model()
    rates = finetune.layer_decay_multipliers(model, decay)
    # Ids: embeddings 0, blocks 1..2, the rest 3; factor decay ** (3 - id).
    assert rates["embedding/kernel"] == decay**3
    assert rates["posembed_input/embedding"] == decay**3
    assert rates["class_token/token"] == decay**3
    assert rates["encoderblock_0/attention/qkv_kernel"] == decay**2
    assert rates["encoderblock_1/mlp_dense_2/kernel"] == decay
    assert rates["encoder_norm/gamma"] == 1.0 and rates["head/kernel"] == 1.0

    kwargs = dict(momentum=0.0, weight_decay=0.0, global_clipnorm=None)
    # A large rate: updates well above the float32 rounding of the weights.
    plain = _one_step(model, make_optimizer(name, 0.5, **kwargs))
    model = _model()
    decayed = _one_step(
        model,
        make_optimizer(name, 0.5, lr_multipliers=rates, ema_momentum=0.9, **kwargs),
    )
    for path, update in plain.items():
        mask = np.abs(update) > 1e-3 * np.abs(update).max()
        assert mask.any(), path
        ratio = decayed[path][mask] / update[mask]
        np.testing.assert_allclose(ratio, rates[path], rtol=1e-2, err_msg=path)


def test_layer_decay_that_reaches_no_variable_is_an_error():
    model = _model()
    rates = finetune.layer_decay_multipliers(_model(), 0.5)
    rates = {"other_model/" + k: v for k, v in rates.items()}
    optimizer = make_optimizer("sgd", 1e-2, lr_multipliers=rates)
    with pytest.raises(ValueError, match="names none of the trained variables"):
        _one_step(model, optimizer)
    with pytest.raises(ValueError, match="decay"):
        finetune.layer_decay_multipliers(model, 1.5)


# -- rematerialisation --------------------------------------------------------------


def test_remat_gives_the_same_outputs_and_gradients_and_recomputes():
    plain = _model()
    remat = keras_vit.ViT("test/4", image_size=SIZE, num_classes=CLASSES, remat=True)
    remat.set_weights(plain.get_weights())
    calls = {}

    def count(model):
        block = ViTLayout.of(model).block(0)
        call = block.call

        def counted(*args, **kwargs):
            calls[model.name] = calls.get(model.name, 0) + 1
            return call(*args, **kwargs)

        block.call = counted

    def outputs_and_grads(model):
        count(model)
        with tf.GradientTape() as tape:
            y = model(X, training=True)
            loss = tf.reduce_sum(tf.square(y))
        return y.numpy(), tape.gradient(loss, model.trainable_weights)

    calls.clear()
    y_plain, g_plain = outputs_and_grads(plain)
    plain_calls = calls.pop(plain.name)
    y_remat, g_remat = outputs_and_grads(remat)
    np.testing.assert_allclose(y_remat, y_plain, atol=1e-6, rtol=0)
    for a, b in zip(g_plain, g_remat, strict=True):
        np.testing.assert_allclose(b.numpy(), a.numpy(), atol=1e-6, rtol=0)
    # The block ran again in the backward pass: remat is not a no-op.
    assert plain_calls == 1 and calls[remat.name] == 2


def test_remat_trains_the_same_in_a_compiled_step_and_refuses_dropout():
    # Keras's train step is a tf.function: TF's recompute_grad takes no
    # keyword arguments there (`training=True`), which the block binds.
    labels = np.array([0, 1, 2, 0])
    losses = {}
    for remat in (False, True):
        model = _model(seed=3, remat=remat) if remat else _model(seed=3)
        model.compile(
            optimizer=keras.optimizers.SGD(0.1),
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        losses[remat] = [float(model.train_on_batch(X, labels)) for _ in range(3)]
    np.testing.assert_allclose(losses[True], losses[False], rtol=1e-6)
    assert losses[True][0] != losses[True][2]  # It trained.
    with pytest.raises(ValueError, match="`remat` needs dropout_rate.*drop_path_rate"):
        keras_vit.ViT("test/4", image_size=SIZE, remat=True, drop_path_rate=0.1)


# -- recipe ----------------------------------------------------------------------


def test_recipe_fields_are_checked_and_applied():
    from keras_vit.recipes.configs.base import ConfigError
    from keras_vit.recipes.configs.base import TrainConfig
    from keras_vit.recipes.configs.base import override
    from keras_vit.recipes.train import build_model

    config = override(
        TrainConfig(variant="test/4", image_size=SIZE),
        ["lora_rank=2", "lora_targets=['qkv']", "layer_decay=0.75", "remat=True"],
    )
    assert config.lora_rank == 2 and config.layer_decay == 0.75
    for bad, field in [
        ("lora_rank=0", "lora_rank"),
        ("lora_targets=['fc']", "lora_targets"),
        ("layer_decay=0", "layer_decay"),
    ]:
        with pytest.raises(ConfigError, match=field):
            override(TrainConfig(), [bad])
    model = build_model(config, CLASSES, say=lambda _: None)
    names = {v.name for v in model.trainable_weights}
    assert names == {"qkv_lora_kernel_a", "qkv_lora_kernel_b", "kernel", "bias"}
    assert ViTLayout.of(model).block(0)._remat_mode is not None


def test_export_refuses_a_quantized_head(tmp_path):
    from keras_vit.export import export

    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    model.quantize("int8")  # Keras's own call quantizes the head as well
    with pytest.raises(ValueError, match="head of .* is quantized"):
        export(model, tmp_path / "1")
    assert not (tmp_path / "1").exists()
