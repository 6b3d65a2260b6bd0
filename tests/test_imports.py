"""How keras_vit imports: every module first, the documented names, saved
models in either import order, and an import graph without cycles.

`import keras_vit` imports the model API (`keras_vit._model_api`); every
other public name is served lazily from the packages' generated
`__init__.pyi` stubs. Each check that depends on what a process imported
first runs in fresh `python -c` processes, as a user's script would.
"""

from __future__ import annotations

import ast
import concurrent.futures
import json
import os
import pathlib
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import keras_vit

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "keras_vit"
# What `pip install keras_vit` does not bring (the extras, and the test
# dependencies): `import keras_vit` must work without any of them.
OPTIONAL = (
    "matplotlib",
    "keras_hub",
    "tf2onnx",
    "onnxruntime",
    "tensorflow_datasets",
    "tensorflow_serving",
    "jax",
    "torch",
    "timm",
    "transformers",
    "safetensors",
)


def _python(code: str, **env) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environment,
        cwd=ROOT,
        timeout=600,
    )


def _last_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[-1]


# -- (a) every module, imported first --------------------------------------------
def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        node = todo.pop()
        if node not in seen:
            seen.add(node)
            todo.extend(graph[node])
    return seen


def _first_imports(modules: list[str]) -> subprocess.CompletedProcess:
    """A fresh process: `import keras_vit`, then each of `modules`, with the
    optional packages unimportable; prints what it imported and the errors."""
    return _python(
        f"""
        import json, pkgutil, sys, traceback

        class NotInstalled:
            def find_spec(self, name, path=None, target=None):
                if name.partition(".")[0] in {OPTIONAL!r}:
                    raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)

        sys.meta_path.insert(0, NotInstalled())
        import keras_vit

        imported = sorted(n for n in sys.modules if n.startswith("keras_vit"))
        errors = {{}}
        for name in {modules!r}:
            try:
                __import__(name)
            except BaseException as error:
                errors[name] = traceback.format_exception_only(error)[-1].strip()
        walked = [m.name for m in pkgutil.walk_packages(
            keras_vit.__path__, "keras_vit.")]
        print(json.dumps({{
            "imported": imported,
            "errors": errors,
            "walked": ["keras_vit", *walked],
            "optional": sorted(n for n in {OPTIONAL!r} if n in sys.modules),
        }}))
        """
    )


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_every_module_imports_first_in_a_fresh_process():
    """Every module imports as a process's first import, without the
    optional packages.

    Importing `keras_vit.a.b` runs `keras_vit/__init__.py` first, which
    imports the model API in one fixed order: importing one of the modules it
    imports first runs exactly what `import keras_vit` runs. A module it does
    not import (a command, a shipped config) is imported after it, in a
    process where nothing that module imports at load time (`_graphs`) was
    imported before: it runs as it would first.
    """
    _, load_time = _graphs()
    everything = set(load_time)
    eager = _reachable(load_time, "keras_vit")
    batches = []  # each: (modules, what importing them loads beyond `eager`)
    for name in sorted(everything - eager):
        needs = _reachable(load_time, name) - eager
        batch = next((b for b in batches if not b[1] & needs), None)
        if batch is None:
            batches.append(([name], needs))
        else:
            batch[0].append(name)
            batch[1].update(needs)
    assert "keras_vit.recipes.train" in everything - eager
    with concurrent.futures.ThreadPoolExecutor(min(4, os.cpu_count() or 1)) as pool:
        runs = list(pool.map(_first_imports, [b[0] for b in batches]))
    errors = {}
    for run in runs:
        assert run.returncode == 0, run.stderr[-3000:]
        report = json.loads(_last_line(run.stdout))
        assert set(report["imported"]) == eager  # `import keras_vit`, as predicted
        assert set(report["walked"]) == everything  # pkgutil finds them all
        assert report["optional"] == []
        errors.update(report["errors"])
    assert not errors, errors


# -- (b) what the documentation names --------------------------------------------
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_DOTTED = re.compile(r"(?<![\w./-])keras_vit(?:\.[A-Za-z_]\w*)+")
_IMPORT = re.compile(
    r"(?:^|`)[ \t]*(from keras_vit[\w.]* import (?:\([^)]*\)|[^\n#`]+)"
    r"|import keras_vit[\w.]*(?:, *keras_vit[\w.]*)*)",
    re.M,
)


def _documented() -> tuple[list[str], list[str], list[str]]:
    """The dotted names the documents use as attributes, their import lines,
    and the scripts they run (`python -m keras_vit.x.y`: imported when run,
    not by `import keras_vit`)."""
    names, statements, scripts = set(), set(), set()
    for path in DOCUMENTS:
        text = path.read_text(encoding="utf-8")
        for m in _DOTTED.finditer(text):
            run = text.endswith("-m ", 0, m.start())
            (scripts if run else names).add(m.group())
        statements.update(" ".join(m.split()) for m in _IMPORT.findall(text))
    return sorted(names), sorted(statements), sorted(scripts)


def test_the_documentation_finds_names_and_import_lines():
    names, statements, scripts = _documented()
    assert "keras_vit.models.DINOv2_S14" in names
    assert "keras_vit.export.export" in names
    assert "from keras_vit.export import export" in statements
    assert "keras_vit.parkkim.make_demo" in scripts
    assert "keras_vit.parkkim.make_demo" not in names


def test_every_documented_name_resolves_after_import_keras_vit():
    """Each `keras_vit.a.b.c` of README.md and docs/*.md is an attribute
    after a bare `import keras_vit`; each import line there runs; each
    `python -m keras_vit.x` there names a module `python -m` can run."""
    names, statements, scripts = _documented()
    checked = _python(
        f"""
        import importlib.util, json
        import keras_vit

        failures = []
        for name in {names!r}:
            value = keras_vit
            for part in name.split(".")[1:]:
                if not hasattr(value, part):
                    failures.append(f"{{name}}: no attribute {{part!r}}")
                    break
                value = getattr(value, part)
        for statement in {statements!r}:
            try:
                exec(statement, {{}})
            except Exception as error:
                failures.append(f"{{statement}}: {{error!r}}")
        for script in {scripts!r}:  # `python -m` finds code to run
            spec = importlib.util.find_spec(script)
            if spec is not None and spec.submodule_search_locations:
                spec = importlib.util.find_spec(script + ".__main__")
            if spec is None or spec.loader.get_code(spec.name) is None:
                failures.append(f"python -m {{script}}: nothing to run")
        print(json.dumps(failures))
        """
    )
    assert checked.returncode == 0, checked.stderr[-3000:]
    assert json.loads(_last_line(checked.stdout)) == []


# -- (c) saved models load in either import order --------------------------------
@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_a_saved_model_loads_after_import_keras_vit_in_either_order(tmp_path):
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3, qk_norm=True)
    images = np.random.default_rng(0).random((1, 16, 16, 3), dtype="float32")
    model.save(tmp_path / "tiny.keras")
    np.save(tmp_path / "images.npy", images)
    np.save(tmp_path / "out.npy", model.predict(images, verbose=0))
    for order in ("import keras; import keras_vit", "import keras_vit; import keras"):
        loaded = _python(
            f"""
            {order}
            import numpy as np

            model = keras.saving.load_model({str(tmp_path / "tiny.keras")!r})
            out = model.predict(np.load({str(tmp_path / "images.npy")!r}), verbose=0)
            np.testing.assert_allclose(
                out, np.load({str(tmp_path / "out.npy")!r}), atol=1e-6)
            print(type(model).__name__)
            """
        )
        assert loaded.returncode == 0, (order, loaded.stderr[-3000:])
        assert _last_line(loaded.stdout) == "OptimizerFirstModel", order


# -- (d) no import cycle ---------------------------------------------------------
def _modules() -> dict[str, pathlib.Path]:
    modules = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _runs_later(node: ast.AST) -> bool:
    """A function, or `if __name__ == "__main__":` (run as a script only)."""
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return True
    return (
        isinstance(node, ast.If)
        and isinstance(node.test, ast.Compare)
        and isinstance(node.test.left, ast.Name)
        and node.test.left.id == "__name__"
        and [getattr(c, "value", None) for c in node.test.comparators] == ["__main__"]
    )


def _served(package: str, modules) -> dict[str, str]:
    """`{name: module}` a lazy package serves (its `__init__.pyi` stub)."""
    stub = modules.get(package, PACKAGE).with_suffix(".pyi")
    if package not in modules or stub.name != "__init__.pyi" or not stub.exists():
        return {}
    tree = ast.parse(stub.read_text(encoding="utf-8"))
    return {
        alias.name: f"{package}.{node.module}"
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


def _imports(name: str, path: pathlib.Path, modules) -> list[tuple[str, bool]]:
    """`(module imported, not while importing)` for each keras_vit import:
    the second is true in a function or a `__main__` block."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    in_function = {
        id(inner)
        for node in ast.walk(tree)
        if _runs_later(node)
        for inner in ast.walk(node)
    }

    def module_of(dotted):
        while dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted

    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package this module is in
                package = name.split(".")
                if path.name != "__init__.py":
                    package = package[:-1]
                package = package[: len(package) - node.level + 1]
                base = ".".join([*package, *([node.module] if node.module else [])])
            # `from a import b`: the module `a.b` if there is one, else the
            # module a lazy package `a` serves `b` from, else `a`.
            targets = [
                f"{base}.{alias.name}"
                if f"{base}.{alias.name}" in modules
                else _served(base, modules).get(alias.name, base)
                for alias in node.names
            ]
        else:
            continue
        for target in targets:
            if target.split(".")[0] == "keras_vit":
                found.append((module_of(target), id(node) in in_function))
    return found


def _graphs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Two graphs of keras_vit's modules.

    `imports`: every import, at module level or in a function, to the module
    it names. `load_time`: the imports that run while a module is being
    imported (not in a function or a `__main__` block), each also to the
    packages between `keras_vit` and the module it names (importing
    `keras_vit.a.b.c` runs `keras_vit/a/b/__init__.py` first;
    `keras_vit/__init__.py` always runs first of all).
    """
    modules = _modules()
    imports = {name: set() for name in modules}
    load_time = {name: set() for name in modules}
    for name, path in modules.items():
        for target, in_function in _imports(name, path, modules):
            if target == name:
                continue
            imports[name].add(target)
            if in_function:
                continue
            load_time[name].add(target)
            parts = target.split(".")
            for end in range(2, len(parts)):
                package = ".".join(parts[:end])
                if not (name + ".").startswith(package + "."):
                    load_time[name].add(package)
    return imports, load_time


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` as `[a, b, ..., a]`, or `None`."""
    state = {}  # 1: on the current path, 2: done
    path = []

    def visit(node):
        state[node] = 1
        path.append(node)
        for successor in sorted(graph[node]):
            if state.get(successor) == 1:
                return [*path[path.index(successor) :], successor]
            if successor not in state:
                found = visit(successor)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_import_graph_finds_imports_of_every_kind():
    imports, load_time = _graphs()
    # Module level, a module named by `from package import module`, a
    # function-level import, and the package a load-time import passes.
    assert "keras_vit.recipes.termination" in imports["keras_vit.recipes.engine"]
    assert "keras_vit.data.source" in imports["keras_vit.parkkim.glyphs"]
    assert "keras_vit.weights.loader" in imports["keras_vit.models.vit"]
    assert "keras_vit.weights.loader" not in load_time["keras_vit.models.vit"]
    assert "keras_vit.models" in load_time["keras_vit.weights.loader"]
    # A name a lazy package serves: the module it comes from.
    assert "keras_vit.layers.pooling" in load_time["keras_vit.models.vit"]
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_keras_vit_modules_import_each_other_without_cycles():
    imports, load_time = _graphs()
    assert _cycle(imports) is None, " -> ".join(_cycle(imports))
    assert _cycle(load_time) is None, " -> ".join(_cycle(load_time))


# -- (e) the Park & Kim wing sits on the core, never under it ---------------------
WING = "keras_vit.parkkim"


def _in_wing(module: str) -> bool:
    return module == WING or module.startswith(WING + ".")


def test_nothing_in_the_core_imports_the_park_and_kim_wing():
    """No core module imports the wing, the package's front door included:
    the wing is a plug-in the core finds through its entry points
    (`keras_vit.plugins`; `tests/test_plugins.py` checks that it registers
    what the core asks for by name, and that the core works without it)."""
    imports, _ = _graphs()
    reaching = sorted(
        f"{module} -> {target}"
        for module, targets in imports.items()
        if not _in_wing(module)
        for target in targets
        if _in_wing(target)
    )
    assert reaching == [], reaching
    # And the wing does import the core (the test would be vacuous otherwise).
    assert "keras_vit.models.architectures" in imports["keras_vit.parkkim.cnn.family"]
