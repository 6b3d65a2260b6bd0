"""The glyphs dataset: pinned bytes, disjoint splits, balance, the pipeline."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from keras_vit import data
from keras_vit.parkkim import glyphs

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# `glyphs.checksum` of each split's images and labels, and of the inputs they
# are made from. A change here changes the dataset: every result measured on
# it. If only the inputs' checksums moved, a library now decodes the JPEGs
# (Pillow) or reads the font outlines (matplotlib) differently.
PINNED = {
    "train images": "eadc9d230fde5b6ef7303b12f9fc374a970f98c0b692427a6685bf58763a8556",
    "train labels": "e0283b852a375fa5afb420b604e1c01205bbb5b83df4658aa339ac8da16e11e3",
    "test images": "43611a34952e8a337d7763c721729566c383a474b2ff2812c26083ab8688be4a",
    "test labels": "a56b80da9087cf10e976855c590bf4c388895e7ce5dcb5c27fd5a8678fd72889",
    "photos": "279d4f6e46608d44dbefb0e800c143b7823df23ef43f298be96bcb3446954d01",
    "shapes": "476d41aa655ceab83840143eb9db2d92f4db29178640af4e95a1b038d4436c8e",
}


def test_inputs_are_the_pinned_photos_and_font_outlines():
    assert glyphs.checksum(glyphs._photos()) == PINNED["photos"]
    assert glyphs.checksum(glyphs._shapes()) == PINNED["shapes"]


@pytest.mark.parametrize("split", ["train", "test"])
def test_splits_are_the_pinned_bytes(split):
    images, labels = glyphs.glyph_arrays(split)
    assert glyphs.checksum(labels) == PINNED[f"{split} labels"]
    assert glyphs.checksum(images) == PINNED[f"{split} images"]


def test_same_bytes_whatever_simd_numpy_dispatches_to():
    # NumPy picks its kernels by CPU (AVX-512, AVX2, SSE): a fresh process
    # limited to the baseline kernels must produce the same split.
    code = (
        "from keras_vit.parkkim import glyphs\n"
        "images, labels = glyphs.glyph_arrays('test')\n"
        "print(glyphs.checksum(images), glyphs.checksum(labels))\n"
    )
    env = dict(
        os.environ,
        PYTHONPATH=REPO,
        NPY_DISABLE_CPU_FEATURES="X86_V3 X86_V4 AVX512_ICL AVX512_SPR",
        TF_CPP_MIN_LOG_LEVEL="3",
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    images, labels = result.stdout.split()[-2:]
    assert (images, labels) == (PINNED["test images"], PINNED["test labels"])


def test_sizes_shapes_balance_and_read_only_arrays():
    for split, size in (("train", 10_000), ("test", 2_000)):
        images, labels = glyphs.glyph_arrays(split)
        assert images.shape == (size, 32, 32, 3) and images.dtype == np.uint8
        assert labels.shape == (size,) and labels.dtype == np.int64
        np.testing.assert_array_equal(np.bincount(labels), [size // 10] * 10)
        assert not images.flags.writeable and not labels.flags.writeable
        # Real images: the full range of values, not blank or saturated.
        assert images.min() == 0 and images.max() == 255
        assert 40 < images.mean() < 160
    with pytest.raises(ValueError, match="Unknown glyphs split"):
        glyphs.glyph_arrays("validation")


def test_load_source_gives_the_arrays_in_order():
    source = data.load_source("glyphs", "test")
    assert source.num_examples == 2000 and source.num_classes == 10
    assert source.class_names == tuple("0123456789")
    assert not source.encoded and not source.may_fail_to_decode
    assert source.name == "glyphs:test"
    assert source.ranges == (("glyphs", "test", 0, 2000),)
    images, labels = next(iter(source.dataset.batch(2000)))
    expected_images, expected_labels = glyphs.glyph_arrays("test")
    np.testing.assert_array_equal(images.numpy(), expected_images)
    np.testing.assert_array_equal(labels.numpy(), expected_labels)


@pytest.mark.parametrize(
    "split, start, stop",
    [
        ("train[:80%]", 0, 8000),
        ("train[80%:]", 8000, 10_000),
        ("test[100:]", 100, 2000),
        ("test[-50:]", 1950, 2000),
        ("test[10:20]", 10, 20),
    ],
)
def test_slices(split, start, stop):
    source = data.load_source("glyphs", split)
    base = split.split("[")[0]
    assert source.num_examples == stop - start
    assert source.ranges == (("glyphs", base, start, stop),)
    images, labels = next(iter(source.dataset.batch(10_000)))
    all_images, all_labels = glyphs.glyph_arrays(base)
    np.testing.assert_array_equal(images.numpy(), all_images[start:stop])
    np.testing.assert_array_equal(labels.numpy(), all_labels[start:stop])


@pytest.mark.parametrize(
    "split, message",
    [
        ("validation", "Unknown glyphs split 'validation'"),
        ("test[3000:]", "outside the 2000 examples of the split"),
        ("train[:80", "Cannot parse split"),
    ],
)
def test_bad_splits_fail_clearly(split, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[")):
        data.load_source("glyphs", split)


def test_check_disjoint_accepts_disjoint_and_refuses_overlapping_splits():
    def source(split):
        return data.load_source("glyphs", split)

    data.check_disjoint(source("train"), source("test"))
    data.check_disjoint(source("train[:80%]"), source("train[80%:]"))
    data.check_disjoint(source("train[:80%]"), source("test"))
    with pytest.raises(ValueError, match=r"share 5000 example\(s\)"):
        data.check_disjoint(source("train"), source("train[50%:]"))
    with pytest.raises(ValueError, match=r"share 5 example\(s\).*train\[5:10\]"):
        data.check_disjoint(source("train[:10]"), source("train[5:20]"))


def test_splits_share_no_image_and_no_background_tile():
    train, _ = glyphs.glyph_arrays("train")
    test, _ = glyphs.glyph_arrays("test")
    train_digests = {image.tobytes() for image in train}
    assert len(train_digests) == len(train)  # no duplicates within a split
    assert not train_digests & {image.tobytes() for image in test}
    train_tiles = set(glyphs._split_tiles("train"))
    test_tiles = set(glyphs._split_tiles("test"))
    assert not train_tiles & test_tiles
    assert len(train_tiles | test_tiles) == 30 and len(test_tiles) == 6


def test_more_high_frequency_energy_than_the_digits():
    """The reason the dataset exists: energy above half the Nyquist frequency
    at 32 px (each image's mean removed), as the pipeline feeds a model."""

    def energy_above_half_nyquist(name):
        source = data.load_source(name, "test[:300]")
        images = np.concatenate(
            [
                x.numpy()
                for x, _ in data.eval_dataset(
                    source, image_size=32, global_batch_size=300
                )
            ]
        )
        images = images - images.mean(axis=(1, 2), keepdims=True)
        power = (np.abs(np.fft.fft2(images, axes=(1, 2))) ** 2).sum(axis=(0, 3))
        omega = 2 * np.pi * np.fft.fftfreq(32)
        radius = np.hypot(omega[:, None], omega[None, :])
        return power[radius > np.pi / 2].sum() / power.sum()

    assert energy_above_half_nyquist("digits") < 0.01
    assert energy_above_half_nyquist("glyphs") > 0.05


def test_pipelines_consume_it():
    source = data.load_source("glyphs", "train[:256]")
    batches = list(
        data.train_dataset(
            source,
            image_size=32,
            global_batch_size=64,
            epochs=1,
            steps_per_epoch=None,
            seed=0,
            augmentation=data.Augmentation(crop_area_range=(0.6, 1.0), flip=False),
        )
    )
    assert len(batches) == 4
    x, y = batches[0]
    assert x.shape == (64, 32, 32, 3) and x.dtype == "float32"
    assert -1.0 <= float(np.min(x)) < 0.0 < float(np.max(x)) <= 1.0
    np.testing.assert_array_equal(np.sum(y, axis=1), 1.0)
    assert y.shape == (64, 10)

    test = data.load_source("glyphs", "test[:100]")
    evaluation = list(data.eval_dataset(test, image_size=32, global_batch_size=64))
    assert [b[0].shape[0] for b in evaluation] == [64, 36]
    images = np.concatenate([b[0].numpy() for b in evaluation])
    labels = np.concatenate([np.argmax(b[1].numpy(), axis=1) for b in evaluation])
    raw_images, raw_labels = glyphs.glyph_arrays("test")
    # At the native size evaluation only rescales: the pixels are the source's.
    expected = (raw_images[:100].astype(np.float32) - 127.5) / 127.5
    np.testing.assert_array_equal(images, expected)
    np.testing.assert_array_equal(labels, raw_labels[:100])


# The building blocks, against hand-computed values --------------------------


def test_fill_is_even_odd_with_holes():
    # A square ring: outer 10x10, inner 4x4 hole, in font units (y up). The
    # grid puts the 10-unit height on `_MASTER_HEIGHT` cells.
    outer = np.array([[0, 0], [10, 0], [10, 10], [0, 10]], float)
    inner = np.array([[3, 3], [3, 7], [7, 7], [7, 3]], float)
    shape = glyphs._fill([outer, inner])
    # Cell centres sit at half-integer offsets from the grid's centre; one
    # unit is 88 / 10 cells: the square covers |offset| < 44 (88 cells a
    # side), the hole |offset| < 17.6 (36 cells a side).
    assert glyphs._MASTER_HEIGHT == 88
    assert shape.sum() == 88 * 88 - 36 * 36
    centre = glyphs._MASTER // 2
    assert not shape[centre, centre] and shape[centre, centre - 40]
    assert not shape[centre, centre - 45] and not shape[0, 0]


def test_thicken_grows_and_shrinks_by_a_disc():
    shape = np.zeros((21, 21), bool)
    shape[10, 10] = True
    disc = glyphs._thicken(shape, 3)
    # Cells with dx^2 + dy^2 <= 9: 29 of them.
    assert disc.sum() == 29 and disc[10, 13] and not disc[12, 13]
    np.testing.assert_array_equal(glyphs._thicken(disc, -3), shape)
    np.testing.assert_array_equal(glyphs._thicken(shape, 0), shape)


def _exact_cells(inverse, shift):
    """`glyphs._cells` in float64, where every product and sum is exact."""
    size, master = 32 * glyphs._SUPERSAMPLE, glyphs._MASTER
    position = (np.arange(size) + 0.5) / glyphs._SUPERSAMPLE - 16
    x = position[None, None, :] - shift[:, 0, None, None]
    y = position[None, :, None] - shift[:, 1, None, None]
    col = np.floor(inverse[:, 0, :1, None] * x + inverse[:, 0, 1:, None] * y)
    row = np.floor(inverse[:, 1, :1, None] * x + inverse[:, 1, 1:, None] * y)
    col = np.clip(col + master // 2, 0, master - 1).astype(int)
    row = np.clip(row + master // 2, 0, master - 1).astype(int)
    return row, col


def test_sample_cells_are_exact_in_float32():
    # `_cells` maps the sample positions in float32; its cells must be those
    # of an exact computation, else the images would depend on rounding, and
    # rounding on the CPU. (With the transforms on a 2^-20 grid instead of
    # 2^-11, 8 of these 4 million row and column indices differ.)
    params = glyphs._draw(np.random.default_rng(0), 1000, "train")
    inverse, shift = params["inverse"], params["shift"]
    np.testing.assert_array_equal(inverse * 2**11, np.round(inverse * 2**11))
    np.testing.assert_array_equal(shift * 16, np.round(shift * 16))
    for part in np.split(np.arange(1000), 4):
        row, col = glyphs._cells(inverse[part], shift[part])
        expected_row, expected_col = _exact_cells(inverse[part], shift[part])
        np.testing.assert_array_equal(row, expected_row)
        np.testing.assert_array_equal(col, expected_col)


def test_coverage_is_the_mean_of_the_samples():
    params = glyphs._draw(np.random.default_rng(0), 200, "train")
    inverse, shift = params["inverse"], params["shift"]
    shapes = glyphs._shapes()
    ids = np.arange(200) * 7 % len(shapes)
    row, col = _exact_cells(inverse, shift)
    hits = shapes[ids[:, None, None], row, col]  # (200, size, size)
    expected = hits.reshape(200, 32, glyphs._SUPERSAMPLE, 32, -1).mean(axis=(2, 4))
    np.testing.assert_array_equal(
        glyphs._coverage(shapes, ids, inverse, shift), expected
    )
    assert 0.05 < expected.mean() < 0.5  # the samples hit the glyphs


def test_matplotlib_missing_is_a_clear_error(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match="pip install matplotlib"):
        glyphs._font_path("DejaVuSans.ttf")
