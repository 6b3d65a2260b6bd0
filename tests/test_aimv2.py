"""AIMv2 against timm's own outputs, keys and configs.

`tests/fixtures/aimv2/` was written by `scripts/make_aimv2_fixtures.py` with
timm 1.0.31: a tiny `aimv2_large_patch14_224` (D=32, depth 2, 2 heads,
patch 14, a 5-class head; random weights, every parameter perturbed, the
RMSNorm scales included) saved by timm's own `save_for_hf` as a Hub folder,
timm's tokens, pooled features, logits and last-block maps at its 42x42
size and at 28x70 (timm's `dynamic_img_size=True`), and, for every AIMv2
tag timm has, its parameter count and `pretrained_cfg`.
"""

from __future__ import annotations

import json
import os

import keras
import numpy as np
import pytest
from helpers import assert_config_is_constructor_args
from helpers import hub_cache

import keras_vit
from keras_vit.models import zoo
from keras_vit.weights import read_safetensors

AIMV2 = os.path.join(os.path.dirname(__file__), "fixtures", "aimv2")
NAME = "aimv2_large_patch14_224.apple_pt"
FOLDER = os.path.join(AIMV2, f"timm--{NAME}")
TOLERANCE = 1e-5  # relative to the largest value: float32's floor


def _outputs() -> dict:
    with np.load(os.path.join(AIMV2, "aimv2.npz")) as data:
        return dict(data)


def _timm_tables() -> dict:
    with open(os.path.join(AIMV2, "aimv2.json")) as f:
        return json.load(f)["models"]


def _close(ours, theirs, what):
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    assert ours.shape == theirs.shape, (what, ours.shape, theirs.shape)
    error = np.abs(ours - theirs).max() / np.abs(theirs).max()
    assert error < TOLERANCE, (what, error)
    return error


def _stateless(build, **arguments):
    with keras.StatelessScope(initialize_variables=False):
        return build(**arguments)


@pytest.mark.parametrize("size", ("native", "other"))
def test_from_pretrained_computes_what_timm_computes(size):
    """timm's folder, read by its config and keys: tokens, pooled features,
    logits and the last block's maps as timm's, at its size and (dynamic,
    the position table resampled as timm does) at a non-square one."""
    fixture = _outputs()
    dynamic = size == "other"
    model = keras_vit.from_pretrained(
        FOLDER, dynamic_image_size=dynamic, position_resample="timm"
    )
    options = keras_vit.ViTLayout.of(model).encoder_options
    assert options == zoo.named("aimv2").options
    images = fixture[f"images_{size}"].astype("float32")
    out = keras_vit.feature_extractor(model, blocks=[-1], spatial=True)(images)
    errors = [
        _close(out["tokens"], fixture[f"tokens_{size}"], "tokens"),
        _close(out["pooled"], fixture[f"pooled_{size}"], "pooled"),
        _close(
            out["block_1"], np.transpose(fixture[f"spatial_{size}"], (0, 2, 3, 1)),
            "spatial",
        ),
        _close(model.predict(images, verbose=0), fixture[f"logits_{size}"], "logits"),
    ]  # fmt: skip
    print(f"{size}: largest relative error {max(errors):.2e}")  # noqa: T201


def test_a_static_model_rebuilt_at_another_size_computes_timms_outputs():
    """`with_image_size` rebuilds the encoder from its read-back options (the
    patch-embedding norm included) with the table resampled as timm does."""
    fixture = _outputs()
    images = fixture["images_other"].astype("float32")
    static = keras_vit.with_image_size(
        keras_vit.from_pretrained(FOLDER), images.shape[1:3], method="timm"
    )
    assert static.get_layer("embedding_norm") is not None
    _close(static.predict(images, verbose=0), fixture["logits_other"], "resized")


def test_a_timm_name_loads_from_the_hub_cache_with_its_contract(tmp_path):
    cache = hub_cache(tmp_path, {f"timm/{NAME}": FOLDER})
    model = keras_vit.from_pretrained(NAME, cache_dir=cache, local_files_only=True)
    fixture = _outputs()
    images = fixture["images_native"].astype("float32")
    _close(model.predict(images, verbose=0), fixture["logits_native"], NAME)
    cfg = _timm_tables()[NAME]["pretrained_cfg"]
    prep = model.preprocessing
    assert prep.mean == pytest.approx(tuple(cfg["mean"]), abs=1e-6)
    assert prep.std == pytest.approx(tuple(cfg["std"]), abs=1e-6)
    assert (prep.interpolation, prep.crop_fraction, prep.crop_mode) == (
        "bicubic", 1.0, "center",
    )  # fmt: skip


def test_save_pretrained_writes_timms_keys(tmp_path):
    """The folder holds the very keys, shapes and values timm's `save_for_hf`
    wrote (no bias where AIMv2 has none, the RmsNorm scales, the patch
    embedding's norm, SwiGLU's `fc1_g`/`fc1_x`), and reads back exactly."""
    model = keras_vit.from_pretrained(
        FOLDER, dynamic_image_size=True, position_resample="timm"
    )
    folder = keras_vit.save_pretrained(model, tmp_path / "folder")
    written = read_safetensors(os.path.join(folder, "model.safetensors"))
    theirs = read_safetensors(os.path.join(FOLDER, "model.safetensors"))
    assert {k: v.shape for k, v in written.items()} == {
        k: v.shape for k, v in theirs.items()
    }
    for key, value in theirs.items():
        np.testing.assert_array_equal(written[key], value, err_msg=key)
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    assert config["architecture"] == "aimv2_large_patch14_224"
    restored = keras_vit.from_pretrained(str(folder))
    images = _outputs()["images_other"].astype("float32")
    np.testing.assert_array_equal(
        np.asarray(restored(images)), np.asarray(model(images))
    )


def test_a_new_model_is_written_as_timms_aimv2(tmp_path):
    """A model built here (not read from timm) is written as timm's AIMv2
    architecture, with its separate SwiGLU layers, and the config's
    `model_args` keep what the architecture does not fix."""
    model = zoo.named("aimv2").build(
        "32x2x88x2/14", image_size=28, num_classes=3, include_top=True
    )
    folder = keras_vit.save_pretrained(model, tmp_path / "new")
    written = read_safetensors(os.path.join(folder, "model.safetensors"))
    theirs = read_safetensors(os.path.join(FOLDER, "model.safetensors"))
    assert set(written) == set(theirs)  # the same layers, another head width
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    assert config["architecture"] == "aimv2_large_patch14_224"
    args = config["model_args"]
    assert (args["embed_dim"], args["num_heads"], args["class_token"]) == (32, 2, False)
    assert args["global_pool"] == "avg" and args["qkv_bias"] is False


def test_every_checkpoint_is_listed_with_timms_count_contract_and_licence():
    tables = _timm_tables()
    rows = keras_vit.weights.list_weights("aimv2*")
    assert {w.name for w in rows} == set(tables)
    for weights in rows:
        assert weights.family == "aimv2" and weights.license == "apple-ascl"
        cfg = tables[weights.name]["pretrained_cfg"]
        timm = keras_vit.Preprocessing.from_timm(cfg)
        for name in ("mean", "std"):  # written to 6 digits in the fixture
            got = getattr(weights.preprocessing, name)
            assert got == pytest.approx(getattr(timm, name), abs=1e-6), weights.name
        rest = dict.fromkeys(("mean", "std"), 0.5)
        assert weights.preprocessing.replace(**rest) == timm.replace(**rest)
        assert weights.num_classes == cfg["num_classes"] == 0
        model = _stateless(
            keras_vit.ViT, variant=weights.variant, options=weights.options,
            image_size=weights.image_size, include_top=False,
        )  # fmt: skip
        assert model.count_params() == tables[weights.name]["params"], weights.name


def test_the_constructors_build_timms_sizes():
    tables = _timm_tables()
    for name, word in (("AIMv2_L14", "large"), ("AIMv2_H14", "huge"),
                       ("AIMv2_1B14", "1b"), ("AIMv2_3B14", "3b")):  # fmt: skip
        model = _stateless(getattr(keras_vit.models, name))
        count = tables[f"aimv2_{word}_patch14_224.apple_pt"]["params"]
        assert model.count_params() == count, name
        options = keras_vit.ViTLayout.of(model).encoder_options
        assert options == zoo.named("aimv2").options
    assert "norm='rms'" in keras_vit.models.AIMv2_L14.__doc__


def test_the_rms_norm_is_timms_formula_with_epsilon_inside_the_root():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 3, 8)).astype("float32") * 1e-3  # epsilon matters
    scale = rng.normal(1.0, 0.2, 8).astype("float32")
    model = zoo.named("aimv2").build("8x1x16x2/4", image_size=8)
    norm = model.get_layer("embedding_norm")
    norm.set_weights([scale])
    expected = x / np.sqrt(np.mean(x.astype(np.float64) ** 2, -1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(np.asarray(norm(x)), expected * scale, rtol=1e-5)


def test_the_new_options_build_read_back_and_refuse_what_they_cannot_be():
    options = keras_vit.EncoderOptions(norm="rms", proj_bias=False, qk_norm=True,
                                       attention_norm=True, mlp_norm=True,
                                       embedding_norm=True, pre_norm=True,
                                       class_token=False, pooling="gap",
                                       fc_norm=True, qkv_bias=False)  # fmt: skip
    model = keras_vit.ViT("test/4", image_size=16, options=options)
    assert keras_vit.ViTLayout.of(model).encoder_options == options
    names = {w.path for w in model.weights}
    assert not any("bias" in n for n in names if n.startswith("encoderblock_0"))
    assert {w.path.rsplit("/", 1)[-1] for w in model.weights if "norm" in w.path} == {
        "scale"
    }
    block = keras_vit.ViTLayout.of(model).block(0)
    assert_config_is_constructor_args(block)
    assert_config_is_constructor_args(block.attention)
    with pytest.raises(ValueError, match="`norm` must be one of"):
        keras_vit.EncoderOptions(norm="batch")
    with pytest.raises(ValueError, match="'rms' does not build the attention-pooling"):
        keras_vit.EncoderOptions(norm="rms", pooling="map")
    with pytest.raises(ValueError, match="`proj_bias` must be True or False"):
        keras_vit.EncoderOptions(proj_bias=None)


def test_weight_decay_leaves_the_rms_norm_scales_alone():
    from keras_vit import training

    model = zoo.named("aimv2").build("32x1x88x2/14", image_size=28)
    adamw = training.make_optimizer("adamw", 1e-3, weight_decay=0.1)
    adamw.build(model.trainable_variables)
    decayed = {v.path for v in model.trainable_variables if adamw._use_weight_decay(v)}
    assert decayed == {
        "encoderblock_0/attention/qkv_kernel", "encoderblock_0/attention/out_kernel",
        "encoderblock_0/mlp_dense_1/kernel", "encoderblock_0/mlp_dense_2/kernel",
        "embedding/kernel",
    }  # fmt: skip


def test_a_saved_aimv2_model_loads_back_and_quantizes(tmp_path):
    model = keras_vit.from_pretrained(FOLDER)
    images = _outputs()["images_native"].astype("float32")
    model.save(tmp_path / "model.keras")
    restored = keras.saving.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(
        np.asarray(restored(images)), np.asarray(model(images))
    )
    restored.quantize("int8")  # the attention without an output bias
    restored.save(tmp_path / "int8.keras")
    again = keras.saving.load_model(tmp_path / "int8.keras")
    np.testing.assert_array_equal(
        np.asarray(again(images)), np.asarray(restored(images))
    )


@pytest.mark.large  # Three exports, over 17 s on 2 cores: not in the default run.
def test_aimv2_serves_at_any_size_and_exports_to_litert_and_onnx(tmp_path):
    """The RMSNorms, the bias-free projections and the patch-embedding norm
    go through the SavedModel (a non-square size), LiteRT and ONNX."""
    import onnxruntime
    import tensorflow as tf

    from keras_vit import export

    model = keras_vit.from_pretrained(
        FOLDER, dynamic_image_size=True, position_resample="timm"
    )
    height, width = _outputs()["images_other"].shape[1:3]
    pixels = np.random.default_rng(0).integers(0, 256, (2, height, width, 3))
    pixels = pixels.astype("uint8")
    contract = model.preprocessing
    inputs = (pixels / 255.0 - np.array(contract.mean)) / np.array(contract.std)
    expected = np.asarray(model(inputs.astype("float32")))
    path = tmp_path / "export" / "1"
    export.export(model, path)
    served = tf.saved_model.load(str(path)).signatures["serving_default"]
    _close(served(tf.constant(pixels))["logits"].numpy(), expected, "SavedModel")
    fixed = tmp_path / "fixed" / "1"
    export.export(model, fixed, image_size=(height, width))
    litert = export.export_tflite(fixed, tmp_path / "model.tflite")
    runner = tf.lite.Interpreter(model_path=str(litert)).get_signature_runner(
        "serving_default"
    )
    _close(runner(images=pixels)["logits"], expected, "LiteRT")
    onnx = export.export_onnx(fixed, tmp_path / "model.onnx")
    session = onnxruntime.InferenceSession(str(onnx))
    _close(session.run(["logits"], {"images": pixels})[0], expected, "ONNX")
