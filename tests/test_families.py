"""DeiT III, DINOv2 with registers, SigLIP, DeiT distillation: the newer
families' features against timm fixtures, their sizes and their rules.

The fixtures were written by `scripts/make_family_fixtures.py` with timm
(tiny random models); these tests need only NumPy and the fixtures.
"""

import os

import keras
import numpy as np
import pytest
from helpers import images
from helpers import randomize

import keras_vit
from keras_vit import models
from keras_vit.models.layout import ViTLayout
from keras_vit.weights import load_weights
from keras_vit.weights.errors import CheckpointError

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def fixture(name):
    return os.path.join(FIXTURES, name)


def tiny(**kwargs):
    kwargs.setdefault("image_size", 32)
    kwargs.setdefault("num_classes", 10)
    return keras_vit.ViT("test/8", **kwargs)


# fixture -> the keras_vit arguments of the same architecture.
FAMILY_FIXTURES = {
    "timm_deit3": dict(models.FAMILIES["deit3"].arguments()),
    "timm_dinov2": dict(models.FAMILIES["dinov2"].arguments(), image_size=32),
    "timm_dinov2_swiglu": dict(
        models.FAMILIES["dinov2_swiglu"].arguments(), image_size=32
    ),
    "timm_siglip": dict(models.FAMILIES["siglip"].arguments()),
    "timm_qknorm_fcnorm": dict(qk_norm=True, fc_norm=True, pooling="gap"),
    "timm_deit_distilled": dict(distillation=True),
    "timm_clip": dict(models.FAMILIES["clip"].arguments()),
    "timm_rpn": dict(models.FAMILIES["rpn"].arguments()),
}


@pytest.mark.parametrize("name", sorted(FAMILY_FIXTURES))
def test_timm_family_fixture_gives_timm_outputs(name):
    model = tiny(**FAMILY_FIXTURES[name])
    assert load_weights(model, fixture(f"{name}.safetensors")) == []
    expected = np.load(fixture(f"{name}.npz"))
    out = model.predict(expected["images"], verbose=0)
    np.testing.assert_allclose(out, expected["logits"], atol=1e-5, rtol=1e-5)


def test_dinov2_position_embedding_resamples_like_timm():
    # timm's dynamic_img_size resamples the 4x4 table to 6x6 (bicubic, no
    # class-token row); keras_vit resamples at load time with timm's mode.
    options = dict(models.FAMILIES["dinov2"].arguments(), image_size=48)
    model = tiny(**options)
    notes = load_weights(
        model, fixture("timm_dinov2.safetensors"), resample_method="timm"
    )
    assert any("4x4 to a 6x6" in note for note in notes)
    expected = np.load(fixture("timm_dinov2.npz"))
    out = model.predict(expected["images_48"], verbose=0)
    np.testing.assert_allclose(out, expected["logits_48"], atol=1e-5, rtol=1e-5)


# --- layers against NumPy ---------------------------------------------------


def _rand(shape, seed, scale=0.5):
    return np.random.default_rng(seed).normal(0, scale, shape).astype("float32")


def test_map_head_matches_numpy_and_ignores_prefix_tokens():
    import reference

    d, heads, mlp = 8, 2, 16
    layer = keras_vit.layers.MAPHead(heads, mlp, num_prefix_tokens=1)
    x = _rand((2, 7, d), 0)
    layer.build(x.shape)
    p, mha = "MAPHead_0/", "MAPHead_0/MultiHeadDotProductAttention_0/"
    params = {p + "probe": _rand((1, 1, d), 1)}
    for i, name in enumerate(("query", "key", "value")):
        params[mha + name + "/kernel"] = _rand((d, heads, d // heads), 2 + i)
        params[mha + name + "/bias"] = _rand((heads, d // heads), 5 + i, 0.1)
    params[mha + "out/kernel"] = _rand((heads, d // heads, d), 8)
    params[mha + "out/bias"] = _rand((d,), 9, 0.1)
    params[p + "LayerNorm_0/scale"] = 1 + _rand((d,), 10, 0.1)
    params[p + "LayerNorm_0/bias"] = _rand((d,), 11, 0.1)
    params[p + "MlpBlock_0/Dense_0/kernel"] = _rand((d, mlp), 12)
    params[p + "MlpBlock_0/Dense_0/bias"] = _rand((mlp,), 13, 0.1)
    params[p + "MlpBlock_0/Dense_1/kernel"] = _rand((mlp, d), 14)
    params[p + "MlpBlock_0/Dense_1/bias"] = _rand((d,), 15, 0.1)
    layer.probe.assign(params[p + "probe"])
    layer.query_kernel.assign(params[mha + "query/kernel"])
    layer.query_bias.assign(params[mha + "query/bias"])
    layer.kv_kernel.assign(
        np.stack([params[mha + "key/kernel"], params[mha + "value/kernel"]], 1)
    )
    layer.kv_bias.assign(
        np.stack([params[mha + "key/bias"], params[mha + "value/bias"]], 0)
    )
    layer.out_kernel.assign(params[mha + "out/kernel"])
    layer.out_bias.assign(params[mha + "out/bias"])
    layer.norm.set_weights(
        [params[p + "LayerNorm_0/scale"], params[p + "LayerNorm_0/bias"]]
    )
    layer.mlp_dense_1.set_weights(
        [params[p + "MlpBlock_0/Dense_0/kernel"], params[p + "MlpBlock_0/Dense_0/bias"]]
    )
    layer.mlp_dense_2.set_weights(
        [params[p + "MlpBlock_0/Dense_1/kernel"], params[p + "MlpBlock_0/Dense_1/bias"]]
    )
    expected = reference.map_head(x, params, num_prefix_tokens=1)
    np.testing.assert_allclose(layer(x), expected, atol=1e-5)
    # The prefix token is left out: changing it changes nothing.
    y = x.copy()
    y[:, 0] += 100.0
    np.testing.assert_allclose(layer(y), layer(x), atol=1e-6)


def test_layer_scale_and_register_tokens():
    scale = keras_vit.layers.LayerScale(1e-6)
    out = scale(np.full((1, 3, 4), 2.0, "float32"))
    np.testing.assert_allclose(out, 2e-6, rtol=1e-6)
    registers = keras_vit.layers.RegisterTokens(2, num_leading=1)
    x = np.arange(1, 13, dtype="float32").reshape(1, 3, 4)
    registers.build(x.shape)
    registers.tokens.assign(np.full((1, 2, 4), -1.0, "float32"))
    out = np.asarray(registers(x))
    assert out.shape == (1, 5, 4)
    np.testing.assert_array_equal(out[0, 0], x[0, 0])  # the class token first
    np.testing.assert_array_equal(out[0, 1:3], -1.0)  # then the registers
    np.testing.assert_array_equal(out[0, 3:], x[0, 1:])  # then the patches


def test_features_off_add_no_layers_or_variables():
    # The default path is the paper's graph: no LayerScale, no QK norm, no
    # registers, and the same variables as before the families existed.
    model = tiny()
    block = model.get_layer("encoderblock_0")
    assert not hasattr(block, "layer_scale_1")
    assert not hasattr(block.attention, "query_norm")
    assert sorted(v.path.split("/", 1)[1] for v in block.weights) == sorted(
        [
            "attention/qkv_kernel", "attention/qkv_bias", "attention/out_kernel",
            "attention/out_bias", "norm_1/gamma", "norm_1/beta", "norm_2/gamma",
            "norm_2/beta", "mlp_dense_1/kernel", "mlp_dense_1/bias",
            "mlp_dense_2/kernel", "mlp_dense_2/bias",
        ]
    )  # fmt: skip
    assert {layer.name for layer in model.layers} == {
        "images", "embedding", "class_token", "posembed_input",
        "posembed_dropout", "encoderblock_0", "encoderblock_1",
        "encoder_norm", "pool", "head",
    }  # fmt: skip


# --- the model: pooling, prefix tokens, heads -------------------------------


def test_registers_are_left_out_of_mean_pooling():
    model = tiny(num_registers=3, pooling="gap", include_top=False)
    randomize(model, seed=1)
    features = keras_vit.feature_extractor(model, blocks=None)
    out = features(images(batch=2))
    tokens, pooled = np.asarray(out["tokens"]), np.asarray(out["pooled"])
    assert tokens.shape == (2, 1 + 3 + 16, 32)
    np.testing.assert_allclose(pooled, tokens[:, 4:].mean(1), atol=1e-5)
    assert np.abs(pooled - tokens[:, 1:].mean(1)).max() > 1e-3


def test_distilled_model_averages_its_two_heads():
    model = tiny(distillation=True)
    randomize(model, seed=2)
    x = images(batch=2)
    both = keras.Model(
        model.input, [model.get_layer(n).output for n in ("head", "head_dist")]
    )
    head, dist = (np.asarray(t) for t in both(x))
    np.testing.assert_allclose(model(x), (head + dist) / 2, atol=1e-6)
    assert np.abs(head - dist).max() > 1e-3


def test_distilled_head_follows_the_head_rule():
    # 10-class distilled checkpoint into a 5-class model: both heads zeroed.
    model = tiny(distillation=True, num_classes=5)
    notes = load_weights(model, fixture("timm_deit_distilled.safetensors"))
    assert any("zero-initialised" in note for note in notes)
    for name in ("head", "head_dist"):
        for weight in model.get_layer(name).weights:
            np.testing.assert_array_equal(weight.numpy(), 0.0)
    headless = keras_vit.ViT(
        "test/8", image_size=32, include_top=False, distillation=False
    )
    with pytest.raises(CheckpointError, match=r"Unexpected keys:\n  dist "):
        load_weights(headless, fixture("timm_deit_distilled.safetensors"))


def test_family_checkpoint_into_a_plain_model_is_refused_unchanged():
    model = tiny()
    randomize(model, seed=3)
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(CheckpointError, match="build the model with `no_embed_class"):
        load_weights(model, fixture("timm_deit3.safetensors"))
    for old, weight in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(old, weight.numpy())
    # The right table, but no LayerScale in the model: each key is named.
    model = tiny(no_embed_class=True)
    randomize(model, seed=3)
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(CheckpointError, match="LayerScale_0/scale") as info:
        load_weights(model, fixture("timm_deit3.safetensors"))
    assert "no weight was changed" in str(info.value)
    for old, weight in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(old, weight.numpy())
    # Registers in the checkpoint, none in the model: named.
    plain = tiny(**dict(models.FAMILIES["deit3"].arguments()))
    with pytest.raises(CheckpointError, match=r"Unexpected keys:\n  reg \(1, 4, 32\)"):
        load_weights(plain, fixture("timm_dinov2.safetensors"))


def test_siglip_map_checkpoint_needs_map_pooling():
    model = tiny(class_token=False, pooling="gap", include_top=False)
    with pytest.raises(CheckpointError, match="MAPHead_0/probe"):
        load_weights(model, fixture("timm_siglip.safetensors"))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(distillation=True, pooling="gap"), "`distillation` needs class_token"),
        (dict(distillation=True, class_token=False, pooling="gap"), "needs"),
        (dict(num_registers=-1), "`num_registers` must be an integer >= 0"),
        (dict(num_registers=1.5), "`num_registers` must be an integer >= 0"),
        (dict(fc_norm=True, pooling=None, include_top=False), "`fc_norm` normalises"),
        (dict(pooling="mean"), "`pooling` must be one of"),
        (dict(mlp="relu"), "`mlp` must be one of"),
        (dict(class_token=False), "`pooling` needs a class token"),
    ],
)
def test_bad_family_arguments_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tiny(**kwargs)


def test_unknown_family_is_named():
    with pytest.raises(ValueError, match="Unknown family 'dino'"):
        models.family_model("test/8", "dino")


# --- resolution, serialization, analyses --------------------------------------


def test_with_image_size_and_keras_round_trip_keep_family_outputs(tmp_path):
    model = tiny(**dict(models.FAMILIES["dinov2"].arguments(), image_size=32))
    load_weights(model, fixture("timm_dinov2.safetensors"))
    bigger = keras_vit.with_image_size(model, 48)
    assert ViTLayout.of(bigger).num_prefix_tokens == 5
    assert bigger.get_layer("posembed_input").embedding.shape == (1, 36, 32)
    x = images(batch=2, size=(48, 48))
    path = str(tmp_path / "dinov2.keras")
    bigger.save(path)
    restored = keras.saving.load_model(path)
    np.testing.assert_allclose(restored(x), bigger(x), atol=1e-6)
    # The same grid resampled at load time with the reference's method.
    direct = tiny(**dict(models.FAMILIES["dinov2"].arguments(), image_size=48))
    load_weights(direct, fixture("timm_dinov2.safetensors"))
    np.testing.assert_allclose(direct(x), bigger(x), atol=1e-5)


def test_analyses_skip_registers_and_the_distillation_token():
    from keras_vit import analysis

    model = tiny(**dict(models.FAMILIES["dinov2"].arguments(), image_size=32))
    load_weights(model, fixture("timm_dinov2.safetensors"))
    x = images(batch=2)
    maps = analysis.attention_rollout_maps(model, x)
    assert maps.shape == (2, 4, 4) and np.isfinite(maps).all()
    distances = analysis.attention_distances(model, x)
    assert distances.shape == (2, 2) and np.isfinite(distances).all()
    similarity = analysis.position_embedding_similarity(model)
    assert similarity.shape[:2] == (4, 4)
    distilled = tiny(distillation=True)
    randomize(distilled, seed=4)
    assert analysis.attention_rollout_maps(distilled, x).shape == (2, 4, 4)


# --- tags ---------------------------------------------------------------------


def test_family_tags_name_their_timm_files():
    from keras_vit.weights import registry

    for tag, variants in (
        ("deit3_in1k", ("S/16", "B/16", "L/16")),
        ("deit3_in21k_ft_in1k", ("S/16", "B/16", "L/16")),
        ("dinov2_lvd142m", ("S/14", "B/14", "L/14", "g/14")),
        ("siglip_webli", ("B/16", "So400m/14")),
        ("siglip_v2_webli", ("B/16", "So400m/14")),
    ):
        for variant in variants:
            entry = registry.find(tag, variant)
            assert entry.url.startswith("https://huggingface.co/timm/")
            assert entry.url.endswith("/resolve/main/model.safetensors")
            assert entry.file_name.endswith(".safetensors") and entry.sha256 is None
    entry = registry.find("dinov2_lvd142m", "S/14")
    assert entry.url == (
        "https://huggingface.co/timm/vit_small_patch14_reg4_dinov2.lvd142m"
        "/resolve/main/model.safetensors"
    )
    assert (entry.image_size, entry.num_classes) == (518, 0)


def _offline(*args, **kwargs):
    raise Exception(
        "URL fetch failure: [Errno -3] Temporary failure in name resolution"
    )


def test_family_tag_offline_names_the_file(tmp_path, monkeypatch):
    from keras_vit.weights.errors import WeightsNotFoundError

    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.setattr(keras.utils, "get_file", _offline)
    with keras.StatelessScope(initialize_variables=False):
        model = models.DINOv2_S14(image_size=28)
    with pytest.raises(
        WeightsNotFoundError,
        match=r"timm_vit_small_patch14_reg4_dinov2\.lvd142m\.safetensors",
    ):
        load_weights(model, "dinov2_lvd142m")


def test_a_cached_safetensors_tag_loads_through_the_one_path(tmp_path, monkeypatch):
    import shutil

    from keras_vit.weights import registry

    entry = registry.PretrainedWeights(
        tag="dinov2_lvd142m", variant="test/8", file_name="tiny_dinov2.safetensors",
        url="https://huggingface.co/timm/x/resolve/main/model.safetensors",
        image_size=32, num_classes=0,
    )  # fmt: skip
    monkeypatch.setattr(registry, "PRETRAINED_WEIGHTS", (entry,))
    monkeypatch.setattr(keras.utils, "get_file", _offline)
    os.makedirs(tmp_path / "keras_vit")
    shutil.copy(
        fixture("timm_dinov2.safetensors"), tmp_path / "keras_vit" / entry.file_name
    )
    model = tiny(**dict(models.FAMILIES["dinov2"].arguments(), image_size=48))
    notes = load_weights(
        model, "dinov2_lvd142m", cache_dir=tmp_path, resample_method="timm"
    )
    assert any("4x4 to a 6x6" in note for note in notes)
    expected = np.load(fixture("timm_dinov2.npz"))
    out = model.predict(expected["images_48"], verbose=0)
    np.testing.assert_allclose(out, expected["logits_48"], atol=1e-5, rtol=1e-5)


def test_dynamic_size_family_model_equals_the_resized_one():
    options = dict(models.FAMILIES["dinov2"].arguments(), image_size=32)
    dynamic = tiny(**options, dynamic_image_size=True)
    load_weights(dynamic, fixture("timm_dinov2.safetensors"))
    static = keras_vit.with_image_size(dynamic, 48)
    x = images(batch=2, size=(48, 48))
    np.testing.assert_allclose(dynamic(x), static(x), atol=1e-5)


@pytest.mark.parametrize("name", ["timm_siglip", "timm_dinov2", "timm_qknorm_fcnorm"])
def test_family_models_under_mixed_bfloat16(name):
    expected = np.load(fixture(f"{name}.npz"))
    keras.config.set_dtype_policy("mixed_bfloat16")
    try:
        model = tiny(**FAMILY_FIXTURES[name])
        load_weights(model, fixture(f"{name}.safetensors"))
        out = np.asarray(keras.ops.cast(model(expected["images"]), "float32"))
    finally:
        keras.config.set_dtype_policy("float32")
    assert np.isfinite(out).all()
    scale = np.abs(expected["logits"]).max()
    np.testing.assert_allclose(out, expected["logits"], atol=0.05 * scale)


def test_with_image_size_keeps_both_prefix_rows_of_a_distilled_table():
    model = tiny(distillation=True)
    load_weights(model, fixture("timm_deit_distilled.safetensors"))
    bigger = keras_vit.with_image_size(model, 48)
    old = model.get_layer("posembed_input").embedding.numpy()
    new = bigger.get_layer("posembed_input").embedding.numpy()
    assert new.shape == (1, 2 + 36, 32)
    np.testing.assert_array_equal(new[:, :2], old[:, :2])  # class, distillation
    for name in ("dist_token", "head", "head_dist"):
        for a, b in zip(
            model.get_layer(name).weights, bigger.get_layer(name).weights, strict=True
        ):
            np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_a_family_tag_for_a_plain_model_names_the_builder_before_any_download(
    monkeypatch,
):
    from keras_vit.weights import registry

    def no_download(*args, **kwargs):
        raise AssertionError("downloaded")

    monkeypatch.setattr(registry, "fetch", no_download)
    with keras.StatelessScope(initialize_variables=False):
        with pytest.raises(
            CheckpointError,
            match=r"'dinov2_lvd142m' is a DINOv2 with registers checkpoint: this "
            r"tag needs keras_vit\.models\.DINOv2_S14 \(the model differs in "
            r"num_registers, no_embed_class, layer_scale_init\)",
        ):
            keras_vit.ViT("S/14", image_size=518, weights="dinov2_lvd142m")
        model = models.DINOv2_S14(image_size=28)
    with pytest.raises(AssertionError, match="downloaded"):  # the family fits
        load_weights(model, "dinov2_lvd142m")


def test_res_post_norm_blocks_start_near_identity_and_round_trip(tmp_path):
    """timm's ResPostBlock with `init_values`: the post-norms' scales start at
    `layer_scale_init` (no LayerScale weights), so a fresh block barely moves
    its input; the option is read back from a built model and kept through a
    `.keras` file."""
    model = tiny(**models.FAMILIES["rpn"].arguments())
    block = ViTLayout.of(model).block(0)
    assert not [w.path for w in block.weights if "layer_scale" in w.path]
    np.testing.assert_allclose(block.norm_1.gamma.numpy(), 1e-5)
    np.testing.assert_allclose(block.norm_2.gamma.numpy(), 1e-5)
    x = np.random.default_rng(0).normal(size=(2, 16, 32)).astype("float32")
    moved = np.abs(np.asarray(block(x)) - x).max()
    assert moved < 1e-3  # two unit-variance branches scaled by 1e-5 (+ beta 0)
    pre = keras_vit.layers.TransformerBlock(num_heads=2, mlp_dim=64)
    assert np.abs(np.asarray(pre(x)) - x).max() > 0.1  # pre-norm: not so
    options = ViTLayout.of(model).encoder_options
    assert options == models.FAMILIES["rpn"].options_for("test/8")
    randomize(model, seed=4)
    path = str(tmp_path / "rpn.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    pixels = images(2, (32, 32), seed=5)
    np.testing.assert_array_equal(np.asarray(loaded(pixels)), np.asarray(model(pixels)))
