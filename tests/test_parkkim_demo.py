"""The demo checkpoints `keras-vit compare` analyses by default
(`keras_vit.parkkim.demo`, made by `python -m keras_vit.parkkim.make_demo`)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import keras_vit_script

from keras_vit.parkkim import claims
from keras_vit.parkkim import compare
from keras_vit.parkkim import demo
from keras_vit.parkkim.config import CompareConfig
from keras_vit.recipes.configs.base import load_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")


def _config(name="compare_quick"):
    return load_config(name, CompareConfig)


def _tiny(name="resnet", seed=0):
    """A built run model of the quick comparison and its `TrainConfig`."""
    run_config = compare.train_config(_config(), name, seed, "runs")
    return compare.build_run_model(run_config, 10), run_config


def _weights(model):
    return [np.asarray(w.numpy()).copy() for w in model.weights]


def _ship(directory, run_config, model):
    """Writes `model` as the demo checkpoint of `run_config` with a manifest."""
    file = f"{run_config.name}.npz"
    sha256, size = demo.save(model, str(directory / file))
    entry = {"file": file, "sha256": sha256, "bytes": size,
             "recipe": demo.recipe_of(run_config), "results": {}}  # fmt: skip
    manifest = {"runs": {run_config.name: entry}}
    (directory / demo.MANIFEST).write_text(json.dumps(manifest))
    return demo.DemoRun(name=run_config.name, **entry)


# -- the format ----------------------------------------------------------------
def test_a_checkpoint_is_the_models_weights_rounded_to_float16(tmp_path):
    model, run_config = _tiny()
    shipped = _ship(tmp_path, run_config, model)
    data = (tmp_path / shipped.file).read_bytes()
    assert shipped.sha256 == hashlib.sha256(data).hexdigest()
    assert shipped.bytes == len(data)
    fresh, _ = _tiny()
    demo.load(fresh, shipped, str(tmp_path))
    for original, loaded in zip(_weights(model), _weights(fresh), strict=True):
        assert loaded.dtype == np.float32
        np.testing.assert_array_equal(loaded, original.astype("float16"))
    # The keys are the variables' paths, every one (BatchNorm statistics too).
    with np.load(tmp_path / shipped.file) as stored:
        assert sorted(stored.files) == sorted(w.path for w in model.weights)
        assert any("moving_variance" in key for key in stored.files)


def test_a_changed_byte_is_refused_and_the_model_left_as_it_was(tmp_path):
    model, run_config = _tiny()
    shipped = _ship(tmp_path, run_config, model)
    path = tmp_path / shipped.file
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    fresh, _ = _tiny(seed=1)
    before = _weights(fresh)
    with pytest.raises(demo.DemoCheckpointError) as raised:
        demo.load(fresh, shipped, str(tmp_path))
    message = str(raised.value)
    assert str(path) in message and shipped.sha256 in message
    assert hashlib.sha256(bytes(data)).hexdigest() in message
    assert "--retrain" in message and "\n" not in message
    for a, b in zip(before, _weights(fresh), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_missing_file_is_one_line_naming_it(tmp_path):
    model, run_config = _tiny()
    shipped = _ship(tmp_path, run_config, model)
    (tmp_path / shipped.file).unlink()
    with pytest.raises(demo.DemoCheckpointError, match="seed0.npz: No such file"):
        demo.load(model, shipped, str(tmp_path))


def test_another_models_checkpoint_names_every_key_that_does_not_fit(tmp_path):
    model, run_config = _tiny("resnet")
    shipped = _ship(tmp_path, run_config, model)
    other, _ = _tiny("alternet")
    before = _weights(other)
    with pytest.raises(demo.DemoCheckpointError) as raised:
        demo.load(other, shipped, str(tmp_path))
    message = str(raised.value)
    known = {w.path for w in model.weights}
    missing = [w.path for w in other.weights if w.path not in known]
    assert f"{len(missing)} missing ({', '.join(missing)})" in message
    assert "unexpected (" in message
    for a, b in zip(before, _weights(other), strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_shipped_run_stands_in_only_for_its_own_recipe(tmp_path):
    model, run_config = _tiny()
    _ship(tmp_path, run_config, model)
    directory = str(tmp_path)
    assert demo.find(run_config, directory).name == "resnet_seed0"
    # Run-only fields do not matter ...
    moved = dataclasses.replace(run_config, workdir="elsewhere", verbose=2)
    assert demo.find(moved, directory) is not None
    # ... every field of the recipe does, and says which.
    changed = dataclasses.replace(run_config, epochs=2, learning_rate=0.5)
    assert demo.find(changed, directory) is None
    assert demo.differences(changed, directory) == ["epochs", "learning_rate"]
    # Another seed is another run, of which nothing is shipped.
    _, other_seed = _tiny(seed=1)
    assert demo.find(other_seed, directory) is None
    assert demo.differences(other_seed, directory) == []
    assert demo.find(run_config, str(tmp_path / "nothing")) is None


def test_an_option_added_after_a_shipped_run_counts_at_its_default(tmp_path):
    """A manifest written before a config (or encoder) field existed does
    not record it: the run was made as the field's default does; another
    value is a difference."""
    model, run_config = _tiny("vit")
    _ship(tmp_path, run_config, model)
    path = tmp_path / demo.MANIFEST
    manifest = json.loads(path.read_text())
    recipe = manifest["runs"][run_config.name]["recipe"]
    del recipe["encoder"]["encoder_norm"], recipe["beta_2"]
    path.write_text(json.dumps(manifest))
    directory = str(tmp_path)
    assert demo.differences(run_config, directory) == []
    assert demo.find(run_config, directory).name == "vit_seed0"
    encoder = dataclasses.replace(run_config.encoder, encoder_norm=False)
    changed = dataclasses.replace(run_config, encoder=encoder, beta_2=0.9)
    assert demo.differences(changed, directory) == ["beta_2", "encoder"]
    assert demo.find(changed, directory) is None


def test_an_unreadable_manifest_is_one_clear_error(tmp_path):
    (tmp_path / demo.MANIFEST).write_text('{"runs": {"vit_seed0": {"file": 3}}}')
    _, run_config = _tiny("vit")
    with pytest.raises(demo.DemoCheckpointError, match="not a demo-checkpoint"):
        demo.find(run_config, str(tmp_path))


# -- the shipped checkpoints ------------------------------------------------------
def _shipped():
    return demo.manifest()


def test_the_shipped_checkpoints_are_the_default_comparisons_runs():
    config = _config("compare")
    assert config.checkpoints == "demo"
    runs = _shipped()
    expected = [
        f"{m}_seed{s}" for m in config.models for s in range(config.seeds_of(m))
    ]
    assert sorted(runs) == sorted(expected)
    for name, run in runs.items():
        model, seed = name.rsplit("_seed", 1)
        run_config = compare.train_config(config, model, int(seed), "runs/compare")
        # A change to the default recipe must come with new checkpoints.
        assert demo.differences(run_config) == [], name
        assert demo.find(run_config) == run
        data = open(os.path.join(demo.DIRECTORY, run.file), "rb").read()
        assert hashlib.sha256(data).hexdigest() == run.sha256, run.file
        assert len(data) == run.bytes
        # Trained by the claims' criterion (twice chance, and beyond luck on
        # the 2,000 test images), with a margin: 10 classes, chance 10 %.
        threshold = claims.accuracy_threshold(10, 2000)
        assert run.results["test_accuracy"] > threshold + 0.1, name


def _evaluate(names):
    import keras

    config = _config("compare")
    data = compare._data(dataclasses.replace(config, workdir="unused"))
    for name in names:
        run = _shipped()[name]
        model, seed = name.rsplit("_seed", 1)
        run_config = compare.train_config(config, model, int(seed), "runs/compare")
        built = compare.build_run_model(run_config, data["train"].num_classes)
        demo.load(built, run)
        accuracy, loss = compare.test_metrics(built, data["test"], config, model)
        # 2,000 test images: another CPU's float32 may flip a few of them.
        assert abs(accuracy - run.results["test_accuracy"]) <= 0.003, name
        assert loss == pytest.approx(run.results["test_loss"], rel=2e-3), name
        keras.utils.clear_session()


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_the_shipped_checkpoints_reach_their_recorded_accuracy_seed_0():
    _evaluate([name for name in _shipped() if name.endswith("_seed0")])


@pytest.mark.large
def test_every_shipped_checkpoint_reaches_its_recorded_accuracy():
    _evaluate(sorted(_shipped()))


# -- the command ----------------------------------------------------------------
SMALL_ANALYSIS = [
    "seeds=1", "models=('vit', 'resnet')", "analysis.images=64",
    "analysis.hessian_batches=1", "analysis.hessian_top_k=1",
    "analysis.hessian_iterations=2", "analysis.noise_frequencies=3",
    "analysis.landscape_points=0",
]  # fmt: skip


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_compare_analyses_the_demo_checkpoints_without_training(tmp_path):
    argv = [keras_vit_script(), "compare", "--set", f"workdir={tmp_path}"]
    for item in SMALL_ANALYSIS:
        argv += ["--set", item]
    done = subprocess.run(argv, env=ENV, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ViT seed 0: demo checkpoint loaded (vit_seed0.npz)" in done.stdout
    assert "ResNet seed 0: demo checkpoint loaded (resnet_seed0.npz)" in done.stdout
    assert "plus training" not in done.stdout
    assert not (tmp_path / "runs").exists()  # Nothing was trained.
    with open(tmp_path / "results.json", encoding="utf-8") as f:
        stored = json.load(f)
    shipped = _shipped()
    for panel in (p for panels in stored["panels"].values() for p in panels):
        run = shipped[f"{panel['model']}_seed0"]
        assert panel["test_accuracy"] == run.results["test_accuracy"]
    # Trained models: no claim is untestable for want of training.
    for claim in stored["claims"]:
        assert "not trained" not in claim["verdict"], claim


def test_retrain_trains_every_run():
    from keras_vit.recipes import cli

    parser = compare.build_parser()
    config = cli.parse_config(parser.parse_args(["--retrain"]), CompareConfig)
    assert config.checkpoints == "train"
    assert cli.parse_config(parser.parse_args([]), CompareConfig).checkpoints == "demo"
    help_text = subprocess.run(
        [keras_vit_script(), "compare", "--help"],
        env=ENV,
        capture_output=True,
        text=True,
    ).stdout
    assert "--retrain" in help_text


# -- making them ----------------------------------------------------------------
def _make(workdir, out):
    return [sys.executable, "-m", "keras_vit.parkkim.make_demo", "--config",
            "compare_quick", "--workdir", str(workdir), "--out", str(out)]  # fmt: skip


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_make_demo_writes_checkpoints_that_load_after_a_kill(tmp_path):
    """Killed after its first checkpoint, the command leaves no manifest (so
    nothing half-made is used); run again, it finishes from the runs kept."""
    workdir, out = tmp_path / "runs", tmp_path / "demo"
    out.mkdir()
    (out / demo.MANIFEST).write_text('{"runs": {}}')  # An earlier one: removed.
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    process = subprocess.Popen(_make(workdir, out), env=ENV, cwd=REPO, **quiet)
    deadline = time.monotonic() + 300
    while not list(out.glob("*.npz")) and process.poll() is None:
        assert time.monotonic() < deadline, "no checkpoint was written"
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert not (out / demo.MANIFEST).exists()
    assert demo.manifest(str(out)) == {}
    done = subprocess.run(_make(workdir, out), env=ENV, cwd=REPO,
                          capture_output=True, text=True)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    config = _config()
    runs = demo.manifest(str(out))
    assert sorted(runs) == sorted(f"{m}_seed0" for m in config.models)
    for name in config.models:
        run_config = compare.train_config(config, name, 0, str(workdir))
        shipped = demo.find(run_config, str(out))
        assert shipped is not None, name
        assert f"[make_demo] {run_config.name}:" in done.stdout
        model = compare.build_run_model(run_config, 10)
        demo.load(model, shipped, str(out))
        results = shipped.results
        assert 0.0 <= results["test_accuracy"] <= 1.0
        assert results["epochs"] == 1 and results["train_seconds"] > 0
        assert results["parameters"] == model.count_params()
        assert len(results["epoch_losses"]) == 1  # the convergence rule's
        assert results["train_loss"] == results["epoch_losses"][-1]
    manifest = json.loads((out / demo.MANIFEST).read_text())
    assert manifest["stored_dtype"] == "float16" and manifest["cpu"]
    # Run again: every run has its recipe and a whole file, so it is kept,
    # file and record, and nothing is trained or written.
    stamps = {p.name: p.stat().st_mtime_ns for p in out.glob("*.npz")}
    again = subprocess.run(_make(workdir, out), env=ENV, cwd=REPO,
                           capture_output=True, text=True)  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    for name in config.models:
        assert f"[make_demo] {name}_seed0: kept" in again.stdout
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.npz")} == stamps
    assert json.loads((out / demo.MANIFEST).read_text())["runs"] == manifest["runs"]
