"""Fault injection at the end of a training run, and on its run directory.

Each test breaks a real run of the tiny digits config (`fault_runs.TRAIN`:
two epochs of two steps, then a test evaluation) at a named instant: a
SIGKILL, SIGTERM or Ctrl-C, a full disk, a second run on the same
directory, the rerun of a finished run, a bad `init_from`. Then it runs the
same command again and checks that the run ends exactly where an
uninterrupted one ends (weights, `metrics.csv`, TensorBoard, `results.json`)
or is refused in one line, leaving everything as it was.

SIGTERM and Ctrl-C are sent by the process to itself at the instant (a real
signal; Python raises where the program stands). SIGKILL needs a
subprocess (about 15 s each: the TensorFlow import); the reruns are made in
this process.
"""

from __future__ import annotations

import dataclasses
import errno
import filecmp
import glob
import json
import os
import shutil
import signal
import subprocess
import time

import fault_runs as fr
import keras
import numpy as np
import pytest
from fault_runs import Fault

from keras_vit.recipes import pretrain_masked
from keras_vit.recipes import train


@dataclasses.dataclass
class Whole:
    """What an uninterrupted run leaves."""

    workdir: str
    results: dict
    weights: list
    rows: dict


def _unhandled_sigterm(signum, frame):
    raise AssertionError("SIGTERM reached the test: the command did not handle it")


def _main(recipe, arguments, fault=None):
    """`recipes.<recipe>.main(arguments)` in this process, with `fault`.

    A SIGTERM that the command does not handle fails the test (instead of
    ending the test session).
    """
    keras.backend.clear_session()
    undo = fr.inject(fault) if fault is not None else (lambda: None)
    previous = signal.signal(signal.SIGTERM, _unhandled_sigterm)
    try:
        return recipe.main(arguments)
    finally:
        signal.signal(signal.SIGTERM, previous)
        undo()
        keras.backend.clear_session()


def _exit(recipe, arguments, fault=None, capsys=None):
    """Runs `_main`, expecting an exit; returns `(code, stderr lines)`."""
    if capsys is not None:
        capsys.readouterr()
    with pytest.raises(SystemExit) as caught:
        _main(recipe, arguments, fault)
    lines = fr.error_lines(capsys.readouterr().err) if capsys is not None else []
    return caught.value.code, lines


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("whole"))
    _main(train, fr.train_argv(workdir))
    return Whole(
        workdir,
        fr.results(workdir),
        fr.model_weights(os.path.join(workdir, "final.keras")),
        fr.csv_rows(workdir),
    )


def _assert_like_whole(workdir, whole: Whole):
    """The run in `workdir` ended where the uninterrupted one did."""
    got, want = fr.results(workdir), dict(whole.results)
    got_test, want_test = got.pop("test"), want.pop("test")
    assert got_test.keys() == want_test.keys()
    for key, value in want_test.items():
        np.testing.assert_allclose(got_test[key], value, rtol=1e-5)
    assert got == want
    weights = fr.model_weights(os.path.join(workdir, "final.keras"))
    for got_w, want_w in zip(weights, whole.weights, strict=True):
        np.testing.assert_allclose(got_w, want_w, rtol=1e-5, atol=1e-6)
    assert fr.csv_epochs(workdir) == [0, 1]  # Every epoch, once.
    rows = fr.csv_rows(workdir)
    for epoch, row in whole.rows.items():
        assert rows[epoch].keys() == row.keys()
        for key, value in row.items():
            np.testing.assert_allclose(rows[epoch][key], value, rtol=1e-5)
    assert set(fr.tensorboard_steps(workdir)) == {0, 1}
    assert fr.leftovers(workdir) == []


# -- stopped after training: finishing without training again (items 1, 2)


# Instants between the last epoch's backup and `results.json`, each named
# by a call that exists in the old and the new code.
AFTER_TRAINING = {
    # The last epoch's metrics.csv row is written; fit has not returned.
    "last-epoch-logged": Fault(
        "keras_vit.training.callbacks:AtomicCSVLogger.on_epoch_end", "after", nth=2
    ),
    # Every epoch is done: fit is ending (its callbacks' on_train_end).
    "fit-ending": Fault("keras.callbacks:TensorBoard.on_train_end", "before"),
    "fit-returned": Fault("keras_vit.recipes.engine:fit", "after"),
    "test-evaluation": Fault("keras:Model.evaluate", "before"),
    "final.keras-saved": Fault(
        "keras_vit.atomic:save_model", "after", match="final.keras"
    ),
    "results.json-being-written": Fault(
        "keras_vit.atomic:write_json", "before", match="results.json"
    ),
}


# One instant per kind of step runs by default; the others are `large`.
_MORE = pytest.mark.large


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
@pytest.mark.parametrize(
    "instant",
    [
        "last-epoch-logged",
        "fit-returned",
        "final.keras-saved",
        pytest.param("fit-ending", marks=_MORE),
        pytest.param("test-evaluation", marks=_MORE),
        pytest.param("results.json-being-written", marks=_MORE),
    ],
)
def test_a_sigterm_after_training_is_finished_by_the_same_command(
    tmp_path, whole, capsys, instant
):
    arguments = fr.train_argv(tmp_path, "verbose=2")
    fault = AFTER_TRAINING[instant].with_action("SIGTERM")

    code, lines = _exit(train, arguments, fault, capsys)

    assert code == 143 and len(lines) == 1, lines
    assert lines[0].startswith("error: interrupted (SIGTERM) ")
    if instant == "last-epoch-logged":  # Epoch 2 is not committed yet.
        assert "resume from the backup of epoch 1" in lines[0]
    else:
        assert "finish from the backup of epoch 2, without training again" in (lines[0])
    assert not os.path.exists(tmp_path / "results.json")

    result = _main(train, arguments)  # The same command again.

    out = capsys.readouterr().out
    if instant == "last-epoch-logged":
        assert len(result["history"]["loss"]) == 1  # Epoch 2 redone.
    else:
        assert result["history"] == {}  # Nothing trained again.
        assert "Resuming: training finished at epoch 2; finishing: test " in out
    _assert_like_whole(tmp_path, whole)


# SIGKILL (no clean-up at all) at the instants of the old failures: the
# window of `StopIteration` (item 1), and after `fit` (the backup was gone).
@pytest.mark.parametrize(
    "instant", ["last-epoch-logged", pytest.param("fit-returned", marks=_MORE)]
)
def test_a_sigkill_after_training_is_finished_by_the_same_command(
    tmp_path, whole, instant
):
    fault = AFTER_TRAINING[instant].with_action("SIGKILL")
    process = fr.run_command(fr.train_argv(tmp_path), fault)
    assert process.returncode == -signal.SIGKILL, process.stderr[-3000:]
    assert os.path.exists(tmp_path / "backup")

    result = _main(train, fr.train_argv(tmp_path))  # The same command again.

    if instant == "fit-returned":
        assert result["history"] == {}
    _assert_like_whole(tmp_path, whole)


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_a_rerun_that_only_finishes_removes_killed_writers_temporary_files(
    tmp_path, whole, capsys
):
    fault = AFTER_TRAINING["final.keras-saved"].with_action("SIGTERM")
    assert _exit(train, fr.train_argv(tmp_path), fault, capsys)[0] == 143
    # What writers killed mid-write leave (a SIGKILL leaves them in place).
    (tmp_path / ".partial-1-final.keras").write_bytes(b"torn")
    (tmp_path / "checkpoints" / ".partial-1-last.keras").write_bytes(b"torn")

    result = _main(train, fr.train_argv(tmp_path))

    assert result["history"] == {}  # Straight to finishing.
    _assert_like_whole(tmp_path, whole)  # No leftovers.


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_with_ema_a_run_finished_by_a_rerun_saves_the_averaged_weights(
    tmp_path, whole, capsys
):
    ema = ("ema_momentum=0.5",)
    _main(train, fr.train_argv(tmp_path / "whole", *ema))
    want = fr.model_weights(tmp_path / "whole" / "final.keras")
    arguments = fr.train_argv(tmp_path / "run", *ema)
    fault = AFTER_TRAINING["fit-returned"].with_action("SIGTERM")
    assert _exit(train, arguments, fault, capsys)[0] == 143

    result = _main(train, arguments)

    assert result["history"] == {}
    got = fr.model_weights(tmp_path / "run" / "final.keras")
    for got_w, want_w in zip(got, want, strict=True):
        # Keras swaps the average in by adding and subtracting: float rounding.
        np.testing.assert_allclose(got_w, want_w, rtol=1e-5, atol=1e-6)
    # The same run without EMA ends with the raw weights: these are others.
    assert not all(
        np.allclose(a, b, rtol=1e-3) for a, b in zip(got, whole.weights, strict=True)
    )
    test = fr.results(tmp_path / "run")["test"]
    np.testing.assert_allclose(
        test["loss"], fr.results(tmp_path / "whole")["test"]["loss"], rtol=1e-5
    )


AFTER_RESULTS = {
    # results.json is written; the backup is not discarded yet.
    "results.json-written": Fault(
        "keras_vit.atomic:write_json", "after", match="results.json"
    ),
    # The backup is renamed for deletion; its deletion has not run.
    "backup-being-deleted": Fault("shutil:rmtree", "before", match="backup.discarded"),
}


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
@pytest.mark.parametrize("instant", sorted(AFTER_RESULTS))
def test_a_kill_after_results_are_written_is_completed_by_the_same_command(
    tmp_path, whole, capsys, instant
):
    fault = AFTER_RESULTS[instant].with_action("SIGTERM")
    code, _ = _exit(train, fr.train_argv(tmp_path), fault, capsys)
    assert code == 143 and fr.leftovers(tmp_path), fr.leftovers(tmp_path)
    kept = {n: (tmp_path / n).read_bytes() for n in ("final.keras", "results.json")}

    # "Rerun until it exits 0" ends: the run is completed, exit status 0.
    assert _main(train, fr.train_argv(tmp_path)) is None
    out = fr.error_lines(capsys.readouterr().out)
    assert out == [
        f"the run in {tmp_path} has finished (2 epochs; results in "
        f"{tmp_path}/results.json, model in {tmp_path}/final.keras); removed the "
        "backup its interrupted end left"
    ]
    assert {n: (tmp_path / n).read_bytes() for n in kept} == kept
    _assert_like_whole(tmp_path, whole)  # And the leftover backup is gone.

    code, lines = _exit(train, fr.train_argv(tmp_path), capsys=capsys)
    assert code == 3 and len(lines) == 1 and "has finished" in lines[0]


def test_a_backup_is_discarded_past_a_leftover_of_an_earlier_discard(
    tmp_path, monkeypatch
):
    from keras_vit.training import backup_records as backup_module

    backup = tmp_path / "backup"
    (tmp_path / "backup.discarded" / "old").mkdir(parents=True)
    (tmp_path / "backup.discarded" / "old" / "epoch-000001.json").write_text("{}")
    backup.mkdir()
    (backup / "epoch-000002.json").write_text("{}")
    # A deletion that fails (or is killed) halfway leaves its folder behind.
    monkeypatch.setattr(backup_module.shutil, "rmtree", lambda *a, **k: None)

    assert backup_module.discard(str(backup)) is True  # Not ENOTEMPTY.

    assert not backup.exists()
    assert len(glob.glob(str(tmp_path / "backup.discarded*"))) == 2
    monkeypatch.undo()
    assert backup_module.discard(str(backup)) is True  # Cleans the leftovers.
    assert os.listdir(tmp_path) == []
    assert backup_module.discard(str(backup)) is False


# -- a full disk (item 3) --------------------------------------------------


def test_a_full_disk_while_writing_a_backup_stops_in_one_line(tmp_path, whole, capsys):
    from keras_vit import atomic

    # The second epoch's backup: half written, then ENOSPC (h5py's wording).
    fault = Fault("keras:Model.save_weights", "during", nth=2, action="enospc")
    code, lines = _exit(train, fr.train_argv(tmp_path), fault, capsys)

    assert code == 1 and len(lines) == 1, lines
    message = lines[0]
    target = os.path.join(tmp_path, "backup", "epoch-000002.weights.h5")
    mount = atomic.mount_point(target)
    assert message.startswith(
        f"error: disk full: could not write {target} (No space left on device "
        f"on {mount}, "
    )
    assert message.endswith(
        " free); what was written before is whole: free some space, then rerun "
        "the same command to resume from the backup of epoch 1"
    )
    backup = sorted(os.listdir(tmp_path / "backup"))
    assert backup == ["epoch-000001.json", "epoch-000001.weights.h5"]

    result = _main(train, fr.train_argv(tmp_path))

    assert len(result["history"]["loss"]) == 1
    _assert_like_whole(tmp_path, whole)


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_a_full_disk_while_saving_the_final_model_is_finished_later(
    tmp_path, whole, capsys
):
    fault = Fault("keras:Model.save", "during", match="final.keras", action="enospc")
    code, lines = _exit(train, fr.train_argv(tmp_path), fault, capsys)

    assert code == 1 and len(lines) == 1, lines
    assert "disk full: could not write" in lines[0] and "final.keras" in lines[0]
    assert "finish from the backup of epoch 2, without training again" in lines[0]
    assert not os.path.exists(tmp_path / "final.keras")

    result = _main(train, fr.train_argv(tmp_path))

    assert result["history"] == {}
    _assert_like_whole(tmp_path, whole)


def test_a_failed_hdf5_write_is_closed_and_removed(tmp_path):
    """Keras leaves its h5py file open when a write fails: it is closed.

    Left open, h5py flushes it again whenever the object is freed, failing
    and reporting each time on a full disk, and HDF5 crashes at exit.
    """
    import h5py

    from keras_vit import atomic

    opened = []

    def write(partial):
        opened.append(h5py.File(partial, "w"))
        opened[0]["kernel"] = np.zeros(1000, "float32")
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(atomic.DiskFull) as caught:
        atomic.atomic_write(tmp_path / "x.weights.h5", write)

    assert not opened[0].id.valid  # Closed, not left to the garbage collector.
    assert os.listdir(tmp_path) == []
    assert str(caught.value).startswith(
        f"disk full: could not write {tmp_path / 'x.weights.h5'} (No space left"
    )


_FULL_DISK = """
set -u
mount -t tmpfs -o size=4m tmpfs "$DISK" || exit 97
"$@" > "$OUT/first.out" 2> "$OUT/first.err"
echo $? > "$OUT/first.rc"
rm -f "$DISK/filler.bin"
cp -a "$DISK/run" "$OUT/after_first"
env -u KERAS_VIT_FAULT "$@" > "$OUT/second.out" 2> "$OUT/second.err"
echo $? > "$OUT/second.rc"
cp -a "$DISK/run" "$OUT/after_second"
"""


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_a_real_full_disk_while_writing_a_backup(tmp_path, whole):
    """A 4 MiB tmpfs, filled when the second backup is written.

    Mounted in a private mount namespace (`unshare --user --mount`), so no
    root is needed; the run and its rerun both run inside it.
    """
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir(), out.mkdir()
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) for a private tmpfs")
    fault = Fault(
        "keras_vit.atomic:save_weights", "before", nth=2, action="fill", leave=100_000
    )
    command = fr.command("train", fr.train_argv(disk / "run"))
    process = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", _FULL_DISK]
        + ["full-disk", *command],
        cwd=fr.ROOT,
        env=fr.environment(fault, DISK=str(disk), OUT=str(out)),
        capture_output=True,
        text=True,
        timeout=600,
    )
    if process.returncode == 97 or not (out / "first.rc").exists():
        pytest.skip(f"cannot mount a private tmpfs here: {process.stderr[-300:]}")
    first = (out / "first.err").read_text()
    assert (out / "first.rc").read_text().strip() == "1", first[-3000:]
    lines = fr.error_lines(first)
    assert len(lines) == 1, first[-3000:]  # No h5py errors, no segfault.
    target = disk / "run" / "backup" / "epoch-000002.weights.h5"
    assert lines[0].startswith(
        f"error: disk full: could not write {target} (No space left on device "
        f"on {disk}, "
    )
    assert lines[0].endswith("resume from the backup of epoch 1")
    backup = sorted(os.listdir(out / "after_first" / "backup"))
    assert backup == ["epoch-000001.json", "epoch-000001.weights.h5"]

    second = (out / "second.err").read_text()
    assert (out / "second.rc").read_text().strip() == "0", second[-3000:]
    _assert_like_whole(out / "after_second", whole)


# -- every committed epoch is logged once (item 4) --------------------------


BEFORE_COMMIT = {
    # The first epoch's backup is written; its metrics.csv row is not.
    "before-csv-row": Fault(
        "keras_vit.training.callbacks:AtomicCSVLogger.on_epoch_end", "before"
    ),
    # Its row and TensorBoard summaries are written; it is not committed.
    "after-tensorboard": Fault("keras.callbacks:TensorBoard.on_epoch_end", "after"),
}


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
@pytest.mark.parametrize(
    "instant", ["before-csv-row", pytest.param("after-tensorboard", marks=_MORE)]
)
def test_a_sigkill_before_an_epoch_is_logged_loses_no_row_or_summary(
    tmp_path, whole, instant
):
    fault = BEFORE_COMMIT[instant].with_action("SIGKILL")
    process = fr.run_command(fr.train_argv(tmp_path), fault)
    assert process.returncode == -signal.SIGKILL, process.stderr[-3000:]

    _main(train, fr.train_argv(tmp_path))  # The same command again.

    _assert_like_whole(tmp_path, whole)  # metrics.csv [0, 1]; TensorBoard 0, 1.


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_a_sigkill_after_a_commit_keeps_the_committed_epochs_summaries(tmp_path, whole):
    # Killed right after epoch 1 is committed: the rerun resumes after it, so
    # its TensorBoard points must already be on disk (the writers flushed).
    fault = Fault("keras_vit.training.backup:CrashSafeBackup.commit", "after")
    process = fr.run_command(fr.train_argv(tmp_path), fault)
    assert process.returncode == -signal.SIGKILL, process.stderr[-3000:]
    assert fr.tensorboard_steps(tmp_path) == [0]
    assert fr.tensorboard_steps(tmp_path, "epoch_learning_rate") == [0]

    result = _main(train, fr.train_argv(tmp_path))  # The same command again.

    assert len(result["history"]["loss"]) == 1  # Resumed after epoch 1.
    _assert_like_whole(tmp_path, whole)


def test_a_resumed_run_keeps_the_best_checkpoint_of_the_epochs_before_it(tmp_path):
    from keras_vit.training import AtomicCheckpoint

    path = str(tmp_path / "best.keras")
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])

    def epochs(checkpoint, values, first):
        checkpoint.set_model(model)
        for epoch, value in enumerate(values, first):
            model.layers[0].kernel.assign(np.full((2, 1), epoch, "float32"))
            checkpoint.on_epoch_begin(epoch)
            checkpoint.on_epoch_end(epoch, {"val_accuracy": value})

    epochs(AtomicCheckpoint(path, monitor="val_accuracy"), [0.5, 0.7, 0.6], 0)
    # A kill during epoch 3; the rerun
    # resumes from the backup of epoch 2 and redoes epoch 3, then epoch 4.
    epochs(AtomicCheckpoint(path, monitor="val_accuracy"), [0.6, 0.65], 2)

    kernel = keras.saving.load_model(path).layers[0].get_weights()[0]
    assert (kernel == 1).all()  # Epoch 2 (0.7): still the best.
    record = json.loads((tmp_path / "best.json").read_text())
    assert record == {"monitor": "val_accuracy", "improvements": {"1": 0.5, "2": 0.7}}


# -- two runs on one directory (item 5) -------------------------------------


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_a_second_run_on_a_live_directory_is_refused_and_a_killed_one_frees_it(
    tmp_path, whole, capsys
):
    ready = tmp_path / "ready"
    workdir = tmp_path / "run"
    # The first run stops in its first epoch (before the metrics.csv row).
    fault = Fault(
        "keras_vit.training.callbacks:AtomicCSVLogger.on_epoch_end",
        "before",
        action="pause",
    )
    first = subprocess.Popen(
        fr.command("train", fr.train_argv(workdir)),
        cwd=fr.ROOT,
        env=fr.environment(fault, KERAS_VIT_FAULT_READY=str(ready)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        while not ready.exists() and first.poll() is None:
            assert time.monotonic() < deadline, "the first run did not start"
            time.sleep(0.1)
        assert ready.exists(), first.stderr.read()[-3000:]
        before = _listing(workdir)

        code, lines = _exit(train, fr.train_argv(workdir), capsys=capsys)

        assert code == 2 and len(lines) == 1, lines
        assert f"{workdir} is in use by another run (PID {first.pid} on " in lines[0]
        assert _listing(workdir) == before  # The refused run touched nothing.
    finally:
        first.kill()  # SIGKILL: the kernel releases its lock.
        first.wait()
    assert first.returncode == -signal.SIGKILL

    _main(train, fr.train_argv(workdir))  # Now it runs.

    _assert_like_whole(workdir, whole)


def _files(folder) -> dict:
    """`_listing` without the folders' times (a lock file comes and goes)."""
    return {
        path: None if os.path.isdir(path) else value
        for path, value in _listing(folder).items()
    }


def _listing(folder) -> dict:
    """`{path: (size, mtime)}` of everything under `folder`, hidden included."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = os.path.join(root, name)
            stat = os.stat(path)
            out[path] = (stat.st_size, stat.st_mtime_ns)
    return out


# -- rerunning a finished run (item 6) ---------------------------------------


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_a_finished_run_is_not_rerun_and_fresh_sets_it_aside(tmp_path, whole, capsys):
    workdir = tmp_path / "run"
    shutil.copytree(whole.workdir, workdir)
    snapshot = tmp_path / "snapshot"
    shutil.copytree(workdir, snapshot)

    code, lines = _exit(train, fr.train_argv(workdir), capsys=capsys)

    assert code == 3 and len(lines) == 1, lines
    assert lines[0] == (
        f"error: the run in {workdir} has finished (2 epochs; results in "
        f"{workdir}/results.json, model in {workdir}/final.keras); nothing to do: "
        "rerun with --fresh to set it aside and train again"
    )
    assert not filecmp.dircmp(workdir, snapshot).diff_files

    other = fr.train_argv(workdir, "learning_rate=0.01")
    code, lines = _exit(train, other, capsys=capsys)
    assert code == 2 and len(lines) == 1 and "learning_rate 0.003 -> 0.01" in lines[0]
    assert "holds a finished run of another config" in lines[0]
    assert not filecmp.dircmp(workdir, snapshot).diff_files

    # A run made before an option existed (its config.json lacks it) is the
    # same run: the option's default is what was done then.
    with open(workdir / "config.json", encoding="utf-8") as f:
        stored = json.load(f)
    del stored["encoder"]["qk_norm"]  # at its default, False
    (workdir / "config.json").write_text(json.dumps(stored))
    code, lines = _exit(train, fr.train_argv(workdir), capsys=capsys)
    assert code == 3 and "has finished" in lines[0], lines
    shutil.copy(snapshot / "config.json", workdir / "config.json")

    result = _main(train, fr.train_argv(workdir) + ["--fresh"])

    assert len(result["history"]["loss"]) == 2  # Trained again, from epoch 1.
    (aside,) = glob.glob(str(workdir / "old-*"))
    for name in ("final.keras", "results.json", "metrics.csv", "config.json"):
        assert filecmp.cmp(snapshot / name, os.path.join(aside, name), shallow=False)
    _assert_like_whole(workdir, whole)


# -- Ctrl-C and SIGTERM: one line (item 7) ------------------------------------


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_ctrl_c_prints_one_line_and_the_same_command_resumes(tmp_path, whole):
    # Ctrl-C in the second epoch (the first is backed up).
    fault = Fault(
        "keras_vit.training.callbacks:ReseedEachEpoch.on_epoch_begin",
        "after",
        nth=2,
        action="SIGINT",
    )
    process = fr.run_command(fr.train_argv(tmp_path), fault)

    assert process.returncode == 130, process.stderr[-3000:]
    assert fr.error_lines(process.stderr) == [
        "error: interrupted (Ctrl-C) at epoch 2 of 2; rerun the same command to "
        "resume from the backup of epoch 1"
    ]

    result = _main(train, fr.train_argv(tmp_path))

    assert len(result["history"]["loss"]) == 1
    _assert_like_whole(tmp_path, whole)


def test_sigterm_before_any_epoch_finished_says_the_run_starts_again(tmp_path, capsys):
    fault = Fault(
        "keras_vit.training.callbacks:AtomicCSVLogger.on_epoch_end",
        "before",
        action="SIGTERM",
    )
    code, lines = _exit(train, fr.train_argv(tmp_path), fault, capsys)
    assert code == 143 and lines == [
        "error: interrupted (SIGTERM) at epoch 1 of 2; no epoch was finished: "
        "rerun the same command to start again"
    ]
    assert not os.path.exists(tmp_path / ".lock")  # Released.


# -- init_from (item 15) ------------------------------------------------------


@pytest.mark.parametrize("what", ["missing.keras", "missing.npz", "a-directory/"])
def test_init_from_a_missing_file_is_one_line_before_anything_is_written(
    tmp_path, capsys, what
):
    (tmp_path / "a-directory").mkdir()
    path = tmp_path / what
    workdir = tmp_path / "run"
    code, lines = _exit(
        train, fr.train_argv(workdir, f"init_from='{path}'"), capsys=capsys
    )
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: init_from='{path}' ")
    assert "checkpoint file" in lines[0]
    assert not workdir.exists()

    from keras_vit.recipes.configs import base

    config = base.override(
        base.load_config("digits"), [*fr.TRAIN, f"init_from='{path}'"]
    )
    with pytest.raises(base.ConfigError, match="init_from"):
        train.run(dataclasses.replace(config, workdir=str(workdir)))


# -- masked pre-training: the same end of run --------------------------------


@pytest.fixture(scope="module")
def whole_pretraining(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("whole_pretraining"))
    _main(pretrain_masked, fr.pretrain_argv(workdir))
    return Whole(
        workdir,
        fr.results(workdir),
        fr.model_weights(os.path.join(workdir, "encoder.keras")),
        fr.csv_rows(workdir),
    )


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
@pytest.mark.parametrize(
    "instant", ["final.keras-saved", pytest.param("fit-returned", marks=_MORE)]
)
def test_pretraining_stopped_while_saving_is_finished_by_the_same_command(
    tmp_path, whole_pretraining, capsys, instant
):
    arguments = fr.pretrain_argv(tmp_path, "verbose=2")
    fault = AFTER_TRAINING[instant].with_action("SIGTERM")
    code, lines = _exit(pretrain_masked, arguments, fault, capsys)
    assert code == 143 and len(lines) == 1, lines
    assert not os.path.exists(tmp_path / "encoder.keras")

    result = _main(pretrain_masked, arguments)

    assert result["history"] == {}
    out = capsys.readouterr().out
    assert "Resuming: training finished at epoch 2; finishing: final.keras, " in out
    want = whole_pretraining
    got = fr.results(tmp_path)
    np.testing.assert_allclose(
        [got["final"][k] for k in sorted(want.results["final"])],
        [want.results["final"][k] for k in sorted(want.results["final"])],
        rtol=1e-6,
    )
    assert got["epochs"] == 2 and got["status"] == "finished"
    encoder = fr.model_weights(tmp_path / "encoder.keras")
    for got_w, want_w in zip(encoder, want.weights, strict=True):
        np.testing.assert_allclose(got_w, want_w, rtol=1e-5, atol=1e-6)
    assert fr.csv_epochs(tmp_path) == [0, 1] and fr.leftovers(tmp_path) == []

    code, lines = _exit(pretrain_masked, arguments, capsys=capsys)
    assert code == 3 and "has finished" in lines[0]


def test_the_fault_harness_fires_once_at_the_named_call(tmp_path):
    """The injection itself: the nth matching call, a real signal, undone."""
    from keras_vit import atomic
    from keras_vit.recipes import cli

    original, handler = atomic.write_text, signal.getsignal(signal.SIGTERM)
    fault = Fault("keras_vit.atomic:write_text", "after", nth=2, match="b.txt")
    undo = fr.inject(fault.with_action("SIGTERM"))
    try:
        with cli.handle_termination():
            atomic.write_text(tmp_path / "b.txt", "1")
            atomic.write_text(tmp_path / "a.txt", "x")  # Not matched.
            with pytest.raises(cli.Terminated):
                atomic.write_text(tmp_path / "b.txt", "2")
            atomic.write_text(tmp_path / "b.txt", "3")  # Fired once only.
    finally:
        undo()
    assert (tmp_path / "b.txt").read_text() == "3"
    assert atomic.write_text is original
    assert signal.getsignal(signal.SIGTERM) == handler


@pytest.mark.parametrize("name", ["model.pth", "model.pth.tar", "model.pt"])
def test_a_bare_torch_file_name_is_taken_for_a_file(tmp_path, monkeypatch, name):
    from keras_vit.recipes.configs import base

    monkeypatch.chdir(tmp_path)  # No directory in the value: the suffix says.
    config = dataclasses.replace(base.load_config("digits"), init_from=name)
    with pytest.raises(base.ConfigError, match=f"init_from='{name}' names no"):
        train.check_init_from(config)
    (tmp_path / name).write_bytes(b"")
    train.check_init_from(config)  # Present: left to the loader.


# -- --fresh in the command that was stopped ---------------------------------


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_a_stopped_fresh_run_says_to_rerun_without_fresh(tmp_path, whole, capsys):
    arguments = [*fr.train_argv(tmp_path), "--fresh"]
    # SIGTERM in the second epoch (the first is committed), then a full disk
    # while the second epoch's backup is written.
    sigterm = Fault(
        "keras_vit.training.callbacks:ReseedEachEpoch.on_epoch_begin",
        "after",
        nth=2,
        action="SIGTERM",
    )
    code, lines = _exit(train, arguments, sigterm, capsys)
    assert code == 143 and lines == [
        "error: interrupted (SIGTERM) at epoch 2 of 2; rerun the same command "
        "without --fresh to resume from the backup of epoch 1"
    ]
    full = Fault("keras:Model.save_weights", "during", nth=2, action="enospc")
    code, lines = _exit(train, arguments, full, capsys)
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].endswith(
        "free some space, then rerun the same command without --fresh to resume "
        "from the backup of epoch 1"
    )

    result = _main(train, fr.train_argv(tmp_path))  # Without --fresh.

    assert len(result["history"]["loss"]) == 1
    _assert_like_whole(tmp_path, whole)


# -- bad input changes nothing ------------------------------------------------


def _interrupted_run(workdir, capsys):
    """A run stopped in its second epoch: `backup/` holds epoch 1."""
    fault = Fault(
        "keras_vit.training.callbacks:ReseedEachEpoch.on_epoch_begin",
        "after",
        nth=2,
        action="SIGTERM",
    )
    assert _exit(train, fr.train_argv(workdir), fault, capsys)[0] == 143
    (workdir / ".partial-1-final.keras").write_bytes(b"torn")  # A killed writer's.


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
@pytest.mark.parametrize(
    "extra",
    [
        ["--fresh", "--set", "val_split='tset'"],
        ["--allow-changes", "--set", "val_split='tset'"],
        ["--fresh", "--set", "fewshot_every=1", "--set", "fewshot_shots=(500,)"],
        ["--set", "fewshot_every=1", "--set", "fewshot_shots=(500,)"],
    ],
    ids=["fresh-bad-split", "allow-changes-bad-split", "fresh-fewshot", "fewshot"],
)
def test_a_refused_command_leaves_the_run_directory_as_it_was(
    tmp_path, whole, capsys, extra
):
    workdir = tmp_path / "run"
    _interrupted_run(workdir, capsys)
    before = _files(workdir)

    code, lines = _exit(train, [*fr.train_argv(workdir), *extra], capsys=capsys)

    assert code == 2 and len(lines) == 1, lines
    assert "tset" in lines[0] or "fewer than the 500 shots" in lines[0], lines
    assert _files(workdir) == before

    _main(train, fr.train_argv(workdir))  # The run itself is intact.

    _assert_like_whole(workdir, whole)  # Its partial file removed, too.


@pytest.mark.parametrize(
    "extra",
    [
        ("val_split='tset'",),
        ("val_split='test[:60%]'", "test_split='test[40%:]'"),
        ("fewshot_every=1", "fewshot_shots=(500,)"),
    ],
    ids=["bad-split", "val-test-overlap", "fewshot"],
)
def test_a_refused_command_creates_no_run_directory(tmp_path, capsys, extra):
    workdir = tmp_path / "new" / "run"

    code, lines = _exit(train, fr.train_argv(workdir, *extra), capsys=capsys)

    assert code == 2 and len(lines) == 1, lines
    assert os.listdir(tmp_path) == []


# -- file system errors outside keras_vit.atomic: one line -------------------


def test_a_file_system_error_outside_the_atomic_writes_is_one_line(
    tmp_path, capsys, monkeypatch
):
    import tensorflow as tf

    from keras_vit.recipes import workdir_lock

    def refused(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path))

    monkeypatch.setattr(workdir_lock.WorkdirLock, "acquire", refused)
    code, lines = _exit(train, fr.train_argv(tmp_path), capsys=capsys)
    assert code == 1 and lines == [
        f"error: {tmp_path}: Permission denied; no epoch was finished: rerun the "
        "same command to start again"
    ]
    monkeypatch.undo()

    def full(self, epoch, logs=None):  # TensorFlow's summary writer's words.
        raise tf.errors.ResourceExhaustedError(
            None, None, "tensorboard/train; No space left on device"
        )

    monkeypatch.setattr(keras.callbacks.TensorBoard, "on_epoch_end", full)
    code, lines = _exit(train, fr.train_argv(tmp_path), capsys=capsys)
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith(
        f"error: disk full: could not write {tmp_path} (No space left on device"
    )
    assert lines[0].endswith(
        "free some space, then no epoch was finished: rerun the same command "
        "to start again"
    )


# -- a kill while --fresh sets the previous run aside -------------------------


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_a_kill_while_fresh_sets_a_run_aside_is_finished_by_the_same_command(
    tmp_path, whole, capsys
):
    workdir = tmp_path / "run"
    _interrupted_run(workdir, capsys)
    before = {
        os.path.relpath(path, workdir): size
        for path, (size, _) in _listing(workdir).items()
        if os.path.isfile(path) and ".partial-" not in path and ".lock" not in path
    }
    arguments = [*fr.train_argv(workdir), "--fresh"]
    # Killed once the backup is moved, before the logs are.
    fault = Fault("os:replace", "after", match=f"{workdir}/backup", action="SIGTERM")
    code, lines = _exit(train, arguments, fault, capsys)
    assert code == 143 and len(lines) == 1, lines
    assert lines[0].endswith(
        "rerun the same command to set the previous run aside and start again"
    )
    assert not (workdir / "backup").exists() and (workdir / "metrics.csv").exists()

    result = _main(train, arguments)  # The same command again.

    assert len(result["history"]["loss"]) == 2  # Started again.
    (aside,) = glob.glob(str(workdir / "old-*"))  # Everything in one place.
    moved = {
        os.path.relpath(path, aside): size
        for path, (size, _) in _listing(aside).items()
        if os.path.isfile(path)
    }
    assert moved == before
    _assert_like_whole(workdir, whole)


# -- SIGTERM whose exception Python swallowed ----------------------------------


@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
def test_a_swallowed_sigterm_is_raised_again_at_the_next_step():
    import gc

    from keras_vit.recipes import cli
    from keras_vit.recipes import engine
    from keras_vit.recipes import rundir

    class Dies:
        def __del__(self):  # A signal arriving here: "Exception ignored in".
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.01)

    progress = engine._Progress(rundir.Setup(*[None] * 7))
    with cli.handle_termination():
        progress.on_train_batch_end(0)  # Nothing pending.
        Dies()
        gc.collect()
        with pytest.raises(cli.Terminated):
            progress.on_train_batch_end(1)
    progress.on_train_batch_end(2)  # Reset when the command ends.


# -- an evaluation image that fails to decode ---------------------------------


def test_an_eval_image_that_fails_to_decode_is_one_line_naming_it(tmp_path, capsys):
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for label in ("a", "b"):
            folder = tmp_path / "data" / split / label
            folder.mkdir(parents=True)
            for i in range(4):
                pixels = rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.jpg", quality=95)
    torn = tmp_path / "data" / "test" / "b" / "2.jpg"
    # Truncated: Pillow's check of the header and structure passes it.
    torn.write_bytes(torn.read_bytes()[: torn.stat().st_size * 7 // 10])
    workdir = tmp_path / "run"
    arguments = fr.train_argv(
        workdir,
        f"dataset='folder:{tmp_path / 'data'}'",
        "val_split=None",
        "test_split='test'",
        "global_batch_size=4",
    )

    code, lines = _exit(train, arguments, capsys=capsys)

    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: {torn} (in "), lines
    assert "cannot be decoded as an image" in lines[0]
    assert not workdir.exists()
