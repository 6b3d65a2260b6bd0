"""The command tests find the installed scripts without an activated
environment.

CI-like scripts run the suite as `ENV/bin/python -m pytest`, with `ENV/bin`
not on `PATH`. The tests find `keras-vit` (and TensorFlow's
`saved_model_cli`) through `helpers.installed_script`, beside
`sys.executable`, and fail when it is not there. Two checks keep it so: no
test module looks an installed script up on `PATH` (a source scan), and a
command test run with a bare `PATH` runs and passes rather than skips.
"""

from __future__ import annotations

import ast
import importlib.metadata
import os
import pathlib
import re
import subprocess
import sys
import textwrap

from helpers import keras_vit_script

TESTS = pathlib.Path(__file__).resolve().parent
ROOT = TESTS.parent
SUBPROCESS_CALLS = {"run", "Popen", "call", "check_call", "check_output"}
# Command words of a `sh -c` / `bash -c` script: its first, and each after
# `&&`, `||`, `;`, `|` or `(`.
_SHELL_COMMAND = re.compile(r"(?:^|&&|\|\||[;|(])\s*([\w.-]+)")


def installed_names() -> set[str]:
    """The names an installation puts beside its Python: every installed
    distribution's console scripts, and Python and pip themselves."""
    scripts = importlib.metadata.entry_points(group="console_scripts")
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    return {script.name for script in scripts} | {
        "python", "python3", version, "pip", "pip3",
    }  # fmt: skip


def _text(node: ast.AST) -> str | None:
    """The text of a string literal, or of an f-string's literal parts."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(_text(part) or "{}" for part in node.values)
    return None


def path_lookups(source: str, names: set[str]) -> list[str]:
    """Where `source` finds one of `names` through `PATH`: `which("name")`,
    or a subprocess whose command line starts with the bare name, directly
    or in a `sh -c` script.

    Example:

    ```python
    path_lookups('shutil.which("keras-vit")', {"keras-vit"})
    # ['line 1: which("keras-vit")']
    ```
    """
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or not node.args:
            continue
        called = getattr(node.func, "attr", getattr(node.func, "id", None))
        first = node.args[0]
        if called == "which" and _text(first) in names:
            found.append(f'line {node.lineno}: which("{_text(first)}")')
        is_argv = isinstance(first, ast.List | ast.Tuple)
        if called not in SUBPROCESS_CALLS or not is_argv:
            continue
        argv = [_text(item) for item in first.elts]
        commands = argv[:1]
        if len(argv) > 2 and argv[1] == "-c" and argv[2] is not None:
            commands += _SHELL_COMMAND.findall(argv[2])
        found += [
            f"line {node.lineno}: runs {name!r} from PATH"
            for name in commands
            if name in names
        ]
    return found


def test_the_scan_finds_each_kind_of_path_lookup():
    source = textwrap.dedent(
        """
        import shutil, subprocess
        KERAS_VIT = shutil.which("keras-vit")
        subprocess.run(["keras-vit", "convert", "a.keras", "b.keras"])
        subprocess.Popen(("python", "-c", "pass"))
        subprocess.run(["bash", "-c", f"cd {here} && saved_model_cli show"])
        subprocess.run([sys.executable, "-m", "keras_vit.recipes", "train"])
        subprocess.run(["bash", "-c", f'"{script}" convert x && touch done'])
        """
    )
    names = {"keras-vit", "python", "saved_model_cli"}
    assert path_lookups(source, names) == [
        'line 3: which("keras-vit")',
        "line 4: runs 'keras-vit' from PATH",
        "line 5: runs 'python' from PATH",
        "line 6: runs 'saved_model_cli' from PATH",
    ]


def test_no_test_finds_an_installed_script_on_path():
    names = installed_names()
    assert {"keras-vit", "saved_model_cli", "python"} <= names
    found = {
        path.name: lookups
        for path in sorted(TESTS.glob("*.py"))
        if (lookups := path_lookups(path.read_text(encoding="utf-8"), names))
    }
    assert found == {}, "use helpers.installed_script / keras_vit_script"


def test_the_scripts_are_found_beside_the_python_running_the_tests():
    beside = os.path.dirname(sys.executable)
    assert os.path.dirname(keras_vit_script()) == os.path.normpath(beside)


def test_command_tests_run_and_pass_without_the_environment_on_path(tmp_path):
    """A command test, run as `ENV/bin/python -m pytest` with a bare `PATH`."""
    environment = {
        "HOME": os.environ.get("HOME", str(tmp_path)),
        "PATH": "/usr/bin:/bin",
        "TF_CPP_MIN_LOG_LEVEL": "3",
    }
    if "PYTHONPATH" in os.environ:  # The checkout under test, if set.
        environment["PYTHONPATH"] = os.environ["PYTHONPATH"]
    test = "tests/test_cli_commands.py::test_every_command_answers_help_with_status_0"
    process = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:xdist",
         f"{test}[predict]", "--basetemp", str(tmp_path / "basetemp")],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    summary = process.stdout.strip().splitlines()[-1:]
    assert process.returncode == 0, process.stdout[-3000:] + process.stderr[-2000:]
    assert summary and re.fullmatch(r"1 passed in [\d.]+s", summary[0]), process.stdout[
        -3000:
    ]
