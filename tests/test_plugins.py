"""Plug-ins (`keras_vit.plugins`): found through entry points, loaded when a
name needs them; the Park & Kim wing is one, and the core works without it.

Three kinds of check:

- each place where the core looks a name up loads the plug-ins when the
  name is not built in (in this process, with `load_plugins` spied on);
- fresh processes, as users run them: `import keras_vit` leaves the wing
  alone until a name needs it, `keras-vit --help` lists the wing's command
  without importing the wing, a saved CNN loads after `import
  keras_vit.parkkim`;
- the core with the wing made unimportable (a `sitecustomize` that blocks
  `keras_vit.parkkim`, as a deleted folder would), and a plug-in of another
  distribution (an installed `.dist-info` in a temporary folder): its
  command runs, a broken one is left out with a note.
"""

from __future__ import annotations

import ast
import json
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest
from helpers import keras_vit_script

from keras_vit import plugins
from keras_vit.data import datasets
from keras_vit.models import architectures
from keras_vit.recipes.configs import base
from keras_vit.weights import formats

ROOT = pathlib.Path(__file__).resolve().parents[1]
WING = "keras_vit.parkkim"


def _env(*paths, **extra) -> dict:
    """The environment of a fresh process: the checkout (and `paths`) first."""
    path = os.pathsep.join([*map(str, paths), str(ROOT)])
    return dict(os.environ, PYTHONPATH=path, TF_CPP_MIN_LOG_LEVEL="3", **extra)


def _python(code: str, *paths) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=_env(*paths),
        cwd=ROOT,
        timeout=600,
    )


def _keras_vit(*args, paths=(), **env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [keras_vit_script(), *args],
        capture_output=True,
        text=True,
        env=_env(*paths, **env),
        cwd=ROOT,
        timeout=600,
    )


def _last_json(process: subprocess.CompletedProcess):
    assert process.returncode == 0, process.stderr[-3000:]
    return json.loads(process.stdout.strip().splitlines()[-1])


# -- the core asks the plug-ins where a name may be theirs -------------------------
@pytest.fixture
def spied_plugins(monkeypatch):
    """`load_plugins` replaced by a plug-in that registers the names `extra`
    (an architecture, a dataset, a format, a config package); the calls are
    counted. The registries are restored afterwards."""
    import keras

    from keras_vit.models.layout import ModelLayout

    class ExtraLayout(ModelLayout):
        @classmethod
        def describes(cls, model):
            return model.name == "extra_model"

    extra = architectures.ModelArchitecture(
        name="extra",
        title="Extra",
        layout=ExtraLayout,
        build=lambda config, num_classes: keras.Sequential(name="extra_model"),
        check_variant=lambda variant: True,
    )
    calls = []

    def load_plugins():
        calls.append(1)
        monkeypatch.setitem(architectures._ARCHITECTURES, "extra", extra)
        monkeypatch.setitem(
            datasets.NAMED_SOURCES,
            "extra_data",
            datasets.NamedSource(datasets.digits, test_split="holdout"),
        )
        monkeypatch.setattr(
            formats,
            "FORMATS",
            [
                *formats.FORMATS,
                formats.Format("extra", (".xtra",), lambda h: False, dict),
            ],
        )
        monkeypatch.setattr(
            base,
            "CONFIG_PACKAGES",
            [*base.CONFIG_PACKAGES, "keras_vit.parkkim.configs"],
        )
        return ("extra",)

    monkeypatch.setattr(plugins, "load_plugins", load_plugins)
    return calls


def test_an_unknown_architecture_loads_the_plugins(spied_plugins):
    assert architectures.named("vit").name == "vit"
    assert spied_plugins == []  # A built-in name needs no plug-in.
    assert architectures.named("extra").title == "Extra"
    assert spied_plugins == [1]


def test_a_model_no_builtin_architecture_describes_loads_the_plugins(spied_plugins):
    import keras

    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.name = "extra_model"
    assert architectures.architecture_of(model).name == "extra"
    assert spied_plugins == [1]


def test_a_config_naming_a_plugin_architecture_loads_the_plugins(spied_plugins):
    config = base.TrainConfig(architecture="extra", variant="any")
    assert config.architecture == "extra"
    assert spied_plugins == [1]


def test_a_dataset_name_that_is_not_built_in_loads_the_plugins(spied_plugins):
    from keras_vit.recipes.validate import default_split

    assert datasets.named_source("digits").test_split == "test"
    assert datasets.named_source("folder:images") is None  # Never a plug-in's.
    assert spied_plugins == []
    # The split `keras-vit validate` evaluates is the source's own.
    assert default_split("extra_data") == "holdout"
    assert spied_plugins == [1]
    assert datasets.load_source("extra_data", "test[:3]").num_examples == 3


def test_a_file_no_builtin_format_names_loads_the_plugins(spied_plugins):
    assert formats.format_of("model.npz").name == "npz"
    assert spied_plugins == []
    assert formats.format_of("model.xtra").name == "extra"
    assert spied_plugins == [1]


def test_an_unknown_config_name_loads_the_plugins(spied_plugins, monkeypatch):
    monkeypatch.setattr(base, "CONFIG_PACKAGES", ["keras_vit.recipes.configs"])
    assert base.load_config("digits").name == "digits"
    assert spied_plugins == []
    config = base.load_config("compare_quick", base.RunConfig)
    assert type(config).__name__ == "CompareConfig"
    assert spied_plugins == [1]


def test_an_unknown_name_names_the_plugins_that_failed(monkeypatch):
    monkeypatch.setitem(plugins._FAILED, ("keras_vit.plugins", "broken"), "OSError: x")
    monkeypatch.setattr(plugins, "load_plugins", lambda: ())
    with pytest.raises(
        ValueError, match=r"known: .*vit.*failed to load: broken: OSError"
    ):
        architectures.named("no_such_architecture")


# -- the wing is loaded when used ---------------------------------------------------
def test_import_keras_vit_leaves_the_wing_until_a_name_needs_it():
    """A bare `import keras_vit` imports no module of the wing; the first
    name only the wing knows loads it, and every name it registers is
    there."""
    process = _python(
        f"""
        import json, sys
        import keras_vit

        before = sorted(m for m in sys.modules if m.startswith({WING!r}))
        from keras_vit.data.datasets import named_source
        from keras_vit.models import architectures
        from keras_vit.recipes.configs.base import RunConfig, load_config
        from keras_vit.weights.formats import format_of

        title = architectures.named("alternet").title
        print(json.dumps([
            before, title, "keras_vit.parkkim.plugin" in sys.modules,
            sorted(architectures.names()), named_source("glyphs").test_split,
            format_of("resnet.pth").name,
            type(load_config("compare_quick", RunConfig)).__name__,
        ]))
        """
    )
    assert _last_json(process) == [
        [],
        "AlterNet",
        True,
        ["alternet", "preact_resnet", "resnet", "vit"],
        "test",
        "torch.save",
        "CompareConfig",
    ]


def _recording_modules(tmp_path) -> tuple[pathlib.Path, pathlib.Path]:
    """A folder whose `sitecustomize` writes, as the process exits, the
    names of every module it imported (`sys.modules`; `-X importtime` misses
    the modules `importlib` imports), and the file it writes."""
    folder, record = tmp_path / "record", tmp_path / "modules.json"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        "import atexit, json, sys\n"
        "def write():\n"
        f"    with open({str(record)!r}, 'w') as file:\n"
        "        json.dump(sorted(sys.modules), file)\n"
        "atexit.register(write)\n"
    )
    return folder, record


def test_keras_vit_help_lists_the_wing_command_without_importing_the_wing(tmp_path):
    folder, record = _recording_modules(tmp_path)
    process = _keras_vit("--help", paths=[folder])
    assert process.returncode == 0, process.stderr[-3000:]
    lines = process.stdout.splitlines()
    assert any(line.split()[:1] == ["compare"] for line in lines), process.stdout
    imported = json.loads(record.read_text())
    wing = [m for m in imported if m == WING or m.startswith(WING + ".")]
    # The command's summary, read from its entry point; nothing else.
    assert wing == ["keras_vit.parkkim", "keras_vit.parkkim.commands"], wing


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_a_saved_cnn_loads_after_import_keras_vit_parkkim(tmp_path):
    """As docs/parkkim.md shows: `import keras_vit.parkkim`, then Keras's
    own loader; and keras_vit's loader after a bare `import keras_vit`."""
    path = tmp_path / "alternet.keras"
    process = _python(
        f"""
        import json
        import keras
        import numpy as np
        import keras_vit.parkkim
        from keras_vit.models import architectures

        model = keras_vit.parkkim.AlterNet("test", image_size=16, num_classes=3)
        model.save({str(path)!r})
        images = np.random.default_rng(0).random((1, 16, 16, 3), dtype="float32")
        np.save({str(tmp_path / "images.npy")!r}, images)
        np.save({str(tmp_path / "out.npy")!r}, model.predict(images, verbose=0))
        loaded = keras.saving.load_model({str(path)!r})
        print(json.dumps(architectures.architecture_of(loaded).name))
        """
    )
    assert _last_json(process) == "alternet"
    process = _python(
        f"""
        import json, sys
        import numpy as np
        import keras_vit
        from keras_vit import inference

        model = inference.load_model({str(path)!r})
        out = model.predict(np.load({str(tmp_path / "images.npy")!r}), verbose=0)
        np.testing.assert_allclose(out, np.load({str(tmp_path / "out.npy")!r}),
                                   atol=1e-6)
        print(json.dumps("keras_vit.parkkim.plugin" in sys.modules))
        """
    )
    assert _last_json(process) is True


# -- the core without the wing -----------------------------------------------------
def _without_the_wing(tmp_path) -> pathlib.Path:
    """A folder whose `sitecustomize` makes `keras_vit.parkkim` unimportable
    in every process started with it on `PYTHONPATH`, as if the folder were
    deleted (the installed entry points still name it)."""
    folder = tmp_path / "no_wing"
    folder.mkdir()
    (folder / "sitecustomize.py").write_text(
        f"import sys\nsys.modules[{WING!r}] = None  # no wing\n"
    )
    return folder


def test_the_core_works_without_the_wing(tmp_path):
    folder = _without_the_wing(tmp_path)
    process = _python(
        """
        import json
        import keras_vit
        from keras_vit.models import architectures
        from keras_vit.recipes.configs.base import load_config

        model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
        try:
            architectures.named("alternet")
        except ValueError as error:
            refused = str(error)
        print(json.dumps([
            architectures.architecture_of(model).name, load_config("digits").name,
            architectures.names(), refused,
        ]))
        """,
        folder,
    )
    name, config, names, refused = _last_json(process)
    assert (name, config, names) == ("vit", "digits", ["vit"])
    assert "Unknown model architecture 'alternet'; known: vit." in refused
    assert "parkkim: ModuleNotFoundError" in refused  # The plug-in that failed.
    assert "keras_vit plug-in 'parkkim'" in process.stderr  # Logged once.


def test_keras_vit_without_the_wing_lists_no_compare(tmp_path):
    folder = _without_the_wing(tmp_path)
    listed = _keras_vit("--help", paths=[folder])
    assert listed.returncode == 0, listed.stderr[-3000:]
    assert "train" in listed.stdout and "compare" not in listed.stdout
    assert "keras_vit plug-in 'compare'" in listed.stderr
    refused = _keras_vit("compare", "--help", paths=[folder])
    assert refused.returncode == 2, refused.stderr[-3000:]
    error = refused.stderr.strip().splitlines()[-1]
    assert error.startswith("error: unknown command 'compare'; choose from train")
    assert "failed to load: compare: ModuleNotFoundError" in error


# -- a plug-in of another distribution ---------------------------------------------
def _install_plugin(tmp_path) -> pathlib.Path:
    """A distribution `hello-plugin` in a folder on `PYTHONPATH`: its
    `.dist-info` declares a plug-in module (registering a dataset), a
    command, and a command whose module does not exist."""
    folder = tmp_path / "site"
    info = folder / "hello_plugin-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: hello-plugin\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(
        "[keras_vit.plugins]\nhello = hello_plugin\n\n"
        "[keras_vit.plugins.commands]\nhello = hello_plugin_commands:HELLO\n"
        "broken = no_such_module:BROKEN\n"
    )
    (folder / "hello_plugin_commands.py").write_text(
        "from keras_vit.plugins import Command\n\n"
        'HELLO = Command("hello_plugin_main", "say hello from a plug-in")\n'
    )
    (folder / "hello_plugin_main.py").write_text(
        'def main(argv):\n    print("hello", *argv)\n'
    )
    (folder / "hello_plugin.py").write_text(
        "from keras_vit.data.datasets import digits, register_source\n\n"
        'register_source("hello_digits", digits, test_split="train")\n'
    )
    return folder


def test_a_plugin_of_another_distribution_adds_a_command_and_a_dataset(tmp_path):
    folder = _install_plugin(tmp_path)
    listed = _keras_vit("--help", paths=[folder])
    assert listed.returncode == 0, listed.stderr[-3000:]
    summaries = {line.split()[0]: line for line in listed.stdout.splitlines()[3:]}
    assert "say hello from a plug-in" in summaries["hello"]
    assert "compare" in summaries and "broken" not in summaries
    assert "keras_vit plug-in 'broken'" in listed.stderr  # left out, said once
    ran = _keras_vit("hello", "world", paths=[folder])
    assert ran.returncode == 0, ran.stderr[-3000:]
    assert ran.stdout.strip().splitlines()[-1] == "hello world"
    process = _python(
        """
        import json
        from keras_vit.recipes.validate import default_split
        from keras_vit.data import load_source
        print(json.dumps([default_split("hello_digits"),
                          load_source("hello_digits", "test[:5]").num_examples]))
        """,
        folder,
    )
    assert _last_json(process) == ["train", 5]


# -- the wing uses the core's public names only ------------------------------------
def test_the_wing_imports_no_private_name_of_the_core():
    """Every `from keras_vit.x import y` of the wing names a public module
    and a public name (the core may rename its private ones at will). The
    export marks (`keras_vit._export`) are for every module, the wing's
    included."""
    marks = "keras_vit._export."
    private = []
    for path in sorted((ROOT / "keras_vit" / "parkkim").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                module, names = node.module or "", [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                module, names = "", [a.name for a in node.names]
            else:
                continue
            for name in names:
                dotted = f"{module}.{name}" if module else name
                if not dotted.startswith("keras_vit.") or dotted.startswith(WING):
                    continue
                if dotted.startswith(marks):
                    continue
                parts = dotted.split(".")
                if any(p.startswith("_") and not p.startswith("__") for p in parts):
                    relative = path.relative_to(ROOT)
                    private.append(f"{relative}:{node.lineno}: {dotted}")
    assert private == [], private
