"""`to_timm`: keras_vit weights written back in timm's state-dict keys.

Without torch: the timm fixtures (written by `scripts/make_timm_fixture.py`
and `scripts/make_family_fixtures.py`, every one with 2 heads) must come
back key for key and bit for bit through the original layout, and a
keras_vit model's weights must load back from the timm file they become.
"""

from __future__ import annotations

import glob
import os

import keras
import numpy as np
import pytest
from doc_blocks import write_safetensors

import keras_vit
from keras_vit.models.variants import ResNetSpec
from keras_vit.weights import from_model
from keras_vit.weights import load_weights
from keras_vit.weights import read_safetensors
from keras_vit.weights import to_original_layout
from keras_vit.weights.dialects.timm_writer import to_timm

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
TIMM_FIXTURES = sorted(
    os.path.basename(p)[: -len(".safetensors")]
    for p in glob.glob(os.path.join(FIXTURES, "timm_*.safetensors"))
)
HEADS = 2  # `num_heads=2` in both fixture scripts


def test_there_are_timm_fixtures():
    assert {"timm_vit", "timm_dinov2_swiglu", "timm_siglip"} <= set(TIMM_FIXTURES)


@pytest.mark.parametrize("name", TIMM_FIXTURES)
def test_timm_fixture_comes_back_exactly(name):
    tensors = read_safetensors(os.path.join(FIXTURES, f"{name}.safetensors"))
    written = to_timm(to_original_layout(tensors, HEADS), num_heads=HEADS)
    assert list(sorted(written)) == list(sorted(tensors))
    for key, value in tensors.items():
        assert written[key].dtype == np.float32, key
        assert written[key].flags.c_contiguous, key
        assert written[key].shape == value.shape, key
        np.testing.assert_array_equal(written[key], value, err_msg=key)


MODEL_OPTIONS = {
    "defaults": {},
    "qk_norm_gap_fc_norm": dict(qk_norm=True, pooling="gap", fc_norm=True),
    "registers_layer_scale": dict(
        num_registers=4, layer_scale_init=1e-5, no_embed_class=True
    ),
    "map_no_class_token": dict(class_token=False, pooling="map"),
    "distilled": dict(distillation=True),
    "swiglu_no_qkv_bias": dict(mlp="swiglu", qkv_bias=False),
    "hybrid": dict(variant="test/8", backbone=ResNetSpec((1, 1), width=32)),
}


def _model(options):
    options = dict(options)
    variant = options.pop("variant", "test/4")
    return keras_vit.ViT(variant, image_size=16, num_classes=3, **options)


def _random_model(options, seed):
    model = _model(options)
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.2, weight.shape).astype(weight.dtype))
    return model


@pytest.mark.parametrize("name", sorted(MODEL_OPTIONS))
def test_model_round_trip_through_timm_layout(name, tmp_path):
    options = MODEL_OPTIONS[name]
    model = _random_model(options, seed=len(name))
    tensors = to_timm(from_model(model).params, num_heads=HEADS)
    assert all("/" not in k for k in tensors)  # every key is timm's
    path = str(tmp_path / "model.safetensors")
    write_safetensors(path, tensors)
    fresh = _model(options)
    assert load_weights(fresh, path) == []
    images = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3))
    images = images.astype("float32")
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(fresh(images)),
        keras.ops.convert_to_numpy(model(images)),
    )


def test_timm_keys_of_the_options():
    def written(**options):
        return set(to_timm(from_model(_random_model(options, 0)).params, num_heads=2))

    plain = written()
    assert {"cls_token", "pos_embed", "norm.weight", "head.weight"} <= plain
    assert "blocks.1.attn.qkv.bias" in plain
    assert "blocks.1.attn.qkv.bias" not in written(qkv_bias=False)
    gap = written(qk_norm=True, pooling="gap", fc_norm=True)
    assert {"fc_norm.weight", "blocks.0.attn.q_norm.weight"} <= gap
    assert "norm.weight" not in gap
    distilled = written(distillation=True)
    assert {"dist_token", "head_dist.weight", "head_dist.bias"} <= distilled
    siglip = written(class_token=False, pooling="map")
    assert "cls_token" not in siglip
    assert {"attn_pool.latent", "attn_pool.kv.weight", "attn_pool.q.bias"} <= siglip


def test_unmappable_keys_are_named():
    params = dict(from_model(_random_model({}, 0)).params)
    params["foo/bar"] = np.zeros(3, "float32")
    del params["Transformer/encoderblock_1/MultiHeadDotProductAttention_1/key/kernel"]
    with pytest.raises(ValueError) as error:
        to_timm(params, num_heads=HEADS)
    message = str(error.value)
    assert "foo/bar" in message
    # The query and value kernels are refused: timm fuses them with the key.
    assert "encoderblock_1/MultiHeadDotProductAttention_1/query/kernel" in message
    assert "encoderblock_1/MultiHeadDotProductAttention_1/value/kernel" in message
    assert "blocks.1.attn.qkv.weight" in message


def test_pre_logits_has_no_timm_key():
    model = keras_vit.ViT(
        "test/4", image_size=16, num_classes=3, representation_size=32
    )
    with pytest.raises(ValueError, match=r"pre_logits/kernel.*no\s+timm key"):
        to_timm(from_model(model).params, num_heads=HEADS)


def test_wrong_heads_are_refused():
    params = from_model(_random_model({}, 0)).params
    with pytest.raises(ValueError, match="query/kernel"):
        to_timm(params, num_heads=4)


def test_norm_and_fc_norm_together_are_refused():
    params = dict(from_model(_random_model({}, 0)).params)
    params["fc_norm/scale"] = np.ones(32, "float32")
    params["fc_norm/bias"] = np.zeros(32, "float32")
    with pytest.raises(ValueError, match="fc_norm"):
        to_timm(params, num_heads=HEADS)
