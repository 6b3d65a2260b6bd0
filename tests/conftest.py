"""Shared pytest setup: quiet TensorFlow, seeds, the `large` marker."""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")
sys.path.insert(0, os.path.dirname(__file__))  # tests/reference.py, helpers.py

import keras  # noqa: E402
import pytest  # noqa: E402

from keras_vit import keras_internals


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


@pytest.fixture(autouse=True)
def _drop_uninitialised_variables():
    """Forgets the variables a test created but never initialised.

    A model built in `keras.StatelessScope(initialize_variables=False)` (the
    parameter counts of `test_models.py`, ViT-H/14 and DINOv2-g/14 included)
    stays on a Keras-global list, and the next `backend.compute_output_spec`
    outside a stateless scope (any keras-hub layer called symbolically)
    allocates every variable on it: 6.5 billion parameters, 24 GiB, after
    `test_models.py`, whichever test comes next.
    """
    yield
    keras_internals.set_deferred_variables([])
