"""Test helpers: tiny models, round trips, and reference-weight assignment."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.metadata
import inspect
import os
import shutil
import socket
import sys

import keras
import numpy as np
import pytest

import keras_vit
from keras_vit.recipes.configs import base


def tiny_model(**kwargs) -> keras.Model:
    """A 2-block, 32-wide ViT on 32 px images with patch 8 and 10 classes."""
    kwargs.setdefault("image_size", 32)
    kwargs.setdefault("num_classes", 10)
    return keras_vit.ViT(kwargs.pop("variant", "test/8"), **kwargs)


def randomize(model: keras.Model, seed: int = 0, scale: float = 0.2) -> None:
    """Gives every weight random values (zero-initialised heads hide bugs)."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        weight.assign(rng.normal(0, scale, weight.shape).astype(weight.dtype))


def images(batch=2, size=(32, 32), channels=3, seed=0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (batch, *size, channels)).astype("float32")


def assert_config_is_constructor_args(layer: keras.layers.Layer) -> None:
    """`get_config` adds exactly the `__init__` arguments to the base config."""
    base = set(keras.layers.Layer().get_config())
    added = set(layer.get_config()) - base
    params = set(inspect.signature(type(layer).__init__).parameters)
    params -= {"self", "kwargs"}
    assert added == params, f"{type(layer).__name__}: {added} != {params}"


def assign_reference_params(model: keras.Model, params: dict) -> None:
    """Copies an original-layout parameter dict into a keras_vit model.

    Written independently of `keras_vit.weights` so the model's numerics are
    checked on their own.
    """

    def set_layer(name, *arrays):
        model.get_layer(name).set_weights([np.asarray(a) for a in arrays])

    set_layer("embedding", params["embedding/kernel"], params["embedding/bias"])
    if "cls" in params:
        set_layer("class_token", params["cls"])
    set_layer("posembed_input", params["Transformer/posembed_input/pos_embedding"])
    depth = sum(
        1 for k in params if k.endswith("LayerNorm_0/scale") and "encoderblock_" in k
    )
    for i in range(depth):
        p = f"Transformer/encoderblock_{i}/"
        mha = p + "MultiHeadDotProductAttention_1/"
        block = model.get_layer(f"encoderblock_{i}")
        block.norm_1.set_weights(
            [params[p + "LayerNorm_0/scale"], params[p + "LayerNorm_0/bias"]]
        )
        block.attention.set_weights(
            [
                np.stack(
                    [params[mha + f"{n}/kernel"] for n in ("query", "key", "value")], 1
                ),
                np.stack(
                    [params[mha + f"{n}/bias"] for n in ("query", "key", "value")], 0
                ),
                params[mha + "out/kernel"],
                params[mha + "out/bias"],
            ]
        )
        block.norm_2.set_weights(
            [params[p + "LayerNorm_2/scale"], params[p + "LayerNorm_2/bias"]]
        )
        mlp = p + "MlpBlock_3/"
        block.mlp_dense_1.set_weights(
            [params[mlp + "Dense_0/kernel"], params[mlp + "Dense_0/bias"]]
        )
        block.mlp_dense_2.set_weights(
            [params[mlp + "Dense_1/kernel"], params[mlp + "Dense_1/bias"]]
        )
    set_layer(
        "encoder_norm",
        params["Transformer/encoder_norm/scale"],
        params["Transformer/encoder_norm/bias"],
    )
    if "pre_logits/kernel" in params:
        set_layer("pre_logits", params["pre_logits/kernel"], params["pre_logits/bias"])
    set_layer("head", params["head/kernel"], params["head/bias"])
    for key in params:
        if key.startswith(("conv_root", "gn_root", "block")):
            layer, _, weight = key.rpartition("/")
            name = layer.replace("/", "_")
            target = model.get_layer(name)
            if weight == "kernel":
                target.set_weights([params[key]])
    for key in params:
        if key.startswith(("gn_root", "block")) and key.endswith("/scale"):
            name = key[: -len("/scale")].replace("/", "_")
            bias = params[key[: -len("scale")] + "bias"]
            model.get_layer(name).set_weights(
                [params[key].reshape(-1), bias.reshape(-1)]
            )


# -- the installed commands ------------------------------------------------------
@functools.cache
def installed_script(name: str, distribution: str) -> str:
    """The path of the console script `name` that `distribution` installed
    for the Python running the tests.

    Looked up beside `sys.executable` (a virtual environment's `bin/`,
    activated or not), then where the distribution's installation recorded
    it (`pip install --user`, a system Python's `/usr/local/bin`). Never on
    `PATH`: an unactivated environment's scripts are not there, and another
    installation's may be. Fails the calling test when the script is in
    neither place: a command test must not pass by not running.

    Example:

    ```python
    cli = installed_script("saved_model_cli", "tensorflow")
    subprocess.run([cli, "show", "--all", "--dir", exported])
    ```
    """
    candidates = [os.path.join(os.path.dirname(sys.executable), name)]
    try:
        recorded = importlib.metadata.distribution(distribution).files or []
    except importlib.metadata.PackageNotFoundError:
        recorded = []
    candidates += [str(file.locate()) for file in recorded if file.name == name]
    for candidate in candidates:
        if os.path.isfile(candidate) and os.access(candidate, os.X_OK):
            return os.path.normpath(candidate)
    pytest.fail(
        f"the {name} script of {distribution} is not installed for "
        f"{sys.executable} (looked in {', '.join(candidates)}); "
        "pip install -e '.[test]'",
        pytrace=False,
    )


def keras_vit_script() -> str:
    """The installed `keras-vit` command (see `installed_script`).

    Example:

    ```python
    subprocess.run([keras_vit_script(), "train", "--help"])
    ```
    """
    return installed_script("keras-vit", "keras3-vit")


def digits_run_config(workdir, *overrides: str):
    """The `digits` config with `--set`-style `overrides`, run in `workdir`."""
    config = base.override(base.load_config("digits"), list(overrides))
    return dataclasses.replace(config, workdir=str(workdir))


def free_ports(count: int) -> list[int]:
    """`count` loopback ports free at the time of the call."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


# -- a Hugging Face Hub cache on disk -----------------------------------------

# The tiny timm and transformers repositories of `tests/fixtures/hub/`
# (`scripts/make_hub_fixtures.py`), by the names users type.
HUB = os.path.join(os.path.dirname(__file__), "fixtures", "hub")
# Hub repository -> fixture folder.
TIMM = {
    "vit_base_patch16_224.augreg2_in21k_ft_in1k": "augreg",
    "deit3_small_patch16_224.fb_in22k_ft_in1k": "deit3",
    "vit_small_patch14_reg4_dinov2.lvd142m": "dinov2",
    "vit_base_patch16_siglip_224.webli": "siglip",
}
TRANSFORMERS = ("google/vit-base-patch16-224", "facebook/dinov2-small")
REPOS = {f"timm/{name}": f"timm--{name}" for name in TIMM} | {
    repo: repo.replace("/", "--") for repo in TRANSFORMERS
}


def hub_fixture(folder: str) -> dict:
    """What the library that wrote `folder` computed (its `.npz` beside it)."""
    with np.load(os.path.join(HUB, f"{folder}.npz")) as data:
        return dict(data)


def hub_cache(root, repos=REPOS) -> str:
    """A Hub cache under `root` holding `repos`; returns its `hub` folder."""
    cache = os.path.join(os.fspath(root), "hub")
    for repo, folder in repos.items():
        org, name = repo.split("/")
        base = os.path.join(cache, f"models--{org}--{name}")
        commit = hashlib.sha1(repo.encode()).hexdigest()  # 40 hex digits
        os.makedirs(os.path.join(base, "refs"), exist_ok=True)
        with open(os.path.join(base, "refs", "main"), "w") as f:
            f.write(commit)  # no newline, as huggingface_hub writes it
        shutil.copytree(
            os.path.join(HUB, folder), os.path.join(base, "snapshots", commit)
        )
    return cache
