"""Fault injection on training runs: torn backups, kills, NaN, wrong resumes.

Each test breaks a run the way the world does (a file cut in half, a
SIGKILL in the middle of writing the backup, a learning rate that diverges,
a rerun with another config) and checks that the same command then finishes
where an uninterrupted run ends, or fails loudly in one line.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from helpers import digits_run_config

from keras_vit.recipes import train

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
    "crop_area_range=(0.3, 1.0)",
    "val_split=None",
    "test_split=None",
    "monitor_images=0",
    "verbose=0",
]


def _config(workdir, *extra):
    return digits_run_config(workdir, *RUN, *extra)


def _argv(workdir, *extra):
    argv = ["--config", "digits"]
    for item in [*RUN, f"workdir='{workdir}'", *extra]:
        argv += ["--set", item]
    return argv


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    result = train.run(_config(tmp_path_factory.mktemp("whole")))
    return [w.copy() for w in result["model"].get_weights()]


def _assert_same_weights(model, weights):
    for got, want in zip(model.get_weights(), weights, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


class _Interrupt(keras.callbacks.Callback):
    """Raises KeyboardInterrupt at the first step of epoch `epoch` (0-based)."""

    def __init__(self, epoch):
        super().__init__()
        self.at = epoch

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if self.epoch == self.at and batch == 0:
            raise KeyboardInterrupt("simulated preemption")


def _newest_backup_file(workdir):
    files = glob.glob(os.path.join(workdir, "backup", "*.h5"))
    return max(files, key=os.path.getmtime)


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_a_torn_newest_backup_falls_back_and_ends_where_a_whole_run_ends(
    tmp_path, uninterrupted, capsys
):
    config = _config(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        train.run(config, callbacks=(_Interrupt(epoch=2),))  # After 2 backups.
    newest = _newest_backup_file(config.workdir)
    with open(newest, "r+b") as f:  # A kill in the middle of the write.
        f.truncate(os.path.getsize(newest) // 2)
    keras.backend.clear_session()

    resumed = train.run(config)  # The same command again.

    assert len(resumed["history"]["loss"]) == 2  # Epochs 2 and 3.
    _assert_same_weights(resumed["model"], uninterrupted)
    out = capsys.readouterr().out
    assert out.count("unusable") == 1 and "falling back to the backup of epoch 1" in out
    assert not os.path.exists(os.path.join(config.workdir, "backup"))


_KILL_DURING_BACKUP = """
import os, signal, sys

import keras

# The second backup write is cut in half and the process killed, as a
# pre-emption in the middle of writing a large backup does.
calls = []
save_weights = keras.Model.save_weights

def torn_save_weights(self, filepath, *args, **kwargs):
    save_weights(self, filepath, *args, **kwargs)
    calls.append(filepath)
    if len(calls) == 2:
        with open(filepath, "r+b") as f:
            f.truncate(os.path.getsize(filepath) // 2)
        os.kill(os.getpid(), signal.SIGKILL)

keras.Model.save_weights = torn_save_weights
from keras_vit.recipes import train

train.main(sys.argv[1:])
"""


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_a_run_killed_while_writing_its_backup_resumes_exactly(tmp_path, uninterrupted):
    process = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_KILL_DURING_BACKUP)] + _argv(tmp_path),
        cwd=ROOT,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == -9, process.stderr[-2000:]  # SIGKILL.
    keras.backend.clear_session()

    resumed = train.run(_config(tmp_path))  # The same command again.

    assert len(resumed["history"]["loss"]) == 2  # Epoch 1's backup was whole.
    _assert_same_weights(resumed["model"], uninterrupted)
    leftovers = glob.glob(os.path.join(tmp_path, "**", ".partial-*"), recursive=True)
    assert not leftovers


def _strict_json(path):
    def refuse(constant):
        raise ValueError(f"{path} holds a bare {constant}")

    with open(path) as f:
        return json.load(f, parse_constant=refuse)


def _all_finite(path):
    model = keras.saving.load_model(path, compile=False)
    return all(np.isfinite(w).all() for w in model.get_weights())


def test_a_diverged_run_fails_loudly_and_writes_no_nan(tmp_path, capsys):
    diverging = ["learning_rate=1e6", "warmup_steps=0"]
    with pytest.raises(SystemExit) as caught:
        train.main(_argv(tmp_path, *diverging))
    assert caught.value.code == 1
    captured = capsys.readouterr()
    assert "Done" not in captured.out
    message = captured.err.strip()
    assert message.startswith("error: training diverged at epoch")
    assert len(message.splitlines()) == 1 and "--allow-changes" in message

    results = _strict_json(tmp_path / "results.json")
    where = results["diverged"]
    assert results["status"] == "diverged" and where["loss"] in ("nan", "inf", "-inf")
    assert results["epochs"] == where["epoch"] - 1 >= 1  # Epochs that finished.
    assert not (tmp_path / "final.keras").exists()
    for name in ("best.keras", "last.keras"):
        path = tmp_path / "checkpoints" / name
        assert not path.exists() or _all_finite(path), name
    backups = glob.glob(str(tmp_path / "backup" / "*.json"))
    assert max(json.load(open(p))["epoch"] for p in backups) == results["epochs"]


class _PoisonWeights(keras.callbacks.Callback):
    """Puts a NaN into a kernel before the second step of epoch `epoch`."""

    def __init__(self, epoch):
        super().__init__()
        self.at = epoch

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_begin(self, batch, logs=None):
        if self.epoch == self.at and batch == 1:
            kernel = self.model.get_layer("head").kernel
            kernel.assign(np.full(kernel.shape, np.nan, "float32"))


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_a_run_resumes_from_the_last_finite_backup_after_a_nan(tmp_path, uninterrupted):
    from keras_vit.recipes.rundir import RunDiverged

    config = _config(tmp_path)
    with pytest.raises(RunDiverged, match="diverged at epoch 2, step 2"):
        train.run(config, callbacks=(_PoisonWeights(epoch=1),))
    results = _strict_json(tmp_path / "results.json")
    assert (results["status"], results["epochs"]) == ("diverged", 1)
    keras.backend.clear_session()

    resumed = train.run(config)  # The same command: from epoch 1's backup.

    assert len(resumed["history"]["loss"]) == 2
    _assert_same_weights(resumed["model"], uninterrupted)
    results = _strict_json(tmp_path / "results.json")
    assert (results["status"], results["epochs"]) == ("finished", 3)


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_a_resume_with_another_config_is_refused_until_fresh(tmp_path, capsys):
    with pytest.raises(KeyboardInterrupt):
        train.run(_config(tmp_path), callbacks=(_Interrupt(epoch=1),))
    saved_config = (tmp_path / "config.json").read_bytes()
    keras.backend.clear_session()
    capsys.readouterr()

    other = ["variant=test/8", "learning_rate=0.01"]
    with pytest.raises(SystemExit) as caught:
        train.main(_argv(tmp_path, *other))
    assert caught.value.code == 2
    message = capsys.readouterr().err.strip()
    assert len(message.splitlines()) == 1 and "Traceback" not in message
    assert "learning_rate" in message and "variant" in message
    assert "--fresh" in message and "epochs" not in message
    assert (tmp_path / "config.json").read_bytes() == saved_config

    keras.backend.clear_session()
    result = train.main(_argv(tmp_path, *other) + ["--fresh"])
    assert len(result["history"]["loss"]) == 3  # A new run from epoch 1.
    assert json.load(open(tmp_path / "config.json"))["variant"] == "test/8"
    # The previous run is set aside, not deleted: old-<time>/backup/...
    assert len(glob.glob(str(tmp_path / "old-*" / "backup" / "*.weights.h5"))) >= 1


def test_an_altered_backup_fails_its_checksum_and_an_older_one_is_used(tmp_path):
    from keras_vit.training import CrashSafeBackup
    from keras_vit.training import latest_backup

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    backup = CrashSafeBackup(str(tmp_path), fingerprint={"lr": 1}, delete_at_end=False)
    x, y = np.ones((4, 3), "float32"), np.zeros((4, 2), "float32")
    model.fit(x, y, epochs=3, verbose=0, callbacks=[backup])
    assert sorted(os.listdir(tmp_path)) == [  # The two newest, whole.
        "epoch-000002.json",
        "epoch-000002.weights.h5",
        "epoch-000003.json",
        "epoch-000003.weights.h5",
    ]
    newest = tmp_path / "epoch-000003.weights.h5"
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0xFF  # Same size, one bit pattern changed.
    newest.write_bytes(bytes(data))
    lines = []
    state = latest_backup(str(tmp_path), say=lines.append)
    assert (state.epoch, state.fingerprint) == (2, {"lr": 1})
    assert len(lines) == 1 and "fails its checksum" in lines[0]


def test_a_refused_write_leaves_the_old_file(tmp_path):
    from keras_vit import atomic

    path = tmp_path / "results.json"
    atomic.write_json(path, {"accuracy": 0.5})
    with pytest.raises(ValueError):
        atomic.write_json(path, {"accuracy": float("nan")})  # Not strict JSON.
    assert json.loads(path.read_text()) == {"accuracy": 0.5}
    assert os.listdir(tmp_path) == ["results.json"]  # No temporary file left.
