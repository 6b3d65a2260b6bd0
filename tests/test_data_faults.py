"""Data faults: leaking splits, unreadable files, offline TFDS, noisy pipelines.

Each test injects the fault (a folder without a test split, a planted shared
file, broken images, no network, a download that dies half-way, a file that
fails to decode) and checks what the user sees: the error, the files, the
log, the length of the stream.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import shutil
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


def _flat_folder(root, classes=("cat", "dog", "owl"), per_class=10, offset=0):
    """A class-per-folder dataset without split sub-folders; image `i` of
    class `k` is the constant `20 * k + i + offset` (give other splits of
    one dataset another `offset`: equal images are the same example)."""
    for label, name in enumerate(classes):
        for i in range(per_class):
            _png(os.path.join(root, name, f"{i:02d}.png"), 20 * label + i + offset)
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
    _flat_folder(tmp_path / "split" / "test", per_class=2, offset=10)
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
    _flat_folder(tmp_path / "test", per_class=2, offset=10)
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


# == Splits that disagree with each other =====================================

# A solid colour per class: a fixed model reads the class off the image.
_COLOURS = {
    "apple": (1, 0, 0),
    "banana": (0, 1, 0),
    "cherry": (0, 0, 1),
    "date": (1, 1, 0),
}


def _fruit_split(root, classes, per_class=2, shade=250):
    """`root/<class>/<i>.png` of the class's colour; each split its own
    `shade` (equal files in two splits would be one example)."""
    for name in classes:
        for i in range(per_class):
            colour = np.asarray(_COLOURS[name], np.uint8) * (shade - i)
            path = os.path.join(root, name, f"{i}.png")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            Image.fromarray(np.broadcast_to(colour, (8, 8, 3)).copy()).save(path)


def _colour_classifier(num_classes=3):
    """Mean colour -> class: channel k votes for class k."""
    import keras

    model = keras.Sequential(
        [
            keras.Input((8, 8, 3)),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(num_classes, use_bias=False),
        ]
    )
    model.layers[-1].set_weights([np.eye(3, num_classes, dtype="float32")])
    model.compile(loss="categorical_crossentropy", metrics=["accuracy"])
    return model


def test_splits_with_other_classes_are_refused_naming_them(tmp_path):
    _fruit_split(tmp_path / "train", ("apple", "banana", "cherry"))
    _fruit_split(tmp_path / "test", ("banana", "cherry", "date"), shade=200)
    _fruit_split(tmp_path / "validation", ("apple", "banana", "cherry", "date"), 1)
    folder = f"folder:{tmp_path}"
    train = data.load_source(folder, "train")
    assert train.class_names == ("apple", "banana", "cherry")
    expected = {
        "test": "only in 'test': date; only in 'train': apple",
        "test[:50%]": "only in 'test[:50%]': date; only in 'train': apple",
        "validation": "only in 'validation': date; only in 'train': none",
    }
    for split, named in expected.items():
        # Old: loaded, labels by sorted position (banana as apple, ...).
        with pytest.raises(ValueError, match="different class folders") as info:
            data.load_source(folder, split)
        assert named in str(info.value) and "\n" not in str(info.value)

    # Sources built elsewhere are compared by `check_disjoint` too.
    digits = data.load_source("digits", "test[:10]")
    renamed = dataclasses.replace(digits, class_names=tuple("abcdefghij"))
    with pytest.raises(ValueError, match="different classes") as info:
        data.check_disjoint(data.load_source("digits", "train"), renamed)
    assert "only in 'digits:test[:10]': a, b, c" in str(info.value)
    shuffled = dataclasses.replace(digits, class_names=tuple("1023456789"))
    with pytest.raises(ValueError, match="same names in another order"):
        data.check_disjoint(digits, shuffled)


def test_a_split_without_some_classes_keeps_the_training_labels(tmp_path, caplog):
    _fruit_split(tmp_path / "train", ("apple", "banana", "cherry"), per_class=3)
    _fruit_split(tmp_path / "test", ("banana", "cherry"), shade=200)
    _fruit_split(tmp_path / "validation", ("cherry",), shade=150)
    folder = f"folder:{tmp_path}"
    with caplog.at_level(logging.WARNING, logger=datasets.logger.name):
        train = data.load_source(folder, "train")
        test = data.load_source(folder, "test")
        data.load_source(folder, "test")  # Said once.
        validation = data.load_source(folder, "validation")
    notes = [r.getMessage() for r in caplog.records if "class" in r.getMessage()]
    assert len(notes) == 2, notes
    assert "'test'" in notes[0] and "2 of the 'train' split's 3 classes" in notes[0]
    assert "(none of apple)" in notes[0] and "matched by name" in notes[0]
    for source in (test, validation):
        assert source.class_names == train.class_names and source.num_classes == 3
        data.check_disjoint(train, source)

    # Each label is the training index of the image's folder name.
    def labels_by_folder(source):
        dataset = data.eval_dataset(source, image_size=8, global_batch_size=64)
        labels = np.concatenate([y.numpy().argmax(1) for _, y in dataset])
        folders = [os.path.basename(os.path.dirname(f)) for f in source.files]
        return list(zip(folders, labels.tolist(), strict=True))

    index = {name: i for i, name in enumerate(train.class_names)}
    for source in (train, test, validation):
        pairs = labels_by_folder(source)
        assert pairs == [(name, index[name]) for name, _ in pairs]
    assert {name for name, _ in labels_by_folder(test)} == {"banana", "cherry"}

    # A model that reads the colour is right on every image of every split
    # (old: 0.0 on the test split, whose banana was label 0, apple's).
    model = _colour_classifier()
    for source in (train, test, validation):
        dataset = data.eval_dataset(source, image_size=8, global_batch_size=4)
        assert model.evaluate(dataset, verbose=0, return_dict=True)["accuracy"] == 1.0


def test_few_shot_pools_label_by_the_training_classes(tmp_path):
    from keras_vit.analysis import fewshot

    _fruit_split(tmp_path / "train", ("apple", "banana", "cherry"), per_class=3)
    _fruit_split(tmp_path / "test", ("banana", "cherry"), shade=200)
    train, test, _ = fewshot.few_shot_pools(
        f"folder:{tmp_path}",
        train_split="train",
        test_split="test",
        image_size=8,
        channels=3,
        shots=(1,),
    )
    for dataset in (train, test):
        for images, labels in dataset:
            # The brightest channel is the colour, hence the training class.
            colours = images.numpy().mean(axis=(1, 2)).argmax(1)
            np.testing.assert_array_equal(labels.numpy().argmax(1), colours)
    assert sum(int(y.shape[0]) for _, y in test) == 4


def test_an_empty_class_folder_is_an_error_naming_it(tmp_path):
    _flat_folder(tmp_path / "train", per_class=2)
    _flat_folder(tmp_path / "test", per_class=2, offset=10)
    os.makedirs(tmp_path / "test" / "dog" / "nested")  # Not a class: fine.
    os.makedirs(tmp_path / "train" / "emu")  # Empty.
    (tmp_path / "train" / "yak").mkdir()
    (tmp_path / "train" / "yak" / "scan.tiff").write_bytes(b"II*\x00")
    (tmp_path / "train" / "yak" / ".DS_Store").write_bytes(b"")
    folder = f"folder:{tmp_path}"
    for split in ("train", "train[:50%]", "train[-1:]"):
        # Old: 5 classes, two never seen, and the test split's labels out
        # of step (a Keras shape error once training had started).
        with pytest.raises(ValueError, match="class folder") as info:
            data.load_source(folder, split)
        message = str(info.value)
        assert "emu, yak hold no image file" in message, message
        assert "yak/scan.tiff" in message and "\n" not in message
    shutil.rmtree(tmp_path / "train" / "emu")
    shutil.rmtree(tmp_path / "train" / "yak")
    assert data.load_source(folder, "train").num_classes == 3
    os.makedirs(tmp_path / "test" / "cat" / "empty")  # Empty sub-folder: fine.
    (tmp_path / "test" / "owl" / "00.png").unlink()
    (tmp_path / "test" / "owl" / "01.png").unlink()
    with pytest.raises(ValueError, match=r"'test'.*owl hold no image file"):
        data.load_source(folder, "test")


def test_a_class_of_unreadable_files_is_an_error_naming_it(tmp_path, caplog):
    _flat_folder(tmp_path, per_class=4)
    for name in ("00", "01", "02", "03"):
        (tmp_path / "owl" / f"{name}.png").write_bytes(b"\x89PNG\r\n\x1a\nnot")
    folder = f"folder:{tmp_path}"
    for split in ("train", "train[:50%]", "train[50%:]"):
        # Old: owl silently had no examples; a model of 3 classes trained on 2.
        with pytest.raises(ValueError, match="no image of class folder") as info:
            data.load_source(folder, split)
        message = str(info.value)
        assert "folder(s) owl can be read (e.g. owl/00.png)" in message
        assert "\n" not in message
    # One readable image keeps the class (and lists the others as skipped).
    _png(str(tmp_path / "owl" / "03.png"), 99)
    with caplog.at_level(logging.WARNING, logger=datasets.logger.name):
        source = data.load_source(folder, "train")
    assert source.num_examples == 9 and len(source.skipped) == 3
    for split in ("train[:50%]", "train[50%:]"):  # Each half: owl is readable.
        assert data.load_source(folder, split).num_classes == 3


def test_check_disjoint_sees_hard_links_and_byte_identical_copies(tmp_path):
    _flat_folder(tmp_path / "train", per_class=3)
    _flat_folder(tmp_path / "test", per_class=2, offset=10)
    # Old: both passed, each test file being another path.
    os.link(tmp_path / "train" / "cat" / "01.png", tmp_path / "test" / "cat" / "h.png")
    shutil.copy(
        tmp_path / "train" / "owl" / "02.png", tmp_path / "test" / "dog" / "c.png"
    )
    train = data.load_source(f"folder:{tmp_path}", "train")
    test = data.load_source(f"folder:{tmp_path}", "test")
    with pytest.raises(ValueError, match="share 2 file") as info:
        data.check_disjoint(train, test)
    message = str(info.value)
    assert f"under {tmp_path}, e.g. " in message and "\n" not in message
    assert "test/cat/h.png (same file as train/cat/01.png)" in message
    assert "test/dog/c.png (same content as train/owl/02.png)" in message

    # Equal sizes, equal first and last 8 KiB, one byte apart in the middle:
    # different images. Files are compared by content, not by name or size.
    def source(name, paths):
        return data.ImageSource(None, len(paths), 1, ("x",), name=name, files=paths)

    rng = np.random.default_rng(0)
    body = rng.integers(0, 256, 40_000, dtype=np.uint8)
    paths = {}
    for name, flip in (("a", None), ("b", 20_000), ("same", None), ("small", None)):
        content = body.copy()
        if flip is not None:
            content[flip] ^= 1
        if name == "small":
            content = content[:100]
        paths[name] = tmp_path / f"{name}.bin"
        paths[name].write_bytes(content.tobytes())
    data.check_disjoint(
        source("a", (str(paths["a"]),)), source("b", (str(paths["b"]),))
    )
    data.check_disjoint(
        source("a", (str(paths["a"]),)), source("small", (str(paths["small"]),))
    )
    with pytest.raises(ValueError, match=r"share 1 file.*same content as a\.bin"):
        data.check_disjoint(
            source("a", (str(paths["a"]), str(paths["b"]))),
            source("same", (str(paths["same"]),)),
        )


def test_webp_is_read_and_tiff_is_listed_as_skipped(tmp_path, caplog):
    _flat_folder(tmp_path, per_class=2)
    pixels = np.zeros((6, 5, 3), np.uint8)
    pixels[..., 1] = 77
    Image.fromarray(pixels).save(tmp_path / "cat" / "w.webp", lossless=True)
    Image.fromarray(pixels).save(tmp_path / "dog" / "t.tiff")
    Image.fromarray(pixels).save(tmp_path / "dog" / "t2.TIF")
    (tmp_path / "owl" / "labels.csv").write_text("not an image\n")
    with caplog.at_level(logging.WARNING, logger=datasets.logger.name):
        source = data.load_source(f"folder:{tmp_path}", "train")
    # Old: 6 examples, and the other three files ignored without a word.
    assert source.num_examples == 7
    webp = source.files.index(str(tmp_path / "cat" / "w.webp"))
    assert sorted(os.path.basename(p) for p in source.skipped) == [
        "labels.csv",
        "t.tiff",
        "t2.TIF",
    ]
    text = "\n".join(record.getMessage() for record in caplog.records)
    assert "not readable images of a format TensorFlow decodes" in text
    for name in ("dog/t.tiff", "dog/t2.TIF", "owl/labels.csv"):
        assert name in text
    dataset = data.eval_dataset(source, image_size=(6, 5), global_batch_size=8)
    images = np.concatenate([x.numpy() for x, _ in dataset])
    np.testing.assert_allclose(images[webp], (pixels - 127.5) / 127.5, atol=1e-6)


@pytest.mark.parametrize(
    "split, words",
    [
        ("train[:200%]", "slices at 200%"),
        ("train[-150%:]", "slices at -150%"),
        ("train[:5000]", "slices at example 5000, outside the 30 examples"),
        ("train[-31:]", "slices at example -31, outside the 30 examples"),
        ("train[20:10]", "selects no examples"),
    ],
)
def test_impossible_slices_are_refused(tmp_path, split, words):
    flat = _flat_folder(tmp_path)
    # Old: every one but the last was read as the whole split.
    with pytest.raises(ValueError, match=re.escape(words)) as info:
        data.load_source(f"folder:{flat}", split)
    assert "\n" not in str(info.value)
    if "%" in split:
        with pytest.raises(ValueError, match=re.escape(words)):
            data.load_source("digits", split)
        with pytest.raises(ValueError, match=re.escape(words)):  # Before TFDS.
            data.load_source("tfds:cifar10", split, data_dir=str(tmp_path / "no"))
        assert not (tmp_path / "no").exists()


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
    # A ValueError too: the commands answer it in one line (see below).
    assert isinstance(info.value, data.DatasetError)
    assert isinstance(info.value, ValueError)
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
    assert isinstance(info.value, data.DatasetError)
    assert isinstance(info.value, ValueError)


# Runs `recipes.train` command lines in one process without network (the
# probe answers "unreachable") and prints, per line, its exit code, stdout
# and stderr.
_TRAIN_OFFLINE = """
import contextlib, io, json, sys
from keras_vit.data import datasets
from keras_vit.recipes import train

datasets.check_download = lambda *args, **kwargs: False
for line in sys.stdin:
    argv = json.loads(line)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            train.main(argv)
            code = 0
        except SystemExit as exit:
            code = exit.code
        except BaseException:
            import traceback
            traceback.print_exc()
            code = "raised"
    print(json.dumps({"code": code, "out": out.getvalue(), "err": err.getvalue()}))
"""


def test_train_command_answers_data_faults_in_one_line(tmp_path):
    """Each fault: `error: <one line>`, exit 2, before any model is built."""
    mixed, empty, unreadable = (tmp_path / n for n in ("mixed", "empty", "bad"))
    _fruit_split(mixed / "train", ("apple", "banana", "cherry"))
    _fruit_split(mixed / "test", ("banana", "cherry", "date"), shade=200)
    _flat_folder(empty / "train", per_class=2)
    _flat_folder(empty / "test", per_class=2, offset=10)
    (empty / "test" / "emu").mkdir()
    _flat_folder(unreadable / "train", per_class=2)
    _flat_folder(unreadable / "test", per_class=2, offset=10)
    for name in ("00.png", "01.png"):
        (unreadable / "train" / "dog" / name).write_bytes(b"\xff\xd8 not a jpeg")
    tfds_dir = tmp_path / "tfds"
    cases = {
        f"folder:{mixed}": "only in 'test': date; only in 'train': apple",
        f"folder:{empty}": "'test': class folder(s) emu hold no image file",
        f"folder:{unreadable}": "no image of class folder(s) dog can be read",
        "tfds:no_such_set_42": "Unknown TFDS dataset 'no_such_set_42'",
        "cifar10": "storage.googleapis.com cannot be reached to download it",
        "digits": "slices at 200%",
    }
    lines = []
    for dataset in cases:
        split = "train[:200%]" if dataset == "digits" else "train"
        lines.append(
            [
                "--config=digits",
                f"--set=dataset={dataset}",
                f"--set=train_split={split}",
                "--set=val_split=None",
                f"--set=data_dir={tfds_dir}",
                f"--set=workdir={tmp_path / 'run'}",
                "--set=global_batch_size=2",
                "--set=epochs=1",
            ]
        )
    result = subprocess.run(
        [sys.executable, "-c", _TRAIN_OFFLINE],
        input="\n".join(map(json.dumps, lines)) + "\n",
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    reports = [json.loads(line) for line in result.stdout.splitlines()]
    for (dataset, words), report in zip(cases.items(), reports, strict=True):
        # Old: a traceback (TFDS, and a Keras shape error after training had
        # started for the empty class), or a finished run on misaligned
        # labels (exit 0).
        errors = [x for x in report["err"].splitlines() if x.startswith("error: ")]
        assert report["code"] == 2, (dataset, report)
        assert len(errors) == 1 and words in errors[0], (dataset, report["err"])
        assert "Traceback" not in report["err"], report["err"]
        assert "Model:" not in report["out"]  # Refused before building one.
    assert not tfds_dir.exists()


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


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
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
