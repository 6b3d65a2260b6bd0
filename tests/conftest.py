"""Shared pytest setup: quiet TensorFlow, seeds, the `large` marker."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.dirname(__file__))  # tests/reference.py, helpers.py

import keras  # noqa: E402
import pytest  # noqa: E402


def pytest_addoption(parser):
    parser.addoption(
        "--run-large",
        action="store_true",
        help="also run tests marked `large` (big models, long runs)",
    )


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-large"):
        return
    skip = pytest.mark.skip(reason="large: run with --run-large")
    for item in items:
        if "large" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed_and_policy():
    keras.utils.set_random_seed(0)
    keras.config.set_dtype_policy("float32")
    yield
    keras.config.set_dtype_policy("float32")
