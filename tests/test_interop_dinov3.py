"""keras-hub's DINOv3 to keras_vit and back (`keras_vit.interop.keras_hub`).

The keras-hub backbones are built in-process with every weight random (no
download). keras-hub's `DINOV3Backbone` has one fixed `image_shape`: another
size is a second backbone with the same weights
(`from_config` + `set_weights`), the keras_vit model one dynamic model.
"""

from __future__ import annotations

import json
import os

import keras_hub
import numpy as np
import pytest
from test_rope import EVA
from test_rope import keras_arguments

import keras_vit
from keras_vit.interop import from_keras_hub
from keras_vit.interop import keras_hub_checkpoint
from keras_vit.interop import to_keras_hub
from keras_vit.weights.checkpoint import from_model
from keras_vit.weights.errors import CheckpointError

TINY = dict(
    patch_size=8, num_layers=2, hidden_dim=32, num_heads=2, intermediate_dim=64,
    image_shape=(32, 32, 3),
)  # fmt: skip
TOLERANCE = 1e-5  # float32's floor: the largest token is about 5


def _randomize(model, seed=0):
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        value = rng.normal(0.0, 0.3, variable.shape).astype("float32")
        if variable.path.endswith(("gamma", "lambda1")):
            value += 1.0  # norms and LayerScale around 1
        variable.assign(value)


def _images(shape=(32, 32), seed=1):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (2, *shape, 3)).astype("float32")


def _hub(**kwargs):
    backbone = keras_hub.models.DINOV3Backbone(**{**TINY, **kwargs})
    _randomize(backbone)
    return backbone


def _run(backbone, images):
    return np.asarray(backbone({"pixel_values": images}))


def _tokens(model, images):
    features = keras_vit.feature_extractor(model, blocks=None, include_pooled=False)
    return np.asarray(features(images)["tokens"])


def _close(ours, theirs):
    np.testing.assert_allclose(ours, theirs, atol=TOLERANCE, rtol=0)


def _config(name):
    """The constructor arguments of timm's model of a fixture."""
    with np.load(os.path.join(EVA, f"{name}.npz")) as fixture:
        return json.loads(str(fixture["config"]))


def _resized(backbone, image_shape):
    """The same backbone (same weights) at another `image_shape`."""
    config = {**backbone.get_config(), "image_shape": image_shape}
    other = keras_hub.models.DINOV3Backbone.from_config(config)
    other.set_weights(backbone.get_weights())
    return other


HUB_VARIANTS = {
    "gelu": dict(),
    "gated_qv": dict(
        use_gated_mlp=True, hidden_activation="silu", use_key_bias=False, name="dino"
    ),
    "no_biases": dict(
        use_query_bias=False,
        use_key_bias=False,
        use_value_bias=False,
        use_proj_bias=False,
        use_mlp_bias=False,
        num_register_tokens=0,
    ),  # fmt: skip
    "query_bias_swish": dict(
        use_gated_mlp=True,
        hidden_activation="swish",
        use_key_bias=False,
        use_value_bias=False,
        rope_theta=50.0,
        layer_norm_eps=1e-6,
    ),  # fmt: skip
}
# keras_vit's options for each: (mlp, qkv_bias, registers).
EXPECTED = {
    "gelu": ("gelu", True, 4),
    "gated_qv": ("swiglu", "qv", 4),
    "no_biases": ("gelu", False, 0),
    "query_bias_swish": ("swiglu", "qv", 4),
}


@pytest.mark.parametrize("variant", list(HUB_VARIANTS))
def test_keras_hub_dinov3_gives_its_tokens_at_its_size_and_a_non_square_one(variant):
    hub = _hub(**HUB_VARIANTS[variant])
    images = _images()
    vit = from_keras_hub(hub)
    options = keras_vit.models.ViTLayout.of(vit).encoder_options
    assert (options.mlp, options.qkv_bias, options.num_registers) == EXPECTED[variant]
    assert options.rope.temperature == hub.rope_theta
    assert options.layer_norm_epsilon == hub.layer_norm_eps
    _close(_tokens(vit, images), _run(hub, images))
    wide = _images((24, 40), seed=2)
    _close(_tokens(vit, wide), _run(_resized(hub, (24, 40, 3)), wide))
    back = to_keras_hub(vit, backbone="dinov3")
    assert isinstance(back, keras_hub.models.DINOV3Backbone)
    _close(_run(back, images), _run(hub, images))


def test_the_mask_token_is_left_out():
    hub = _hub()
    params = keras_hub_checkpoint(hub).params
    assert not [key for key in params if "mask" in key]
    assert any(w.path.endswith("mask_token") for w in hub.weights)


@pytest.mark.parametrize(
    "options",
    [dict(), dict(qkv_bias="qv"), dict(qkv_bias=True), dict(mlp="swiglu")],
    ids=["plain", "qv", "qkv", "swiglu"],
)
def test_keras_vit_dinov3_to_keras_hub_and_back_is_exact(options):
    model = keras_vit.models.family_model("test/8", "dinov3", image_size=32, **options)
    _randomize(model, seed=3)
    images = _images(seed=4)
    expected = _tokens(model, images)
    hub = to_keras_hub(model, backbone="dinov3")
    _close(_run(hub, images), expected)
    again = from_keras_hub(hub)
    before, after = from_model(model).params, from_model(again).params
    assert sorted(before) == sorted(after)
    for key, value in before.items():
        np.testing.assert_array_equal(after[key], value, err_msg=key)
    np.testing.assert_array_equal(_tokens(again, images), expected)


@pytest.mark.parametrize(
    "name, size", [("dinov3", (32, 48)), ("dinov3_swiglu", (40, 24))]
)
def test_keras_hub_dinov3_computes_timms_dinov3(name, size):
    """keras-hub's rotary embeddings are timm's (and ours): timm's tokens
    from its fixture, at its size and a non-square one, within float32."""
    arguments = keras_arguments(_config(name))
    variant = arguments.pop("variant")
    arguments.update(include_top=False, pooling=None)
    model = keras_vit.ViT(variant, **arguments, dynamic_image_size=True)
    keras_vit.load_weights(model, os.path.join(EVA, f"{name}.safetensors"))
    with np.load(os.path.join(EVA, f"{name}.npz")) as fixture:
        for which, shape in (("native", (32, 32)), ("other", size)):
            images = fixture[f"images_{which}"].astype("float32")
            assert images.shape[1:3] == shape
            hub = to_keras_hub(model, backbone="dinov3", image_size=shape)
            theirs = fixture[f"tokens_{which}"]
            error = np.abs(_run(hub, images) - theirs).max() / np.abs(theirs).max()
            assert error < TOLERANCE, (which, error)


def test_an_image_shape_off_the_patch_grid_crops_as_keras_hub():
    hub = _hub(image_shape=(36, 44, 3))
    images = _images((36, 44))
    vit = from_keras_hub(hub)
    layout = keras_vit.models.ViTLayout.of(vit)
    assert layout.dynamic and layout.native_image_size == (32, 40)
    _close(_tokens(vit, images), _run(hub, images))
    pooled = from_keras_hub(hub, pooling="gap")
    _close(np.asarray(pooled(images)), _run(hub, images)[:, 5:].mean(axis=1))


def test_keras_hub_stochastic_depth_becomes_keras_vits():
    vit = from_keras_hub(_hub(drop_path_rate=0.2))
    layout = keras_vit.models.ViTLayout.of(vit)
    rates = [layout.block(i).get_config()["drop_path_rate"] for i in (0, 1)]
    assert rates == pytest.approx([0.0, 0.2])


def test_a_keras_hub_dinov3_preset_folder_loads(tmp_path):
    hub = _hub()
    hub.save_to_preset(str(tmp_path / "preset"))
    vit = keras_vit.from_pretrained(str(tmp_path / "preset"))
    images = _images()
    _close(_tokens(vit, images), _run(hub, images))


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(hidden_activation="relu"), "hidden_activation='relu'"),
        (dict(use_gated_mlp=True), "use_gated_mlp=True with hidden_activation='gelu'"),
        (dict(attention_dropout=0.1), "attention_dropout=0.1"),
        (dict(hidden_dim=24, num_heads=4), "a head width of 6"),
    ],
)
def test_what_keras_vit_cannot_express_is_refused_in_one_line(kwargs, message):
    hub = keras_hub.models.DINOV3Backbone(**{**TINY, **kwargs})
    with pytest.raises(ValueError, match="Cannot convert") as info:
        from_keras_hub(hub)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(include_top=True, num_classes=3), "a head"),
        (dict(pooling="map"), "pooling='map'"),
        (dict(qk_norm=True, dropout_rate=0.1), "QK-norm; dropout_rate=0.1"),
        (dict(drop_path_rate=0.1), "drop_path_rate=0.1"),
        (dict(attention_dropout_rate=0.1), "attention_dropout_rate=0.1"),
        (dict(fc_norm=True), "fc_norm"),
        (dict(rope=dict(kind="axial")), "rotary embeddings other than DINOv3's"),
        (dict(include_preprocessing=True), "include_preprocessing"),
        (dict(embedding_norm=True), "embedding_norm=True"),
    ],
)
def test_what_keras_hub_dinov3_lacks_is_named_in_one_line(kwargs, message):
    model = keras_vit.models.family_model("test/8", "dinov3", image_size=32, **kwargs)
    with pytest.raises(ValueError, match="to keras-hub's DINOV3Backbone") as info:
        to_keras_hub(model, backbone="dinov3")
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_a_plain_vit_is_refused_naming_its_position_table():
    model = keras_vit.ViT("test/8", image_size=32, include_top=False, pooling=None)
    with pytest.raises(ValueError, match="a position table; no rotary embeddings"):
        to_keras_hub(model, backbone="dinov3")


def test_image_size_is_for_dinov3_only():
    model = keras_vit.ViT("test/8", image_size=32, include_top=False, pooling=None)
    with pytest.raises(ValueError, match="`image_size` is for backbone='dinov3'"):
        to_keras_hub(model, backbone="dinov2", image_size=48)


def test_a_padding_model_at_a_size_off_the_grid_is_refused():
    model = keras_vit.models.family_model(
        "test/8", "dinov3", image_size=32, dynamic_image_pad=True
    )
    to_keras_hub(model, backbone="dinov3", image_size=(32, 48))  # a multiple: same
    with pytest.raises(ValueError, match="zero-pads images to a multiple of 8"):
        to_keras_hub(model, backbone="dinov3", image_size=(36, 44))


def test_to_keras_hub_dinov3_names_a_missing_value(monkeypatch):
    from keras_vit.interop import keras_hub_dinov3

    model = keras_vit.models.family_model("test/8", "dinov3", image_size=32)
    real = keras_hub_dinov3.from_model

    def without_a_norm(vit):
        checkpoint = real(vit)
        del checkpoint.params["Transformer/encoderblock_1/LayerNorm_2/scale"]
        return checkpoint

    monkeypatch.setattr(keras_hub_dinov3, "from_model", without_a_norm)
    with pytest.raises(CheckpointError, match="encoder/layers_1/norm2/gamma"):
        to_keras_hub(model, backbone="dinov3")
