"""Hugging Face DINOv2 / SigLIP `.safetensors` and big_vision SigLIP `.npz`.

The fixtures were written by `scripts/make_hf_family_fixtures.py` with
transformers (tiny random models; `bv_siglip.npz` is the same SigLIP in
big_vision's key layout); these tests need only NumPy and the fixtures.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest
from doc_blocks import write_safetensors

import keras_vit
from keras_vit.models.variants import Variant
from keras_vit.models.variants import parse_variant
from keras_vit.models.zoo import FAMILIES
from keras_vit.weights import CheckpointError
from keras_vit.weights import load_weights
from keras_vit.weights import read_safetensors
from keras_vit.weights import to_original_layout

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")


def fixture(name):
    return os.path.join(FIXTURES, name)


def _model(family, variant="test/8", **kwargs):
    options = {**FAMILIES[family].arguments(), "image_size": 32, **kwargs}
    return keras_vit.ViT(variant, **options)


def _swiglu_spec():  # HF's SwiGLU hidden width at D=32, mlp_ratio=2: 48
    return dataclasses.replace(parse_variant("test/8"), variant=Variant(32, 2, 48, 2))


CASES = {
    "hf_dinov2_reg": lambda: _model("dinov2"),
    "hf_dinov2": lambda: _model("dinov2", num_registers=0),
    "hf_dinov2_swiglu": lambda: _model(
        "dinov2", _swiglu_spec(), num_registers=0, mlp="swiglu"
    ),
    "hf_siglip": lambda: _model("siglip", gelu_approximate=True),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hugging_face_family_gives_transformers_outputs(name):
    model = CASES[name]()
    assert load_weights(model, fixture(f"{name}.safetensors")) == []
    expected = np.load(fixture(f"{name}.npz"))
    out = np.asarray(model(expected["images"]))
    np.testing.assert_allclose(out, expected["logits"], atol=1e-5, rtol=0)


def test_big_vision_siglip_npz_gives_the_same_outputs():
    model = CASES["hf_siglip"]()
    assert load_weights(model, fixture("bv_siglip.npz")) == []
    expected = np.load(fixture("hf_siglip.npz"))
    out = np.asarray(model(expected["images"]))
    np.testing.assert_allclose(out, expected["logits"], atol=1e-5, rtol=0)


def _big_vision(tmp_path, edit):
    params = dict(np.load(fixture("bv_siglip.npz")))
    edit(params)
    path = tmp_path / "edited.npz"
    np.savez(path, **params)
    return path


def test_scanned_big_vision_checkpoint_is_unstacked(tmp_path):
    def scan(params):
        prefix = "params/img/Transformer/encoderblock_"
        leaves = {k.split("/", 4)[4] for k in params if k.startswith(prefix)}
        for leaf in leaves:
            stacked = [params.pop(f"{prefix}{i}/{leaf}") for i in range(2)]
            params[f"params/img/Transformer/encoderblock/{leaf}"] = np.stack(stacked)

    model = CASES["hf_siglip"]()
    load_weights(model, _big_vision(tmp_path, scan))
    expected = np.load(fixture("hf_siglip.npz"))
    np.testing.assert_allclose(
        np.asarray(model(expected["images"])), expected["logits"], atol=1e-5, rtol=0
    )


def test_big_vision_text_tower_is_left_out(tmp_path):
    def add_text(params):
        params["params/txt/Embed_0/embedding"] = np.zeros((10, 32), "float32")
        params["params/t"] = np.ones((1,), "float32")
        params["params/b"] = np.ones((1,), "float32")

    model = CASES["hf_siglip"]()
    assert load_weights(model, _big_vision(tmp_path, add_text)) == []


def test_big_vision_missing_key_is_named_and_nothing_changes(tmp_path):
    key = "params/img/MAPHead_0/probe"
    model = CASES["hf_siglip"]()
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(CheckpointError, match="MAPHead_0/probe"):
        load_weights(model, _big_vision(tmp_path, lambda p: p.pop(key)))
    for old, new in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(old, new.numpy())


def test_dinov2_class_position_row_is_folded_into_the_class_token():
    tensors = read_safetensors(fixture("hf_dinov2_reg.safetensors"))
    params = to_original_layout(tensors, num_heads=2)
    table = tensors["embeddings.position_embeddings"]
    assert params["Transformer/posembed_input/pos_embedding"].shape == (1, 16, 32)
    np.testing.assert_allclose(
        params["cls"], tensors["embeddings.cls_token"] + table[:, :1]
    )
    assert params["reg"].shape == (1, 4, 32)
    assert not any("mask_token" in k for k in params)  # pre-training only


def test_siglip_packed_map_projection_is_split_per_head():
    tensors = read_safetensors(fixture("hf_siglip.safetensors"))
    params = to_original_layout(tensors, num_heads=2)
    mha = "MAPHead_0/MultiHeadDotProductAttention_0"
    for name in ("query", "key", "value"):
        assert params[f"{mha}/{name}/kernel"].shape == (32, 2, 16)
        assert params[f"{mha}/{name}/bias"].shape == (2, 16)
    weight = tensors["head.attention.in_proj_weight"]
    np.testing.assert_array_equal(
        params[f"{mha}/key/kernel"].reshape(32, 32), weight[32:64].T
    )


def test_hf_dinov2_into_a_model_with_a_class_row_is_refused_unchanged():
    model = _model("dinov2", no_embed_class=False)
    before = [w.numpy().copy() for w in model.weights]
    with pytest.raises(CheckpointError, match="pos_embedding"):
        load_weights(model, fixture("hf_dinov2_reg.safetensors"))
    for old, new in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(old, new.numpy())


def test_hf_siglip_into_a_token_pooled_model_is_refused():
    model = _model("dinov2", num_registers=0)
    with pytest.raises(CheckpointError):
        load_weights(model, fixture("hf_siglip.safetensors"))


def test_truncated_hf_file_is_named(tmp_path):
    data = open(fixture("hf_siglip.safetensors"), "rb").read()
    path = tmp_path / "cut.safetensors"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="truncated"):
        load_weights(CASES["hf_siglip"](), path)


def test_whole_siglip_model_loads_its_vision_tower(tmp_path):
    tensors = read_safetensors(fixture("hf_siglip.safetensors"))
    whole = {f"vision_model.{k}": v for k, v in tensors.items()}
    whole["text_model.embeddings.token_embedding.weight"] = np.zeros((8, 32), "f4")
    whole["logit_scale"] = np.ones((1,), "f4")
    whole["logit_bias"] = np.zeros((1,), "f4")
    path = tmp_path / "siglip_whole.safetensors"
    write_safetensors(path, whole)
    model = CASES["hf_siglip"]()
    assert load_weights(model, path) == []
    expected = np.load(fixture("hf_siglip.npz"))
    np.testing.assert_allclose(
        np.asarray(model(expected["images"])), expected["logits"], atol=1e-5, rtol=0
    )
