"""Input pipelines: sources, value range, shapes, determinism, batch division."""

from __future__ import annotations

import dataclasses
import hashlib
import os

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit import data

_AUGMENTATION_FIELDS = {f.name for f in dataclasses.fields(data.Augmentation)}


def _stream(source, **kwargs):
    """The batches of `train_dataset`; `Augmentation` fields may be passed flat."""
    augmentation = dict(flip=False)
    augmentation.update(
        {k: kwargs.pop(k) for k in list(kwargs) if k in _AUGMENTATION_FIELDS}
    )
    options = dict(image_size=16, global_batch_size=32, seed=3, steps_per_epoch=None)
    options.update(kwargs)
    dataset = data.train_dataset(
        source, augmentation=data.Augmentation(**augmentation), **options
    )
    return [(x.numpy(), y.numpy()) for x, y in dataset]


def test_digits_splits_shapes_and_value_range():
    train = data.load_source("digits", "train")
    test = data.load_source("digits", "test")
    assert (train.num_examples, test.num_examples) == (1437, 360)
    assert train.num_classes == 10 and not train.encoded
    images, _ = next(iter(train.dataset.batch(2000)))
    assert images.shape[1:] == (8, 8, 1) and images.dtype == tf.uint8

    head = data.load_source("digits", "train[:90%]").num_examples
    tail = data.load_source("digits", "train[90%:]").num_examples
    assert head + tail == 1437 and tail == 144

    batches = _stream(train, epochs=1, steps_per_epoch=2)
    assert len(batches) == 2
    x, y = batches[0]
    assert x.shape == (32, 16, 16, 3) and x.dtype == np.float32
    assert -1.0 <= x.min() < 0.0 < x.max() <= 1.0
    assert y.shape == (32, 10)
    np.testing.assert_allclose(y.sum(axis=1), 1.0)

    evaluation = list(data.eval_dataset(test, image_size=24, global_batch_size=100))
    assert [b[0].shape[0] for b in evaluation] == [100, 100, 100, 60]
    x = evaluation[0][0].numpy()
    assert x.shape[1:] == (24, 24, 3) and x.min() == -1.0 and x.max() == 1.0


def test_train_stream_is_a_function_of_seed_and_epoch():
    source = data.load_source("digits", "train[:200]")
    full = _stream(source, epochs=3, crop_area_range=(0.3, 1.0), flip=True)
    assert len(full) == 3 * (200 // 32)
    again = _stream(source, epochs=3, crop_area_range=(0.3, 1.0), flip=True)
    for (x1, y1), (x2, y2) in zip(full, again, strict=True):
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)
    # A run resumed at epoch 1 reads exactly what the full run read from then.
    resumed = _stream(
        source, epochs=3, start_epoch=1, crop_area_range=(0.3, 1.0), flip=True
    )
    for (x1, y1), (x2, y2) in zip(full[6:], resumed, strict=True):
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)
    # Epochs differ from each other, and so do seeds.
    assert not np.array_equal(full[0][1], full[6][1])
    other = _stream(source, epochs=1, seed=4, crop_area_range=(0.3, 1.0), flip=True)
    assert not np.array_equal(full[0][0], other[0][0])


# Batches 0 and 5 of the stream below as the implementation before
# `Augmentation` produced them (keyword arguments `area_range=...` etc.): a
# hash of the labels' order and the images' sum and absolute sum.
_PINNED = {
    (0, 0): ("e3b08fd24733", -2333.144035383113, 9391.108037833343),
    (0, 5): ("69d7a2e14d31", -3532.4747817126336, 10027.053221869399),
    (2, 0): ("5e3d932988be", -2501.590006512328, 10037.866901884525),
    (2, 5): ("e5ab0a1f9a86", -2950.0477207901567, 10335.901645402526),
}


def _fingerprint(x, y):
    labels = hashlib.sha256(y.argmax(1).astype(np.int8).tobytes()).hexdigest()[:12]
    x = x.astype(np.float64)
    return labels, x.sum(), np.abs(x).sum()


def test_train_stream_matches_pinned_batches_across_resumes():
    source = data.load_source("digits", "train[:200]")
    options = dict(
        image_size=(16, 12),
        epochs=3,
        seed=5,
        flip=True,
        crop_area_range=(0.3, 1.0),
        randaugment_ops=2,
        randaugment_magnitude=0.9,
    )
    full = _stream(source, **options)
    resumed = _stream(source, start_epoch=2, **options)
    assert (len(full), len(resumed)) == (18, 6)
    for (start, index), (labels, total, magnitude) in _PINNED.items():
        got = _fingerprint(*(full if start == 0 else resumed)[index])
        assert got[0] == labels, (start, index)
        np.testing.assert_allclose(got[1:], (total, magnitude), rtol=1e-5)
    # Epoch 2 of the full stream is, bit for bit, the resumed stream.
    for (x1, y1), (x2, y2) in zip(full[12:], resumed, strict=True):
        np.testing.assert_array_equal(x1, x2)
        np.testing.assert_array_equal(y1, y2)


def test_augmentation_validates_each_field_by_name():
    assert data.Augmentation(crop_area_range=[0.5, 1]).crop_area_range == (0.5, 1.0)
    bad = {
        "crop_area_range": (0.5, 1.5),
        "crop_aspect_range": (0.0, 1.0),
        "flip": "yes",
        "randaugment_ops": -1,
        "randaugment_magnitude": 1.5,
        "mixup_alpha": float("nan"),
        "cutmix_factor": 2.0,
    }
    for field, value in bad.items():
        with pytest.raises(ValueError, match=f"`{field}`"):
            data.Augmentation(**{field: value})
    with pytest.raises(dataclasses.FrozenInstanceError):
        data.Augmentation().flip = False
    with pytest.raises(ValueError, match="augmentation"):
        data.train_dataset(
            data.load_source("digits", "train[:64]"),
            image_size=8,
            global_batch_size=32,
            epochs=1,
            steps_per_epoch=None,
            seed=0,
            augmentation={"flip": False},
        )


def test_epochs_longer_than_the_source_reshuffle_each_pass():
    source = data.load_source("digits", "train[:40]")
    batches = _stream(source, epochs=1, steps_per_epoch=5, global_batch_size=16)
    labels = np.concatenate([y.argmax(1) for _, y in batches])
    assert len(labels) == 80  # Two passes over 40 examples.
    counts = np.bincount(labels[:40], minlength=10)
    expected = np.bincount(
        np.array([y for _, y in source.dataset.as_numpy_iterator()]), minlength=10
    )
    np.testing.assert_array_equal(counts, expected)  # Pass 1 is a permutation.


def test_inception_crop_follows_its_seed_and_area():
    image = tf.reshape(tf.range(100 * 100 * 3, dtype=tf.int32), (100, 100, 3))
    seed = tf.constant([1, 2], tf.int64)
    crop = data.inception_crop(
        image, seed, area_range=(0.25, 0.25), aspect_ratio_range=(1, 1)
    )
    assert crop.shape == (50, 50, 3)
    np.testing.assert_array_equal(
        crop, data.inception_crop(image, seed, (0.25, 0.25), (1, 1))
    )
    with pytest.raises(ValueError, match="area_range"):
        data.inception_crop(image, seed, area_range=(0.5, 1.5))


def test_randaugment_mixup_and_cutmix_keep_ranges_and_mix_labels():
    source = data.load_source("digits", "train[:64]")
    ((x, y),) = _stream(
        source,
        epochs=1,
        global_batch_size=64,
        randaugment_ops=2,
        mixup_alpha=0.4,
        cutmix_factor=1.0,
    )
    assert -1.0 <= x.min() and x.max() <= 1.0
    np.testing.assert_allclose(y.sum(axis=1), 1.0, rtol=1e-5)
    assert ((y > 0) & (y < 1)).any()  # Some labels are mixtures.


def test_per_replica_batch_size_divides_the_global_batch():
    assert data.per_replica_batch_size(512, 8) == 64
    assert data.per_replica_batch_size(6, 1) == 6
    with pytest.raises(ValueError, match="not divisible"):
        data.per_replica_batch_size(10, 4)
    with pytest.raises(ValueError, match="larger than"):
        data.full_batches(10, 32)


def _png(path, value):
    Image.fromarray(np.full((12, 10, 3), value, np.uint8)).save(path)


def test_image_folder_skips_and_counts_unreadable_files(tmp_path):
    for name in ("cat", "dog"):
        os.makedirs(tmp_path / "train" / name)
        _png(tmp_path / "train" / name / "a.png", 10)
        _png(tmp_path / "train" / name / "b.png", 250)
    (tmp_path / "train" / "dog" / "broken.jpg").write_bytes(b"\xff\xd8not a jpeg")
    (tmp_path / "train" / "dog" / "notes.txt").write_text("skipped: not an image")
    (tmp_path / "train" / "dog" / ".DS_Store").write_bytes(b"hidden: ignored")

    source = data.load_source(f"folder:{tmp_path}", "train")
    assert source.class_names == ("cat", "dog")
    assert source.num_examples == 4 and source.encoded
    skipped = [os.path.basename(p) for p in source.skipped]
    assert skipped == ["broken.jpg", "notes.txt"]
    batches = list(data.eval_dataset(source, image_size=8, global_batch_size=8))
    images, labels = batches[0]
    assert images.shape == (4, 8, 8, 3)
    np.testing.assert_array_equal(labels.numpy().argmax(1), [0, 0, 1, 1])

    # A file that passes the check but cannot be decoded is dropped from
    # training (the epoch keeps its length); an evaluation refuses to run on
    # fewer images than its source holds.
    unchecked = data.image_folder(str(tmp_path), "train", validate=False)
    assert unchecked.num_examples == 5
    options = dict(image_size=8, epochs=1, steps_per_epoch=None, seed=0)
    ((images, _),) = data.train_dataset(unchecked, global_batch_size=5, **options)
    assert images.shape[0] == 5
    with pytest.raises(tf.errors.FailedPreconditionError, match="5 elements"):
        list(data.eval_dataset(unchecked, image_size=8, global_batch_size=8))

    with pytest.raises(ValueError, match="does not exist"):
        data.load_source(f"folder:{tmp_path}/missing", "train")


def test_tfds_source_with_mock_data():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=12):
        source = data.load_source("cifar10", "train")
        assert source.encoded and source.num_classes == 10
        ((x, y),) = _stream(source, epochs=1, global_batch_size=12, image_size=16)
    assert x.shape == (12, 16, 16, 3) and y.shape == (12, 10)
    assert -1.0 <= x.min() and x.max() <= 1.0


def test_bad_splits_and_names_raise():
    with pytest.raises(ValueError, match="Unknown digits split"):
        data.load_source("digits", "validation")
    with pytest.raises(ValueError, match="Cannot parse split"):
        data.parse_split("train[:x]")
    with pytest.raises(ValueError, match="selects no examples"):
        data.load_source("digits", "test[360:]")
