"""The front door: what `import keras_vit` and `keras-vit` import, and the
public names, each written once where it is defined (`keras_vit._export`)
and served from the packages' generated `__init__.pyi` stubs.

Each check of what a process imports runs in a fresh process: the installed
`keras-vit` script as a user runs it, or `python -c` as a user's script,
with a start-up hook (`sitecustomize`) that lists the modules it imported
when it exits.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import shutil
import subprocess
import sys
import textwrap

import pytest
from helpers import keras_vit_script

from keras_vit import _export

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "keras_vit"
GENERATOR = ROOT / "scripts" / "generate_api.py"
PUBLIC_NAMES = ROOT / "tests" / "fixtures" / "public_names.txt"
# Names that moved: their old path -> the new one its error names.
MOVED = {
    "keras_vit.analysis.model_family": "keras_vit.models.architectures.architecture_of",
    "keras_vit.models.model_family": "keras_vit.models.architectures",
    "keras_vit.models.families": "keras_vit.models.zoo",
}
# What `import keras_vit` leaves to be imported when used (the model API may
# use a few light modules of `data`, `training` and `interop`: listed).
NOT_IMPORTED = ("recipes", "analysis", "export", "finetune", "parkkim")
LIGHT_PARTS = {
    "keras_vit.data": {"keras_vit.data", "keras_vit.data.transforms"},
    "keras_vit.training": {
        "keras_vit.training",
        "keras_vit.training.optimizers",
        "keras_vit.training.schedules",
    },
}
HEAVY = ("tensorflow", "keras")


def _run(argv, **env) -> subprocess.CompletedProcess:
    environment = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    environment.update(env)
    return subprocess.run(
        argv, capture_output=True, text=True, env=environment, cwd=ROOT, timeout=600
    )


def _python(code: str, **env) -> subprocess.CompletedProcess:
    return _run([sys.executable, "-c", textwrap.dedent(code)], **env)


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[-1]


# Run by Python at start-up (`sitecustomize`, found on `PYTHONPATH`): at exit,
# the process writes the names of the modules it imported to the file named
# by `KERAS_VIT_MODULES_FILE`.
_SITECUSTOMIZE = """
import atexit, json, os, sys

def _write_modules(path=os.environ.get("KERAS_VIT_MODULES_FILE")):
    if path:
        with open(path, "w") as f:
            json.dump(sorted(sys.modules), f)

atexit.register(_write_modules)
"""


def _watched(argv, folder: pathlib.Path) -> tuple[subprocess.CompletedProcess, set]:
    """Runs `argv` with the start-up hook above; returns the process and the
    modules it had imported when it exited."""
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE, encoding="utf-8")
    modules = folder / "modules.json"
    modules.unlink(missing_ok=True)
    process = _run(argv, PYTHONPATH=str(folder), KERAS_VIT_MODULES_FILE=str(modules))
    assert modules.exists(), process.stderr[-2000:]
    return process, set(json.loads(modules.read_text(encoding="utf-8")))


def _errors(process: subprocess.CompletedProcess) -> str:
    """The end of its standard error."""
    return process.stderr.strip()[-1000:]


def _keras_vit(*argv: str, folder: pathlib.Path):
    """Runs the installed `keras-vit`; returns the process and the modules
    it imported."""
    return _watched([keras_vit_script(), *argv], folder)


# -- the command line answers without TensorFlow ------------------------------------
def _commands(folder: pathlib.Path) -> list[str]:
    usage, _ = _keras_vit("--help", folder=folder)
    assert usage.returncode == 0, usage.stderr[-2000:]
    lines = usage.stdout.split("commands", 1)[1].splitlines()[1:]
    return [line.split()[0] for line in lines if line.startswith("  ")]


def test_the_hook_sees_what_a_process_imports(tmp_path):
    """The checks below are not vacuous: a process that imports TensorFlow
    (through `keras_vit._tensorflow`, which hides what it prints) is seen."""
    process, imported = _watched([sys.executable, "-c", "import keras_vit"], tmp_path)
    assert process.returncode == 0, process.stderr[-2000:]
    assert {"tensorflow", "keras", "keras_vit.models.vit"} <= imported


def test_keras_vit_help_and_every_command_help_import_no_tensorflow(tmp_path):
    commands = _commands(tmp_path)
    assert {"train", "predict", "export", "convert", "validate"} <= set(commands)
    failures = []
    for argv in (["--help"], *([command, "--help"] for command in commands)):
        process, imported = _keras_vit(*argv, folder=tmp_path)
        if process.returncode != 0 or not process.stdout.startswith("usage:"):
            failures.append(f"{argv}: exit {process.returncode}: {_errors(process)}")
        heavy = sorted(set(HEAVY) & imported)
        if heavy:
            failures.append(f"keras-vit {' '.join(argv)} imported {heavy}")
    assert not failures, "\n".join(failures)


def test_a_bad_argument_answers_in_one_line_without_tensorflow(tmp_path):
    process, imported = _keras_vit("train", "--no-such-flag", folder=tmp_path)
    assert process.returncode == 2
    assert _errors(process).startswith("error: unrecognized arguments")
    assert not set(HEAVY) & imported


def test_a_command_imports_the_model_api_once_its_arguments_are_read(tmp_path):
    """`keras-vit predict` reads a saved `.keras` file (its layers registered
    by the model API the command imported after its arguments), and
    TensorFlow's start-up notes stay hidden, as after `import keras_vit`."""
    made = _python(
        f"""
        import numpy as np
        from PIL import Image
        import keras_vit

        model = keras_vit.ViT("test/4", image_size=16, num_classes=3, qk_norm=True)
        model.save({str(tmp_path / "tiny.keras")!r})
        pixels = np.random.default_rng(0).integers(0, 255, (20, 20, 3), "uint8")
        Image.fromarray(pixels).save({str(tmp_path / "image.png")!r})
        """
    )
    assert made.returncode == 0, made.stderr[-2000:]
    environment = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
    process = subprocess.run(
        [keras_vit_script(), "predict", "--model", str(tmp_path / "tiny.keras"),
         "--top-k", "2", str(tmp_path / "image.png")],
        capture_output=True, text=True, env=environment, cwd=tmp_path, timeout=600,
    )  # fmt: skip
    assert process.returncode == 0, process.stderr[-2000:]
    assert "image.png" in process.stdout and "probability" in process.stdout
    assert "absl::InitializeLog" not in process.stderr, process.stderr[-2000:]


# -- import keras_vit: the model API, the rest when used ----------------------------
def _registering_modules() -> set[str]:
    """The core modules that register a Keras class (the wing's register
    when it is loaded, `keras_vit.plugins`)."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name.startswith("keras_vit.parkkim"):
            continue
        if "register_keras_serializable" in path.read_text(encoding="utf-8"):
            found.add(name)
    return found


def test_import_keras_vit_imports_the_model_api_and_not_the_rest():
    process = _python(
        """
        import json, sys
        import keras_vit

        print(json.dumps(sorted(sys.modules)))
        """
    )
    assert process.returncode == 0, process.stderr[-2000:]
    imported = set(json.loads(_last_line(process.stdout)))
    model_api = {
        "tensorflow",
        "keras_vit.models.vit",
        "keras_vit.models.zoo.dinov2",
        "keras_vit.weights.loader",
        "keras_vit.pretrained",
        "keras_vit.inference",
        "keras_vit.resample",
    }
    assert model_api <= imported
    registering = _registering_modules()
    assert "keras_vit.layers.transformer_block" in registering
    assert registering <= imported, sorted(registering - imported)
    for part in NOT_IMPORTED:
        package = f"keras_vit.{part}"
        assert not {m for m in imported if (m + ".").startswith(package + ".")}
    for package, allowed in LIGHT_PARTS.items():
        loaded = {m for m in imported if (m + ".").startswith(package + ".")}
        assert loaded <= allowed, sorted(loaded - allowed)


def test_every_public_name_resolves_where_it_was_public():
    """Each name the hand-kept `__all__` lists made public is an attribute
    at the same path after a bare `import keras_vit`; a name that moved
    raises an error naming its new place."""
    names = [
        line
        for line in PUBLIC_NAMES.read_text(encoding="utf-8").splitlines()
        if line and not line.startswith("#")
    ]
    assert len(names) > 400
    process = _python(
        f"""
        import json
        import keras_vit

        out = {{}}
        for name in {[*names, *MOVED]!r}:
            value = keras_vit
            try:
                for part in name.split(".")[1:]:
                    value = getattr(value, part)
                out[name] = "ok"
            except (AttributeError, ImportError) as error:
                out[name] = f"{{type(error).__name__}}: {{error}}"
        print(json.dumps(out))
        """
    )
    assert process.returncode == 0, process.stderr[-2000:]
    found = json.loads(_last_line(process.stdout))
    for old, new in MOVED.items():
        assert found.pop(old) == f"MovedError: {old} moved: use {new} instead."
    assert {name: why for name, why in found.items() if why != "ok"} == {}


def test_a_moved_name_fails_its_from_import_naming_the_new_one():
    process = _python(
        """
        import keras_vit
        from keras_vit.models import model_family
        """
    )
    assert process.returncode == 1
    assert _last_line(process.stderr) == (
        "keras_vit._export.MovedError: keras_vit.models.model_family moved: use "
        "keras_vit.models.architectures instead."
    )


# -- public names, written once --------------------------------------------------
def test_the_stubs_are_what_the_marks_and_the_zoo_give():
    process = _run([sys.executable, str(GENERATOR), "--check"])
    assert process.returncode == 0, (process.stdout + process.stderr)[-3000:]
    assert process.stdout == ""


def test_a_stale_stub_is_found(tmp_path):
    """`--check` fails, with the difference, when a stub lacks a marked
    name and when a mark has no line in its stub."""
    shutil.copytree(
        PACKAGE,
        tmp_path / "keras_vit",
        ignore=shutil.ignore_patterns("__pycache__", "demo_checkpoints"),
    )
    (tmp_path / "scripts").mkdir()
    shutil.copy(GENERATOR, tmp_path / "scripts")
    stub = tmp_path / "keras_vit" / "models" / "__init__.pyi"
    text = stub.read_text(encoding="utf-8")
    line = "from .vit import ViT as ViT\n"
    assert line in text
    stub.write_text(text.replace(line, ""), encoding="utf-8")
    resize = tmp_path / "keras_vit" / "models" / "resize.py"
    resize.write_text(
        resize.read_text(encoding="utf-8")
        + '\n\n@export("keras_vit.models.a_new_name")\ndef a_new_name():\n    pass\n',
        encoding="utf-8",
    )
    process = _run(
        [sys.executable, str(tmp_path / "scripts" / "generate_api.py"), "--check"],
        PYTHONPATH=str(tmp_path),
    )
    assert process.returncode == 1, process.stderr[-3000:]
    assert "+from .vit import ViT as ViT" in process.stdout
    assert "+from .resize import a_new_name as a_new_name" in process.stdout


def test_no_package_keeps_a_hand_written_name_list():
    """No `__all__ = [...]` in a package's `__init__.py`: a package's names
    come from its stub (or from the table it hands `lazy_loader`)."""
    listed = []
    for path in sorted(PACKAGE.rglob("__init__.py")):
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (
                isinstance(node, ast.Assign)
                and any(getattr(t, "id", None) == "__all__" for t in node.targets)
                and not isinstance(node.value, ast.Call)
            ):
                listed.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert listed == []


def test_a_mark_is_refused_where_a_stub_could_not_serve_it():
    with pytest.raises(ValueError, match="not a public path in keras_vit"):
        _export.export("numpy.ViT")
    with pytest.raises(ValueError, match=r"keras_vit\.models\.Other: .* is public as"):
        _export.export("keras_vit.models.Other")(_export.MovedError)
    mark = _export.export("keras_vit.models.ViT")
    with pytest.raises(ValueError, match="exported twice: by keras_vit.models.vit"):
        mark.constant("keras_vit.somewhere", "ViT")
