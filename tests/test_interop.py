"""keras-hub's ViT to keras_vit and back (`keras_vit.interop.keras_hub`).

The keras-hub models are built in-process with random weights (no
download); every round trip must compute the same outputs to 1e-5.
"""

from __future__ import annotations

import builtins

import keras_hub
import numpy as np
import pytest

import keras_vit
from keras_vit.interop import from_keras_hub
from keras_vit.interop import keras_hub_checkpoint
from keras_vit.interop import to_keras_hub
from keras_vit.weights import CheckpointError
from keras_vit.weights import load_weights

TINY = dict(
    image_shape=(16, 16, 3), patch_size=4, num_layers=2, num_heads=2,
    hidden_dim=32, mlp_dim=64,
)  # fmt: skip


def _randomize(model, seed=0):
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        value = rng.normal(0.0, 0.3, variable.shape).astype("float32")
        if variable.path.endswith("gamma"):
            value += 1.0
        variable.assign(value)


def _images(seed=1, size=16):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (2, size, size, 3)).astype("float32")


def _backbone(**kwargs):
    backbone = keras_hub.models.ViTBackbone(**{**TINY, **kwargs})
    _randomize(backbone)
    return backbone


def _classifier(pooling="token", **kwargs):
    backbone = keras_hub.models.ViTBackbone(**{**TINY, **kwargs})
    classifier = keras_hub.models.ViTImageClassifier(
        backbone=backbone,
        num_classes=3,
        pooling=pooling,
        intermediate_dim=8,
        activation="softmax",
    )
    _randomize(classifier)
    return classifier


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-5, rtol=0)


@pytest.mark.parametrize("make", [_backbone, _classifier], ids=["backbone", "head"])
def test_keras_hub_round_trip_gives_identical_outputs(make):
    hub = make()
    images = _images()
    expected = np.asarray(hub(images))
    vit = from_keras_hub(hub)
    _close(vit(images), expected)
    back = to_keras_hub(vit)
    assert type(back) is type(hub)
    _close(back(images), expected)


def test_no_class_token_gap_classifier_round_trips():
    hub = _classifier(pooling="gap", use_class_token=False)
    vit = from_keras_hub(hub)
    assert vit.get_layer("pool").get_config()["mode"] == "gap"
    _close(vit(_images()), hub(_images()))
    _close(to_keras_hub(vit)(_images()), hub(_images()))


def test_keras_hub_without_biases_converts_with_zero_biases():
    hub = _backbone(use_mha_bias=False, use_mlp_bias=False, use_patch_bias=False)
    vit = from_keras_hub(hub)
    _close(vit(_images()), hub(_images()))
    assert not np.any(vit.get_layer("embedding").bias.numpy())


def test_keras_vit_classifier_to_keras_hub_and_back():
    model = keras_vit.ViT("test/4", image_size=16, num_classes=5, representation_size=8)
    _randomize(model, seed=3)
    images = _images(seed=4)
    hub = to_keras_hub(model)
    assert isinstance(hub, keras_hub.models.ViTImageClassifier)
    _close(hub(images), model(images))
    _close(from_keras_hub(hub)(images), model(images))


def test_a_model_without_qkv_biases_converts_with_zero_biases():
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3, qkv_bias=False)
    _randomize(model, seed=10)
    images = _images(seed=11)
    hub = to_keras_hub(model)
    _close(hub(images), model(images))
    biases = [w for w in hub.weights if w.path.endswith(("query/bias", "key/bias"))]
    assert biases and not any(np.any(w.numpy()) for w in biases)


def test_a_dinov2_model_without_qkv_biases_converts_with_its_drop_path():
    model = keras_vit.ViT(
        "test/8", image_size=32, include_top=False, pooling=None, qkv_bias=False,
        drop_path_rate=0.1,
    )  # fmt: skip
    _randomize(model, seed=12)
    images = _images(seed=13, size=32)
    hub = to_keras_hub(model, backbone="dinov2")
    assert hub.drop_path_rate == pytest.approx(0.1)
    _close(hub(images), model(images))


def test_converted_model_is_a_full_keras_vit_model():
    vit = from_keras_hub(_classifier())
    layout = keras_vit.models.ViTLayout.of(vit)
    assert (layout.grid_size, layout.depth, layout.num_prefix_tokens) == ((4, 4), 2, 1)
    grown = keras_vit.with_image_size(vit, 32)  # the recipes' resize works
    assert grown(_images(size=32)).shape == (2, 3)


def test_checkpoint_feeds_the_one_weights_path():
    hub = _backbone()
    checkpoint = keras_hub_checkpoint(hub)
    assert checkpoint.grid_size == (4, 4)
    assert checkpoint.params["Transformer/posembed_input/pos_embedding"].shape == (
        1, 17, 32,
    )  # fmt: skip
    model = keras_vit.ViT("test/4", image_size=16, include_top=False, pooling=None)
    assert load_weights(model, checkpoint) == []
    _close(model(_images()), hub(_images()))


def test_keras_hub_checkpoint_into_another_size_is_refused_unchanged():
    model = keras_vit.ViT("S/4", image_size=16, include_top=False, pooling=None)
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(keras_vit.weights.VariantMismatchError):
        load_weights(model, keras_hub_checkpoint(_backbone()))
    for old, new in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(old, new.numpy())


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(layer_scale_init=1e-5), "LayerScale"),
        (dict(num_registers=4), "register tokens"),
        (dict(qk_norm=True), "QK-norm"),
        (dict(gelu_approximate=True), "tanh GELU"),
        (dict(include_preprocessing=True), "include_preprocessing"),
        (dict(pooling="gap"), "pooling='gap' that skips the class token"),
        (dict(no_embed_class=True), "no_embed_class"),
        (dict(class_token=False, pooling="map"), "pooling='map'"),
        (dict(pooling="gap", fc_norm=True), "fc_norm"),
        (dict(dynamic_image_size=True), "dynamic image size"),
        # Options the converter does not map are named as they are set.
        (dict(embedding_norm=True), "embedding_norm=True"),
        (dict(proj_bias=False, res_post_norm=True), "proj_bias=False, res_post_norm"),
        (dict(attention_norm=True, mlp_norm=True), "attention_norm=True, mlp_norm"),
        (dict(pre_norm=True), "pre_norm=True"),
        (dict(norm="rms"), "norm='rms'"),
    ],
)
def test_what_keras_hub_lacks_is_named_in_one_line(kwargs, message):
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3, **kwargs)
    with pytest.raises(ValueError, match="Cannot convert") as info:
        to_keras_hub(model)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_keras_hub_gap_with_class_token_is_refused():
    with pytest.raises(ValueError, match="averages the class token"):
        from_keras_hub(_classifier(pooling="gap"))


def test_other_keras_hub_settings_are_refused():
    with pytest.raises(ValueError, match="layer_norm_epsilon=1e-05"):
        from_keras_hub(_backbone(layer_norm_epsilon=1e-5))
    with pytest.raises(ValueError, match="non-square patch_size"):
        from_keras_hub(_backbone(patch_size=(4, 2)))
    with pytest.raises(TypeError, match="not a keras-hub ViTBackbone"):
        from_keras_hub(keras_vit.ViT("test/4", image_size=16))


def test_missing_keras_hub_names_the_extra(monkeypatch):
    real_import = builtins.__import__

    def no_keras_hub(name, *args, **kwargs):
        if name == "keras_hub" or name.startswith("keras_hub."):
            raise ImportError("No module named 'keras_hub'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_keras_hub)
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    with pytest.raises(ImportError, match=r"pip install \"keras-hub>=0\.32\"$"):
        to_keras_hub(model)


def test_to_keras_hub_names_a_missing_value(monkeypatch):
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    from keras_vit.interop import keras_hub as interop

    real = interop.from_model

    def without_last_norm(vit):
        checkpoint = real(vit)
        del checkpoint.params["Transformer/encoder_norm/bias"]
        return checkpoint

    monkeypatch.setattr(interop, "from_model", without_last_norm)
    with pytest.raises(CheckpointError, match="vit_encoder/ln/beta"):
        to_keras_hub(model)


# -- DINOv2 ------------------------------------------------------------------


def _dinov2(**kwargs):
    options = dict(
        patch_size=8, num_layers=2, hidden_dim=32, num_heads=2, intermediate_dim=64,
        image_shape=(32, 32, 3), position_embedding_shape=(48, 48, 3),
    )  # fmt: skip
    backbone = keras_hub.models.DINOV2Backbone(**{**options, **kwargs})
    _randomize(backbone)
    for variable in backbone.weights:  # LayerScale around 1, not 0
        if "lambda1" in variable.path:
            variable.assign(variable.numpy() + 1.0)
    return backbone


@pytest.mark.parametrize(
    "kwargs",
    [dict(num_register_tokens=4), dict(use_swiglu_ffn=True, name="dino")],
    ids=["registers", "swiglu"],
)
def test_keras_hub_dinov2_round_trip_gives_identical_outputs(kwargs):
    hub = _dinov2(**kwargs)
    images = _images(size=32)
    expected = np.asarray(hub(images))
    vit = from_keras_hub(hub)
    layout = keras_vit.models.ViTLayout.of(vit)
    assert layout.num_registers == kwargs.get("num_register_tokens", 0)
    assert vit.get_layer("posembed_input").get_config()["num_prefix_tokens"] == 0
    _close(vit(images), expected)
    back = to_keras_hub(vit, backbone="dinov2")
    assert isinstance(back, keras_hub.models.DINOV2Backbone)
    _close(back(images), expected)


def test_keras_vit_dinov2_family_to_keras_hub():
    model = keras_vit.models.family_model(
        "test/8", "dinov2", image_size=32, pooling=None
    )
    _randomize(model, seed=6)
    images = _images(seed=7, size=32)
    _close(to_keras_hub(model, backbone="dinov2")(images), model(images))


def test_plain_vit_becomes_a_dinov2_backbone_with_unit_layer_scale():
    model = keras_vit.ViT("test/8", image_size=32, include_top=False, pooling=None)
    _randomize(model, seed=8)
    images = _images(seed=9, size=32)
    _close(to_keras_hub(model, backbone="dinov2")(images), model(images))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(pooling="token"), "pooling"),
        (dict(qk_norm=True, pooling=None), "QK-norm"),
        (dict(class_token=False, pooling=None), "without a class token"),
        (dict(res_post_norm=True, pooling=None), "res_post_norm=True"),
    ],
)
def test_what_keras_hub_dinov2_lacks_is_named(kwargs, message):
    model = keras_vit.ViT("test/8", image_size=32, include_top=False, **kwargs)
    with pytest.raises(ValueError, match="DINOV2Backbone has no") as info:
        to_keras_hub(model, backbone="dinov2")
    assert message in str(info.value)


def test_unknown_keras_hub_architecture_is_named():
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    with pytest.raises(ValueError, match="'vit', 'dinov2' or 'dinov3'"):
        to_keras_hub(model, backbone="siglip")


def test_a_keras_hub_preset_folder_loads_by_name(tmp_path):
    """`from_pretrained(folder)` of a preset keras-hub saved: its outputs and
    its image converter's scale and offset as the input contract."""
    classifier = _classifier()
    classifier.save_to_preset(str(tmp_path / "preset"))
    vit = keras_vit.from_pretrained(str(tmp_path / "preset"))
    images = _images()
    _close(vit(images), classifier(images))
    assert vit.preprocessing == keras_vit.Preprocessing()  # none saved: ViT's
    converter = keras_hub.layers.ViTImageConverter(
        image_size=(16, 16), scale=1 / 255.0, offset=0.0, interpolation="bicubic"
    )
    classifier.preprocessor = keras_hub.models.ViTImageClassifierPreprocessor(
        image_converter=converter
    )
    classifier.save_to_preset(str(tmp_path / "with_converter"))
    vit = keras_vit.from_pretrained(str(tmp_path / "with_converter"))
    prep = vit.preprocessing
    assert prep.mean == (0.0, 0.0, 0.0) and prep.std == (1.0, 1.0, 1.0)
    assert (prep.interpolation, prep.image_size) == ("bicubic", (16, 16))
