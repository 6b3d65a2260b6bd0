"""Every command says what happened: its exit status, and its whole error.

Each test runs a command as a user does, in a subprocess: the installed
`keras-vit` console script, `python -m keras_vit.recipes <command>`, or a
checkout's `python -m recipes.<command>`, and checks the exit status and
the printed text. A command that fails exits non-zero (so that a shell's
`&&` stops), and prints its whole message (every line, no traceback).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import keras_vit_script

from keras_vit.parkkim.config import CompareConfig
from keras_vit.recipes.__main__ import commands
from keras_vit.recipes.config_help import fields
from keras_vit.recipes.configs import base

# Every command `keras-vit` runs: the built-in ones and the installed
# plug-ins' (the Park & Kim wing's `compare`).
COMMANDS = tuple(commands())

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
TIMM_VIT = os.path.join(FIXTURES, "timm_vit.safetensors")  # test/8, 32 px
TIMEOUT = 600


def run(argv, cwd, env=None):
    """Runs a command line; returns the completed process (text output)."""
    return subprocess.run(
        argv,
        cwd=cwd,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )


def error_of(process) -> str:
    """The `error: ...` message a command printed, every line of it."""
    text = process.stderr
    assert "error: " in text, (process.returncode, text[-3000:])
    message = text[text.index("error: ") :]
    assert "Traceback" not in text, text[-3000:]
    return message.rstrip("\n")


def offline_env(tmp_path) -> dict:
    """No cached weights, and any download refused at once."""
    proxy = "http://127.0.0.1:9"  # Nothing listens there.
    return {
        "KERAS_HOME": str(tmp_path / "keras_home"),
        "https_proxy": proxy,
        "HTTPS_PROXY": proxy,
        "http_proxy": proxy,
        "HTTP_PROXY": proxy,
    }


def image_folder(root, classes=("cat", "dog", "emu"), per_class=10, size=20):
    """A folder of PNG images, one sub-folder per class."""
    from PIL import Image

    rng = np.random.default_rng(0)
    for name in classes:
        os.makedirs(root / name)
        for i in range(per_class):
            pixels = rng.integers(0, 255, (size, size, 3), dtype=np.uint8)
            Image.fromarray(pixels).save(root / name / f"{i}.png")
    return root


def tiny_vit_file(path, **options):
    """A `.keras` file of a `test/4` ViT at 16 px with 3 classes."""
    import keras_vit

    model = keras_vit.ViT("test/4", image_size=16, num_classes=3, **options)
    model.save(path)
    return str(path)


# -- Exit status: every command, every way of starting it ---------------------
@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_answers_help_with_status_0(command, tmp_path):
    process = run([keras_vit_script(), command, "--help"], cwd=tmp_path)
    assert process.returncode == 0, process.stderr[-2000:]
    assert process.stdout.startswith(f"usage: keras-vit {command}"), process.stdout


# What makes each command fail before it does any work, and what it says.
FAILURES = {
    "train": (["--set", "epochs=0"], "epochs=0: must be at least 1"),
    "pretrain_masked": (["--set", "mask_rate=0.95"], "random_rate"),
    "compare": (["--set", "seeds=0"], "seeds=0: must be at least 1"),
    "analyze": (
        ["--variant", "test/4", "--images", "digits", "--out", "x", "--only", "bad"],
        "unknown analyses ['bad']",
    ),
    "export": (
        ["--variant", "test/4", "--name", "x", "--version", "0"],
        "--version must be a positive integer",
    ),
    "convert": (["in.npz", "out.txt"], "must end in .weights.h5 or .keras"),
    "fewshot": (["--variant", "test/4", "--shots", "1,x"], "--shots"),
    "predict": (
        ["--model", "x.keras", "--top-k", "0", "a.jpg"],
        "--top-k: not a positive integer",
    ),
    "validate": (
        ["--model", "x.keras", "--data", "folder:x", "--batch-size", "0"],
        "--batch-size: not a positive integer",
    ),
}


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_fails_with_a_nonzero_status_and_its_message(command, tmp_path):
    argv, expected = FAILURES[command]
    process = run([keras_vit_script(), command, *argv], cwd=tmp_path)
    assert process.returncode == 2, (process.returncode, process.stderr[-2000:])
    message = error_of(process)
    assert expected in message, message
    assert len(message.splitlines()) == 1, message


CONVERT_MISFIT = [TIMM_VIT, "x.keras", "--variant", "S/16"]


@pytest.mark.parametrize(
    "launcher",
    [
        ["keras-vit", "convert"],  # The installed script.
        [sys.executable, "-m", "keras_vit.recipes", "convert"],
        [sys.executable, "-m", "keras_vit.recipes.convert"],
        [sys.executable, "-m", "recipes.convert"],  # from a checkout
    ],
    ids=["keras-vit", "python-m-keras_vit.recipes", "module", "checkout"],
)
def test_a_checkpoint_that_does_not_fit_exits_1_however_convert_is_started(
    launcher, tmp_path
):
    if launcher[0] == "keras-vit":
        launcher = [keras_vit_script(), *launcher[1:]]
    cwd = ROOT if launcher[-1] == "recipes.convert" else tmp_path
    out = tmp_path / "x.keras"
    process = run([*launcher, *CONVERT_MISFIT[:1], str(out), *CONVERT_MISFIT[2:]], cwd)
    assert process.returncode == 1, (process.returncode, process.stderr[-3000:])
    message = error_of(process)
    assert "but the model is a ViT-S/16" in message
    assert not out.exists()


def test_the_convert_message_names_only_what_the_file_records(tmp_path):
    process = run([keras_vit_script(), "convert", *CONVERT_MISFIT], cwd=tmp_path)
    assert process.returncode == 1
    lines = error_of(process).splitlines()
    # A timm file fuses its attention projections: it does not record its
    # number of heads, so no head count is named as the file's.
    assert lines[0].startswith(
        "error: The checkpoint is a ViT(hidden_dim=32, depth=2, mlp_dim=64, "
        "patch_size=(8, 8); num_heads not recorded) but the model is a ViT-S/16 "
        "(hidden_dim: checkpoint 32 vs model 384, depth: checkpoint 2 vs model 12, "
        "mlp_dim: checkpoint 64 vs model 1536, patch_size: checkpoint (8, 8) vs "
        "model (16, 16))."
    ), lines
    assert "num_heads: checkpoint" not in lines[0]
    assert "num_heads=" not in lines[0]
    assert lines[1:] == [
        "  Pass --variant 32x2x64xH/8 with H its number of attention heads, which "
        "the file does not record (test/8 has these sizes and 2 heads)."
    ]


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_a_shell_chain_stops_at_a_failed_command_and_runs_on_after_success(
    tmp_path,
):
    out = tmp_path / "vit.keras"
    script = keras_vit_script()
    failed = run(
        ["bash", "-c", f'"{script}" convert "{TIMM_VIT}" x.keras --variant S/16 '
         "&& touch reached"],
        cwd=tmp_path,
    )  # fmt: skip
    assert failed.returncode == 1, failed.stderr[-2000:]
    assert not (tmp_path / "reached").exists()
    # A real conversion, then an export of its output: both exit 0.
    chain = (
        f'"{script}" convert "{TIMM_VIT}" "{out}" --variant test/8 && '
        f'"{script}" export --model "{out}" --name vit --version 1 '
        f'--base-dir "{tmp_path}" && touch reached'
    )
    process = run(["bash", "-c", chain], cwd=tmp_path)
    assert process.returncode == 0, process.stderr[-3000:]
    assert f"Wrote {out}" in process.stdout
    assert "SavedModel: " in process.stdout
    assert (tmp_path / "vit" / "1" / "saved_model.pb").is_file()
    assert (tmp_path / "reached").exists()


def test_weights_that_cannot_be_found_are_an_error_not_a_traceback(tmp_path):
    process = run(
        [keras_vit_script(), "export", "--variant", "test/4", "--weights",
         str(tmp_path / "none.npz"), "--name", "x", "--version", "1"],
        cwd=tmp_path,
    )  # fmt: skip
    assert process.returncode == 2, process.stderr[-3000:]
    message = error_of(process)
    assert f"--weights '{tmp_path / 'none.npz'}': No checkpoint file at" in message


# -- Whole messages ----------------------------------------------------------
def test_init_from_that_does_not_fit_names_the_difference_and_the_fix(tmp_path):
    with_class_token = tiny_vit_file(tmp_path / "cls.keras")
    process = run(
        [keras_vit_script(), "train", "--config", "digits", "--set", "variant=test/4",
         "--set", f"init_from={with_class_token}", "--set", "epochs=1",
         "--set", f"workdir={tmp_path / 'run'}"],
        cwd=tmp_path,
    )  # fmt: skip
    assert process.returncode == 2, process.stderr[-3000:]
    lines = error_of(process).splitlines()
    assert lines[0] == (
        f"error: init_from={with_class_token!r} does not fit the model of config "
        "'digits'; to fine-tune from it: --set encoder.class_token=true --set "
        "encoder.pooling=token"
    )
    assert (
        lines[1] == "  - class token: the file has one, the config's encoder has none"
    )
    # Then the loader's own message, whole: the keys and shapes.
    assert "  Unexpected keys:" in lines
    assert "    cls (1, 1, 32)" in lines
    assert not (tmp_path / "run" / "config.json").exists()


def test_init_from_of_another_size_is_named_in_the_config_terms(tmp_path):
    process = run(
        [keras_vit_script(), "train", "--config", "digits",
         "--set", f"init_from={TIMM_VIT}", "--set", "epochs=1",
         "--set", f"workdir={tmp_path / 'run'}"],
        cwd=tmp_path,
    )  # fmt: skip
    assert process.returncode == 2, process.stderr[-3000:]
    lines = error_of(process).splitlines()
    assert lines[0].endswith(
        "to fine-tune from it: --set encoder.class_token=true --set "
        "encoder.pooling=token --set variant=32x2x64xH/8"
    ), lines[0]
    assert (
        "  - patch size: the file's 8x8, the config's 2x2 (variant 'test/2')" in lines
    )
    assert (
        "  - attention heads: the file does not record them; H is the number it "
        "was trained with (test/8 has these sizes and 2 heads)"
    ) in lines
    assert any(line.startswith("  - position grid: the file's 4x4") for line in lines)
    assert any("num_heads not recorded" in line for line in lines)


# -- Config fields in --help ----------------------------------------------------
@pytest.mark.parametrize(
    "command, expected",
    [
        ("train", ["epochs: int = 300", "encoder.drop_path_rate: float = 0.0",
                   "Stochastic depth;", "init_from: str | None = None"]),
        ("pretrain_masked", ["mask_rate: float = 0.8", "encoder.pooling:"]),
        ("compare", ["seeds: int = 5", "Runs per model, seeds 0 .. seeds - 1."]),
    ],
)  # fmt: skip
def test_help_lists_the_config_fields(command, expected, tmp_path):
    process = run([keras_vit_script(), command, "--help"], cwd=tmp_path)
    assert process.returncode == 0, process.stderr[-2000:]
    for text in expected:
        assert text in process.stdout, (text, process.stdout[-3000:])


@pytest.mark.parametrize("kind", [base.TrainConfig, base.PretrainConfig, CompareConfig])
def test_every_config_field_has_a_meaning(kind):
    listed = fields(kind)
    names = {field.name for field in listed}
    assert {"epochs", "encoder.drop_path_rate", "encoder.class_token"} <= names
    assert [field.name for field in listed if not field.meaning] == []
    assert "encoder" not in names  # Given as its options.


# -- Training on an image folder ------------------------------------------------
def test_a_dataset_without_a_config_is_refused_with_the_configs_to_use(tmp_path):
    process = run(
        [keras_vit_script(), "train", "--set", f"dataset=folder:{tmp_path}"],
        cwd=tmp_path,
    )
    assert process.returncode == 2
    message = error_of(process)
    assert len(message.splitlines()) == 1, message
    assert "without --config would run the 'digits' recipe" in message
    assert "--config folder_finetune" in message and "--config digits" in message
    assert not (tmp_path / "runs").exists()


def test_folder_finetune_needs_a_dataset(tmp_path):
    process = run(
        [keras_vit_script(), "train", "--config", "folder_finetune"], cwd=tmp_path
    )
    assert process.returncode == 2
    assert error_of(process) == (
        "error: config 'folder_finetune' has no dataset: give yours with --set "
        "dataset=folder:DIR (DIR holds one sub-folder of images per class) or "
        "--set dataset=<a TFDS name>"
    )


def test_folder_finetune_is_the_papers_fine_tuning_from_a_pretrained_tag():
    from keras_vit.weights import registry

    config = base.load_config("folder_finetune")
    entry = registry.find(config.init_from, config.variant)
    assert entry.image_size == config.image_size == 224
    assert (config.encoder.class_token, config.encoder.pooling) == (True, "token")
    assert (config.optimizer, config.momentum, config.weight_decay) == ("sgd", 0.9, 0)
    assert (config.schedule, config.global_clipnorm) == ("cosine", 1.0)
    assert config.warmup_steps > 0
    assert config.resolved_workdir() == os.path.join("runs", "folder_finetune")


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_folder_finetune_offline_says_where_to_put_the_weights(tmp_path):
    folder = image_folder(tmp_path / "images")
    process = run(
        [keras_vit_script(), "train", "--config", "folder_finetune",
         "--set", f"dataset=folder:{folder}", "--set", "global_batch_size=8",
         "--set", f"workdir={tmp_path / 'run'}"],
        cwd=tmp_path,
        env=offline_env(tmp_path),
    )  # fmt: skip
    assert process.returncode == 2, process.stderr[-3000:]
    message = error_of(process)
    assert len(message.splitlines()) == 1, message
    assert "init_from='augreg_in21k'" in message
    assert (
        "https://storage.googleapis.com/vit_models/augreg/S_16-i21k-300ep-lr_0.001"
        "-aug_light1-wd_0.03-do_0.0-sd_0.0.npz"
    ) in message
    assert str(tmp_path / "keras_home" / "keras_vit") in message
    assert not (tmp_path / "run" / "config.json").exists()


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_folder_finetune_fine_tunes_a_local_model_on_a_folder(tmp_path):
    folder = image_folder(tmp_path / "images")
    pretrained = tiny_vit_file(tmp_path / "pre.keras")
    workdir = tmp_path / "run"
    process = run(
        [keras_vit_script(), "train", "--config", "folder_finetune",
         "--set", f"dataset=folder:{folder}", "--set", f"init_from={pretrained}",
         "--set", "variant=test/4", "--set", "image_size=16",
         "--set", "global_batch_size=9", "--set", "epochs=1",
         "--set", "mixed_precision=false", "--set", "monitor_images=0",
         "--set", f"workdir={workdir}"],
        cwd=tmp_path,
        env=offline_env(tmp_path),
    )  # fmt: skip
    assert process.returncode == 0, process.stderr[-3000:]
    assert f"Initialised from {pretrained}." in process.stdout
    results = json.loads((workdir / "results.json").read_text())
    assert results["status"] == "finished"
    assert (workdir / "final.keras").is_file()
