"""What the wheel installs: `keras_vit` (recipes included) and `keras-vit`,
no top-level `recipes`; used from a clean virtual environment outside the
checkout. (About a minute: a wheel, a venv and a short training run.)

The venv is as a user's after `pip install .`, except that keras, TensorFlow
and the other dependencies come from the interpreter running the tests, so
nothing is downloaded: a `.pth` file lists that interpreter's site
directories after the venv's own. Python adds a `.pth` file's lines to
`sys.path` without processing the `.pth` files in them, so the checkout's
editable install (a `.pth` file and an import hook there) does not follow;
the tests check that `keras_vit` is the venv's copy. This also holds when
the tests run inside a venv, whose packages `--system-site-packages` would
not show (it shows the base interpreter's).
"""

from __future__ import annotations

import os
import pathlib
import shlex
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DISTRIBUTION = "keras3-vit"  # PyPI's `keras-vit` is another project.


def _run(argv, **kwargs):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("PYTHONPATH", None)  # Nothing from the checkout.
    return subprocess.run(argv, capture_output=True, text=True, env=env, **kwargs)


def _site_dirs() -> list[str]:
    """Where the interpreter running the tests finds its packages."""
    paths = sysconfig.get_paths()
    dirs = [*site.getsitepackages(), paths["purelib"], paths["platlib"]]
    if site.ENABLE_USER_SITE:
        dirs.append(site.getusersitepackages())
    return [d for d in dict.fromkeys(dirs) if os.path.isdir(d)]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A clean venv with the wheel, seeing this interpreter's packages."""
    root = tmp_path_factory.mktemp("packaging")
    # Built from a copy: a build in the checkout would leave `build/` and
    # `*.egg-info` there, and a stale `build/lib` would go into the wheel.
    source = root / "source"
    shutil.copytree(
        ROOT,
        source,
        ignore=shutil.ignore_patterns(
            ".git", "build", "dist", "*.egg-info", "__pycache__", ".venv*", "runs"
        ),
    )
    built = _run(
        [sys.executable, "-m", "pip", "wheel", str(source), "--no-deps",
         "--no-build-isolation", "--quiet", "-w", str(root / "dist")],
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (root / "dist").glob("*.whl")
    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert made.returncode == 0, made.stderr
    bin_dir = venv / "bin"
    # This interpreter's pip installs into the venv (`--python`), which sees
    # nothing but itself yet: the wheel's files and `keras-vit` land there.
    installed = _run(
        [sys.executable, "-m", "pip", "--python", str(bin_dir / "python"),
         "install", "--quiet", "--no-deps", "--no-index", str(wheel)],
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-2000:]
    purelib = _run(
        [str(bin_dir / "python"), "-c",
         "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
    )  # fmt: skip
    assert purelib.returncode == 0, purelib.stderr
    deps = pathlib.Path(purelib.stdout.strip()) / "_keras_vit_test_deps.pth"
    deps.write_text("".join(f"{d}\n" for d in _site_dirs()))
    outside = root / "elsewhere"
    outside.mkdir()
    return wheel, bin_dir, outside


def test_the_wheel_holds_keras_vit_and_its_recipes_not_a_top_level_recipes(installed):
    wheel, _, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert "keras_vit/recipes/train.py" in names
    assert "keras_vit/recipes/configs/digits.py" in names
    assert "keras_vit/imagenet/__init__.py" in names
    # The packages' stubs, which serve their names at run time, all shipped.
    stubs = {str(p.relative_to(ROOT)) for p in (ROOT / "keras_vit").rglob("*.pyi")}
    assert "keras_vit/__init__.pyi" in stubs
    assert stubs <= set(names) and "keras_vit/py.typed" in names
    assert [n for n in names if n.startswith("keras_vit/imagenet/") and ".tsv" in n]
    # Nothing but the package and its metadata: no `recipes`, no `tests`.
    info = "keras3_vit-0.1.0.dist-info"
    assert {n.split("/")[0] for n in names} == {"keras_vit", info}
    metadata = zipfile.ZipFile(wheel).read(f"{info}/METADATA").decode()
    assert f"\nName: {DISTRIBUTION}\n" in metadata
    text = zipfile.ZipFile(wheel).read(f"{info}/entry_points.txt").decode()
    assert "keras-vit = keras_vit.recipes.__main__:console" in text


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_an_installed_user_runs_the_recipes_with_keras_vit(installed, tmp_path):
    _, bin_dir, outside = installed
    where = _run(
        [str(bin_dir / "python"), "-c",
         "import importlib.metadata as m, importlib.util, sys, keras_vit; "
         "import keras_vit.recipes.train as t; "
         "print(keras_vit.__file__, t.__file__, "
         f"m.distribution({DISTRIBUTION!r}).locate_file('keras_vit'), "
         "m.version('keras3-vit'), importlib.util.find_spec('recipes'), "
         "[f for f in sys.meta_path if 'editable' in repr(f).lower()])"],
        cwd=outside,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr[-2000:]
    package, train, located, version, recipes, hooks = where.stdout.split(maxsplit=5)
    venv = str(bin_dir.parent.resolve())
    for path in (package, train, located):
        assert str(pathlib.Path(path).resolve()).startswith(venv), where.stdout
    assert version == "0.1.0" and recipes == "None" and hooks.strip() == "[]"
    usage = _run([str(bin_dir / "keras-vit"), "--help"], cwd=outside)
    assert usage.returncode == 0 and "keras-vit <command>" in usage.stdout
    unknown = _run([str(bin_dir / "keras-vit"), "trian"], cwd=outside)
    assert unknown.returncode == 2
    assert unknown.stderr.strip().startswith("error: unknown command 'trian'")
    trained = _run(
        [str(bin_dir / "keras-vit"), "train", "--config", "digits",
         "--set", "epochs=1", "--set", "steps_per_epoch=2", "--set", "verbose=0",
         "--set", f"workdir={tmp_path / 'run'}"],
        cwd=outside,
    )  # fmt: skip
    assert trained.returncode == 0, trained.stderr[-2000:]
    assert (tmp_path / "run" / "final.keras").exists()
    again = _run(
        [str(bin_dir / "keras-vit"), "train", "--config", "digits",
         "--set", "epochs=1", "--set", "steps_per_epoch=2", "--set", "verbose=0",
         "--set", f"workdir={tmp_path / 'run'}"],
        cwd=outside,
    )  # fmt: skip
    assert again.returncode == 3  # Finished: nothing to do, said in one line.
    assert again.stderr.startswith("error: the run in") and "usage" not in again.stderr


def test_a_checkout_runs_python_m_recipes(tmp_path):
    usage = _run([sys.executable, "-m", "recipes.train", "--help"], cwd=ROOT)
    assert usage.returncode == 0
    assert usage.stdout.startswith("usage: python -m recipes.train")


def _hint_cases():
    from keras_vit.analysis import plotting
    from keras_vit.data import datasets
    from keras_vit.export import onnx
    from keras_vit.interop import keras_hub
    from keras_vit.parkkim import glyphs

    return {
        "tfds": ("data", "tensorflow_datasets", lambda: datasets.tfds_source("a", "b")),
        "glyphs": ("viz", "matplotlib", lambda: glyphs._font_path("DejaVuSans.ttf")),
        "plotting": ("viz", "matplotlib", plotting._matplotlib),
        "onnx": ("onnx", "tf2onnx", lambda: onnx.export_onnx("model", "model.onnx")),
        "keras_hub": ("keras_hub", "keras_hub", keras_hub._keras_hub),
    }


@pytest.mark.parametrize("case", ["tfds", "glyphs", "plotting", "onnx", "keras_hub"])
def test_a_missing_optional_package_names_the_pip_command_of_its_extra(
    monkeypatch, case
):
    # The command installs the extra's own requirements: it works before
    # any release of the distribution, from a checkout or from a wheel.
    tomllib = pytest.importorskip("tomllib", reason="Python 3.11 reads TOML")
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    extra, module, trigger = _hint_cases()[case]
    monkeypatch.setitem(sys.modules, module, None)
    with pytest.raises(ImportError) as info:
        trigger()
    message = str(info.value)
    assert "\n" not in message and message.count("pip install ") == 1
    command = message.split("pip install ")[1].removesuffix(".")
    assert shlex.split(command) == extras[extra]
