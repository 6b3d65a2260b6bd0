"""The RoPE families (DINOv3, EVA-02, PE, RoPE-ViT) against timm's own outputs.

The fixtures of `tests/fixtures/eva/` were written by
`scripts/make_eva_fixtures.py` with timm 1.0.31: one tiny model per family
and rotary kind (random weights, every parameter perturbed), its
`state_dict` as `.safetensors`, timm's `config.json` for it (timm's
`save_config_for_hf`), and timm's tokens, pooled features, logits and
spatial maps at the model's size and at a non-square other size (timm's
`dynamic_img_size=True`). `tests/fixtures/eva/param_counts.json` holds timm's
parameter count of every pretrained tag of the four families.
"""

from __future__ import annotations

import json
import os
import shutil

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.layers import rotary
from keras_vit.models import zoo
from keras_vit.models.options import RotaryOptions

EVA = os.path.join(os.path.dirname(__file__), "fixtures", "eva")
NAMES = (
    "dinov3", "dinov3_swiglu", "eva02", "eva02_fused", "eva02_clip", "pe_core",
    "pe_core_nocls", "pe_lang", "rope_axial", "rope_mixed", "rope_ape",
    "rope_mixed_ape",
)  # fmt: skip
ROPE_FAMILIES = (
    "dinov3", "eva02", "eva02_clip", "pe_core", "pe_lang", "pe_spatial",
    "rope_vit", "rope_vit_mixed", "rope_vit_ape", "rope_vit_mixed_ape",
)  # fmt: skip
TOLERANCE = 1e-5  # relative to the largest value: float32's floor


def _fixture(name: str) -> dict:
    with np.load(os.path.join(EVA, f"{name}.npz")) as data:
        return dict(data)


def _config(name: str) -> dict:
    return json.loads(str(_fixture(name)["config"]))


def _close(ours, theirs, what):
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    assert ours.shape == theirs.shape, (what, ours.shape, theirs.shape)
    error = np.abs(ours - theirs).max() / np.abs(theirs).max()
    assert error < TOLERANCE, (what, error)


def keras_arguments(cfg: dict) -> dict:
    """The `keras_vit.ViT` arguments of an `Eva` built with `cfg` (its
    constructor arguments), from timm's `Eva.__init__` rules: `fc_norm` on
    for average pooling unless given, the final norm where `fc_norm` is off
    unless given, `AttentionRope` (a full query/key/value bias) for
    `attn_type="rope"`, q/v biases for Eva's own attention."""
    d, heads, patch = cfg["embed_dim"], cfg["num_heads"], cfg["patch_size"]
    hidden = int(d * cfg.get("mlp_ratio", 4.0))
    align = cfg.get("swiglu_align_to", 0)
    if cfg.get("swiglu_mlp") and align:
        hidden = -(-hidden // align) * align
    pool = cfg.get("global_pool", "avg")
    fc_norm = cfg.get("use_fc_norm", pool == "avg")
    final = cfg.get("use_post_transformer_norm", not fc_norm)
    bias = cfg.get("qkv_bias", True)
    rope = None
    if cfg.get("use_rot_pos_emb"):
        kind = {"cat": "axial"}.get(cfg.get("rope_type", "cat"), cfg.get("rope_type"))
        rope = RotaryOptions(
            kind,
            temperature=cfg.get("rope_temperature", 10000.0),
            grid_offset=cfg.get("rope_grid_offset", 0.0),
            grid_indexing=cfg.get("rope_grid_indexing", "ij"),
            reference_grid=cfg.get("ref_feat_shape") if kind == "axial" else None,
            rotate_half=cfg.get("rope_rotate_half", False),
        )
    classes = cfg.get("num_classes", 1000)
    arguments = dict(
        variant=f"{d}x{cfg['depth']}x{hidden}x{heads}/{patch}",
        image_size=cfg["img_size"],
        num_classes=classes or 1,
        include_top=classes > 0,
        class_token=cfg.get("class_token", True),
        num_registers=cfg.get("num_reg_tokens", 0),
        no_embed_class=cfg.get("no_embed_class", False),
        position_embedding=cfg.get("use_abs_pos_emb", True),
        qkv_bias=bool(bias) if cfg.get("attn_type") == "rope" else bias and "qv",
        layer_scale_init=cfg.get("init_values"),
        mlp="swiglu" if cfg.get("swiglu_mlp") else "gelu",
        mlp_norm=cfg.get("scale_mlp", False),
        attention_norm=cfg.get("scale_attn_inner", False),
        rope=rope,
        pre_norm=cfg.get("use_pre_transformer_norm", False),
        layer_norm_epsilon=cfg.get("norm_eps", 1e-6),
        pooling={"avg": "gap", "token": "token", "map": "map"}[pool],
        fc_norm=fc_norm,
        encoder_norm=final or fc_norm,
    )
    if pool == "map":
        ratio = cfg.get("attn_pool_mlp_ratio") or cfg.get("mlp_ratio", 4.0)
        arguments.update(
            map_heads=cfg.get("attn_pool_num_heads") or heads,
            map_mlp_dim=int(d * ratio),
            pool_include_prefix=True,
        )
    return arguments


def _model(name: str, dynamic: bool) -> keras.Model:
    arguments = keras_arguments(_config(name))
    variant = arguments.pop("variant")
    model = keras_vit.ViT(
        variant, **arguments, dynamic_image_size=dynamic, position_resample="timm"
    )
    keras_vit.load_weights(model, os.path.join(EVA, f"{name}.safetensors"))
    return model


@pytest.mark.parametrize("name", NAMES)
def test_outputs_equal_timms_at_its_size_and_a_non_square_one(name):
    fixture = _fixture(name)
    for size, dynamic in (("native", False), ("other", True)):
        model = _model(name, dynamic)
        features = keras_vit.feature_extractor(model, blocks=[-1], spatial=True)
        images = fixture[f"images_{size}"].astype("float32")
        out = features(images)
        _close(out["tokens"], fixture[f"tokens_{size}"], (name, size, "tokens"))
        _close(out["pooled"], fixture[f"pooled_{size}"], (name, size, "pooled"))
        spatial = np.transpose(fixture[f"spatial_{size}"], (0, 2, 3, 1))  # NHWC
        _close(out["block_1"], spatial, (name, size, "spatial"))
        if _config(name)["num_classes"]:
            logits = model.predict(images, verbose=0)
            _close(logits, fixture[f"logits_{size}"], (name, size, "logits"))


@pytest.mark.parametrize("name", ("dinov3", "pe_core", "rope_mixed"))
def test_a_static_model_rebuilt_at_another_size_equals_the_dynamic_one(name):
    """`with_image_size` (new rotary coordinates, the table resampled) gives
    what the dynamic model computes at that size."""
    fixture = _fixture(name)
    images = fixture["images_other"].astype("float32")
    static = keras_vit.with_image_size(
        _model(name, False), images.shape[1:3], method="timm"
    )
    dynamic = _model(name, True)
    _close(static(images), dynamic(images), name)


@pytest.mark.parametrize("name", ("dinov3", "eva02_clip", "rope_mixed_ape"))
def test_saved_models_keep_their_rotary_embeddings(tmp_path, name):
    model = _model(name, True)
    images = _fixture(name)["images_other"].astype("float32")
    model.save(tmp_path / "model.keras")
    restored = keras.saving.load_model(tmp_path / "model.keras")
    np.testing.assert_array_equal(
        np.asarray(restored(images)), np.asarray(model(images))
    )
    layout = keras_vit.ViTLayout.of(restored)
    assert layout.encoder_options == keras_vit.ViTLayout.of(model).encoder_options
    assert layout.encoder_options.rope is not None


def _hub_cache(root, names) -> str:
    """timm's files as `huggingface_hub` caches them (`models--timm--<name>`)."""
    cache = os.path.join(root, "hub")
    for fixture, repo in names.items():
        base = os.path.join(cache, f"models--timm--{repo}")
        snapshot = os.path.join(base, "snapshots", "0" * 40)
        os.makedirs(snapshot)
        os.makedirs(os.path.join(base, "refs"))
        with open(os.path.join(base, "refs", "main"), "w") as f:
            f.write("0" * 40)
        shutil.copy(os.path.join(EVA, f"{fixture}.safetensors"),
                    os.path.join(snapshot, "model.safetensors"))  # fmt: skip
        shutil.copy(os.path.join(EVA, f"{fixture}.config.json"),
                    os.path.join(snapshot, "config.json"))  # fmt: skip
    return cache


def _repo(fixture: str) -> str:
    config = json.load(open(os.path.join(EVA, f"{fixture}.config.json")))
    return f"{config['architecture']}.{config['pretrained_cfg']['tag']}"


@pytest.mark.parametrize("fixture", NAMES)
def test_from_pretrained_by_timm_name_builds_and_loads_each_family(tmp_path, fixture):
    """The model a timm name needs is read off its config and keys: the
    rotary settings, the tokens, the norms, the pool's heads."""
    cache = _hub_cache(tmp_path, {fixture: _repo(fixture)})
    model = keras_vit.from_pretrained(
        _repo(fixture), cache_dir=cache, local_files_only=True
    )
    data = _fixture(fixture)
    images = data["images_native"].astype("float32")
    expected = data["logits_native"] if _config(fixture)["num_classes"] else None
    if expected is not None:
        _close(model.predict(images, verbose=0), expected, fixture)
    else:
        _close(keras_vit.feature_extractor(model)(images)["pooled"],
               data["pooled_native"], fixture)  # fmt: skip
    options = keras_vit.ViTLayout.of(model).encoder_options
    wanted = keras_arguments(_config(fixture))
    for option in ("rope", "qkv_bias", "position_embedding", "pre_norm",
                   "num_registers", "mlp_norm", "attention_norm",
                   "pooling"):  # fmt: skip
        assert getattr(options, option) == wanted[option], (fixture, option)


def _stateless(build, **arguments):
    with keras.StatelessScope(initialize_variables=False):
        return build(**arguments)


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_every_checkpoint_of_the_rope_families_has_timms_parameter_count():
    """timm counted each tag on the meta device (`param_counts.json`); each
    of the zoo's rows builds a model of the same count, the 7B included."""
    with open(os.path.join(EVA, "param_counts.json")) as f:
        counts = json.load(f)["models"]
    rows = [w for f in ROPE_FAMILIES for w in zoo.named(f).weights()]
    assert {w.timm_name for w in rows} == set(counts)
    for weights in rows:
        family = zoo.named(weights.family)
        arguments = family.model_arguments(weights.variant)
        arguments = {
            k: v
            for k, v in arguments.items()
            if k not in weights.options.__dataclass_fields__
        }
        arguments.update(
            image_size=weights.image_size,
            num_classes=weights.num_classes or 1,
            include_top=weights.num_classes > 0,
        )
        model = _stateless(
            keras_vit.ViT, variant=weights.variant, options=weights.options, **arguments
        )
        assert model.count_params() == counts[weights.timm_name]["params"], weights.name


def test_each_constructor_builds_its_familys_model():
    """The named constructors take their family's options and their own
    (DINOv3-H+'s SwiGLU, PE-G's missing class token)."""
    h_plus = _stateless(keras_vit.models.DINOv3_HPlus16)
    options = keras_vit.ViTLayout.of(h_plus).encoder_options
    assert options.mlp == "swiglu" and options.rope.kind == "dinov3"
    assert h_plus.count_params() == 840_509_440  # timm's vit_huge_plus_patch16_dinov3
    pe_g = _stateless(keras_vit.models.PE_Core_G14)
    assert not keras_vit.ViTLayout.of(pe_g).encoder_options.class_token
    assert pe_g.count_params() == 1_882_033_920  # timm's vit_pe_core_gigantic
    assert keras_vit.models.PE_Core_B16.__doc__.count("B/16") >= 1


def test_rotary_coordinates_and_frequencies_follow_the_formulas():
    dinov3 = rotary.grid_coordinates("dinov3", 2, 3)
    np.testing.assert_allclose(
        np.asarray(dinov3),
        [[-0.5, -2 / 3], [-0.5, 0.0], [-0.5, 2 / 3],
         [0.5, -2 / 3], [0.5, 0.0], [0.5, 2 / 3]], atol=1e-6,
    )  # fmt: skip
    pe = rotary.grid_coordinates("axial", 2, 2, grid_offset=1.0, grid_indexing="xy",
                                 reference_grid=(4, 4))  # fmt: skip
    np.testing.assert_allclose(np.asarray(pe), [[2, 2], [4, 2], [2, 4], [4, 4]])
    np.testing.assert_allclose(
        rotary.fixed_frequencies("axial", 16, 100.0), 100.0 ** (-np.arange(4) / 4)
    )
    np.testing.assert_allclose(
        rotary.fixed_frequencies("dinov3", 16, 100.0),
        2 * np.pi / 100.0 ** (2 * np.arange(4) / 8),
        rtol=1e-6,
    )


def test_rotary_embeddings_refuse_what_they_cannot_be():
    with pytest.raises(ValueError, match="rope.kind"):
        RotaryOptions("spiral")
    with pytest.raises(ValueError, match="reference_grid.*'axial'"):
        RotaryOptions("dinov3", reference_grid=(16, 16))
    with pytest.raises(ValueError, match="head width divisible by 4"):
        keras_vit.ViT("30x1x60x5/8", image_size=16, rope=RotaryOptions())
    with pytest.raises(ValueError, match="needs a position table"):
        keras_vit.EncoderOptions(position_embedding=False, no_embed_class=True)


@pytest.mark.parametrize("name", NAMES)
def test_save_pretrained_writes_timms_eva_layout(tmp_path, name):
    """The folder holds timm's `Eva` state dict of the model (the fixture's
    arrays, which timm wrote; a fused `qkv` and packed SwiGLU where the
    fixture has separate layers: the same arrays joined), a config whose
    `model_args` rebuild it, and reads back bit-exactly. (timm itself loads
    these folders strictly: `scripts/check_timm_loads.py`.)"""
    from keras_vit.weights import read_safetensors
    from keras_vit.weights.checkpoint import to_original_layout
    from keras_vit.weights.dialects.timm_args import options_from_eva_args

    model = _model(name, dynamic=True)
    folder = keras_vit.save_pretrained(model, tmp_path / "folder")
    written = read_safetensors(os.path.join(folder, "model.safetensors"))
    fixture = read_safetensors(os.path.join(EVA, f"{name}.safetensors"))
    heads = _config(name)["num_heads"]
    pool = _config(name).get("attn_pool_num_heads")
    split = (
        heads
        if not pool
        else {None: heads, "MAPHead_0/MultiHeadDotProductAttention_0": pool}
    )
    ours, theirs = (to_original_layout(t, split) for t in (written, fixture))
    assert sorted(ours) == sorted(theirs)
    for key in ours:
        np.testing.assert_array_equal(ours[key], theirs[key], err_msg=key)
    if name not in ("eva02", "eva02_clip", "dinov3_swiglu"):
        assert sorted(written) == sorted(fixture)  # the very same keys
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    options = keras_vit.ViTLayout.of(model).encoder_options
    assert options_from_eva_args(config["model_args"], options) == options
    restored = keras_vit.from_pretrained(str(folder))
    images = _fixture(name)["images_other"].astype("float32")
    np.testing.assert_array_equal(
        np.asarray(restored(images)), np.asarray(model(images))
    )


def test_feature_pca_is_the_patch_features_principal_components():
    """The RGB picture of the DINO papers: the last block's normalised patch
    features (registers and class token left out) on their first three
    principal components, as scikit-learn's PCA computes them."""
    from sklearn.decomposition import PCA

    from keras_vit.analysis.patch_pca import patch_features

    model = _model("dinov3", dynamic=True)
    images = _fixture("dinov3")["images_other"].astype("float32")  # (2, 32, 48, 3)
    result = keras_vit.analysis.feature_pca(model, images, details=True)
    assert result.rgb.shape == (2, 4, 6, 3)
    assert result.rgb.min() >= 0.0 and result.rgb.max() <= 1.0
    features = patch_features(model, images)
    spatial = np.transpose(_fixture("dinov3")["spatial_norm_other"], (0, 2, 3, 1))
    _close(features, spatial, "normalised patch features")  # timm's, prefix out
    reference = PCA(3).fit(features.reshape(-1, features.shape[-1]))
    for ours, theirs in zip(result.components, reference.components_, strict=True):
        assert abs(float(np.dot(ours, theirs))) > 1 - 1e-5
    np.testing.assert_allclose(
        result.explained_variance_ratio, reference.explained_variance_ratio_, rtol=1e-4
    )
    kept = keras_vit.analysis.feature_pca(model, images, foreground=0.5, details=True)
    assert 0 < kept.mask.mean() < 1
    assert np.all(kept.rgb[~kept.mask] == 0)


def _exported(name: str, tmp_path, fixed: bool):
    """`name`'s dynamic model exported (at the fixture's other size when
    `fixed`), with uint8 pixels and the logits the model gives for them."""
    from keras_vit import export

    model = _model(name, dynamic=True)
    height, width = _fixture(name)["images_other"].shape[1:3]
    pixels = np.random.default_rng(0).integers(0, 256, (2, height, width, 3))
    pixels = pixels.astype("uint8")
    contract = model.preprocessing
    inputs = (pixels / 255.0 - np.array(contract.mean)) / np.array(contract.std)
    expected = np.asarray(model(inputs.astype("float32")))
    path = tmp_path / "export" / "1"
    export.export(model, path, image_size=(height, width) if fixed else None)
    return path, pixels, expected


@pytest.mark.parametrize(
    "name", ["dinov3", *(pytest.param(n, marks=pytest.mark.large)
                         for n in ("pe_core", "rope_mixed_ape", "eva02_clip"))],
)  # fmt: skip
def test_rotary_models_serve_at_any_size_and_export_to_litert_and_onnx(tmp_path, name):
    """The SavedModel of a dynamic-size model answers a non-square size (its
    rotary coordinates computed in the graph); LiteRT and ONNX take the
    model at a fixed size. Each equals the Keras model to float32's floor."""
    import onnxruntime
    import tensorflow as tf

    from keras_vit import export

    path, pixels, expected = _exported(name, tmp_path, fixed=False)
    served = tf.saved_model.load(str(path)).signatures["serving_default"]
    _close(served(tf.constant(pixels))["logits"].numpy(), expected, "SavedModel")
    fixed, pixels, expected = _exported(name, tmp_path / "fixed", fixed=True)
    litert = export.export_tflite(fixed, tmp_path / "model.tflite")
    runner = tf.lite.Interpreter(model_path=str(litert)).get_signature_runner(
        "serving_default"
    )
    _close(runner(images=pixels)["logits"], expected, "LiteRT")
    onnx = export.export_onnx(fixed, tmp_path / "model.onnx")
    session = onnxruntime.InferenceSession(str(onnx))
    _close(session.run(["logits"], {"images": pixels})[0], expected, "ONNX")


def test_a_constructor_takes_a_rotary_checkpoint_by_name(tmp_path, monkeypatch):
    """`weights=` with a zoo checkpoint's timm name: the family check, the
    Hub file, the checkpoint's contract (DINOv3's 256-px ImageNet one)."""
    from huggingface_hub import constants

    name = "vit_small_patch16_dinov3_qkvb.lvd1689m"
    cache = _hub_cache(tmp_path, {"dinov3": name})
    monkeypatch.setattr(constants, "HF_HUB_CACHE", cache)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    variant = keras_arguments(_config("dinov3"))["variant"]
    model = keras_vit.models.family_model(
        variant, "dinov3", qkv_bias="qv", num_classes=5, include_top=True,
        image_size=32, weights=name,
    )  # fmt: skip
    fixture = _fixture("dinov3")
    images = fixture["images_other"].astype("float32")
    _close(model.predict(images, verbose=0), fixture["logits_other"], "by name")
    assert model.preprocessing.image_size == (256, 256)
    assert model.preprocessing.mean == keras_vit.models.IMAGENET_MEAN
    with pytest.raises(Exception, match="qkv_bias"):  # the _qkvb file needs "qv"
        keras_vit.models.family_model(
            variant, "dinov3", num_classes=5, include_top=True, image_size=32,
            weights=name,
        )  # fmt: skip
