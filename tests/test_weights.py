"""keras_vit.weights: original .npz checkpoints, strict checks, tags, convert.

Checkpoints are written by the test in the exact original layout with
`reference.make_vit_checkpoint`, and the loaded models are compared with the
independent NumPy forward pass `reference.vit_forward`. Nothing is
downloaded: `keras.utils.get_file` is replaced by a stub wherever a tag is
resolved.
"""

from __future__ import annotations

import os
import warnings

import keras
import numpy as np
import pytest
import reference
import scipy.ndimage

import keras_vit
from keras_vit.models.variants import ResNetSpec
from keras_vit.recipes import convert
from keras_vit.weights import Architecture
from keras_vit.weights import CheckpointError
from keras_vit.weights import VariantMismatchError
from keras_vit.weights import WeightsNotFoundError
from keras_vit.weights import load_weights
from keras_vit.weights import registry

TINY = dict(hidden_dim=32, depth=2, mlp_dim=64, num_heads=2)
TI16 = dict(hidden_dim=192, depth=12, mlp_dim=768, num_heads=3, patch_size=16)
POSEMB = "Transformer/posembed_input/pos_embedding"


def checkpoint(**kwargs):
    kwargs.setdefault("patch_size", 8)
    kwargs.setdefault("image_size", (32, 32))
    return reference.make_vit_checkpoint(**TINY, **kwargs)


def images(shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")


def run(model, x):
    return keras.ops.convert_to_numpy(model(x, training=False))


def snapshot(model):
    return {w.path: keras.ops.convert_to_numpy(w).copy() for w in model.weights}


def assert_unchanged(model, before):
    for w in model.weights:
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(w), before[w.path])


def zoomed(params, grid, new_grid, prefix=1):
    """The reference's resampling, written with scipy for the oracle."""
    table = params[POSEMB][0]
    old = table[prefix:].reshape(*grid, -1)
    factors = (new_grid[0] / grid[0], new_grid[1] / grid[1], 1)
    new = scipy.ndimage.zoom(old.astype(np.float64), factors, order=1)
    out = dict(params)
    out[POSEMB] = np.concatenate([table[:prefix], new.reshape(-1, table.shape[-1])])[
        None
    ]
    return out


# --------------------------------------------------------------------------
# Exact parity with the NumPy reference
# --------------------------------------------------------------------------


@pytest.mark.parametrize("gelu", ["exact", "tanh"])
def test_npz_vit_with_pre_logits_matches_reference(tmp_path, gelu):
    params = checkpoint(image_size=(24, 40), representation_size=16)
    path = reference.save_npz(params, tmp_path / "vit.npz")
    model = keras_vit.ViT(
        "test/8",
        image_size=(24, 40),
        num_classes=10,
        representation_size=16,
        gelu_approximate=gelu == "tanh",
        weights=path,
    )
    x = images((2, 24, 40, 3))
    expected = reference.vit_forward(params, x, num_heads=2, patch_size=8, gelu=gelu)
    np.testing.assert_allclose(run(model, x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("gelu, legacy_gn_shape", [("exact", True), ("tanh", False)])
def test_npz_hybrid_matches_reference(tmp_path, gelu, legacy_gn_shape):
    params = checkpoint(
        patch_size=2,
        resnet_layers=(1, 1),
        resnet_width=32,
        legacy_gn_shape=legacy_gn_shape,
    )
    if legacy_gn_shape:
        assert params["block2/unit1/gn_proj/scale"].shape == (1, 1, 1, 256)
    path = reference.save_npz(params, tmp_path / "hybrid.npz")
    model = keras_vit.ViT(
        "test/16",
        backbone=ResNetSpec((1, 1), width=32),
        image_size=32,
        num_classes=10,
        gelu_approximate=gelu == "tanh",
    )
    assert load_weights(model, path) == []
    x = images((2, 32, 32, 3))
    expected = reference.vit_forward(
        params, x, num_heads=2, patch_size=2, gelu=gelu, resnet_layers=(1, 1)
    )
    np.testing.assert_allclose(run(model, x), expected, rtol=1e-5, atol=1e-5)


def test_npz_gap_without_class_token_matches_reference(tmp_path):
    params = checkpoint(class_token=False)
    assert "cls" not in params and params[POSEMB].shape == (1, 16, 32)
    path = reference.save_npz(params, tmp_path / "gap.npz")
    model = keras_vit.ViT(
        "test/8", image_size=32, num_classes=10, pooling="gap", class_token=False
    )
    load_weights(model, path)
    x = images((2, 32, 32, 3))
    expected = reference.vit_forward(
        params, x, num_heads=2, patch_size=8, gelu="exact", pooling="gap"
    )
    np.testing.assert_allclose(run(model, x), expected, rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------
# Resolution change
# --------------------------------------------------------------------------


@pytest.mark.parametrize("old, new", [((14, 14), (24, 24)), ((14, 14), (12, 20))])
def test_resample_position_embedding_equals_scipy_zoom(old, new):
    table = np.random.default_rng(0).normal(size=(1, 1 + old[0] * old[1], 8))
    out = keras_vit.resample_position_embedding(table, new)
    grid = table[0, 1:].reshape(*old, 8)
    factors = (new[0] / old[0], new[1] / old[1], 1)
    expected = scipy.ndimage.zoom(grid, factors, order=1).reshape(-1, 8)
    assert out.shape == (1, 1 + new[0] * new[1], 8)
    np.testing.assert_array_equal(out[0, 0], table[0, 0])  # class-token row kept
    np.testing.assert_allclose(out[0, 1:], expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("image_size, grid", [(48, (6, 6)), ((32, 64), (4, 8))])
def test_load_at_another_resolution_resamples_like_the_reference(image_size, grid):
    params = checkpoint()  # 32 px: a 4x4 grid, as a 224 file is 14x14
    model = keras_vit.ViT("test/8", image_size=image_size, num_classes=10)
    notes = load_weights(model, params)
    assert any("4x4" in n and f"{grid[0]}x{grid[1]}" in n for n in notes)
    x = images((2, *model.input_shape[1:3], 3))
    expected = reference.vit_forward(
        zoomed(params, (4, 4), grid), x, num_heads=2, patch_size=8, gelu="exact"
    )
    np.testing.assert_allclose(run(model, x), expected, rtol=1e-5, atol=1e-5)


def test_bicubic_resampling_option():
    params = checkpoint()
    model = keras_vit.ViT("test/8", image_size=48, num_classes=10)
    load_weights(model, params, resample_method="bicubic")
    expected = keras_vit.resample_position_embedding(
        params[POSEMB], (6, 6), method="bicubic"
    )
    table = keras.ops.convert_to_numpy(model.get_layer("posembed_input").embedding)
    np.testing.assert_allclose(table, expected, rtol=1e-6, atol=1e-7)
    bilinear = keras_vit.resample_position_embedding(params[POSEMB], (6, 6))
    assert not np.allclose(table, bilinear, atol=1e-4)


# --------------------------------------------------------------------------
# Head and pre_logits rules
# --------------------------------------------------------------------------


def test_head_is_zeroed_when_the_class_count_differs():
    params = checkpoint(num_classes=10)
    model = keras_vit.ViT("test/8", image_size=32, num_classes=5)
    head = model.get_layer("head")
    head.set_weights([np.ones((32, 5), "float32"), np.ones(5, "float32")])
    notes = load_weights(model, params)
    assert any("zero-initialised" in n and "10 classes" in n for n in notes)
    assert not np.any(head.get_weights()[0]) and not np.any(head.get_weights()[1])
    np.testing.assert_array_equal(
        model.get_layer("encoder_norm").get_weights()[0],
        params["Transformer/encoder_norm/scale"],
    )


def test_head_dropped_without_top():
    params = checkpoint(num_classes=10)
    model = keras_vit.ViT("test/8", image_size=32, include_top=False)
    load_weights(model, params)
    x = images((1, 32, 32, 3))
    pooled = reference.vit_intermediates(
        params, x, num_heads=2, patch_size=8, gelu="exact"
    )["pooled"]
    np.testing.assert_allclose(run(model, x), pooled, rtol=1e-5, atol=1e-5)


def test_pre_logits_dropped_with_a_warning_and_head_zeroed():
    params = checkpoint(num_classes=10, representation_size=16)
    model = keras_vit.ViT("test/8", image_size=32, num_classes=10)
    with pytest.warns(UserWarning, match="pre_logits.*representation_size=16"):
        load_weights(model, params)
    assert not np.any(model.get_layer("head").get_weights()[0])
    # Asked for explicitly: no warning.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_weights(model, params, keep_pre_logits=False)
    with pytest.raises(ValueError, match="no `pre_logits` layer"):
        load_weights(model, params, keep_pre_logits=True)


def test_pre_logits_in_model_but_not_in_checkpoint_raises():
    params = checkpoint(num_classes=10)
    model = keras_vit.ViT(
        "test/8", image_size=32, num_classes=10, representation_size=16
    )
    before = snapshot(model)
    with pytest.raises(CheckpointError, match="pre_logits/kernel") as info:
        load_weights(model, params)
    assert "pre_logits/kernel" in info.value.missing
    assert_unchanged(model, before)


# --------------------------------------------------------------------------
# Bad checkpoints: documented errors, weights unchanged
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny():
    return keras_vit.ViT("test/8", image_size=32, num_classes=10)


def _bad_cases():
    def missing(p):
        del p["Transformer/encoderblock_1/LayerNorm_2/scale"]

    def unexpected(p):
        p["Transformer/encoderblock_0/Extra_9/kernel"] = np.ones((3, 4), "float32")

    def misshaped(p):
        p["Transformer/encoderblock_1/MlpBlock_3/Dense_1/bias"] = np.ones(33, "float32")

    def late_misshaped(p):  # the last key checked: nothing may be half-loaded
        p["Transformer/encoder_norm/bias"] = np.ones(31, "float32")

    return [
        (missing, "Missing keys", ["Transformer/encoderblock_1/LayerNorm_2/scale"]),
        (unexpected, "Unexpected keys", [
            "Transformer/encoderblock_0/Extra_9/kernel (3, 4)"]),
        (misshaped, "Mis-shaped keys", [
            "Transformer/encoderblock_1/MlpBlock_3/Dense_1/bias: "
            "checkpoint (33,) vs model (32,)"]),
        (late_misshaped, "Mis-shaped keys", [
            "Transformer/encoder_norm/bias: checkpoint (31,) vs model (32,)"]),
    ]  # fmt: skip


@pytest.mark.parametrize("corrupt, title, lines", _bad_cases())
def test_bad_keys_raise_and_leave_weights_unchanged(tiny, corrupt, title, lines):
    params = checkpoint(seed=1)
    corrupt(params)
    before = snapshot(tiny)
    with pytest.raises(CheckpointError) as info:
        load_weights(tiny, params)
    message = str(info.value)
    assert title in message and "no weight was changed" in message
    for line in lines:
        assert line in message
    assert_unchanged(tiny, before)


def test_variant_mismatch_is_caught_before_any_change(tiny):
    # A real Ti/16 file layout (shapes only) into a "test" model: like a B/16
    # file into an L/16 model, but cheap to build.
    params = reference.make_vit_checkpoint(**TI16, image_size=32, shapes_only=True)
    before = snapshot(tiny)
    with pytest.raises(VariantMismatchError) as info:
        load_weights(tiny, params)
    message = str(info.value)
    assert "ViT-Ti/16" in message and "ViT-test/8" in message
    assert "'embedding/kernel' has shape (16, 16, 3, 192)" in message
    assert "(8, 8, 3, 32) in the model" in message
    assert info.value.mismatched["embedding/kernel"] == (
        (16, 16, 3, 192),
        (8, 8, 3, 32),
    )
    assert_unchanged(tiny, before)


def test_hybrid_checkpoint_into_plain_model_is_a_variant_mismatch(tiny):
    params = checkpoint(patch_size=2, resnet_layers=(1,), resnet_width=32)
    before = snapshot(tiny)
    with pytest.raises(VariantMismatchError, match="backbone"):
        load_weights(tiny, params)
    assert_unchanged(tiny, before)


def test_pickled_npz_is_refused(tiny, tmp_path):
    params = checkpoint()
    params["evil"] = np.array([{"run": "code"}], dtype=object)
    path = tmp_path / "pickled.npz"
    np.savez(path, **params)
    pickled_file = tmp_path / "pickle_file.npz"
    np.save(tmp_path / "p.npy", {"a": 1}, allow_pickle=True)
    os.rename(tmp_path / "p.npy", pickled_file)
    before = snapshot(tiny)
    with pytest.raises(CheckpointError, match="'evil'.*pickled"):
        load_weights(tiny, path)
    with pytest.raises(CheckpointError, match="pickled data"):
        load_weights(tiny, pickled_file)
    assert_unchanged(tiny, before)


def test_corrupt_files_are_refused(tiny, tmp_path):
    path = reference.save_npz(checkpoint(), tmp_path / "good.npz")
    data = open(path, "rb").read()
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(data[: len(data) // 2])
    garbage = tmp_path / "garbage.bin"
    garbage.write_bytes(b"\x00\x01not a checkpoint" * 10)
    before = snapshot(tiny)
    with pytest.raises(CheckpointError, match="corrupt|not a readable"):
        load_weights(tiny, truncated)
    with pytest.raises(CheckpointError, match="not a checkpoint keras_vit can read"):
        load_weights(tiny, garbage)
    with pytest.raises(CheckpointError, match="not an .npz archive"):
        load_weights(tiny, str(garbage.rename(tmp_path / "garbage.npz")))
    with pytest.raises(FileNotFoundError):
        load_weights(tiny, tmp_path / "absent.npz")
    assert_unchanged(tiny, before)


def test_nan_or_inf_weights_are_refused_naming_the_key(tiny, tmp_path):
    params = checkpoint()
    qkv = "Transformer/encoderblock_1/MultiHeadDotProductAttention_1/query/kernel"
    params[qkv] = params[qkv].copy()
    params[qkv][0, 0, :3] = np.nan
    params["Transformer/encoder_norm/scale"] = params[
        "Transformer/encoder_norm/scale"
    ].copy()
    params["Transformer/encoder_norm/scale"][5] = -np.inf
    path = reference.save_npz(params, tmp_path / "diverged.npz")
    before = snapshot(tiny)
    for source in (path, params):  # a file, and the same arrays in memory
        with pytest.raises(CheckpointError) as info:
            load_weights(tiny, source)
        message = str(info.value)
        assert "NaN or infinite values" in message
        assert f"{qkv} (32, 2, 16): 3 NaN of 1024" in message
        assert "Transformer/encoder_norm/scale (32,): 1 inf of 32" in message
        assert "no weight was changed" in message
    assert_unchanged(tiny, before)
    # Finite values of any size load (the check sums in float64).
    params = checkpoint()
    params["Transformer/encoder_norm/bias"] = np.full(32, 3e38, np.float32)
    load_weights(tiny, params)


def test_a_directory_is_refused_in_one_sentence(tiny, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    reference.save_npz(checkpoint(), folder / "model.npz")
    before = snapshot(tiny)
    with pytest.raises(CheckpointError) as info:
        load_weights(tiny, folder)
    assert str(info.value) == (
        f"{str(folder)!r} is a directory; `weights=` takes a checkpoint file "
        "(.npz, .safetensors, .pth, .pth.tar, .pt, .keras or .weights.h5), e.g. "
        f"{str(folder / 'model.npz')!r}, or a known tag."
    )
    exported = tmp_path / "exported"
    exported.mkdir()
    (exported / "saved_model.pb").write_bytes(b"")
    with pytest.raises(CheckpointError, match="is a TensorFlow SavedModel directory"):
        keras_vit.ViT("test/8", image_size=32, num_classes=10, weights=exported)
    assert_unchanged(tiny, before)


def test_a_checkpoint_without_vit_keys_says_so(tiny, tmp_path):
    before = snapshot(tiny)
    with pytest.raises(CheckpointError, match="'a dict of arrays' holds no weights"):
        load_weights(tiny, {})
    path = tmp_path / "other.npz"
    np.savez(path, **{"conv1/kernel": np.zeros((3, 3, 3, 8), "float32")})
    with pytest.raises(CheckpointError) as info:
        load_weights(tiny, path)
    assert "has none of the keys a keras_vit model expects" in str(info.value)
    assert "conv1/kernel" in str(info.value)
    assert "depth=0" not in str(info.value)
    assert_unchanged(tiny, before)


# --------------------------------------------------------------------------
# Tags: the registry and the Keras cache, offline
# --------------------------------------------------------------------------


def test_registry_covers_the_original_and_augreg_sets():
    have = {(w.tag, w.variant) for w in registry.PRETRAINED_WEIGHTS}
    for variant in ("B/16", "B/32", "L/16", "L/32", "H/14", "R50+B/16"):
        assert ("imagenet21k", variant) in have
    for variant in ("B/16", "B/32", "L/16", "L/32", "R50+B/16"):
        assert ("imagenet21k+imagenet2012", variant) in have
    for variant in ("Ti/16", "S/16", "S/32", "B/16", "B/32", "L/16", "R26+S/32"):
        for tag in ("augreg_in21k", "augreg_in21k_ft_in1k", "augreg_in21k_ft_in1k_384"):
            assert (tag, variant) in have
    names = [w.file_name for w in registry.PRETRAINED_WEIGHTS]
    assert len(names) == len(set(names))
    for w in registry.PRETRAINED_WEIGHTS:
        keras_vit.parse_variant(w.variant)
        if w.url.startswith(registry.HF_URL):  # the newer families: test_families
            continue
        assert w.url.startswith("https://storage.googleapis.com/vit_models/")
        assert w.url.endswith(".npz") and w.image_size in (224, 384)
        assert w.sha256 is None or len(w.sha256) == 64
        if w.tag == "augreg_in21k_ft_in1k_384":
            assert w.image_size == 384 and w.url.endswith("res_384.npz")
        if w.tag == "imagenet21k+imagenet2012":
            assert w.image_size == 384
    # A model's shapes name its variant, which selects the file of a tag.
    for variant in {w.variant for w in registry.PRETRAINED_WEIGHTS}:
        spec = keras_vit.parse_variant(variant)
        arch = Architecture(
            hidden_dim=spec.variant.hidden_dim,
            depth=spec.variant.depth,
            num_heads=spec.variant.num_heads,
            mlp_dim=spec.variant.mlp_dim,
            patch_size=(spec.patch_size,) * 2,
            backbone=spec.backbone and (spec.backbone.layers, spec.backbone.width),
        )
        assert arch.variant == variant
    entry = registry.find("imagenet21k", "B/16")
    assert (
        entry.url
        == "https://storage.googleapis.com/vit_models/imagenet21k/ViT-B_16.npz"
    )
    assert (entry.num_classes, entry.representation_size) == (21843, 768)


@pytest.fixture(scope="module")
def ti16_file(tmp_path_factory):
    """A synthetic file in the exact layout of the `augreg_in21k` Ti/16 file."""
    entry = registry.find("augreg_in21k", "Ti/16")
    params = reference.make_vit_checkpoint(
        **TI16, image_size=224, num_classes=entry.num_classes, seed=3
    )
    folder = tmp_path_factory.mktemp("keras_home")
    os.makedirs(folder / "keras_vit")
    reference.save_npz(params, folder / "keras_vit" / entry.file_name)
    return folder, params


def _offline(*args, **kwargs):
    raise Exception(
        "URL fetch failure on https://storage.googleapis.com/vit_models/: None "
        "-- [Errno -3] Temporary failure in name resolution"
    )


def test_tag_loads_from_the_keras_cache(ti16_file, monkeypatch):
    folder, params = ti16_file
    monkeypatch.setenv("KERAS_HOME", str(folder))
    monkeypatch.setattr(keras.utils, "get_file", _offline)
    model = keras_vit.ViT_Ti16(image_size=32, num_classes=21843, weights="augreg_in21k")
    x = images((1, 32, 32, 3))
    expected = reference.vit_forward(
        zoomed(params, (14, 14), (2, 2)), x, num_heads=3, patch_size=16, gelu="exact"
    )
    np.testing.assert_allclose(run(model, x), expected, rtol=1e-4, atol=1e-4)
    # The same with an explicit cache_dir and no KERAS_HOME.
    monkeypatch.delenv("KERAS_HOME")
    other = keras_vit.ViT_Ti16(image_size=32, num_classes=7)
    notes = load_weights(other, "augreg_in21k", cache_dir=folder)
    assert any("zero-initialised" in n for n in notes)


def test_tag_offline_error_names_the_file_and_directory(
    ti16_file, tmp_path, monkeypatch
):
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    monkeypatch.setattr(keras.utils, "get_file", _offline)
    model = keras_vit.ViT_Ti16(image_size=32, num_classes=10)
    before = snapshot(model)
    entry = registry.find("augreg_in21k_ft_in1k", "Ti/16")
    with pytest.raises(WeightsNotFoundError) as info:
        load_weights(model, "augreg_in21k_ft_in1k")
    message = str(info.value)
    assert entry.file_name in message and entry.url in message
    assert str(tmp_path / "keras_vit") in message
    with pytest.raises(ValueError, match=r"exists for: \['B/16'"):
        load_weights(model, "imagenet21k+imagenet2012_224")
    with pytest.raises(ValueError, match="Known tags"):
        load_weights(model, "imagenet")
    assert_unchanged(model, before)


def test_tag_downloads_with_keras_get_file_when_online(
    ti16_file, tmp_path, monkeypatch
):
    folder, params = ti16_file
    entry = registry.find("augreg_in21k", "Ti/16")
    calls = []

    def fake_get_file(fname, origin, **kwargs):
        calls.append((fname, origin, kwargs))
        target = os.path.join(kwargs["cache_dir"], kwargs["cache_subdir"], fname)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(folder / "keras_vit" / entry.file_name, "rb") as src:
            open(target, "wb").write(src.read())
        return target

    monkeypatch.setattr(keras.utils, "get_file", fake_get_file)
    model = keras_vit.ViT_Ti16(image_size=32, num_classes=21843)
    load_weights(model, "augreg_in21k", cache_dir=tmp_path)
    assert calls == [
        (entry.file_name, entry.url, dict(
            file_hash=None, hash_algorithm="sha256", cache_subdir="keras_vit",
            cache_dir=str(tmp_path), force_download=False))
    ]  # fmt: skip
    np.testing.assert_array_equal(
        model.get_layer("head").get_weights()[1], params["head/bias"]
    )


# --------------------------------------------------------------------------
# Keras files and the converter
# --------------------------------------------------------------------------


def test_keras_files_load_as_keras_does(tmp_path):
    params = checkpoint()
    model = keras_vit.ViT("test/8", image_size=32, num_classes=10)
    load_weights(model, params)
    model.save_weights(tmp_path / "m.weights.h5")
    model.save(tmp_path / "m.keras")
    x = images((2, 32, 32, 3))
    for name in ("m.weights.h5", "m.keras"):
        fresh = keras_vit.ViT("test/8", image_size=32, num_classes=10)
        load_weights(fresh, tmp_path / name)
        np.testing.assert_array_equal(run(fresh, x), run(model, x))


def test_convert_round_trip(tmp_path, capsys):
    params = checkpoint(num_classes=10, representation_size=16)
    path = reference.save_npz(params, tmp_path / "in.npz")
    out = str(tmp_path / "out" / "vit.weights.h5")
    assert convert.main([path, out, "--variant", "test/8"]) == 0
    printed = capsys.readouterr().out
    assert "34/34" in printed and f"Wrote {out}" in printed
    model = keras_vit.ViT(
        "test/8", image_size=32, num_classes=10, representation_size=16, weights=out
    )
    x = images((2, 32, 32, 3))
    expected = reference.vit_forward(params, x, num_heads=2, patch_size=8, gelu="exact")
    np.testing.assert_allclose(run(model, x), expected, rtol=1e-5, atol=1e-5)
    # A checkpoint of another variant: an error message, exit status 1.
    assert convert.main([path, str(tmp_path / "x.weights.h5"), "--variant", "test/16"])
    assert "ViT-test/8 but the model is a ViT-test/16" in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "x.weights.h5")
    # At another resolution, without pre_logits, to a .keras file.
    out = str(tmp_path / "vit48.keras")
    convert.main([path, out, "--image-size", "48", "--representation-size", "none"])
    loaded = keras.saving.load_model(out)
    assert loaded.input_shape == (None, 48, 48, 3)
    table = keras.ops.convert_to_numpy(loaded.get_layer("posembed_input").embedding)
    np.testing.assert_allclose(
        table, zoomed(params, (4, 4), (6, 6))[POSEMB], rtol=1e-6, atol=1e-6
    )


# -- The rule engine and the old module paths ----------------------------------


def test_the_rule_engine_follows_the_keys_and_names_what_it_cannot_convert():
    from keras_vit.weights import keys
    from keras_vit.weights.dialects import rules
    from keras_vit.weights.dialects.convert import split

    dialect = rules.Dialect(
        "toy",
        rules=(
            rules.Rule(r"b(?P<i>\d+)\.qkv", keys.projections(keys.ATTENTION, keys.QKV, "bias"), split(3)),  # noqa: E501
            rules.Rule(r"b(?P<i>\d+)\.ls", keys.LAYER_SCALE_1),
            rules.Rule(r"mask", None),
        ),
        shift={"i": -1},  # blocks counted from 1
    )  # fmt: skip
    params, left = rules.translate(
        {
            "b1.qkv": np.arange(6.0),
            "b2.qkv": np.arange(5.0),  # not a multiple of 3: kept, named
            "b2.ls": np.ones(2),
            "mask": np.zeros(2),  # left out on purpose
            "other": np.zeros(1),
        },
        dialect,
    )
    attention = "Transformer/encoderblock_0/MultiHeadDotProductAttention_1"
    assert list(params) == [
        f"{attention}/query/bias",
        f"{attention}/key/bias",
        f"{attention}/value/bias",
        "b2.qkv",
        "Transformer/encoderblock_1/LayerScale_0/scale",
        "other",
    ]
    assert left == ["b2.qkv", "other"]
    np.testing.assert_array_equal(params[f"{attention}/value/bias"], [4.0, 5.0])


@pytest.mark.parametrize(
    "adapt, message",
    [
        (
            lambda m: keras_vit.finetune.enable_lora(m, rank=2),
            "unmerged LoRA adapters .*merge_lora\\(\\) first",
        ),
        (
            lambda m: keras_vit.finetune.quantize(m, "int8"),
            "is quantized .*load weights before quantize",
        ),
    ],
    ids=["lora", "int8"],
)
def test_lora_or_quantized_models_are_refused_naming_the_order(adapt, message):
    source = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    adapt(model)
    with pytest.raises(CheckpointError, match=message):
        load_weights(model, source)
    with pytest.raises(CheckpointError, match="merge_lora|before quantize") as info:
        load_weights(source, model)  # read from: the adapted model is the source
    assert "\n" not in str(info.value)


def test_a_lora_model_is_read_once_its_adapters_are_merged():
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    keras_vit.finetune.enable_lora(model, rank=2)
    with pytest.raises(CheckpointError, match="merge_lora\\(model\\) instead"):
        keras_vit.weights.from_model(model)
    merged = keras_vit.finetune.merge_lora(model)
    target = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    load_weights(target, merged)
    images = np.ones((1, 16, 16, 3), "float32")
    np.testing.assert_allclose(target(images), model(images), atol=1e-5)
