"""Strategies: selection, 2 mirrored CPU replicas = 1 device, 2 local workers.

The mirrored and multi-worker runs need their own processes: logical devices
and the multi-worker runtime must be set up before TensorFlow initialises.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf
from helpers import free_ports

from keras_vit import training

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TINY = [
    "variant=test/4",
    "image_size=16",
    "global_batch_size=8",
    "epochs=2",
    "steps_per_epoch=3",
    "warmup_steps=1",
    "dropout_rate=0.0",
    "drop_path_rate=0.0",
    "monitor_images=0",
    "verbose=0",
]
MIRRORED = [*TINY, "test_split=None"]
MULTI_WORKER = [*TINY, "epochs=1", "val_split=None"]


def _env(**extra):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=ROOT, **extra)
    env.pop("TF_CONFIG", None)
    env.update(extra)
    return env


def test_strategy_selection_and_chief(monkeypatch):
    cluster = {"worker": ["127.0.0.1:1", "127.0.0.1:2"]}
    assert training.num_workers("") == 1
    assert training.num_workers(json.dumps({"cluster": cluster})) == 2
    assert (
        training.num_workers(json.dumps({"cluster": {"chief": ["a:1"], **cluster}}))
        == 3
    )

    monkeypatch.delenv("TF_CONFIG", raising=False)
    assert training.is_chief() and training.task_name() == "chief"
    strategy = training.select_strategy("auto")  # One CPU, no cluster.
    assert strategy is tf.distribute.get_strategy()
    monkeypatch.setenv(
        "TF_CONFIG",
        json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}}),
    )
    assert not training.is_chief() and training.task_name() == "worker_1"
    monkeypatch.setenv(
        "TF_CONFIG",
        json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 0}}),
    )
    assert training.is_chief()

    with pytest.raises(ValueError, match="Unknown strategy"):
        training.select_strategy("gpu")
    monkeypatch.delenv("TF_CONFIG")
    with pytest.raises(ValueError, match="TF_CONFIG"):
        training.select_strategy("multi_worker")


_MIRRORED_SCRIPT = """
import json, sys
import numpy as np
import tensorflow as tf

cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2
)
from keras_vit.recipes import train
from keras_vit.recipes.configs import base

out = {}
for strategy in ("default", "mirrored"):
    workdir = f"{sys.argv[1]}/{strategy}"
    config = base.override(
        base.load_config("digits"),
        sys.argv[2:] + [f"strategy={strategy}", f"workdir='{workdir}'"],
    )
    result = train.run(config)
    np.savez(f"{workdir}/weights.npz", *result["model"].get_weights())
    out[strategy] = {
        "loss": result["history"]["loss"],
        "val_loss": result["history"]["val_loss"],
        "replicas": result["model"].distribute_strategy.num_replicas_in_sync,
    }
print("RESULT " + json.dumps(out))
"""


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_mirrored_over_two_cpu_replicas_matches_one_device(tmp_path):
    process = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(_MIRRORED_SCRIPT),
            str(tmp_path),
            *MIRRORED,
        ],
        env=_env(),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    line = [ln for ln in process.stdout.splitlines() if ln.startswith("RESULT ")][-1]
    out = json.loads(line[len("RESULT ") :])
    assert (out["default"]["replicas"], out["mirrored"]["replicas"]) == (1, 2)
    for key in ("loss", "val_loss"):
        np.testing.assert_allclose(out["mirrored"][key], out["default"][key], rtol=1e-5)
    one = np.load(tmp_path / "default" / "weights.npz")
    two = np.load(tmp_path / "mirrored" / "weights.npz")
    for key in one.files:
        np.testing.assert_allclose(two[key], one[key], rtol=1e-4, atol=1e-6)


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_multi_worker_run_with_two_local_workers_completes(tmp_path):
    workers = [f"127.0.0.1:{port}" for port in free_ports(2)]
    command = [
        sys.executable,
        "-m",
        "recipes.train",
        "--config",
        "digits",
        "--strategy",
        "multi_worker",
        "--set",
        f"workdir='{tmp_path}'",
    ]
    for item in MULTI_WORKER:
        command += ["--set", item]
    processes = []
    for index in range(2):
        tf_config = {
            "cluster": {"worker": workers},
            "task": {"type": "worker", "index": index},
        }
        processes.append(
            subprocess.Popen(
                command,
                env=_env(TF_CONFIG=json.dumps(tf_config)),
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
        )
    outputs = []
    try:
        for process in processes:
            outputs.append(process.communicate(timeout=300)[0])
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
    for process, output in zip(processes, outputs, strict=True):
        assert process.returncode == 0, output[-3000:]
    results = json.load(open(tmp_path / "results.json"))
    assert results["strategy"].startswith("MultiWorkerMirroredStrategy, 2 replica")
    assert np.isfinite(results["test"]["loss"])
    assert (tmp_path / "final.keras").exists()
    # Only the chief writes; every worker's backup is gone after success.
    assert sorted(os.listdir(tmp_path)) == sorted(
        [
            "checkpoints",
            "config.json",
            "final.keras",
            "metrics.csv",
            "results.json",
            "tensorboard",
        ]
    )
