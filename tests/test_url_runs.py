"""Runs, exports and datasets at URLs, through TensorFlow's file systems.

Cloud TPU and multi-worker runs keep their run directories on object stores
(`gs://`). TensorFlow's in-memory file system (`ram://`) goes through the
same `tf.io.gfile` code, so these tests run whole runs there in-process: a
run trains, writes `final.keras` and a SavedModel, resumes after an
interruption, sets itself aside with `--fresh`; and nothing is ever written
to a local folder named after the URL. A scheme with no file system
(`s3://` without its plugin, `http://`) is refused in one line.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
import uuid

import keras
import numpy as np
import pytest
import tensorflow as tf
from helpers import digits_run_config
from helpers import keras_vit_script

from keras_vit import atomic
from keras_vit import data
from keras_vit import paths
from keras_vit.recipes import rundir
from keras_vit.recipes import train
from keras_vit.recipes import workdir_lock
from keras_vit.recipes.configs import base

# Three epochs of two steps of a tiny model; dropout and stochastic depth on,
# so that an exact resume needs every random stream restored.
RUN = [
    "variant=test/4",
    "image_size=16",
    "global_batch_size=8",
    "epochs=3",
    "steps_per_epoch=2",
    "warmup_steps=1",
    "dropout_rate=0.1",
    "drop_path_rate=0.1",
    "val_split='test[:16]'",
    "test_split='test[16:48]'",
    "monitor_images=2",
    "verbose=0",
]


def _config(workdir, *extra):
    return digits_run_config(workdir, *RUN, *extra)


def _url(name):
    """A fresh `ram://` folder (the in-memory file system lives per process)."""
    return f"ram://{uuid.uuid4().hex}/{name}"


def _tree(url):
    """Every file under `url`, relative to it."""
    return sorted(
        os.path.join(root, name)[len(url) + 1 :]
        for root, _, names in paths.walk(url)
        for name in names
    )


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    result = train.run(_config(tmp_path_factory.mktemp("local") / "run"))
    return [w.copy() for w in result["model"].get_weights()]


def _assert_same_weights(model, weights):
    for got, want in zip(model.get_weights(), weights, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_a_whole_run_at_a_url_trains_exports_and_writes_nothing_locally(
    tmp_path, monkeypatch, uninterrupted, capsys
):
    monkeypatch.chdir(tmp_path)
    workdir = _url("run1")
    config = _config(workdir, "export_savedmodel=True", "verbose=1")

    result = train.run(config)

    _assert_same_weights(result["model"], uninterrupted)  # As on a local disk.
    files = _tree(workdir)
    for name in (
        "config.json",
        "metrics.csv",
        "results.json",
        "final.keras",
        "checkpoints/best.keras",
        "checkpoints/best.json",
        "checkpoints/last.keras",
        "saved_model/1/saved_model.pb",
        "saved_model/1/assets.extra/keras_vit_export.json",
    ):
        assert name in files
    assert any(n.startswith("tensorboard/train/events.out") for n in files)
    assert not any(
        n.startswith("backup") or ".partial-" in n or n == ".lock" for n in files
    )
    results = atomic.read_json_object(f"{workdir}/results.json")
    assert results["status"] == "finished" and results["epochs"] == 3
    images = np.random.default_rng(0).uniform(0, 255, (2, 16, 16, 3))
    final = keras.saving.load_model(f"{workdir}/final.keras", compile=False)
    np.testing.assert_allclose(
        final.predict(images, verbose=0),
        result["model"].predict(images, verbose=0),
        rtol=1e-5,
        atol=1e-6,
    )
    serve = tf.saved_model.load(f"{workdir}/saved_model/1").signatures
    logits = serve["serving_default"](images=tf.constant(images, tf.uint8))
    assert logits["logits"].shape == (2, 10)

    with pytest.raises(rundir.RunFinished, match="has finished"):
        train.run(config)  # The same command: nothing to do.
    capsys.readouterr()
    keras.backend.clear_session()
    train.run(config, fresh=True)  # Set aside, then trained again.

    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "--fresh: moved" in ln)
    old = line.split(" moved the previous run to ")[1].split(" ")[0]
    assert old.startswith(f"{workdir}/old-")
    assert line.endswith("(file by file: copied there, then deleted here).")
    assert {"results.json", "final.keras", "saved_model/1/saved_model.pb"} <= set(
        _tree(old)
    )
    assert atomic.read_json_object(f"{workdir}/results.json")["status"] == "finished"
    assert os.listdir(tmp_path) == []  # No `./ram:/...` folder, ever.


class _KillBeforeCommit(keras.callbacks.Callback):
    """Raises at the end of epoch `epoch` (0-based): after the backup's
    weights are written, before the record that commits the epoch (extra
    callbacks run before the commit)."""

    def __init__(self, epoch):
        super().__init__()
        self.at = epoch

    def on_epoch_end(self, epoch, logs=None):
        if epoch == self.at:
            raise KeyboardInterrupt("pre-empted")


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_a_run_at_a_url_interrupted_before_a_commit_resumes_exactly(
    tmp_path, monkeypatch, uninterrupted, capsys
):
    monkeypatch.chdir(tmp_path)
    workdir = _url("run2")
    config = _config(workdir, "verbose=1")

    with pytest.raises(KeyboardInterrupt) as stopped:
        train.run(config, callbacks=(_KillBeforeCommit(epoch=1),))

    backup = _tree(f"{workdir}/backup")
    assert "epoch-000002.weights.h5" in backup
    assert "epoch-000002.json" not in backup and "epoch-000001.json" in backup
    assert stopped.value.resume_hint == (
        "rerun the same command to resume from the backup of epoch 1"
    )
    assert not paths.exists(f"{workdir}/.lock")  # Released when it stopped.
    capsys.readouterr()
    keras.backend.clear_session()

    resumed = train.run(config)  # The same command again.

    out = capsys.readouterr().out
    assert f"Resuming from the backup in {workdir}/backup at epoch 2." in out
    assert len(resumed["history"]["loss"]) == 2  # Epochs 2 and 3.
    _assert_same_weights(resumed["model"], uninterrupted)
    assert not paths.exists(f"{workdir}/backup")
    with paths.open_file(f"{workdir}/metrics.csv") as f:
        rows = f.read().splitlines()[1:]
    assert [row.split(",")[0] for row in rows] == ["0", "1", "2"]
    assert os.listdir(tmp_path) == []


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_a_scheme_without_a_file_system_is_refused_in_one_line(tmp_path):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    for url, why in (
        ("s3://my-bucket/run1", "TensorFlow has no file system for s3://"),
        ("http://example.com/run1", "a web address, not a file system"),
    ):
        process = subprocess.run(
            [
                keras_vit_script(),
                "train",
                "--set",
                f"workdir='{url}'",
                "--set",
                "epochs=1",
                "--fresh",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert process.returncode == 2, process.stderr[-2000:]
        lines = process.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(f"error: workdir={url!r}: ")
        assert why in lines[0] and "gs://" in lines[0]
        assert process.stdout == ""
    assert os.listdir(tmp_path) == []  # No `./s3:` folder, nothing at all.


def test_init_from_and_folders_at_a_refused_scheme_fail_before_any_write(tmp_path):
    for field in ("init_from='s3://b/pre.npz'", "dataset='folder:s3://b/flowers'"):
        config = _config(tmp_path / "run", field)
        with pytest.raises(base.ConfigError, match="no file system for s3://"):
            train.run(config)
    assert os.listdir(tmp_path) == []


def test_init_from_a_url_is_read_from_a_local_copy(tmp_path):
    url = _url("pre/pre.weights.h5")
    source = train.build_model(_config(tmp_path / "run"), 10)
    atomic.save_weights(source, url)
    config = _config(tmp_path / "run", f"init_from={url!r}")

    train.check_init_from(config, urls=True)
    model = train.build_model(config, 10, say=lambda _: None)

    _assert_same_weights(model, source.get_weights())
    missing = _config(tmp_path / "run", f"init_from={url[:-3]!r}")
    with pytest.raises(base.ConfigError, match="names no checkpoint file"):
        train.check_init_from(missing, urls=True)
    train.check_init_from(missing)  # Before TensorFlow: URLs are left to `run`.


def _dead_pid():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_the_lock_at_a_url_is_held_named_and_taken_over_once_its_run_is_gone():
    workdir = _url("locked")
    lock = workdir_lock.WorkdirLock.acquire(workdir)
    holder = atomic.read_json_object(f"{workdir}/.lock")
    assert holder["pid"] == os.getpid() and holder["host"] == socket.gethostname()
    with pytest.raises(workdir_lock.WorkdirBusy, match=f"PID {os.getpid()} on "):
        workdir_lock.WorkdirLock.acquire(workdir)  # This process is alive.
    lock.release()
    assert not paths.exists(f"{workdir}/.lock")

    here = {"host": socket.gethostname(), "started": "then", "heartbeat": time.time()}
    atomic.write_json(f"{workdir}/.lock", {**here, "pid": _dead_pid()})
    workdir_lock.WorkdirLock.acquire(workdir).release()  # A killed run's: taken over.

    there = {"pid": 1, "host": "elsewhere", "started": "then"}
    atomic.write_json(f"{workdir}/.lock", {**there, "heartbeat": time.time()})
    with pytest.raises(workdir_lock.WorkdirBusy, match="last heartbeat 0 s ago"):
        workdir_lock.WorkdirLock.acquire(workdir)  # Another host, beating: alive.
    stale = time.time() - workdir_lock.URL_LOCK_STALE_S - 1
    atomic.write_json(f"{workdir}/.lock", {**there, "heartbeat": stale})
    workdir_lock.WorkdirLock.acquire(workdir).release()  # Silent too long: gone.


def test_atomic_writes_at_a_url_are_whole_and_leave_no_temporary_object(
    monkeypatch,
):
    folder = _url("files")
    atomic.write_json(f"{folder}/a.json", {"x": 1})
    assert atomic.read_json_object(f"{folder}/a.json") == {"x": 1}

    def torn(local):
        with open(local, "w") as f:
            f.write('{"x": ')
        raise KeyboardInterrupt("killed while writing")

    with pytest.raises(KeyboardInterrupt):
        atomic.atomic_write(f"{folder}/a.json", torn)
    uploads = []
    rename = paths.rename

    def killed_rename(source, target):  # Killed between upload and rename.
        uploads.append(source)
        raise KeyboardInterrupt("killed before the rename")

    monkeypatch.setattr(paths, "rename", killed_rename)
    with pytest.raises(KeyboardInterrupt):
        atomic.write_json(f"{folder}/a.json", {"x": 2})
    monkeypatch.setattr(paths, "rename", rename)

    assert atomic.read_json_object(f"{folder}/a.json") == {"x": 1}  # Whole.
    assert os.path.basename(uploads[0]).startswith(atomic.PARTIAL_PREFIX)
    assert paths.listdir(folder) == ["a.json"]  # The upload was removed.
    atomic.write_bytes(f"{folder}/b.bin", b"abc", overwrite=False)
    with pytest.raises(FileExistsError, match="already exists"):
        atomic.write_bytes(f"{folder}/b.bin", b"abd", overwrite=False)
    with paths.open_file(f"{folder}/b.bin", "rb") as f:
        assert f.read() == b"abc"
    with pytest.raises(FileNotFoundError):
        paths.open_file(f"{folder}/missing.json").read()


def test_an_export_to_a_url_killed_mid_upload_is_replaced_by_the_next(
    tmp_path, monkeypatch
):
    from keras_vit.export import export

    model = train.build_model(_config(tmp_path / "run"), 10)
    base_dir = _url("models/vit")
    copy_file, copies = paths.copy_file, []

    def killed_copy(source, target):  # Killed after two files were uploaded.
        if len(copies) == 2:
            raise KeyboardInterrupt("killed while uploading")
        copies.append(target)
        copy_file(source, target)

    monkeypatch.setattr(paths, "copy_file", killed_copy)
    with pytest.raises(KeyboardInterrupt):
        export(model, f"{base_dir}/1")
    monkeypatch.setattr(paths, "copy_file", copy_file)
    assert paths.exists(f"{base_dir}/1")  # A partial version: no marker.
    assert not paths.exists(f"{base_dir}/1/saved_model.pb")
    with pytest.raises(OSError):
        tf.saved_model.load(f"{base_dir}/1")

    path = export(model, f"{base_dir}/1")  # Replaces what the kill left.

    assert path == f"{base_dir}/1"
    serve = tf.saved_model.load(path).signatures["serving_default"]
    logits = serve(images=tf.zeros((1, 16, 16, 3), tf.uint8))["logits"]
    assert logits.shape == (1, 10)
    with pytest.raises(FileExistsError, match="already exists"):
        export(model, f"{base_dir}/1")
    export(model, f"{base_dir}/1", overwrite=True)


def _png(value):
    from PIL import Image

    buffer = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), value, np.uint8)).save(buffer, "PNG")
    return buffer.getvalue()


def test_a_folder_dataset_at_a_url(tmp_path):
    folder = _url("flowers")
    for name, value in (("daisy", 10), ("rose", 200)):
        for index in range(4):
            with paths.open_file(f"{folder}/train/{name}/{index}.png", "wb") as f:
                f.write(_png(value + index))
    with paths.open_file(f"{folder}/train/rose/notes.txt", "w") as f:
        f.write("not an image")

    source = data.load_source(f"folder:{folder}", "train")

    assert source.num_examples == 8 and source.class_names == ("daisy", "rose")
    assert source.skipped == (f"{folder}/train/rose/notes.txt",)
    image, label = next(iter(source.dataset))
    assert tf.io.decode_image(image).shape == (8, 8, 3) and int(label) == 0
    first = data.load_source(f"folder:{folder}", "train[:50%]")
    second = data.load_source(f"folder:{folder}", "train[50%:]")
    data.check_disjoint(first, second)
    with pytest.raises(ValueError, match="share 4 file"):
        data.check_disjoint(first, data.load_source(f"folder:{folder}", "train"))
    assert os.listdir(tmp_path) == []


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_the_export_command_reads_and_writes_urls(capsys):
    from keras_vit.recipes import export as export_command

    model = train.build_model(_config("unused"), 10)
    model_url = _url("trained/final.keras")
    atomic.save_model(model, model_url)
    base_dir = _url("serving")
    argv = ["--model", model_url, "--name", "vit", "--version", "1"]

    path = export_command.main([*argv, "--base-dir", base_dir, "--tflite"])

    assert path == f"{base_dir}/vit/1"
    assert paths.exists(f"{path}/saved_model.pb")
    assert paths.getsize(f"{base_dir}/vit/1.tflite") > 0
    out = capsys.readouterr().out
    assert f"SavedModel: {path}" in out and f"{base_dir}/vit/1.tflite" in out
    with pytest.raises(SystemExit) as refused:
        export_command.main([*argv, "--base-dir", base_dir])
    assert refused.value.code == 2
    assert "already exists" in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:
        export_command.main([*argv, "--base-dir", "s3://bucket/serving"])
    assert refused.value.code == 2
    assert "no file system for s3://" in capsys.readouterr().err
