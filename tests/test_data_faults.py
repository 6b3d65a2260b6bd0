"""Data faults: leaking splits, unreadable files, offline TFDS, noisy pipelines.

Each test injects the fault (a folder without a test split, a planted shared
file, broken images, no network, a download that dies half-way, a file that
fails to decode) and checks what the user sees: the error, the files, the
log, the length of the stream.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
import tensorflow as tf
from PIL import Image

from keras_vit import data
from keras_vit.data import datasets


def _png(path, value=0):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    Image.fromarray(np.full((10, 9, 3), value, np.uint8)).save(path)


def _flat_folder(root, classes=("cat", "dog", "owl"), per_class=10):
    """A class-per-folder dataset without split sub-folders."""
    for label, name in enumerate(classes):
        for i in range(per_class):
            _png(os.path.join(root, name, f"{i:02d}.png"), 20 * label + i)
    return str(root)


def _tree(root):
    """Every path under `root` (and whether `root` exists), for before/after."""
    if not os.path.lexists(root):
        return None
    return sorted(
        os.path.join(dirpath, name)
        for dirpath, dirnames, filenames in os.walk(root)
        for name in dirnames + filenames
    )


# == Splits never overlap =====================================================


def test_folder_without_the_split_is_an_error_naming_split_and_folder(tmp_path):
    flat = _flat_folder(tmp_path / "flat")
    for split in ("test", "validation", "test[:50%]"):
        with pytest.raises(
            ValueError, match=r"has no '(test|validation)' split"
        ) as info:
            data.load_source(f"folder:{flat}", split)
        message = str(info.value)
        assert flat in message and "train[80%:]" in message and "\n" not in message
    assert data.load_source(f"folder:{flat}", "train").num_examples == 30

    # A folder with split sub-folders lacks the ones it does not have.
    _flat_folder(tmp_path / "split" / "train")
    _flat_folder(tmp_path / "split" / "test", per_class=2)
    with pytest.raises(ValueError, match="no 'validation' split.*it has train, test"):
        data.load_source(f"folder:{tmp_path / 'split'}", "validation")
    test = data.load_source(f"folder:{tmp_path / 'split'}", "test")
    assert test.num_examples == 6 and all("/test/" in f for f in test.files)


def test_explicit_holdout_is_disjoint_complete_and_seeded(tmp_path):
    flat = _flat_folder(tmp_path)

    def files(split, seed=0):
        return data.load_source(f"folder:{flat}", split, split_seed=seed).files

    train, test = files("train[:80%]"), files("train[80%:]")
    assert (len(train), len(test)) == (24, 6)
    assert not set(train) & set(test)
    assert sorted(train + test) == sorted(files("train"))
    assert files("train[80%:]") == test  # Same seed, same files, same order.
    assert set(files("train[80%:]", seed=1)) != set(test)  # Another hold-out.
    data.check_disjoint(
        data.load_source(f"folder:{flat}", "train[:80%]"),
        data.load_source(f"folder:{flat}", "train[80%:]"),
    )


def test_check_disjoint_catches_a_planted_overlap(tmp_path):
    _flat_folder(tmp_path / "train")
    _flat_folder(tmp_path / "test", per_class=2)
    planted = tmp_path / "test" / "dog" / "copy.png"
    os.symlink(tmp_path / "train" / "dog" / "03.png", planted)
    train = data.load_source(f"folder:{tmp_path}", "train")
    test = data.load_source(f"folder:{tmp_path}", "test")
    with pytest.raises(ValueError, match="share 1 file") as info:
        data.check_disjoint(train, test)
    message = str(info.value)
    assert "train" in message and "test" in message and "03.png" in message
    assert "\n" not in message

    # Overlapping slices, and the digits' indices.
    with pytest.raises(ValueError, match="share 3 file"):
        data.check_disjoint(
            data.load_source(f"folder:{tmp_path}", "train[:80%]"),
            data.load_source(f"folder:{tmp_path}", "train[70%:]"),
        )
    with pytest.raises(ValueError, match=r"'digits:train\[:90%\]'.*share 143 example"):
        data.check_disjoint(
            data.load_source("digits", "train[:90%]"),
            data.load_source("digits", "train[80%:]"),
        )
    data.check_disjoint(
        data.load_source("digits", "train"), data.load_source("digits", "test")
    )


def test_check_disjoint_compares_tfds_example_ranges():
    def tfds_like(split, ranges):
        return data.ImageSource(None, 1, 2, ("a", "b"), name=split, ranges=ranges)

    head = tfds_like("train[:90%]", (("cifar10", "train", 0, 45000),))
    tail = tfds_like("train[90%:]", (("cifar10", "train", 45000, 50000),))
    test = tfds_like("test", (("cifar10", "test", 0, 10000),))
    data.check_disjoint(head, tail)
    data.check_disjoint(head, test)
    wide = tfds_like("train[80%:]", (("cifar10", "train", 40000, 50000),))
    with pytest.raises(ValueError, match=r"share 5000 example.*train\[40000:45000\]"):
        data.check_disjoint(head, wide)


def test_skipped_files_are_listed_once_each_by_path(tmp_path, caplog):
    flat = _flat_folder(tmp_path)
    broken = []
    for name in ("cat/zz.png", "dog/bad.jpg", "owl/cut.png"):
        path = os.path.join(flat, name)
        broken.append(path)
    (tmp_path / "cat" / "zz.png").write_bytes(b"\x89PNG\r\n\x1a\nnot a png")
    (tmp_path / "dog" / "bad.jpg").write_bytes(b"\xff\xd8not a jpeg")
    good = (tmp_path / "owl" / "00.png").read_bytes()
    (tmp_path / "owl" / "cut.png").write_bytes(good[: len(good) // 2])

    with caplog.at_level(logging.WARNING, logger=datasets.logger.name):
        sources = [
            data.load_source(f"folder:{flat}", split)
            for split in ("train[:80%]", "train[80%:]", "train[:80%]", "train")
        ]
    # Each skipped file in exactly one of the two complementary hold-outs.
    assert sorted(sources[0].skipped + sources[1].skipped) == sorted(broken)
    assert sorted(sources[3].skipped) == sorted(broken)
    text = "\n".join(record.getMessage() for record in caplog.records)
    for path in broken:
        assert text.count(os.path.relpath(path, flat)) == 1, text
    assert len(caplog.records) <= 2 and flat in text
    assert sources[3].num_examples == 30


# == TFDS offline =============================================================


@pytest.mark.parametrize("data_dir_exists", [True, False])
def test_tfds_offline_fails_fast_and_leaves_nothing(
    tmp_path, monkeypatch, data_dir_exists
):
    data_dir = tmp_path / "tfds"
    if data_dir_exists:
        (data_dir / "mnist" / "3.0.1").mkdir(parents=True)  # Another dataset.
        (data_dir / "downloads").mkdir()
    before = _tree(data_dir)
    knocks = []
    monkeypatch.setattr(datasets, "check_download", lambda: knocks.append(1) or False)

    start = time.monotonic()
    with pytest.raises(RuntimeError) as info:
        data.load_source("cifar10", "train", data_dir=str(data_dir))
    assert time.monotonic() - start < 20
    message = str(info.value)
    assert "'cifar10'" in message and str(data_dir) in message
    assert "tfds build cifar10" in message and "\n" not in message
    assert knocks == [1]
    assert _tree(data_dir) == before

    with pytest.raises(RuntimeError, match="not prepared and download=False"):
        data.load_source("cifar10", "train", data_dir=str(data_dir), download=False)
    assert knocks == [1]  # No network probe when downloads are off.
    assert _tree(data_dir) == before


def test_tfds_download_dying_half_way_removes_what_it_wrote(tmp_path, monkeypatch):
    import tensorflow_datasets as tfds

    data_dir = tmp_path / "tfds"
    (data_dir / "downloads" / "old_file").mkdir(parents=True)
    before = _tree(data_dir)

    def dying_load(name, download, data_dir, **kwargs):
        if not download:
            raise AssertionError(f"Dataset {name}: could not find data in {data_dir}.")
        os.makedirs(os.path.join(data_dir, "cifar10", "3.0.2.incomplete.X"))
        extracted = os.path.join(data_dir, "downloads", "extracted", "cifar.tmp")
        os.makedirs(extracted)
        with open(os.path.join(extracted, "part"), "wb") as file:
            file.write(b"half")
        raise ConnectionError("Failed to reach host.\nRetrying...")

    monkeypatch.setattr(datasets, "check_download", lambda: True)
    monkeypatch.setattr(tfds, "load", dying_load)
    with pytest.raises(
        RuntimeError, match="Could not download TFDS dataset 'cifar10'"
    ) as info:
        data.load_source("cifar10", "train", data_dir=str(data_dir))
    assert "\n" not in str(info.value)
    assert _tree(data_dir) == before


def test_tfds_unknown_name_is_one_line():
    with pytest.raises(
        RuntimeError, match="Unknown TFDS dataset 'no_such_set_42'"
    ) as info:
        data.load_source("tfds:no_such_set_42", "train")
    assert "\n" not in str(info.value)


def test_check_download_answers_within_its_timeout():
    start = time.monotonic()
    assert data.datasets.check_download(("192.0.2.1", 9), timeout=0.3) is False
    assert time.monotonic() - start < 2


# == Lengths the trainer can rely on ==========================================


def test_undecodable_training_file_keeps_every_epoch_whole(tmp_path):
    flat = _flat_folder(tmp_path, per_class=5)
    (tmp_path / "owl" / "zz.png").write_bytes(b"\x89PNG\r\n\x1a\nnot a png")
    source = data.image_folder(flat, "train", validate=False)  # 16 files, 1 bad.
    assert source.num_examples == 16
    dataset = data.train_dataset(
        source,
        image_size=8,
        global_batch_size=4,
        epochs=3,
        steps_per_epoch=None,
        seed=0,
    )
    assert len(list(dataset)) == 12  # Old: 11 batches and a short last epoch.
    assert int(dataset.cardinality()) == 12


def test_eval_cache_is_filled_once(tmp_path):
    reads = []

    def count(image, label):
        tf.py_function(lambda: reads.append(1) or 0, [], tf.int32)
        return image, label

    digits = data.load_source("digits", "test[:48]")
    source = data.ImageSource(
        digits.dataset.map(count), 48, 10, digits.class_names, name="counted"
    )
    dataset = data.eval_dataset(source, image_size=8, global_batch_size=16, cache=True)
    assert len(reads) == 48  # Filled, to the end, before anyone reads a batch.
    # Read as the TensorBoard monitor (one batch) and Keras (exactly the known
    # number of batches, never the end) do: nothing is preprocessed again.
    for _ in range(3):
        next(iter(dataset.take(1)))
        assert len(list(dataset.take(int(dataset.cardinality())))) == 3
    assert len(reads) == 48


def test_eval_of_a_folder_has_a_known_length_and_fails_on_a_lost_image(tmp_path):
    flat = _flat_folder(tmp_path, per_class=2)
    source = data.image_folder(flat, "train")
    dataset = data.eval_dataset(source, image_size=8, global_batch_size=4)
    assert int(dataset.cardinality()) == 2  # Old: unknown (-2).
    (tmp_path / "owl" / "zz.png").write_bytes(b"\x89PNG\r\n\x1a\nnot a png")
    unchecked = data.image_folder(flat, "train", validate=False)
    with pytest.raises(tf.errors.FailedPreconditionError, match="7 elements"):
        list(data.eval_dataset(unchecked, image_size=8, global_batch_size=4))


_QUIET_RUN = """
import os, sys, warnings
import numpy as np
from PIL import Image
import keras_vit
from keras_vit import data

root = sys.argv[1]
rng = np.random.default_rng(0)
for name in ("a", "b", "c"):
    os.makedirs(os.path.join(root, name))
    for i in range(8):
        Image.fromarray(rng.integers(0, 255, (12, 12, 3), dtype=np.uint8)).save(
            os.path.join(root, name, f"{i}.png"))
train = data.load_source("folder:" + root, "train[:75%]")
test = data.load_source("folder:" + root, "train[75%:]")
train_ds = data.train_dataset(train, image_size=8, global_batch_size=6,
                              epochs=2, steps_per_epoch=3, seed=0)
test_ds = data.eval_dataset(test, image_size=8, global_batch_size=3, cache=True)
model = keras_vit.ViT("test/4", image_size=8, num_classes=3)
model.compile("adam", "categorical_crossentropy")
warnings.simplefilter("always")
next(iter(test_ds.take(1)))  # As the recipes' TensorBoard monitor does.
model.fit(train_ds, epochs=2, steps_per_epoch=3, validation_data=test_ds,
          shuffle=False, verbose=0)
model.evaluate(test_ds, verbose=0)
digits = data.load_source("digits", "test[:48]")
digits_ds = data.eval_dataset(digits, image_size=8, global_batch_size=16, cache=True)
model = keras_vit.ViT("test/4", image_size=8, num_classes=10)
model.compile("adam", "categorical_crossentropy")
model.evaluate(digits_ds, verbose=0)
model.evaluate(digits_ds, verbose=0)
print("finished")
"""


def test_pipelines_print_no_false_alarms(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="0", PYTHONWARNINGS="always")
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_QUIET_RUN), str(tmp_path / "images")],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 0 and "finished" in result.stdout, output[-3000:]
    assert "did not fully read the dataset being cached" not in output
    assert "ran out of data" not in output
