"""keras_vit's stateless RandAugment: each operation, magnitudes, seeds, pipeline."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image
from PIL import ImageEnhance
from PIL import ImageOps

from keras_vit import data
from keras_vit.data import randaugment as ra

MAGNITUDE_OPS = tuple(
    name for name in ra.RANDAUGMENT_OPS if name not in ("AutoContrast", "Equalize")
)


def _image(height=32, width=32, channels=3, seed=0, low=0, high=256):
    rng = np.random.default_rng(seed)
    return rng.integers(low, high, (height, width, channels)).astype(np.float32)


def _smooth(size=24):
    """Smooth RGB content: moving it changes pixels in proportion to the move."""
    rows, cols = np.meshgrid(np.arange(size), np.arange(size), indexing="ij")
    channels = [np.sin(rows / 7 + k) * np.cos(cols / 5 - k) for k in range(3)]
    return (127.5 + 100 * np.stack(channels, -1)).astype(np.float32)


def _ramp():
    return np.arange(256, dtype=np.float32).reshape(16, 16, 1).repeat(3, axis=-1)


def _op(image, name, magnitude, sign=1.0, **kwargs):
    return ra.apply_op(image, name, magnitude, sign, **kwargs).numpy()


def _numpy_equalize(image):
    """PIL's per-channel equalization, written out: uint8 in and out."""
    out = np.empty_like(image)
    for c in range(image.shape[-1]):
        channel = image[..., c]
        counts = np.bincount(channel.ravel(), minlength=256)
        used = counts[counts > 0]
        step = (used.sum() - used[-1]) // 255
        if step == 0:
            out[..., c] = channel
            continue
        below = np.concatenate([[0], np.cumsum(counts)[:-1]])
        out[..., c] = np.minimum((below + step // 2) // step, 255)[channel]
    return out


def test_solarize_and_solarize_add_change_only_their_pixels():
    x = _ramp()
    # Magnitude 0.5: threshold 128; 1.0: threshold 0 (Invert); 0: nothing.
    np.testing.assert_array_equal(
        _op(x, "Solarize", 0.5), np.where(x >= 128, 255 - x, x)
    )
    np.testing.assert_array_equal(_op(x, "Solarize", 1.0), 255 - x)
    np.testing.assert_array_equal(_op(x, "Solarize", 0.0), x)
    np.testing.assert_array_equal(_op(x, "Invert", 0.3), 255 - x)
    # SolarizeAdd at 0.5 adds 55 below 128 only.
    np.testing.assert_array_equal(
        _op(x, "SolarizeAdd", 0.5), np.where(x < 128, np.minimum(x + 55, 255), x)
    )
    pil = Image.fromarray(x.astype(np.uint8))
    np.testing.assert_array_equal(
        ra.solarize(x, 100.0), np.asarray(ImageOps.solarize(pil, 100))
    )


def test_posterize_keeps_the_top_bits():
    x = _ramp()
    integers = x.astype(np.uint8)
    np.testing.assert_array_equal(_op(x, "Posterize", 1.0), integers & 0xF0)
    np.testing.assert_array_equal(_op(x, "Posterize", 0.5), integers & 0xFC)
    np.testing.assert_array_equal(_op(x, "Posterize", 0.0), x)
    # Fractional values (as after a resize) are truncated first.
    np.testing.assert_array_equal(ra.posterize(tf.fill((2, 2, 3), 200.7), 4), 192.0)
    with pytest.raises(ValueError, match="bits"):
        ra.posterize(x, 0)


def test_rotate_by_90_degrees_matches_rot90():
    for size in (17, 16):  # Odd and even sides: the centre is a pixel or a corner.
        x = _image(size, size, seed=size)
        expected = np.rot90(x)  # Counterclockwise.
        np.testing.assert_array_equal(ra.rotate(x, 90.0), expected)
        np.testing.assert_array_equal(ra.rotate(x, -90.0), np.rot90(x, k=-1))
        bilinear = ra.rotate(x, 90.0, interpolation="bilinear")
        np.testing.assert_allclose(bilinear, expected, atol=1e-2)
    # The op rotates 30 * magnitude degrees, by the sign, filling with 128.
    x = _image(33, 33)
    np.testing.assert_array_equal(_op(x, "Rotate", 1.0, -1.0), ra.rotate(x, -30.0))
    np.testing.assert_array_equal(_op(x, "Rotate", 0.5), ra.rotate(x, 15.0))
    assert np.all(_op(x, "Rotate", 1.0)[0, 0] == 128.0)  # A corner turned out.
    assert np.all(_op(x, "Rotate", 1.0, fill_value=0.0)[0, 0] == 0.0)


def test_translate_shifts_by_whole_pixels_and_fills_128():
    x = _image(20, 40, seed=1)
    # 0.45 of the side at magnitude 1: 18 px across, 9 px down.
    right = _op(x, "TranslateX", 1.0, 1.0)
    np.testing.assert_array_equal(right[:, 18:], x[:, :-18])
    assert np.all(right[:, :18] == 128.0)
    left = _op(x, "TranslateX", 1.0, -1.0)
    np.testing.assert_array_equal(left[:, :-18], x[:, 18:])
    assert np.all(left[:, -18:] == 128.0)
    down = _op(x, "TranslateY", 1.0, 1.0)
    np.testing.assert_array_equal(down[9:], x[:-9])
    assert np.all(down[:9] == 128.0)
    # Shifts larger than the image leave only the fill.
    assert np.all(ra.translate(x, dx=100.0, fill_value=3.0).numpy() == 3.0)


def test_shear_moves_rows_and_columns_about_the_centre():
    x = _image(33, 33, seed=2)  # Centre at (16, 16).
    sheared = ra.shear_x(x, 0.5).numpy()
    np.testing.assert_array_equal(sheared[16], x[16])  # The centre row stays.
    np.testing.assert_array_equal(sheared[20, :-2], x[20, 2:])  # 4 rows down: 2 px.
    np.testing.assert_array_equal(sheared[12, 2:], x[12, :-2])
    sheared = ra.shear_y(x, 0.5).numpy()
    np.testing.assert_array_equal(sheared[:, 16], x[:, 16])
    np.testing.assert_array_equal(sheared[:-2, 20], x[2:, 20])
    np.testing.assert_array_equal(_op(x, "ShearX", 1.0, -1.0), ra.shear_x(x, -0.3))
    np.testing.assert_array_equal(_op(x, "ShearY", 0.5), ra.shear_y(x, 0.15))


def test_equalize_matches_numpy_and_pil_and_flattens_the_histogram():
    rng = np.random.default_rng(3)
    # Skewed channels: most values in a narrow band, plus a constant channel.
    skewed = (rng.beta(2, 8, (48, 40, 2)) * 255).astype(np.uint8)
    image = np.concatenate([skewed, np.full((48, 40, 1), 9, np.uint8)], axis=-1)
    out = _op(image.astype(np.float32), "Equalize", 0.7)
    np.testing.assert_array_equal(out, _numpy_equalize(image))
    np.testing.assert_array_equal(
        out, np.asarray(ImageOps.equalize(Image.fromarray(image)))
    )
    np.testing.assert_array_equal(out[..., 2], 9)  # One value: kept.
    uniform = np.arange(1, 257) / 256
    for c in range(2):
        before, after = image[..., c].ravel(), out[..., c].astype(int).ravel()
        assert before.max() < 200 and after.max() == 255
        # The cumulative histogram moves close to the uniform one (the top
        # value keeps a bin of its own, hence the slack).
        cdf_before = np.cumsum(np.bincount(before, minlength=256)) / before.size
        cdf_after = np.cumsum(np.bincount(after, minlength=256)) / after.size
        assert np.abs(cdf_before - uniform).max() > 0.5
        assert np.abs(cdf_after - uniform).max() < 0.08


def test_autocontrast_stretches_each_channel_to_the_full_range():
    rng = np.random.default_rng(4)
    low_band = rng.integers(50, 101, (24, 24)).astype(np.float32)
    low_band[0, 0], low_band[0, 1] = 50, 100
    full = _image(24, 24, seed=4)[..., 0]
    full[0, 0], full[0, 1] = 0, 255
    image = np.stack([low_band, full, np.full((24, 24), 77.0, np.float32)], -1)
    out = _op(image, "AutoContrast", 0.2)
    np.testing.assert_allclose(out[..., 0], (low_band - 50) * 255 / 50, atol=1e-3)
    np.testing.assert_allclose(out[..., 1], full, atol=1e-3)
    np.testing.assert_array_equal(out[..., 2], 77.0)  # Constant: kept.
    pil = np.asarray(ImageOps.autocontrast(Image.fromarray(image.astype(np.uint8))))
    np.testing.assert_allclose(out, pil, atol=1.0)  # PIL truncates.


def test_blend_ops_match_pil_and_their_definitions():
    x = _image(12, 14, seed=5)
    pil = Image.fromarray(x.astype(np.uint8))
    enhancers = {
        "Color": ImageEnhance.Color,
        "Contrast": ImageEnhance.Contrast,
        "Brightness": ImageEnhance.Brightness,
        "Sharpness": ImageEnhance.Sharpness,
    }
    for name, enhancer in enhancers.items():
        for sign, factor in ((-1.0, 0.1), (1.0, 1.9)):  # Magnitude 1.
            expected = np.asarray(enhancer(pil).enhance(factor))
            # PIL rounds its grey, mean and smoothed images to integers.
            np.testing.assert_allclose(_op(x, name, 1.0, sign), expected, atol=1.5)
    gray = x @ np.array([0.299, 0.587, 0.114], np.float32)
    np.testing.assert_allclose(
        _op(x, "Color", 1.0, -1.0),
        gray[..., None] + 0.1 * (x - gray[..., None]),
        atol=1e-3,
    )
    np.testing.assert_allclose(
        _op(x, "Contrast", 0.5, -1.0),
        gray.mean() + 0.55 * (x - gray.mean()),
        atol=1e-3,
    )
    np.testing.assert_allclose(
        _op(x, "Brightness", 0.5, 1.0), np.minimum(1.45 * x, 255)
    )
    # Neutral images: grey for Color, flat for Contrast and Sharpness.
    neutral = np.repeat(x[..., :1], 3, axis=-1)
    np.testing.assert_allclose(_op(neutral, "Color", 1.0), neutral, atol=1e-3)
    flat = np.full((8, 8, 3), 90.0, np.float32)
    for name in ("Contrast", "Sharpness"):
        np.testing.assert_allclose(_op(flat, name, 1.0), flat, atol=1e-3)
    # Sharpness at factor 0 is the 3x3 smoothing of the interior.
    impulse = np.zeros((5, 5, 1), np.float32)
    impulse[2, 2] = 130.0
    smooth = ra.adjust_sharpness(impulse, 0.0).numpy()[..., 0]
    np.testing.assert_allclose(smooth[1:4, 1:4], [[10, 10, 10], [10, 50, 10], [10] * 3])
    assert np.all(smooth[0] == 0)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_every_op_is_the_identity_at_magnitude_zero_and_grows(sign):
    x = _smooth()
    for name in MAGNITUDE_OPS:
        np.testing.assert_allclose(_op(x, name, 0.0, sign), x, atol=1e-4)
        if name == "Identity":
            continue
        weak = np.abs(_op(x, name, 0.3, sign) - x).mean()
        strong = np.abs(_op(x, name, 1.0, sign) - x).mean()
        assert 0 < weak < strong, name


def test_seeds_decide_the_ops_and_nothing_else():
    augment = data.RandAugment(num_ops=2, magnitude=0.7)
    assert data.RandAugment(**augment.get_config()).get_config() == augment.get_config()
    x = _image(32, 32, seed=7)
    seed = tf.constant([11, 3], tf.int64)
    np.testing.assert_array_equal(augment(x, seed), augment(x, seed))
    np.testing.assert_array_equal(augment(x, seed), augment(x, tf.constant([11, 3])))
    outputs = [augment(x, tf.constant([i, 0])).numpy() for i in range(8)]
    distinct = {o.tobytes() for o in outputs}
    assert len(distinct) >= 6
    # The drawn ops are uniform over the list, with both signs.
    draws = [augment.draw(tf.constant([i, 1])) for i in range(200)]
    indices = np.concatenate([d[0].numpy() for d in draws])
    signs = np.concatenate([d[1].numpy() for d in draws])
    counts = np.bincount(indices, minlength=len(ra.RANDAUGMENT_OPS))
    assert len(counts) == 15 and counts.min() >= 10  # 400 draws, ~27 each.
    assert set(signs.tolist()) == {-1.0, 1.0}
    # The result is the drawn ops applied in order, with the drawn signs.
    negated = set()
    for i in range(10):
        seed = tf.constant([i, 1])
        op_indices, op_signs = augment.draw(seed)
        expected = x
        for index, sign in zip(op_indices.numpy(), op_signs.numpy(), strict=True):
            name = ra.RANDAUGMENT_OPS[index]
            expected = _op(expected, name, 0.7, sign)
            if sign < 0:
                negated.add(name)
        np.testing.assert_allclose(augment(x, seed), expected, atol=1e-4)
    assert negated & {"Rotate", "Color", "Contrast", "Brightness", "Sharpness"}


def test_output_dtype_shape_and_range():
    augment = data.RandAugment(
        num_ops=3, magnitude=1.0, ops=(*ra.RANDAUGMENT_OPS, "Invert")
    )
    x = _image(40, 56, seed=8)
    for i in range(12):
        out = augment(x.astype(np.uint8), tf.constant([i, 5]))
        assert out.dtype == tf.float32 and out.shape == (40, 56, 3)
        assert 0.0 <= out.numpy().min() and out.numpy().max() <= 255.0

    # Unknown height and width inside a graph (as after a crop).
    @tf.function(input_signature=[tf.TensorSpec((None, None, 3), tf.float32)])
    def graph(image):
        return augment(image, tf.constant([1, 2]))

    assert graph(x[:30, :20]).shape == (30, 20, 3)
    for size in (1, 2):  # Degenerate sizes still work (all border for Sharpness).
        tiny = x[:size, :size]
        for name in (*ra.RANDAUGMENT_OPS, "Invert"):
            assert _op(tiny, name, 1.0).shape == (size, size, 3)
        np.testing.assert_array_equal(_op(tiny, "Sharpness", 1.0), tiny)


def test_grayscale_images_match_the_rgb_path():
    gray = _image(24, 24, channels=1, seed=9)
    rgb = np.repeat(gray, 3, axis=-1)
    for name in (*ra.RANDAUGMENT_OPS, "Invert"):
        for sign in (1.0, -1.0):
            out = _op(gray, name, 0.8, sign)
            assert out.shape == (24, 24, 1)
            np.testing.assert_allclose(
                out, _op(rgb, name, 0.8, sign)[..., :1], atol=1e-3
            )
    augment = data.RandAugment(2, 0.9)
    for i in range(4):
        seed = tf.constant([i, 9])
        np.testing.assert_allclose(
            augment(gray, seed), augment(rgb, seed)[..., :1], atol=1e-3
        )


def test_bad_arguments_raise_clear_errors():
    for num_ops in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="num_ops"):
            data.RandAugment(num_ops)
    for magnitude in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="magnitude"):
            data.RandAugment(2, magnitude)
    with pytest.raises(ValueError, match="Unknown RandAugment operation 'Cutout'"):
        data.RandAugment(ops=("Rotate", "Cutout"))
    with pytest.raises(ValueError, match="at least one"):
        data.RandAugment(ops=())
    with pytest.raises(ValueError, match="interpolation"):
        data.RandAugment(interpolation="bicubic")
    with pytest.raises(ValueError, match="fill_value"):
        data.RandAugment(fill_value=300)
    augment = data.RandAugment()
    seed = tf.constant([1, 2])
    for shape in ((2, 8, 8, 3), (8, 8), (8, 8, 4)):
        with pytest.raises(ValueError, match="1 or 3 channels"):
            augment(tf.zeros(shape), seed)
    for bad_seed in (tf.constant([1, 2, 3]), tf.constant([1.0, 2.0]), 5):
        with pytest.raises(ValueError, match="seed"):
            augment(tf.zeros((8, 8, 3)), bad_seed)
    with pytest.raises(ValueError, match="magnitude"):
        ra.apply_op(tf.zeros((8, 8, 3)), "Rotate", 2.0)


def _stream(source, **kwargs):
    fields = {field.name for field in dataclasses.fields(data.Augmentation)}
    augmentation = {"flip": False}
    augmentation.update({k: kwargs.pop(k) for k in list(kwargs) if k in fields})
    options = dict(image_size=16, global_batch_size=32, seed=3, steps_per_epoch=None)
    options.update(kwargs)
    dataset = data.train_dataset(
        source, augmentation=data.Augmentation(**augmentation), **options
    )
    return [x.numpy() for x, _ in dataset]


def test_train_dataset_randaugment_is_reproducible_and_resumable():
    source = data.load_source("digits", "train[:64]")
    options = dict(epochs=2, randaugment_ops=2, randaugment_magnitude=0.9)
    first = _stream(source, **options)
    assert len(first) == 4
    for x1, x2 in zip(first, _stream(source, **options), strict=True):
        np.testing.assert_array_equal(x1, x2)
    # A run resumed at epoch 1 sees the same augmented images.
    resumed = _stream(source, start_epoch=1, **options)
    for x1, x2 in zip(first[2:], resumed, strict=True):
        np.testing.assert_array_equal(x1, x2)
    plain = _stream(source, epochs=2)
    assert not np.array_equal(first[0], plain[0])  # RandAugment did something.
    assert -1.0 <= first[0].min() and first[0].max() <= 1.0
    (gray,) = _stream(
        source,
        epochs=1,
        channels=1,
        global_batch_size=64,
        randaugment_ops=3,
        randaugment_magnitude=1.0,
    )
    assert gray.shape == (64, 16, 16, 1) and -1.0 <= gray.min() <= gray.max() <= 1.0
