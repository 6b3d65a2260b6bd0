"""What the wheel installs: `keras_vit` (recipes included) and `keras-vit`,
no top-level `recipes`; used from a clean virtual environment outside the
checkout. (About a minute: a wheel, a venv and a short training run.)"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import zipfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _run(argv, **kwargs):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env.pop("PYTHONPATH", None)  # Nothing from the checkout.
    return subprocess.run(argv, capture_output=True, text=True, env=env, **kwargs)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """A venv (seeing the machine's packages for keras/TF) with the wheel."""
    root = tmp_path_factory.mktemp("packaging")
    built = _run(
        [sys.executable, "-m", "pip", "wheel", str(ROOT), "--no-deps",
         "--no-build-isolation", "--quiet", "-w", str(root / "dist")],
    )  # fmt: skip
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = (root / "dist").glob("keras_vit-*.whl")
    made = _run(
        [sys.executable, "-m", "venv", "--system-site-packages", str(root / "venv")]
    )
    assert made.returncode == 0, made.stderr
    bin_dir = root / "venv" / "bin"
    installed = _run(
        [
            str(bin_dir / "pip"),
            "install",
            "--quiet",
            "--no-deps",
            "--no-index",
            str(wheel),
        ]
    )
    assert installed.returncode == 0, installed.stderr[-2000:]
    outside = root / "elsewhere"
    outside.mkdir()
    return wheel, bin_dir, outside


def test_the_wheel_holds_keras_vit_and_its_recipes_not_a_top_level_recipes(installed):
    wheel, _, _ = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert "keras_vit/recipes/train.py" in names
    assert "keras_vit/recipes/configs/digits.py" in names
    assert not [n for n in names if n.startswith("recipes/")]
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "keras-vit = keras_vit.recipes.__main__:console" in text


def test_an_installed_user_runs_the_recipes_with_keras_vit(installed, tmp_path):
    _, bin_dir, outside = installed
    where = _run(
        [str(bin_dir / "python"), "-c",
         "import importlib.util, keras_vit; print(keras_vit.__file__); "
         "print(importlib.util.find_spec('recipes'))"],
        cwd=outside,
    )  # fmt: skip
    assert where.returncode == 0, where.stderr
    path, recipes = where.stdout.split()
    assert str(bin_dir.parent) in path and recipes == "None"
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
    old = _run(
        [sys.executable, "-W", "always", "-c",
         "from recipes.configs.base import TrainConfig; "
         "from keras_vit.recipes.configs.base import TrainConfig as New; "
         "assert TrainConfig is New"],
        cwd=ROOT,
    )  # fmt: skip
    assert old.returncode == 0, old.stderr
    assert "moved to keras_vit.recipes.configs.base" in old.stderr
