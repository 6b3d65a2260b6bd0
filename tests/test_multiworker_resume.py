"""Two local workers killed between their commits resume from the same epoch.

Each worker of a `MultiWorkerMirroredStrategy` run keeps its own backup and
commits each epoch on its own. Here worker 1 is SIGKILLed at the instant
after worker 0 committed epoch 2 and before worker 1 commits it, and worker
0 is killed right after (the whole job pre-empted). The same command on
both then agrees on epoch 1, the newest epoch both hold, redoes epoch 2 and
finishes. Loopback only (127.0.0.1). Four TensorFlow processes take about
30 s on 2 idle cores (AMD EPYC Zen 3), up to 2 minutes on busy ones. The
agreement's rule itself is also checked by the quick test below it.
"""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest
from helpers import free_ports

from keras_vit.recipes import rundir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN = [
    "variant=test/4",
    "image_size=16",
    "global_batch_size=8",
    "epochs=3",
    "steps_per_epoch=3",
    "warmup_steps=1",
    "dropout_rate=0.0",
    "drop_path_rate=0.0",
    "val_split=None",
    "test_split=None",
    "monitor_images=0",
    "verbose=2",
    "strategy='multi_worker'",
]

# Runs the recipe on one worker. With KILL_AT_EPOCH=N, worker 1 waits, in
# the commit of epoch N, until worker 0's record of epoch N exists, then
# SIGKILLs itself: a kill between the two workers' commits.
_WORKER = """
import json, os, signal, sys, time

from keras_vit.recipes import train
from keras_vit.recipes.configs import base
from keras_vit.training import backup

workdir = sys.argv[1]
config = base.override(
    base.load_config("digits"), [*sys.argv[2:], f"workdir='{workdir}'"]
)
task = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
kill_at = int(os.environ.get("KILL_AT_EPOCH", "0"))
if kill_at and task == 1:
    commit = backup.CrashSafeBackup.commit

    def commit_or_die(self, epoch, logs=None):
        if epoch + 1 == kill_at:
            name = f"epoch-{kill_at:06d}.json"
            record = os.path.join(workdir, "backup", name)
            while not os.path.exists(record):
                time.sleep(0.02)
            print("KILLED before committing epoch", kill_at, flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        return commit(self, epoch, logs)

    backup.CrashSafeBackup.commit = commit_or_die
result = train.run(config)
print("RESULT " + json.dumps({"trained": len(result["history"].get("loss", []))}))
"""


def _launch(workdir, workers, **env):
    processes = []
    for index in range(2):
        tf_config = {
            "cluster": {"worker": workers},
            "task": {"type": "worker", "index": index},
        }
        environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT)
        environment.pop("KILL_AT_EPOCH", None)
        environment.update(TF_CONFIG=json.dumps(tf_config), **env)
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    textwrap.dedent(_WORKER),
                    str(workdir),
                    *RUN,
                ],
                env=environment,
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    return processes


def _finish(processes, timeout=300):
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=timeout)[0])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    return outputs


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_workers_killed_between_their_commits_agree_on_the_epoch_to_resume(
    tmp_path,
):
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    chief_backup = tmp_path / "backup"
    worker_backup = tmp_path / "backup_worker_1"

    first = _launch(tmp_path, workers, KILL_AT_EPOCH="2")
    deadline = time.time() + 300
    while first[1].poll() is None and time.time() < deadline:
        time.sleep(0.1)
    # Worker 1 died between the commits; the job is pre-empted: worker 0 too.
    if first[0].poll() is None:
        first[0].send_signal(signal.SIGKILL)
    outputs = _finish(first)
    assert first[1].returncode == -signal.SIGKILL, outputs[1][-3000:]
    assert "KILLED before committing epoch 2" in outputs[1]
    assert sorted(os.listdir(chief_backup)) == [
        "epoch-000001.json",
        "epoch-000001.weights.h5",
        "epoch-000002.json",
        "epoch-000002.weights.h5",
    ]
    assert "epoch-000002.json" not in os.listdir(worker_backup)
    assert "epoch-000001.json" in os.listdir(worker_backup)
    with open(chief_backup / "epoch-000002.json", encoding="utf-8") as f:
        committed_loss = json.load(f)["logs"]["loss"]

    second = _launch(tmp_path, workers)  # The same command on both.
    outputs = _finish(second)
    for process, output in zip(second, outputs, strict=True):
        assert process.returncode == 0, output[-3000:]
        assert "workers agree to resume from the backup of epoch 1" in output
        result = json.loads(output.split("RESULT ")[-1].splitlines()[0])
        assert result == {"trained": 2}  # Epochs 2 and 3, on both workers.
    assert "(this worker's newest: epoch 2)" in outputs[0]
    assert "Dropped this worker's backup of epoch 2: redone." in outputs[0]
    assert "(this worker's newest: epoch 1)" in outputs[1]

    results = json.loads((tmp_path / "results.json").read_text())
    assert results["status"] == "finished" and results["epochs"] == 3
    with open(tmp_path / "metrics.csv", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert [row["epoch"] for row in rows] == ["0", "1", "2"]
    # The redone epoch 2 is the epoch worker 0 had committed: same state in.
    assert float(rows[1]["loss"]) == pytest.approx(committed_loss, rel=1e-5)
    assert not chief_backup.exists() and not worker_backup.exists()


def test_the_agreed_epoch_is_the_newest_that_every_worker_holds():
    def table(*held):  # One row per replica: a status, then its epochs.
        rows = np.full((len(held), 4), -1)
        rows[:, 0] = 0
        for row, epochs in zip(rows, held, strict=True):
            row[1 : 1 + len(epochs)] = epochs
        return rows

    assert rundir.agreed_epoch(table([7, 6], [6, 5])) == 6  # Killed between.
    assert rundir.agreed_epoch(table([7, 6], [7, 6], [6, 5])) == 6
    assert rundir.agreed_epoch(table([6], [7, 5])) == 0  # Torn: none in common.
    assert rundir.agreed_epoch(table([3, 2], [3, 2])) == 3
    assert rundir.agreed_epoch(table([], [2, 1])) == 0  # A fresh worker.
