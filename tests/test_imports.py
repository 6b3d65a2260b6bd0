"""What `import keras_vit` loads, lazy names, registration, moved modules."""

from __future__ import annotations

import importlib
import os
import pathlib
import subprocess
import sys
import textwrap

import pytest

import keras_vit
from keras_vit import _imports

ROOT = pathlib.Path(__file__).resolve().parents[1]
FRAMEWORKS = ("tensorflow", "keras", "jax", "torch")


def _python(code: str, **env) -> subprocess.CompletedProcess:
    environment = dict(os.environ, PYTHONPATH=str(ROOT), TF_CPP_MIN_LOG_LEVEL="3")
    environment.update(env)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        env=environment,
        cwd=ROOT,
    )


@pytest.mark.parametrize(
    "statement",
    [
        "import keras_vit",
        "from keras_vit.models.options import EncoderOptions, FAMILIES",
        "from keras_vit.training import hardware; hardware.vector_isa()",
        "import keras_vit.models, keras_vit.training, keras_vit.export",
        "import keras_vit.weights, keras_vit.analysis, keras_vit.data",
        "from keras_vit.recipes.configs.base import load_config; load_config('digits')",
    ],
)
def test_these_imports_load_no_framework(statement):
    result = _python(
        f"""
        import sys
        {statement}
        print(sorted(m for m in {FRAMEWORKS!r} if m in sys.modules))
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]", (statement, result.stdout)


@pytest.mark.parametrize(
    "first",
    ["keras_vit.layers", "keras_vit.layers.attention", "keras_vit.models.encoder"],
)
def test_a_keras_vit_module_that_imports_keras_first_imports_and_registers(first):
    result = _python(
        f"""
        import {first}
        import keras
        print(keras.saving.get_registered_object("keras_vit>TransformerBlock"))
        """
    )
    assert result.returncode == 0, result.stderr
    assert "TransformerBlock" in result.stdout


@pytest.mark.parametrize(
    "order",
    [
        "import keras; import keras_vit",
        "import keras_vit; import keras",
        "import keras_vit; from keras import saving as keras_saving; import keras",
    ],
)
def test_a_saved_model_loads_after_import_keras_vit_in_any_order(tmp_path, order):
    path = tmp_path / "tiny.keras"
    made = _python(
        f"""
        import numpy as np
        import keras_vit
        model = keras_vit.ViT("test/4", image_size=16, num_classes=3, qk_norm=True)
        model.save({str(path)!r})
        np.save({str(tmp_path / "out.npy")!r},
                model.predict(np.ones((1, 16, 16, 3), "float32"), verbose=0))
        """
    )
    assert made.returncode == 0, made.stderr
    loaded = _python(
        f"""
        {order}
        import numpy as np
        model = keras.saving.load_model({str(path)!r})
        out = model.predict(np.ones((1, 16, 16, 3), "float32"), verbose=0)
        np.testing.assert_allclose(out, np.load({str(tmp_path / "out.npy")!r}),
                                   atol=1e-6)
        print("ok")
        """
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "ok"


# Every package with an `__all__` (lazy or not).
PACKAGES = sorted(
    ".".join(path.relative_to(ROOT).parent.parts)
    for path in (ROOT / "keras_vit").rglob("__init__.py")
    if "__all__" in path.read_text()
)


def test_the_package_list_has_the_lazy_packages():
    lazy = {
        ".".join(path.relative_to(ROOT).parent.parts)
        for path in (ROOT / "keras_vit").rglob("__init__.py")
        if "lazy_exports(" in path.read_text()
    }
    assert lazy <= set(PACKAGES)
    assert {"keras_vit.weights", "keras_vit.interop", "keras_vit.models.cnn"} <= lazy


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_name_resolves_and_import_star_works(package):
    module = importlib.import_module(package)
    for name in module.__all__:
        assert getattr(module, name) is not None, f"{package}.{name}"
        assert name in dir(module)
    namespace = {}
    exec(f"from {package} import *", namespace)  # noqa: S102
    assert set(module.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="has no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


@pytest.mark.parametrize(
    "module,name,instead",
    [
        ("keras_vit.weights", "RENAMES", "dialects.ours.RULES"),
        ("keras_vit.weights.formats.npz", "RENAMES", "dialects.ours.RULES"),
        ("keras_vit.weights.formats.npz", "variable_path", "checkpoint_layout"),
        ("keras_vit.weights.formats.safetensors", "detect_layout", "dialect_of"),
        ("keras_vit.weights.formats.safetensors", "is_big_vision", "recognizes"),
    ],
)
def test_removed_names_raise_naming_their_replacement(module, name, instead):
    with pytest.raises(AttributeError, match=f"no attribute '{name}'.*{instead}"):
        getattr(importlib.import_module(module), name)


def test_reload_of_a_moved_module_works_after_an_import_by_its_old_path():
    result = _python(
        """
        import importlib, warnings
        import keras_vit
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            module = importlib.import_module("keras_vit.masked_patch")
        assert module.__spec__.name == "keras_vit.models.masked_patch"
        assert importlib.reload(module) is module
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.parametrize("old,new", sorted(_imports.MOVED.items()))
def test_old_module_paths_warn_and_are_the_new_module(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_old_names_work_as_attributes_and_from_imports_with_a_warning():
    sys.modules.pop("keras_vit.masked_patch", None)
    vars(keras_vit).pop("masked_patch", None)
    with pytest.warns(DeprecationWarning, match="keras_vit.models.masked_patch"):
        model_builder = keras_vit.masked_patch.masked_patch_model
    assert model_builder is keras_vit.models.masked_patch_model
    sys.modules.pop("keras_vit.training.atomic", None)
    training = importlib.import_module("keras_vit.training")
    vars(training).pop("atomic", None)
    with pytest.warns(DeprecationWarning, match="keras_vit.atomic"):
        from keras_vit.training import atomic
    assert atomic is importlib.import_module("keras_vit.atomic")


def test_unknown_module_names_are_not_answered():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("keras_vit.training.no_such_module")
