"""Masked patch prediction: corruption, colour targets, loss, saving, transfer."""

from __future__ import annotations

import math

import keras
import numpy as np
import pytest
from helpers import assert_config_is_constructor_args
from helpers import randomize

import keras_vit
from keras_vit.models.masked_patch import MaskedPatchModel
from keras_vit.models.masked_patch import MeanColorTargets
from keras_vit.models.masked_patch import PatchCorruption
from keras_vit.models.masked_patch import masked_patch_loss
from keras_vit.models.masked_patch import masked_patch_model
from keras_vit.models.masked_patch import mean_color_classes
from keras_vit.models.masked_patch import transfer_encoder


def _solid_color_images(count, size=16, seed=0):
    """Images of one random 3-bit colour each (all 512 equally likely).

    A patch's colour is then that of every other patch of its image, but the
    colours carry no information on their own: a model that ignores the
    image cannot beat `ln(512)`.
    """
    rng = np.random.default_rng(seed)
    levels = rng.integers(0, 8, (count, 1, 1, 3))
    images = (
        -1 + (2 * levels + 1) / 8 + rng.uniform(-0.05, 0.05, (count, size, size, 3))
    )
    return images.astype("float32")


# -- PatchCorruption -----------------------------------------------------------


def _classify(inputs, outputs, token):
    """Labels each position 'mask', 'other' (donor index), 'same' or '?'."""
    kinds, donors = np.empty(inputs.shape[:2], object), []
    for b in range(inputs.shape[0]):
        for i in range(inputs.shape[1]):
            out = outputs[b, i]
            if np.array_equal(out, token):
                kinds[b, i] = "mask"
            elif np.array_equal(out, inputs[b, i]):
                kinds[b, i] = "same"
            else:
                match = np.flatnonzero((inputs[b] == out).all(axis=1))
                kinds[b, i] = "other" if len(match) == 1 else "?"
                donors.append((i, int(match[0]) if len(match) else -1))
    return kinds, donors


def test_corruption_statistics():
    batch, length, dim, draws = 32, 64, 8, 10
    layer = PatchCorruption(seed=1)
    layer.build((None, length, dim))
    token = np.full((1, 1, dim), 1e3, "float32")
    layer.mask_token.assign(token)
    rng = np.random.default_rng(0)
    counts = {"mask": 0, "other": 0, "same": 0}
    offsets = set()
    for _ in range(draws):
        x = rng.normal(size=(batch, length, dim)).astype("float32")
        out, mask = layer(x, training=True)
        out, mask = np.asarray(out), np.asarray(mask)
        assert mask.dtype == bool
        # Exactly half of every image is selected.
        np.testing.assert_array_equal(mask.sum(axis=1), length // 2)
        kinds, donors = _classify(x, out, token[0, 0])
        # Unselected positions are untouched.
        assert set(kinds[~mask]) == {"same"}
        assert "?" not in set(kinds[mask])
        for kind in counts:
            counts[kind] += int(np.sum(kinds[mask] == kind))
        for position, donor in donors:
            assert donor != position  # another patch of the same image
            offsets.add((donor - position) % length)
    total = sum(counts.values())
    assert total == draws * batch * length // 2
    assert abs(counts["mask"] / total - 0.8) < 0.02
    assert abs(counts["other"] / total - 0.1) < 0.015
    assert abs(counts["same"] / total - 0.1) < 0.015
    # Donors are spread over the image, not a fixed neighbour.
    assert len(offsets) > length // 2


def test_corruption_does_nothing_at_inference():
    layer = PatchCorruption(seed=0)
    x = np.random.default_rng(0).normal(size=(4, 10, 6)).astype("float32")
    for training in (False, None):
        out, mask = layer(x, training=training)
        np.testing.assert_array_equal(np.asarray(out), x)
        assert not np.asarray(mask).any()


def test_corruption_is_seeded():
    x = np.random.default_rng(0).normal(size=(4, 16, 6)).astype("float32")

    def draw(seed):
        layer = PatchCorruption(seed=seed, mask_initializer="ones")
        return [np.asarray(t) for t in layer(x, training=True)]

    first, again, other = draw(3), draw(3), draw(4)
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert not np.array_equal(first[1], other[1])


def test_corruption_rates_and_rounding():
    x = np.zeros((3, 7, 2), "float32")
    _, mask = PatchCorruption(0.5, seed=0)(x, training=True)
    np.testing.assert_array_equal(np.asarray(mask).sum(axis=1), 4)  # round(3.5)
    _, mask = PatchCorruption(0.01, seed=0)(x, training=True)
    np.testing.assert_array_equal(np.asarray(mask).sum(axis=1), 1)  # at least one


@pytest.mark.parametrize(
    "kwargs",
    [
        {"corruption_rate": 0.0},
        {"corruption_rate": 1.5},
        {"mask_rate": 0.95, "random_rate": 0.1},
        {"random_rate": -0.1},
    ],
)
def test_corruption_rejects_bad_rates(kwargs):
    with pytest.raises(ValueError, match="rate"):
        PatchCorruption(**kwargs)


def test_corruption_needs_two_patches_for_random_replacement():
    with pytest.raises(ValueError, match="at least 2 patches"):
        PatchCorruption()(np.zeros((1, 1, 4), "float32"))


# -- MeanColorTargets ------------------------------------------------------------


def test_mean_color_targets_hand_computed():
    image = np.zeros((1, 16, 24, 3), "float32")  # 2 x 3 patches of 8 x 8

    def patch(row, col):
        return image[0, 8 * row : 8 * row + 8, 8 * col : 8 * col + 8]

    patch(0, 0)[:] = 1.0  # white
    patch(0, 1)[:] = -1.0  # black
    patch(0, 2)[:] = (1.0, -1.0, -1.0)  # pure red
    patch(1, 0)[:4] = 1.0  # half white, half black: mean 0 -> level 4
    patch(1, 0)[4:] = -1.0
    patch(1, 1)[:] = (-0.9, 0.3, 0.76)  # levels 0, 5 (5.2), 7 (7.04)
    patch(1, 2)[:, :4] = -0.5  # mean -0.25: exactly on the 3 / 2 edge -> 3
    patch(1, 2)[:, 4:] = 0.0
    expected = [511, 0, 448, 4 * 64 + 4 * 8 + 4, 0 * 64 + 5 * 8 + 7, 3 * 73]
    targets = MeanColorTargets(8)(image)
    assert targets.dtype == "int32"
    np.testing.assert_array_equal(np.asarray(targets), [expected])
    # One bit per channel: white is 0b111.
    np.testing.assert_array_equal(
        np.asarray(MeanColorTargets(8, bits=1)(image))[0, 0], 7
    )
    assert mean_color_classes() == 512


def test_mean_color_targets_ignore_mixed_precision():
    image = np.full((1, 8, 8, 3), -0.25, "float32")
    keras.config.set_dtype_policy("mixed_bfloat16")
    targets = MeanColorTargets(4)(image)
    np.testing.assert_array_equal(np.asarray(targets), [[219] * 4])


def test_mean_color_targets_reject_bad_arguments():
    with pytest.raises(ValueError, match="bits"):
        MeanColorTargets(8, bits=0)
    with pytest.raises(ValueError, match="multiple of the patch"):
        MeanColorTargets(8)(np.zeros((1, 12, 16, 3), "float32"))


def test_layer_configs_are_constructor_args():
    for layer in (PatchCorruption(seed=2), MeanColorTargets((4, 8), bits=2)):
        assert_config_is_constructor_args(layer)
        clone = type(layer).from_config(layer.get_config())
        assert clone.get_config() == layer.get_config()


# -- loss, model, training ------------------------------------------------------


def test_loss_averages_over_corrupted_patches_only():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 5, 7)).astype("float32")
    targets = rng.integers(0, 7, (2, 5))
    mask = np.array([[1, 0, 1, 0, 0], [0, 0, 0, 1, 0]], bool)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    per_patch = -np.take_along_axis(log_probs, targets[..., None], -1)[..., 0]
    expected = per_patch[mask].mean()
    np.testing.assert_allclose(
        masked_patch_loss(targets, logits, mask), expected, rtol=1e-5
    )
    np.testing.assert_allclose(
        masked_patch_loss(targets, logits, np.zeros_like(mask)), 0.0
    )


def test_model_layer_names_and_outputs():
    model = masked_patch_model("test/4", image_size=16, seed=0)
    assert isinstance(model, MaskedPatchModel)
    names = {layer.name for layer in model.layers}
    expected = {"embedding", "class_token", "posembed_input", "encoderblock_0"}
    assert expected | {"encoderblock_1", "encoder_norm", "masked_patch_head"} <= names
    out = model.predict(_solid_color_images(3), verbose=0)
    assert out["logits"].shape == (3, 16, 512)
    assert out["targets"].shape == (3, 16) and out["pooled"].shape == (3, 32)
    assert not out["mask"].any()  # predict: no corruption


def test_masked_patch_loss_decreases():
    images = _solid_color_images(256, seed=1)
    probe = images[:64]
    model = masked_patch_model("test/4", image_size=16, seed=0)

    def corrupted_loss():
        keras.utils.set_random_seed(5)  # same corruption before and after
        out = model(probe, training=True)
        return float(masked_patch_loss(out["targets"], out["logits"], out["mask"]))

    before = corrupted_loss()
    np.testing.assert_allclose(before, math.log(512), rtol=1e-4)  # zero head
    model.compile(keras.optimizers.Adam(1e-2), jit_compile=False)
    history = model.fit(images, batch_size=32, epochs=6, shuffle=True, verbose=0)
    after = corrupted_loss()
    # Colours are uniform over 512 classes: only using the other patches of
    # the image brings the loss below ln(512) = 6.24.
    assert after < before - 1.0, (before, after, history.history)
    assert history.history["patch_accuracy"][-1] > 2 / 512


def test_keras_round_trip(tmp_path):
    model = masked_patch_model("test/4", image_size=16, seed=0)
    randomize(model, seed=1)
    # Eager: one step does not pay for tracing a train function.
    model.compile(keras.optimizers.Adam(1e-3), run_eagerly=True)
    images = _solid_color_images(4)
    model.fit(images, batch_size=4, epochs=1, verbose=0)
    path = tmp_path / "masked.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, MaskedPatchModel)
    assert [w.name for w in loaded.weights] == [w.name for w in model.weights]
    for a, b in zip(loaded.weights, model.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    expected, got = model.predict_on_batch(images), loaded.predict_on_batch(images)
    for key in expected:
        np.testing.assert_allclose(got[key], expected[key], atol=1e-6)
    corruption = loaded.get_layer("patch_corruption")
    assert (corruption.corruption_rate, corruption.mask_rate, corruption.seed) == (
        0.5,
        0.8,
        0,
    )
    # The optimizer state comes back, and the loaded model still computes the
    # masked loss (its class, not a plain Functional, was revived).
    for a, b in zip(loaded.optimizer.variables, model.optimizer.variables, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    loss = loaded.compute_loss(y_pred=loaded(images, training=True))
    assert 0 < float(loss) < 20


def test_mixed_precision_train_step():
    keras.config.set_dtype_policy("mixed_bfloat16")
    model = masked_patch_model("test/4", image_size=16, seed=0)
    assert model.get_layer("masked_patch_head").compute_dtype == "float32"
    model.compile(keras.optimizers.Adam(1e-3), run_eagerly=True)
    history = model.fit(_solid_color_images(4), batch_size=4, epochs=1, verbose=0)
    np.testing.assert_allclose(history.history["loss"][0], math.log(512), rtol=1e-2)


# -- transfer ----------------------------------------------------------------------


def test_transfer_encoder_into_vit():
    pretrained = masked_patch_model("test/4", image_size=16, seed=0)
    randomize(pretrained, seed=3)
    classifier = keras_vit.ViT("test/4", image_size=16, num_classes=5)
    notes = transfer_encoder(pretrained, classifier)
    assert any("masked_patch_head" in n and "patch_corruption" in n for n in notes)
    assert any("head is zero-initialised" in n for n in notes)
    copied = [
        "embedding",
        "class_token",
        "posembed_input",
        "encoderblock_0",
        "encoderblock_1",
        "encoder_norm",
    ]
    for name in copied:
        for a, b in zip(
            classifier.get_layer(name).weights,
            pretrained.get_layer(name).weights,
            strict=True,
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.asarray(classifier.get_layer("head").kernel).any()  # kept fresh
    # Same encoder, same representation (no corruption at inference).
    images = _solid_color_images(3)
    features = keras_vit.feature_extractor(classifier, blocks=None)
    np.testing.assert_allclose(
        features.predict(images, verbose=0)["pooled"],
        pretrained.predict(images, verbose=0)["pooled"],
        atol=1e-5,
    )


def test_transfer_encoder_at_higher_resolution():
    pretrained = masked_patch_model("test/4", image_size=16, seed=0)
    randomize(pretrained, seed=3)
    classifier = keras_vit.ViT("test/4", image_size=32, num_classes=5)
    transfer_encoder(pretrained, classifier)
    source = pretrained.get_layer("posembed_input")
    table = np.asarray(classifier.get_layer("posembed_input").embedding)
    assert table.shape == (1, 1 + 8 * 8, 32)
    np.testing.assert_allclose(table, source.resampled((8, 8)), atol=1e-6)
    np.testing.assert_array_equal(table[:, 0], np.asarray(source.embedding)[:, 0])


def test_transfer_encoder_rejects_other_architectures():
    pretrained = masked_patch_model("test/4", image_size=16, seed=0)
    coarser = keras_vit.ViT("test/8", image_size=16)
    before = [np.asarray(w).copy() for w in coarser.weights]
    with pytest.raises(ValueError, match="shape"):
        transfer_encoder(pretrained, coarser)
    for old, weight in zip(before, coarser.weights, strict=True):
        np.testing.assert_array_equal(old, np.asarray(weight))  # untouched
    hybrid = keras_vit.ViT("test/8", image_size=16, backbone=())
    with pytest.raises(ValueError, match="backbone"):
        transfer_encoder(pretrained, hybrid)


def test_pretraining_with_newer_encoder_features_transfers():
    """Registers, LayerScale, QK-norm and SwiGLU pre-train and transfer alike."""
    features = dict(
        num_registers=2, layer_scale_init=0.1, qk_norm=True, mlp="swiglu",
        no_embed_class=True,
    )  # fmt: skip
    pretrained = masked_patch_model("test/4", image_size=16, seed=0, **features)
    randomize(pretrained, seed=5)
    outputs = pretrained(_solid_color_images(2), training=True)
    assert outputs["logits"].shape == (2, 16, 512)  # the 16 patches, no registers
    classifier = keras_vit.ViT("test/4", image_size=16, num_classes=3, **features)
    transfer_encoder(pretrained, classifier)
    images = _solid_color_images(3)
    np.testing.assert_allclose(
        keras_vit.feature_extractor(classifier, blocks=None)(images)["pooled"],
        pretrained.predict(images, verbose=0)["pooled"],
        atol=1e-5,
    )
