"""Modules that moved keep their old import path, with a DeprecationWarning."""

from __future__ import annotations

import importlib
import sys

import pytest

import keras_vit  # noqa: F401  (installs the hook)
from keras_vit import _moved


@pytest.mark.parametrize("old,new", sorted(_moved.MOVED.items()))
def test_old_path_warns_and_is_the_new_module(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_from_import_of_a_moved_module_warns():
    sys.modules.pop("keras_vit.training.atomic", None)
    training = importlib.import_module("keras_vit.training")
    if hasattr(training, "atomic"):
        delattr(training, "atomic")
    with pytest.warns(DeprecationWarning, match="keras_vit.atomic"):
        from keras_vit.training import atomic
    assert atomic.write_json is importlib.import_module("keras_vit.atomic").write_json


def test_unknown_names_are_not_answered():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("keras_vit.training.no_such_module")
