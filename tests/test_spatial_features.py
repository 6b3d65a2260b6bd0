"""Spatial feature maps for dense tasks: `feature_extractor(spatial=, norm=)`.

`spatial=True` lays each block's patch tokens out on the patch grid
`(B, h, w, D)`, prefix tokens dropped; `norm=True` applies the final norm
first. Checked on tiny models against the token sequences of the same
model (registers, distillation, no class token, dynamic size, padding,
hybrid), and against timm 1.0.31's `forward_intermediates(...,
output_fmt="NCHW")` maps, transposed to channels last, on the Hub fixtures
of `tests/fixtures/hub/`.
"""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import pytest
from helpers import assert_config_is_constructor_args
from helpers import images
from helpers import randomize

import keras_vit
from keras_vit.layers import TokenGrid
from keras_vit.models import ViTLayout
from keras_vit.models.layout import LayoutError
from keras_vit.models.variants import custom_spec
from keras_vit.models.zoo import FAMILIES
from keras_vit.weights import load_weights


def _vit(image_size=16, **kwargs) -> keras.Model:
    kwargs.setdefault("num_classes", 3)
    model = keras_vit.ViT("test/4", image_size=image_size, **kwargs)
    randomize(model, seed=1)
    return model


def _grid(tokens, prefix, grid) -> np.ndarray:
    """`tokens[:, prefix:]` reshaped to `(B, h, w, D)`, in NumPy."""
    tokens = np.asarray(tokens)
    return tokens[:, prefix:].reshape(tokens.shape[0], *grid, tokens.shape[-1])


def _assert_maps_are_the_tokens(model, x, grid):
    """Spatial blocks == the token extractor's blocks on the grid (both norms)."""
    prefix = ViTLayout.of(model).num_prefix_tokens
    tokens = keras_vit.feature_extractor(model, include_pooled=False)(x)
    maps = keras_vit.feature_extractor(model, include_pooled=False, spatial=True)(x)
    for i in range(2):
        assert maps[f"block_{i}"].shape == (x.shape[0], *grid, 32)
        np.testing.assert_array_equal(
            maps[f"block_{i}"], _grid(tokens[f"block_{i}"], prefix, grid)
        )
    # `"tokens"` stays the sequence; with the norm, the last block is it.
    np.testing.assert_array_equal(maps["tokens"], tokens["tokens"])
    normed = keras_vit.feature_extractor(
        model, blocks=[-1], include_pooled=False, spatial=True, norm=True
    )(x)
    np.testing.assert_allclose(
        normed["block_1"], _grid(normed["tokens"], prefix, grid), atol=1e-6
    )


@pytest.mark.parametrize(
    "options, prefix",
    [
        ({}, 1),
        ({"num_registers": 4}, 5),
        ({"distillation": True}, 2),
        ({"distillation": True, "num_registers": 2, "no_embed_class": True}, 4),
        ({"class_token": False, "pooling": "gap"}, 0),
    ],
    ids=["class", "class+registers", "distillation", "dist+registers", "no_class"],
)
def test_maps_are_the_patch_tokens_on_the_grid(options, prefix):
    model = _vit(image_size=(16, 24), **options)
    assert ViTLayout.of(model).num_prefix_tokens == prefix
    _assert_maps_are_the_tokens(model, images(size=(16, 24)), (4, 6))


def test_spatial_and_norm_leave_the_other_outputs_and_the_default_alone():
    model = _vit(num_registers=4)
    x = images(size=(16, 16))
    plain = keras_vit.feature_extractor(model)(x)
    assert plain["block_0"].shape == (2, 21, 32)  # unchanged: the sequence
    dense = keras_vit.feature_extractor(model, spatial=True, norm=True)(x)
    assert set(dense) == set(plain) == {"pooled", "tokens", "block_0", "block_1"}
    for key in ("pooled", "tokens"):
        np.testing.assert_array_equal(dense[key], plain[key])
    only = keras_vit.feature_extractor(
        model, blocks=[0], include_pooled=False, include_tokens=False, spatial=True
    )
    assert list(only.output) == ["block_0"] and only.output["block_0"].shape == (
        None, 4, 4, 32,
    )  # fmt: skip
    # Shared weights: the extractor adds no parameter (the head is left out).
    dense = keras_vit.feature_extractor(model, spatial=True, norm=True)
    head = model.get_layer("head").count_params()
    assert dense.count_params() == model.count_params() - head


def test_norm_is_the_encoder_norm_layer_applied_to_each_block():
    model = _vit(num_registers=4, distillation=True)
    x = images(size=(16, 16))
    tokens = keras_vit.feature_extractor(model, include_pooled=False)(x)
    norm = model.get_layer("encoder_norm")
    for spatial in (False, True):
        out = keras_vit.feature_extractor(
            model, include_pooled=False, spatial=spatial, norm=True
        )(x)
        for i in range(2):
            expected = np.asarray(norm(tokens[f"block_{i}"]))
            if spatial:
                expected = _grid(expected, 6, (4, 4))
            np.testing.assert_allclose(out[f"block_{i}"], expected, atol=1e-6)
        np.testing.assert_allclose(
            out["block_1"],
            _grid(tokens["tokens"], 6, (4, 4)) if spatial else tokens["tokens"],
            atol=1e-6,
        )


def test_norm_of_an_fc_norm_model_is_the_identity_as_timm():
    # timm's `self.norm` is `Identity` when `fc_norm` normalises the pooled
    # token instead: `forward_intermediates(norm=True)` then changes nothing.
    model = _vit(pooling="gap", fc_norm=True)
    assert not ViTLayout.of(model).has("encoder_norm")
    x = images(size=(16, 16))
    plain = keras_vit.feature_extractor(model, spatial=True)(x)
    normed = keras_vit.feature_extractor(model, spatial=True, norm=True)(x)
    for key in plain:
        np.testing.assert_array_equal(normed[key], plain[key])


def test_dynamic_model_gives_each_batchs_grid():
    static = _vit(image_size=16, num_registers=4)
    dynamic = keras_vit.ViT(
        "test/4", image_size=16, num_classes=3, num_registers=4,
        dynamic_image_size=True,
    )  # fmt: skip
    dynamic.set_weights(static.get_weights())
    features = keras_vit.feature_extractor(dynamic, spatial=True, norm=True)
    assert features.output["block_0"].shape == (None, None, None, 32)
    for size in [(16, 24), (28, 12)]:
        x = images(size=size, seed=size[0])
        grid = (size[0] // 4, size[1] // 4)
        out = features(x)
        resized = keras_vit.with_image_size(static, size)
        expected = keras_vit.feature_extractor(resized, spatial=True, norm=True)(x)
        for key in ("block_0", "block_1"):
            assert out[key].shape == (2, *grid, 32)
            np.testing.assert_allclose(out[key], expected[key], atol=1e-5)
        _assert_maps_are_the_tokens(dynamic, x, grid)


def test_padded_model_gives_the_padded_grid():
    static = _vit(image_size=(20, 24))
    padded = keras_vit.ViT(
        "test/4", image_size=(20, 24), num_classes=3, dynamic_image_size=True,
        dynamic_image_pad=True,
    )  # fmt: skip
    padded.set_weights(static.get_weights())
    x = images(size=(18, 23))
    out = keras_vit.feature_extractor(padded, spatial=True)(x)
    zero_padded = np.pad(x, ((0, 0), (0, 2), (0, 1), (0, 0)))  # (2, 20, 24, 3)
    expected = keras_vit.feature_extractor(static, spatial=True)(zero_padded)
    for key in ("block_0", "block_1"):
        assert out[key].shape == (2, 5, 6, 32)  # ceil(18 / 4), ceil(23 / 4)
        np.testing.assert_allclose(out[key], expected[key], atol=1e-5)
    _assert_maps_are_the_tokens(padded, x, (5, 6))


def test_hybrid_grid_is_the_resnet_maps():
    model = keras_vit.ViT(
        "test/8", image_size=32, num_classes=3, backbone=(1,),
        dynamic_image_size=True,
    )  # fmt: skip
    randomize(model, seed=2)
    assert ViTLayout.of(model).stride == (8, 8)
    _assert_maps_are_the_tokens(model, images(size=(48, 64)), (6, 8))


def test_cnn_blocks_are_maps_already():
    model = keras_vit.AlterNet("test", image_size=16, num_classes=3)
    x = images(size=(16, 16))
    plain = keras_vit.feature_extractor(model)(x)
    spatial = keras_vit.feature_extractor(model, spatial=True)(x)
    for key in plain:
        np.testing.assert_array_equal(spatial[key], plain[key])
    with pytest.raises(LayoutError, match="no final norm"):
        keras_vit.feature_extractor(model, norm=True)


def test_spatial_extractor_round_trips_and_keeps_the_dtype(tmp_path):
    model = keras_vit.ViT(
        "test/4", image_size=16, num_classes=3, num_registers=4,
        dynamic_image_size=True, dynamic_image_pad=True,
    )  # fmt: skip
    randomize(model)
    features = keras_vit.feature_extractor(model, blocks=[0], spatial=True, norm=True)
    features.save(tmp_path / "features.keras")
    loaded = keras.saving.load_model(tmp_path / "features.keras")
    x = images(size=(13, 22))
    for key, value in features(x).items():
        np.testing.assert_array_equal(loaded(x)[key], value)
    model.save(tmp_path / "model.keras")  # the model itself still saves
    # A bfloat16 model's maps stay bfloat16, whatever the policy now is.
    keras.config.set_dtype_policy("mixed_bfloat16")
    half = _vit()
    keras.config.set_dtype_policy("float32")
    dense = keras_vit.feature_extractor(half, spatial=True, norm=True)
    out = dense(images(batch=1, size=(16, 16)))
    assert keras.backend.standardize_dtype(out["block_1"].dtype) == "bfloat16"
    assert_config_is_constructor_args(TokenGrid(5, (16, 8)))


def test_token_grid_layer():
    layer = TokenGrid(num_prefix_tokens=2, patch_size=(4, 2))
    tokens = np.arange(2 * 14 * 3, dtype="float32").reshape(2, 14, 3)
    out = layer(tokens, grid_source=np.zeros((2, 12, 8, 5), "float32"))
    np.testing.assert_array_equal(out, tokens[:, 2:].reshape(2, 3, 4, 3))
    symbolic = layer(keras.Input((None, 3)), grid_source=keras.Input((None, 8, 5)))
    assert symbolic.shape == (None, None, 4, 3)
    with pytest.raises(ValueError, match="num_prefix_tokens"):
        TokenGrid(-1)


# -- against timm ----------------------------------------------------------

HUB = os.path.join(os.path.dirname(__file__), "fixtures", "hub")
# timm name -> keras_vit family (None: the paper's ViT, AugReg).
TIMM_FAMILIES = {
    "vit_base_patch16_224.augreg2_in21k_ft_in1k": None,
    "deit3_small_patch16_224.fb_in22k_ft_in1k": "deit3",
    "vit_small_patch14_reg4_dinov2.lvd142m": "dinov2",
    "vit_base_patch16_siglip_224.webli": "siglip",
}


def _timm_fixture(name):
    folder = os.path.join(HUB, f"timm--{name}")
    if not os.path.exists(f"{folder}.npz"):
        pytest.skip(f"tests/fixtures/hub/timm--{name} not written yet")
    with open(os.path.join(folder, "config.json")) as f:
        args = json.load(f)["model_args"]
    with np.load(f"{folder}.npz") as data:
        return folder, args, dict(data)


def _timm_model(folder, args, family, **kwargs):
    """The fixture's tiny model rebuilt by hand (its `config.json`'s args)."""
    width, heads = args["embed_dim"], args["num_heads"]
    spec = custom_spec(
        args["patch_size"], hidden_dim=width, depth=args["depth"],
        mlp_dim=int(width * args["mlp_ratio"]), num_heads=heads,
    )  # fmt: skip
    top = {"num_classes": args["num_classes"]} if args["num_classes"] else {}
    model = keras_vit.ViT(
        spec,
        image_size=tuple(args["img_size"]),
        include_top=bool(top),
        options=FAMILIES[family].options if family else None,
        **top,
        **kwargs,
    )
    load_weights(model, os.path.join(folder, "model.safetensors"))
    return model


def _assert_timm_close(ours, theirs):
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(np.asarray(ours), theirs, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", list(TIMM_FAMILIES))
def test_maps_equal_timms_forward_intermediates(name):
    folder, args, fixture = _timm_fixture(name)
    model = _timm_model(folder, args, TIMM_FAMILIES[name])
    pixels = fixture["pixels"]  # (B, H, W, C), normalised as timm's
    maps = keras_vit.feature_extractor(
        model, blocks=[0, 1], include_pooled=False, include_tokens=False,
        spatial=True,
    )(pixels)  # fmt: skip
    _assert_timm_close(maps["block_0"], fixture["intermediates_0"])
    _assert_timm_close(maps["block_1"], fixture["intermediates_1"])
    normed = keras_vit.feature_extractor(
        model, blocks=[1], include_pooled=False, include_tokens=False,
        spatial=True, norm=True,
    )(pixels)  # fmt: skip
    _assert_timm_close(normed["block_1"], fixture["intermediates_norm_1"])


def test_dynamic_dinov2_maps_equal_timms_at_64x48():
    name = "vit_small_patch14_reg4_dinov2.lvd142m"
    folder, args, fixture = _timm_fixture(name)
    model = _timm_model(
        folder, args, "dinov2", dynamic_image_size=True, position_resample="timm"
    )
    features = keras_vit.feature_extractor(
        model, blocks=[0, 1], include_pooled=False, include_tokens=False,
        spatial=True,
    )  # fmt: skip
    maps = features(fixture["pixels_64"])  # (2, 64, 48, 3): an 8 x 6 grid
    _assert_timm_close(maps["block_1"], fixture["intermediates_64_1"])
    maps = features(fixture["pixels"])  # and the native 32 px, same model
    _assert_timm_close(maps["block_0"], fixture["intermediates_0"])
    _assert_timm_close(maps["block_1"], fixture["intermediates_1"])
