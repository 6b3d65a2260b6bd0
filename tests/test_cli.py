"""The command lines: `--help`, one-line errors, shared conventions.

Every command answers `--help`, and every argument or config error before
any work, in one line (`error: ...`, exit status 2, no traceback); they
agree on image sizes (`224`, `224,320`, `224x320`), on
`--num-classes 0` (no head) and on refusing to overwrite.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import reference

import keras_vit
from keras_vit.recipes import cli
from keras_vit.recipes.configs import base

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMMANDS = (
    "recipes.train",
    "recipes.pretrain_masked",
    "recipes.fewshot",
    "recipes.analyze",
    "recipes.export",
    "recipes.convert",
)

# Runs each command line in this one process (TensorFlow is imported once)
# and prints one JSON line per command: exit code, stdout lines, stderr
# text, seconds.
_RUNNER = """
import contextlib, io, json, runpy, sys, time

for line in sys.stdin:
    argv = json.loads(line)
    out, err = io.StringIO(), io.StringIO()
    sys.argv = [argv[0], *argv[1:]]
    started = time.perf_counter()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            runpy.run_module(argv[0], run_name="__main__", alter_sys=True)
        except SystemExit as exit:
            code = exit.code
        except BaseException as error:
            import traceback
            traceback.print_exc()
            code = "raised"
    print(json.dumps({
        "argv": argv, "code": code, "out": out.getvalue(), "err": err.getvalue(),
        "seconds": time.perf_counter() - started,
    }), flush=True)
"""


def _run_all(command_lines, env=None):
    process = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_RUNNER)],
        input="\n".join(json.dumps(argv) for argv in command_lines) + "\n",
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    return [json.loads(line) for line in process.stdout.splitlines()]


def test_help_answers_every_command():
    results = _run_all([[command, "--help"] for command in COMMANDS])
    assert len(results) == len(COMMANDS)
    for result in results:
        command = result["argv"][0]
        assert result["code"] == 0, (command, result["err"])
        assert result["out"].startswith(f"usage: python -m {command}"), command


# Command lines that must fail in one line, and a word of that line.
_BAD_COMMANDS = [
    (["recipes.train", "--set", "epochs=0"], "epochs=0: must be at least 1"),
    (["recipes.train", "--set", "optimizer=lamb"], "optimizer='lamb'"),
    (["recipes.train", "--strategy", "bogus"], "strategy='bogus'"),
    (["recipes.train", "--set", "epoch=3"], "did you mean epochs"),
    (["recipes.train", "--set", "image_size=0x5"], "not an image size"),
    (["recipes.train", "--set", "learning_rate=-1"], "learning_rate=-1.0"),
    (["recipes.train", "--set", "pooling=token", "--set", "class_token=False"],
     "pooling needs a class token"),
    (["recipes.train", "--config", "masked_digits"], "not a TrainConfig"),
    (["recipes.train", "--config", "nope"], "unknown config 'nope'"),
    (["recipes.train", "--bogus"], "unrecognized arguments: --bogus"),
    (["recipes.pretrain_masked", "--set", "mask_rate=0.95"], "random_rate"),
    (["recipes.pretrain_masked", "--set", "label_smoothing=0.1"],
     "unknown config key 'label_smoothing'"),
    (["recipes.fewshot", "--variant", "test/4", "--image-size", "0"],
     "not an image size"),
    (["recipes.fewshot", "--variant", "test/4", "--shots", "1,x"], "--shots"),
    (["recipes.analyze", "--variant", "test/4", "--images", "digits",
      "--out", "x", "--only", "bogus"], "unknown analyses ['bogus']"),
    (["recipes.export", "--variant", "test/4", "--name", "x", "--version", "0"],
     "--version must be a positive integer"),
    (["recipes.export", "--variant", "test/4", "--name", "x", "--version", "1",
      "--num-classes", "-1"], "not a class count"),
]  # fmt: skip


@pytest.fixture(scope="module")
def bad_command_results():
    """Every bad command line of `_BAD_COMMANDS`, run in one interpreter
    (each as `python -m`, by `runpy`): one start of TensorFlow, not one per
    line."""
    results = _run_all([argv for argv, _ in _BAD_COMMANDS])
    assert [r["argv"] for r in results] == [argv for argv, _ in _BAD_COMMANDS]
    return {tuple(r["argv"]): r for r in results}


@pytest.mark.parametrize("argv, expected", _BAD_COMMANDS)
def test_errors_answer_in_one_line(argv, expected, bad_command_results):
    result = bad_command_results[tuple(argv)]
    assert result["code"] == cli.EXIT_USAGE, result
    message = result["err"].strip()
    assert message.startswith("error: ") and len(message.splitlines()) == 1, message
    assert expected in message and "Traceback" not in message
    assert "total_steps" not in message


def test_class_names_that_do_not_fit_the_head_are_refused(tmp_path):
    names = tmp_path / "names.txt"
    names.write_text("cat\ndog\n")
    (result,) = _run_all(
        [
            ["recipes.export", "--variant", "test/4", "--num-classes", "3",
             "--class-names", str(names), "--name", "m", "--version", "1",
             "--base-dir", str(tmp_path)],
        ]
    )  # fmt: skip
    assert result["code"] == 2
    assert result["err"] == "error: --class-names lists 2 names for --num-classes 3\n"
    assert not (tmp_path / "m").exists()


def test_convert_refuses_to_overwrite_and_errors_in_one_line(tmp_path, capsys):
    from keras_vit.recipes import convert

    params = reference.make_vit_checkpoint(
        hidden_dim=32, depth=2, mlp_dim=64, num_heads=2, patch_size=8,
        image_size=(32, 32), num_classes=10,
    )  # fmt: skip
    source = reference.save_npz(params, tmp_path / "in.npz")
    out = tmp_path / "out.keras"
    out.write_bytes(b"an older model")
    with pytest.raises(SystemExit) as caught:
        convert.main([source, str(out), "--variant", "test/8"])
    assert caught.value.code == 2 and out.read_bytes() == b"an older model"
    message = capsys.readouterr().err
    assert message.startswith("error: ") and "--overwrite" in message
    assert len(message.strip().splitlines()) == 1
    for bad in (["--image-size", "32x"], ["--num-classes", "x"]):
        with pytest.raises(SystemExit) as caught:
            convert.main([source, str(out), *bad])
        assert caught.value.code == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1

    # --num-classes 0: the encoder alone, as `include_top=False` everywhere.
    assert convert.main([source, str(out), "--num-classes", "0", "--overwrite"]) == 0
    import keras

    model = keras.saving.load_model(out)
    assert "head" not in [layer.name for layer in model.layers]
    assert convert.main([source, str(out), "--image-size", "32,48", "--overwrite"]) == 0
    assert keras.saving.load_model(out).input_shape == (None, 32, 48, 3)


def test_num_classes_zero_is_headless_in_every_command():
    from keras_vit.recipes import analyze
    from keras_vit.recipes import export

    headless = cli.load_model(variant="test/4", num_classes=0, image_size=16)
    assert "head" not in [layer.name for layer in headless.layers]
    assert headless.output_shape == (None, 32)  # The pooled features.
    for module, extra in (
        (export, ["--name", "x", "--version", "1"]),
        (analyze, ["--images", "digits", "--out", "x"]),
    ):
        args = module.build_parser().parse_args(
            ["--variant", "test/4", "--num-classes", "0", *extra]
        )
        assert args.num_classes == 0


def test_analyze_gives_every_option_a_help_text():
    import argparse

    from keras_vit.recipes import analyze

    parser = analyze.build_parser()
    bare = [
        action.option_strings[-1]
        for action in parser._actions
        if action.option_strings
        and (not action.help or action.help == argparse.SUPPRESS)
    ]
    assert bare == []  # Old: --max-images, --batch-size and 7 more.
    text = parser.format_help()
    for flag in ("--max-images", "--hessian-iterations", "--noise-bands", "--seed"):
        assert flag in text


def test_analyze_answers_bad_files_in_one_line(tmp_path):
    """A damaged model or .npz: `error:` in one line; unreadable images:
    skipped and listed, as training skips them."""
    import zipfile

    from PIL import Image

    model = keras_vit.ViT("test/4", image_size=16, num_classes=2)
    good = tmp_path / "model.keras"
    model.save(good)
    content = good.read_bytes()
    truncated = tmp_path / "truncated.keras"
    truncated.write_bytes(content[: len(content) // 2])
    damaged = tmp_path / "damaged.keras"
    with zipfile.ZipFile(good) as archive:
        info = archive.getinfo("config.json")
    start = info.header_offset + 30 + len(info.filename) + 10
    damaged.write_bytes(content[:start] + b"\0" * 8 + content[start + 8 :])
    images = tmp_path / "images"
    for label in ("a", "b"):
        (images / label).mkdir(parents=True)
        for i in range(2):
            pixels = np.full((16, 16, 3), 60 * i + 100 * (label == "b"), np.uint8)
            Image.fromarray(pixels).save(images / label / f"{i}.png")
    (images / "b" / "bad.png").write_bytes(b"\x89PNG\r\n\x1a\n cut short")
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "only.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    npz = tmp_path / "cut.npz"
    np.savez(npz, images=np.zeros((4, 16, 16, 3), np.uint8))
    npz.write_bytes(npz.read_bytes()[:100])

    def analyze(model_file, source, out="out"):
        paths = ["--model", str(model_file), "--images", str(source)]
        return [
            "recipes.analyze",
            *paths,
            "--out",
            str(tmp_path / out),
            "--only=filters",
        ]

    cases = {
        # Old: "File not found" for a file that is there.
        "truncated": (analyze(truncated, "digits"), "not a readable .keras file"),
        # Old: a BadZipFile traceback.
        "damaged": (analyze(damaged, "digits"), "truncated or corrupt"),
        "no images": (analyze(good, broken), "unreadable: only.jpg"),
        "cut npz": (analyze(good, npz), "cannot be read as an .npz file"),
        "max images": (analyze(good, "digits") + ["--max-images", "0"],
                       "--max-images: not a positive integer: '0'"),
    }  # fmt: skip
    argvs = [argv for argv, _ in cases.values()] + [analyze(good, images, "kept")]
    *results, kept = _run_all(argvs)
    for (name, (_, expected)), result in zip(cases.items(), results, strict=True):
        message = result["err"].strip()
        assert result["code"] == cli.EXIT_USAGE, (name, result)
        assert message.startswith("error: ") and "\n" not in message, (name, message)
        assert expected in message and "not found" not in message, (name, message)
    # Old: a PIL.UnidentifiedImageError traceback.
    assert kept["code"] == 0, kept
    assert "skipped 1 file(s)" in kept["err"] and "b/bad.png" in kept["err"]
    assert "Traceback" not in kept["err"] and "4 images" in kept["out"]
    assert (tmp_path / "kept" / "filters.png").exists()


def test_every_command_reads_image_sizes_the_same_way():
    from keras_vit.recipes import analyze
    from keras_vit.recipes import convert
    from keras_vit.recipes import export
    from keras_vit.recipes import fewshot

    for text, size in (("16", (16, 16)), ("16,24", (16, 24)), ("16x24", (16, 24))):
        assert cli.parse_image_size(text) == size
        config = base.override(base.TrainConfig(), [f"image_size={text}"])
        assert config.image_size in (size, size[0])  # A bare int stays an int.
        masked = base.override(base.PretrainConfig(), [f"image_size={text}"])
        assert masked.image_size == config.image_size
        assert (
            fewshot.parse_args(["--variant", "x", "--image-size", text]).image_size
            == size
        )
        parsed = analyze.build_parser().parse_args(
            ["--variant", "x", "--images", "d", "--out", "o", "--image-size", text]
        )
        assert parsed.image_size == size
        parsed = export.build_parser().parse_args(
            ["--variant", "x", "--name", "n", "--version", "1", "--image-size", text]
        )
        assert parsed.image_size == size
        parsed = convert.build_parser().parse_args(
            ["a.npz", "b.keras", "--image-size", text]
        )
        assert parsed.image_size == size
    assert base.override(base.TrainConfig(), ["image_size=(16, 24)"]).image_size == (
        16,
        24,
    )


def test_the_config_layer_knows_the_trainers_choices():
    from keras_vit import training
    from keras_vit.training import precision
    from keras_vit.training import schedules

    assert base.OPTIMIZERS == training.OPTIMIZERS
    assert base.STRATEGIES == training.STRATEGIES
    assert base.SCHEDULES == schedules.DECAYS
    assert base.PRECISIONS == precision.PRECISIONS


def test_an_option_group_inside_the_encoder_is_set_as_a_dict():
    """`--set rope={...}`: a `RotaryOptions` from a dict, each field checked;
    `rope=None` turns it off; a wrong key or value is one `ConfigError`."""
    from keras_vit.models.options import RotaryOptions

    config = base.override(
        base.TrainConfig(), ["rope={'kind': 'axial', 'temperature': 100}"]
    )
    assert config.encoder.rope == RotaryOptions("axial", temperature=100.0)
    assert base.override(config, ["encoder.rope=None"]).encoder.rope is None
    refusals = {
        "rope={'knd': 'axial'}": "no RotaryOptions field knd; its fields: kind,",
        "rope={'temperature': 'x'}": "rope.temperature='x' does not fit float",
        "rope={'kind': 'spiral'}": "must be one of ('axial', 'dinov3', 'mixed')",
        "rope=3": "rope=3 does not fit",
    }
    for assignment, words in refusals.items():
        with pytest.raises(base.ConfigError, match=re.escape(words)):
            base.override(base.TrainConfig(), [assignment])


def test_both_recipes_speak_one_config_language():
    # Every keras_vit.ViT argument a recipe can use is a field of both, or
    # an encoder option (the `encoder` field, set option by option).
    not_settable = {
        "num_classes",  # From the data.
        "include_top",  # Recipes train a head (pre-training: its own).
        "classifier_activation",  # Logits: the loss applies the softmax.
        "include_preprocessing",  # The pipeline normalises (the model's contract).
        "preprocessing",  # The checkpoint's (`init_from`), carried by the model.
        "backbone",  # A hybrid is a variant: "R50+B/16".
        "weights",  # `init_from` (train).
        "name",
        "options",  # The `encoder` field, whole.
        "encoder_options",  # Its fields, by name.
    }
    from keras_vit.models.masked_patch import masked_patch_model
    from keras_vit.models.options import EncoderOptions
    from keras_vit.models.options import option_names

    arguments = set(inspect.signature(keras_vit.ViT).parameters) - not_settable
    train_fields = {f.name for f in dataclasses.fields(base.TrainConfig)}
    masked_fields = {f.name for f in dataclasses.fields(base.PretrainConfig)}
    assert arguments <= train_fields
    assert arguments - {"variant"} == set(base.TRAIN_VIT_FIELDS)  # All passed on.
    # Pre-training takes every ViT argument its model builder takes.
    masked_arguments = set(inspect.signature(masked_patch_model).parameters)
    assert arguments & masked_arguments <= masked_fields
    assert arguments & masked_arguments - {"variant"} == set(base.VIT_FIELDS)
    # Both hold the encoder options whole, and the command line reaches each.
    for kind in (base.TrainConfig, base.PretrainConfig):
        assert isinstance(kind().encoder, EncoderOptions)
        for name in option_names():
            value = getattr(EncoderOptions(), name)
            changed = base.override(kind(), [f"{name}={value!r}"])
            assert getattr(changed.encoder, name) == value
    assert issubclass(base.PretrainConfig, base.RunConfig)
    assert issubclass(base.TrainConfig, base.RunConfig)
    shared = {f.name for f in dataclasses.fields(base.RunConfig)}
    assert shared == train_fields & masked_fields

    # The masked-patch configs moved to recipes/configs/ with their values.
    digits = base.load_config("masked_digits", base.PretrainConfig)
    assert (digits.variant, digits.image_size, digits.epochs) == ("Ti/4", 16, 30)
    assert (digits.learning_rate, digits.warmup_steps, digits.random_flip) == (
        1e-3,
        200,
        False,
    )
    paper = base.load_config("masked_b16_paper", base.PretrainConfig)
    assert (paper.global_batch_size, paper.learning_rate, paper.optimizer) == (
        4096,
        2e-4,
        "adam",
    )
    assert base.shipped_configs(base.PretrainConfig) == [
        "masked_b16_paper",
        "masked_digits",
    ]
    for name in base.shipped_configs(base.PretrainConfig):
        module = __import__(
            f"keras_vit.recipes.configs.{name}", fromlist=["get_config"]
        )
        assert f"--config {name}" in module.__doc__ and "Hardware" in module.__doc__
    with pytest.raises(base.ConfigError, match="drop_path_rate=1.5"):
        base.override(digits, ["drop_path_rate=1.5"])


@pytest.mark.parametrize(
    "text,value",
    [("true", True), ("True", True), ("yes", True), ("on", True), ("1", True),
     ("false", False), ("FALSE", False), ("no", False), ("off", False), ("0", False)],
)  # fmt: skip
def test_yes_no_fields_take_the_spellings_a_user_types(text, value):
    config = base.override(base.TrainConfig(), [f"qk_norm={text}"])
    assert config.encoder.qk_norm is value
    config = base.override(base.TrainConfig(), [f"random_flip={text}"])
    assert config.random_flip is value
    config = base.override(base.TrainConfig(), [f"encoder.fc_norm={text}"])
    assert config.encoder.fc_norm is value


@pytest.mark.parametrize("text", ["maybe", "2", "0.0", "[]"])
def test_yes_no_fields_refuse_other_words(text):
    with pytest.raises(base.ConfigError, match="qk_norm=.* does not fit bool"):
        base.override(base.TrainConfig(), [f"qk_norm={text}"])


def test_encoder_option_errors_name_the_option():
    with pytest.raises(base.ConfigError, match="num_registers.*integer >= 0"):
        base.override(base.TrainConfig(), ["num_registers=-1"])
    with pytest.raises(base.ConfigError, match="unknown config key 'qk_nrom'"):
        base.override(base.TrainConfig(), ["qk_nrom=true"])


def test_the_encoder_prefix_takes_only_encoder_options():
    with pytest.raises(base.ConfigError, match="encoder.epochs is no encoder option"):
        base.override(base.TrainConfig(), ["encoder.epochs=3"])
    with pytest.raises(base.ConfigError, match="did you mean encoder.qk_norm"):
        base.override(base.TrainConfig(), ["encoder.qk_nrom=true"])
    assert base.override(base.TrainConfig(), ["encoder.qk_norm=true"]).encoder.qk_norm


def test_pre_training_refuses_a_distillation_token_in_its_config():
    with pytest.raises(base.ConfigError, match="no distillation token"):
        base.override(base.PretrainConfig(), ["distillation=true"])
    with pytest.raises(base.ConfigError, match="normalised tokens"):
        base.override(base.PretrainConfig(), ["fc_norm=true"])


def test_fingerprints_ignore_only_where_and_how_loudly_a_run_runs():
    config = base.load_config("digits")
    same = base.override(
        config, ["verbose=0", "workdir='elsewhere'", "strategy=default"]
    )
    assert base.fingerprint(same) == base.fingerprint(config)
    for change in ("variant=test/4", "learning_rate=0.1", "epochs=3", "seed=1",
                   "dataset=cifar10", "image_size=32"):  # fmt: skip
        other = base.override(config, [change])
        assert base.fingerprint(other) != base.fingerprint(config), change
    assert np.isfinite(config.learning_rate)


def test_a_cnn_run_refuses_the_vit_options_it_would_ignore():
    cnn = ["architecture=resnet", "variant=test"]
    with pytest.raises(base.ConfigError, match="qk_norm, remat: ViT options"):
        base.override(base.TrainConfig(), [*cnn, "qk_norm=true", "remat=true"])
    config = base.override(base.TrainConfig(), [*cnn, "drop_path_rate=0.1"])
    assert config.encoder.drop_path_rate == 0.1
