"""keras_vit.weights with timm and Hugging Face `.safetensors` checkpoints.

The fixtures in `tests/fixtures/` were written once by
`scripts/make_timm_fixture.py` with timm and transformers (tiny random
models, the images, and the outputs PyTorch computed in float64). These
tests need only NumPy and the fixtures.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings

import keras
import ml_dtypes
import numpy as np
import pytest
import reference

import keras_vit
from keras_vit.models.variants import ResNetSpec
from keras_vit.weights import CheckpointError
from keras_vit.weights import load_weights
from keras_vit.weights import read_safetensors
from keras_vit.weights import to_original_layout

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")

MODELS = {
    "timm_vit": dict(image_size=32, num_classes=10),
    "timm_vit_bf16": dict(image_size=32, num_classes=10),
    "timm_vit_gap": dict(
        image_size=(24, 40), num_classes=10, pooling="gap", class_token=False
    ),
    "timm_hybrid": dict(
        image_size=32, num_classes=10, backbone=ResNetSpec((1, 1), width=32)
    ),
    "hf_vit": dict(image_size=32, num_classes=10),
    "hf_vit_pooler": dict(image_size=32, include_top=False, representation_size=32),
}


def fixture(name):
    return os.path.join(FIXTURES, name)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_same_weights_give_the_pytorch_outputs(name):
    # timm and transformers use the exact (erf) GELU.
    model = keras_vit.ViT("test/8", gelu_approximate=False, **MODELS[name])
    assert load_weights(model, fixture(f"{name}.safetensors")) == []
    expected = np.load(fixture(f"{name}.npz"))
    out = keras.ops.convert_to_numpy(model(expected["images"]))
    assert out.shape == expected["logits"].shape
    np.testing.assert_allclose(out, expected["logits"], rtol=1e-4, atol=1e-4)


def test_every_timm_key_maps_to_the_original_layout():
    tensors = read_safetensors(fixture("timm_vit.safetensors"))
    params = to_original_layout(tensors, num_heads=2)
    layout = reference.make_vit_checkpoint(
        hidden_dim=32, depth=2, mlp_dim=64, num_heads=2, patch_size=8,
        image_size=32, num_classes=10, shapes_only=True,
    )  # fmt: skip
    assert {k: v.shape for k, v in params.items()} == {
        k: v.shape for k, v in layout.items()
    }
    # timm's fused (3D, D) qkv in torch layout: rows q, k, v; (out, in).
    qkv = tensors["blocks.1.attn.qkv.weight"]
    query = params[
        "Transformer/encoderblock_1/MultiHeadDotProductAttention_1/query/kernel"
    ]
    value = params[
        "Transformer/encoderblock_1/MultiHeadDotProductAttention_1/value/kernel"
    ]
    np.testing.assert_array_equal(query[:, 1, :], qkv[16:32].T)  # head 1 of q
    np.testing.assert_array_equal(value.reshape(32, 32), qkv[64:].T)


def test_hugging_face_layout_including_pre_logits():
    tensors = read_safetensors(fixture("hf_vit_pooler.safetensors"))
    assert "encoder.layer.0.attention.attention.query.weight" in tensors
    params = to_original_layout(tensors, num_heads=2)
    np.testing.assert_array_equal(
        params["pre_logits/kernel"], tensors["pooler.dense.weight"].T
    )
    assert not [k for k in params if "." in k]  # every key translated
    # transformers 5 in-memory names map to the same keys.
    renamed = {
        k.replace("encoder.layer.", "layers.")
        .replace("attention.attention.query", "attention.q_proj")
        .replace("attention.output.dense", "attention.o_proj"): v
        for k, v in tensors.items()
    }
    assert to_original_layout(renamed, num_heads=2).keys() == params.keys()


def test_bfloat16_tensors_read_as_float32():
    full = read_safetensors(fixture("timm_vit.safetensors"))
    half = read_safetensors(fixture("timm_vit_bf16.safetensors"))
    header_size = int.from_bytes(
        open(fixture("timm_vit_bf16.safetensors"), "rb").read(8), "little"
    )
    with open(fixture("timm_vit_bf16.safetensors"), "rb") as f:
        f.seek(8)
        header = json.loads(f.read(header_size))
    assert header["pos_embed"]["dtype"] == "BF16"
    for key, value in half.items():
        assert value.dtype == np.float32
        rounded = full[key].astype(ml_dtypes.bfloat16).astype(np.float32)
        np.testing.assert_array_equal(value, rounded)
    raw = read_safetensors(fixture("timm_vit_bf16.safetensors"), float32=False)
    assert raw["pos_embed"].dtype == ml_dtypes.bfloat16


def test_corrupt_safetensors_are_refused(tmp_path):
    model = keras_vit.ViT("test/8", image_size=32, num_classes=10)
    before = [w.copy() for w in model.get_weights()]
    data = open(fixture("timm_vit.safetensors"), "rb").read()
    truncated = tmp_path / "truncated.safetensors"
    truncated.write_bytes(data[:-100])
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_weights(model, truncated)
    bad_length = tmp_path / "length.safetensors"
    bad_length.write_bytes((10**9).to_bytes(8, "little") + data[8:])
    with pytest.raises(CheckpointError, match="header claims"):
        load_weights(model, bad_length)
    bad_json = tmp_path / "json.safetensors"
    bad_json.write_bytes((5).to_bytes(8, "little") + b"{oops" + data[13:])
    with pytest.raises(CheckpointError, match="unreadable header"):
        load_weights(model, bad_json)
    header = {"x.weight": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}
    blob = json.dumps(header).encode()
    unknown = tmp_path / "unknown.safetensors"
    unknown.write_bytes(len(blob).to_bytes(8, "little") + blob + b"\0" * 8)
    with pytest.raises(CheckpointError, match="Unrecognised safetensors key layout"):
        load_weights(model, unknown)
    for old, new in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(old, new)


def test_safetensors_into_the_wrong_model_names_keys_and_shapes(tmp_path):
    model = keras_vit.ViT("test/8", image_size=32, num_classes=10, class_token=False,
                          pooling="gap")  # fmt: skip
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(CheckpointError) as info:
        load_weights(model, fixture("timm_vit.safetensors"))
    assert info.value.unexpected == ["cls"]
    assert "cls (1, 1, 32)" in str(info.value)
    # A non-square (3x5) grid cannot be guessed from 15 positions.
    with pytest.raises(CheckpointError, match=r"\(1, 15, 32\).*checkpoint_grid_size"):
        load_weights(model, fixture("timm_vit_gap.safetensors"))
    for old, new in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(old, new)
    load_weights(
        model, fixture("timm_vit_gap.safetensors"), checkpoint_grid_size=(3, 5)
    )
    table = keras.ops.convert_to_numpy(model.get_layer("posembed_input").embedding)
    source = read_safetensors(fixture("timm_vit_gap.safetensors"))["pos_embed"]
    expected = keras_vit.resample_position_embedding(
        source, (4, 4), old_grid_size=(3, 5), num_prefix_tokens=0
    )
    np.testing.assert_allclose(table, expected, rtol=1e-6, atol=1e-7)


def test_checkpoint_format_is_recognised_by_content(tmp_path):
    copy = tmp_path / "weights.bin"
    shutil.copy(fixture("timm_vit.safetensors"), copy)
    model = keras_vit.ViT("test/8", image_size=32, num_classes=10)
    load_weights(model, copy)
    expected = np.load(fixture("timm_vit.npz"))
    out = keras.ops.convert_to_numpy(model(expected["images"]))
    np.testing.assert_allclose(out, expected["logits"], rtol=1e-4, atol=1e-4)


# -- Another patch size (FlexiViT): the whole model, head included ---------------


def _by_hand_at_patch_4(source):
    """A /4 model whose weights are set layer by layer from a /8 `source`.

    The patch kernel and the position table are resized with the public
    functions (checked against their references in test_resample_modes.py);
    every other layer, the head included, is copied.
    """
    model = keras_vit.ViT("test/4", image_size=32, num_classes=10)
    for layer in model.layers:
        if not layer.weights:
            continue
        weights = source.get_layer(layer.name).get_weights()
        if layer.name == "embedding":
            weights[0] = keras_vit.resample_patch_embedding(weights[0], 4)
        elif layer.name == "posembed_input":
            weights[0] = keras_vit.resample_position_embedding(weights[0], (8, 8))
        layer.set_weights(weights)
    return model


def test_a_checkpoint_of_another_patch_size_keeps_its_head():
    images = np.load(fixture("timm_vit.npz"))["images"]
    source = keras_vit.ViT("test/8", image_size=32, num_classes=10)
    load_weights(source, fixture("timm_vit.safetensors"))
    expected = keras.ops.convert_to_numpy(_by_hand_at_patch_4(source)(images))

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # nothing dropped: no warning
        model = keras_vit.ViT(
            "test/8", patch_size=4, image_size=32, num_classes=10,
            weights=fixture("timm_vit.safetensors"),
        )  # fmt: skip
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(model.get_layer("head").kernel),
        keras.ops.convert_to_numpy(source.get_layer("head").kernel),
    )
    logits = keras.ops.convert_to_numpy(model(images))
    assert np.abs(logits).max() > 0.1  # not a zeroed head
    np.testing.assert_allclose(logits, expected, rtol=1e-6, atol=1e-6)

    # The notes say what happened, and only that.
    plain = keras_vit.ViT("test/4", image_size=32, num_classes=10)
    notes = load_weights(plain, fixture("timm_vit.safetensors"), resample_patch=True)
    assert len(notes) == 2, notes
    assert notes[0].startswith("Resized the patch embedding from (8, 8) to (4, 4)")
    assert notes[1].startswith("Resampled the position embedding from a 4x4 to a 8x8")
    assert not [n for n in notes if "pre_logits" in n or "head" in n]


def test_patch_resize_with_a_dropped_pre_logits_warns_about_pre_logits(tmp_path):
    # A Hugging Face ViTModel with its pooler (the original pre_logits) into a
    # /4 model without that layer: the pre_logits rule still applies, and the
    # warning is the pre_logits note, not the patch note.
    model = keras_vit.ViT("test/4", image_size=32, num_classes=10)
    with pytest.warns(UserWarning, match="pre_logits") as caught:
        notes = load_weights(
            model, fixture("hf_vit_pooler.safetensors"), resample_patch=True
        )
    assert len(caught) == 1
    assert notes[0].startswith("Resized the patch embedding")
    assert "`pre_logits` layer (width 32)" in notes[1]
    assert notes[2] == ("The head is zero-initialised: the checkpoint has no head.")


def test_timm_patch_resize_reproduces_timms_set_input_size():
    # timm's `set_input_size(patch_size=4)` on the timm_vit fixture model
    # (scripts/make_patch_resample_fixture.py): its kernel resize
    # (`resample_patch_embed`, bicubic antialiased) and its position-table
    # resampling (`resample_abs_pos_embed`) end to end.
    expected = np.load(fixture("patch_resample.npz"))
    model = keras_vit.ViT("test/4", image_size=32, num_classes=10)
    notes = load_weights(
        model,
        fixture("timm_vit.safetensors"),
        resample_patch="timm",
        resample_method="timm",
    )
    assert "resample_patch='timm'" in notes[0]
    logits = keras.ops.convert_to_numpy(model(expected["model/images"]))
    np.testing.assert_allclose(logits, expected["model/logits"], atol=1e-5)
    # big_vision's resize (the default) is another kernel: not timm's logits.
    load_weights(
        model, fixture("timm_vit.safetensors"), resample_patch=True,
        resample_method="timm",
    )  # fmt: skip
    flexivit = keras.ops.convert_to_numpy(model(expected["model/images"]))
    assert np.abs(flexivit - expected["model/logits"]).max() > 0.05


def test_an_unknown_patch_resize_is_refused_before_reading():
    model = keras_vit.ViT("test/4", image_size=32, num_classes=10)
    with pytest.raises(ValueError, match="`resample_patch` must be True, False"):
        load_weights(model, "no/such/file.npz", resample_patch="cubic")


def test_nan_in_a_safetensors_file_is_refused_naming_the_file_key(tmp_path):
    # One NaN written into the bytes of timm's fused qkv weight.
    data = bytearray(open(fixture("timm_vit.safetensors"), "rb").read())
    header_size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + header_size])
    begin = 8 + header_size + header["blocks.0.attn.qkv.weight"]["data_offsets"][0]
    data[begin + 4 : begin + 8] = np.array([np.nan], "<f4").tobytes()
    path = tmp_path / "nan.safetensors"
    path.write_bytes(bytes(data))
    model = keras_vit.ViT("test/8", image_size=32, num_classes=10)
    before = [w.copy() for w in model.get_weights()]
    with pytest.raises(CheckpointError) as info:
        load_weights(model, path)
    assert "blocks.0.attn.qkv.weight (96, 32): 1 NaN of 3072" in str(info.value)
    for old, new in zip(before, model.get_weights(), strict=True):
        np.testing.assert_array_equal(old, new)
