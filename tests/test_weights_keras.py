"""Keras files and models in memory go through the one strict weights path."""

from __future__ import annotations

import warnings

import h5py
import keras
import numpy as np
import pytest
from helpers import images
from helpers import randomize

import keras_vit
from keras_vit.models.masked_patch import masked_patch_model
from keras_vit.models.masked_patch import transfer_encoder
from keras_vit.weights import CheckpointError
from keras_vit.weights import VariantMismatchError
from keras_vit.weights import from_keras_file
from keras_vit.weights import from_model
from keras_vit.weights import load_weights


def snapshot(model):
    return [np.asarray(w).copy() for w in model.weights]


def assert_unchanged(model, before):
    for old, weight in zip(before, model.weights, strict=True):
        np.testing.assert_array_equal(old, np.asarray(weight))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A random 5-class test/4 model at 16 px, saved both ways."""
    folder = tmp_path_factory.mktemp("saved")
    model = keras_vit.ViT("test/4", image_size=16, num_classes=5)
    randomize(model, seed=1)
    model.save(folder / "m.keras")
    model.save_weights(folder / "m.weights.h5")
    return model, folder


@pytest.mark.parametrize("name", ["m.keras", "m.weights.h5"])
def test_same_shape_loads_every_weight(saved, name):
    model, folder = saved
    for fresh in (
        keras_vit.ViT("test/4", image_size=16, num_classes=5, weights=folder / name),
        keras_vit.ViT("test/4", image_size=16, num_classes=5),
    ):
        load_weights(fresh, folder / name)
        for a, b in zip(fresh.weights, model.weights, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("name", ["m.keras", "m.weights.h5"])
def test_other_class_count_and_size_follow_the_one_head_rule(saved, name):
    """A 5-class file into a 10-class model at 32 px: as an .npz would load."""
    model, folder = saved
    target = keras_vit.ViT("test/4", image_size=32, num_classes=10)
    notes = load_weights(target, folder / name)
    assert any("head is zero-initialised" in n and "5 classes" in n for n in notes)
    assert any("4x4 to a 8x8 grid" in n for n in notes)
    assert not np.asarray(target.get_layer("head").kernel).any()
    np.testing.assert_array_equal(
        np.asarray(target.get_layer("encoderblock_1").attention.qkv_kernel),
        np.asarray(model.get_layer("encoderblock_1").attention.qkv_kernel),
    )
    np.testing.assert_allclose(
        np.asarray(target.get_layer("posembed_input").embedding),
        model.get_layer("posembed_input").resampled((8, 8)),
        atol=1e-6,
    )
    # The same file as an in-memory model gives the same weights.
    twin = keras_vit.ViT("test/4", image_size=32, num_classes=10)
    load_weights(twin, model)
    for a, b in zip(twin.weights, target.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("name", ["m.keras", "m.weights.h5"])
def test_another_architecture_fails_strictly_and_briefly(saved, name):
    _, folder = saved
    wider = keras_vit.ViT("test/8", image_size=16, num_classes=5)
    before = snapshot(wider)
    with pytest.raises(VariantMismatchError) as info:
        load_weights(wider, folder / name)
    message = str(info.value)
    assert "patch_size: checkpoint (4, 4) vs model (8, 8)" in message
    assert "no weight was changed" in message
    assert len(message) < 500 and message.count("\n") < 3
    assert_unchanged(wider, before)


def test_a_single_misfit_key_is_named(tmp_path):
    source = keras_vit.ViT(
        "test/4", image_size=16, num_classes=5, representation_size=6
    )
    source.save_weights(tmp_path / "pre_logits.weights.h5")
    target = keras_vit.ViT(
        "test/4", image_size=16, num_classes=5, representation_size=7
    )
    before = snapshot(target)
    with pytest.raises(CheckpointError) as info:
        load_weights(target, tmp_path / "pre_logits.weights.h5")
    message = str(info.value)
    assert "pre_logits/kernel: checkpoint (32, 6) vs model (32, 7)" in message
    assert message.count("\n") < 8
    assert_unchanged(target, before)
    # Without the layer, it is dropped with a warning and the head zeroed.
    plain = keras_vit.ViT("test/4", image_size=16, num_classes=5)
    with pytest.warns(UserWarning, match="pre_logits"):
        load_weights(plain, tmp_path / "pre_logits.weights.h5")
    assert not np.asarray(plain.get_layer("head").kernel).any()


@pytest.mark.parametrize("name", ["m.keras", "m.weights.h5"])
def test_torn_files_are_refused_without_change(saved, tmp_path, name):
    _, folder = saved
    data = (folder / name).read_bytes()
    torn = tmp_path / name
    torn.write_bytes(data[: len(data) // 2])
    target = keras_vit.ViT("test/4", image_size=16, num_classes=5)
    before = snapshot(target)
    with pytest.raises(CheckpointError, match="truncated or corrupt"):
        load_weights(target, torn)
    assert_unchanged(target, before)


@pytest.mark.parametrize("name", ["nan.keras", "nan.weights.h5"])
def test_nan_in_a_keras_file_is_refused_naming_the_variable(tmp_path, name):
    source = keras_vit.ViT("test/4", image_size=16, num_classes=5)
    randomize(source, seed=2)
    attention = source.get_layer("encoderblock_1").attention
    kernel = np.asarray(attention.qkv_kernel).copy()
    kernel[0, 2, 1, :2] = np.inf
    attention.qkv_kernel.assign(kernel)
    if name.endswith(".keras"):
        source.save(tmp_path / name)
    else:
        source.save_weights(tmp_path / name)
    target = keras_vit.ViT("test/4", image_size=16, num_classes=5)
    before = snapshot(target)
    with pytest.raises(CheckpointError) as info:
        load_weights(target, tmp_path / name)
    assert "encoderblock_1/attention/qkv_kernel (32, 3, 2, 16): 2 inf of 3072" in (
        str(info.value)
    )
    assert_unchanged(target, before)


def test_a_legacy_hdf5_file_is_refused_in_one_sentence(saved, tmp_path):
    model, _ = saved
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Keras's own "legacy format" notice
        model.save(tmp_path / "legacy.h5")  # Keras 3 writes Keras 2's format
    # Keras 2's `save_weights`: the layer list as a root attribute.
    with h5py.File(tmp_path / "keras2.weights.h5", "w") as f:
        f.attrs["layer_names"] = [b"embedding"]
        f.create_group("embedding").attrs["weight_names"] = [b"embedding/kernel:0"]
    target = keras_vit.ViT("test/4", image_size=16, num_classes=5)
    before = snapshot(target)
    for name in ("legacy.h5", "keras2.weights.h5"):
        with pytest.raises(CheckpointError) as info:
            load_weights(target, tmp_path / name)
        assert str(info.value) == (
            f"{str(tmp_path / name)!r} is a legacy Keras HDF5 file (Keras 2, or "
            "Keras 3's `model.save('x.h5')`), which is not supported: save the "
            "model with `model.save('x.keras')` or "
            "`model.save_weights('x.weights.h5')`."
        )
    # An HDF5 file with no Keras layers at all.
    with h5py.File(tmp_path / "empty.weights.h5", "w") as f:
        f.create_dataset("x", data=np.zeros(3))
    with pytest.raises(CheckpointError, match="holds no layer weights"):
        load_weights(target, tmp_path / "empty.weights.h5")
    assert_unchanged(target, before)


def test_a_nested_model_file_is_read_by_layer_name(saved, tmp_path):
    model, _ = saved
    wrapper = keras.Sequential(
        [keras.Input((16, 16, 3)), keras.layers.Rescaling(1.0), model], name="wrap"
    )
    wrapper.save(tmp_path / "wrapped.keras")
    target = keras_vit.ViT("test/4", image_size=16, num_classes=5)
    load_weights(target, tmp_path / "wrapped.keras")
    x = images(2, (16, 16))
    np.testing.assert_array_equal(np.asarray(target(x)), np.asarray(model(x)))
    # ... and the same wrapper in memory.
    checkpoint = from_model(wrapper)
    assert checkpoint.grid_size == (4, 4)
    assert "head/kernel" in checkpoint.params


@pytest.mark.parametrize("suffix", [".keras", ".weights.h5"])
def test_masked_patch_files_initialise_a_classifier(tmp_path, suffix):
    pretrained = masked_patch_model("test/4", image_size=16, seed=0)
    randomize(pretrained, seed=3)
    path = tmp_path / f"masked{suffix}"
    if suffix == ".keras":
        pretrained.save(path)
    else:
        pretrained.save_weights(path)
    checkpoint = from_keras_file(str(path), keras_vit.ViT("test/4", image_size=16))
    assert any("patch_corruption" in n for n in checkpoint.notes)
    # ViT(weights=file), load_weights(file) and transfer_encoder(model) agree.
    by_file = keras_vit.ViT("test/4", image_size=32, num_classes=3, weights=path)
    by_model = keras_vit.ViT("test/4", image_size=32, num_classes=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        transfer_encoder(pretrained, by_model)
    for a, b in zip(by_file.weights, by_model.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_with_image_size_moves_weights_through_the_same_path(saved):
    model, _ = saved
    bigger = keras_vit.with_image_size(model, (16, 24))
    expected = keras_vit.ViT("test/4", image_size=(16, 24), num_classes=5)
    load_weights(expected, model)
    for a, b in zip(bigger.weights, expected.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    with pytest.raises(ValueError, match="not a multiple of the model's token stride"):
        keras_vit.with_image_size(model, 18)
