"""keras-hub and the folders keras_vit writes, with keras-hub's real loaders.

A `save_pretrained` folder is a timm folder, which keras-hub's timm loader
refuses for a ViT (it converts CNNs only); the route is
`from_pretrained(folder)` -> `to_keras_hub` (in memory) or
`save_keras_hub_preset` (a keras-hub preset folder that keras-hub's
`from_preset` and keras_vit's `from_pretrained` both read). Outputs must
agree to float32 rounding (1e-5).
"""

from __future__ import annotations

import json
import os
import shutil

import keras_hub
import numpy as np
import pytest
from helpers import images
from helpers import randomize
from helpers import tiny_model

import keras_vit
from keras_vit.interop import save_keras_hub_preset
from keras_vit.interop import to_keras_hub

TOL = dict(rtol=1e-5, atol=1e-5)
PREP = keras_vit.Preprocessing(
    mean=keras_vit.models.IMAGENET_MEAN, std=keras_vit.models.IMAGENET_STD,
    interpolation="bicubic", crop_mode="center", antialias=True,
)  # fmt: skip


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A random tiny classifier, the `save_pretrained` folder of it, what
    `from_pretrained` reads from it, and the keras-hub preset of that."""
    model = tiny_model(num_classes=3, preprocessing=PREP)
    randomize(model, seed=3)
    root = tmp_path_factory.mktemp("saved")
    folder = keras_vit.save_pretrained(model, root / "tiny-vit")
    loaded = keras_vit.from_pretrained(folder)
    preset = save_keras_hub_preset(loaded, root / "tiny-vit-keras-hub")
    return model, folder, loaded, preset


@pytest.fixture(scope="module")
def tokens(saved):
    """The token-returning model of the folder (a keras-hub backbone's
    outputs)."""
    return keras_vit.from_pretrained(saved[1], include_top=False, pooling=None)


def _close(a, b):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), **TOL)


def _same_contract(read, written):
    """Equal `Preprocessing`s but for the rounding of mean and std, which
    travel as keras-hub's scale and offset."""
    np.testing.assert_allclose(read.mean, written.mean, rtol=1e-12)
    np.testing.assert_allclose(read.std, written.std, rtol=1e-12)
    same = dict(mean=written.mean, std=written.std)
    assert read.replace(**same) == written


def test_keras_hub_refuses_a_save_pretrained_folder(saved):
    # The fact docs/migrating.md states: keras-hub dispatches on config.json's
    # "architecture" to its timm loader, which has no ViT converter. If a
    # keras-hub release adds one, this fails: update the docs, and the route.
    folder = saved[1]
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    assert "architecture" in config
    assert not {"registered_name", "model_type"} & set(config)
    for cls in (keras_hub.models.Backbone, keras_hub.models.ImageClassifier):
        with pytest.raises(ValueError, match="no converter for timm models"):
            cls.from_preset(folder)


def test_folder_to_keras_hub_in_memory(saved, tokens):
    model, _, loaded, _ = saved
    classifier = to_keras_hub(loaded)
    assert isinstance(classifier, keras_hub.models.ViTImageClassifier)
    _close(classifier(images()), model(images()))
    backbone = to_keras_hub(tokens)
    assert isinstance(backbone, keras_hub.models.ViTBackbone)
    _close(backbone(images()), tokens(images()))


def test_preset_loads_in_keras_hub_and_back(saved, tokens):
    model, _, _, preset = saved
    assert sorted(os.listdir(preset)) == [
        "config.json", "image_converter.json", "metadata.json",
        "model.weights.h5", "preprocessor.json", "task.json", "task.weights.h5",
    ]  # fmt: skip
    task = keras_hub.models.ImageClassifier.from_preset(preset)
    assert isinstance(task, keras_hub.models.ViTImageClassifier)
    _close(task(images()), model(images()))
    backbone = keras_hub.models.Backbone.from_preset(preset)
    _close(backbone(images()), tokens(images()))
    # keras_vit reads the preset back: same logits, same input contract.
    back = keras_vit.from_pretrained(preset)
    _close(back(images()), model(images()))
    _same_contract(back.preprocessing, PREP.replace(image_size=(32, 32)))


def test_preset_preprocessor_is_the_models_contract(saved):
    # Raw [0, 255] pixels through keras-hub's preprocessor and task equal
    # keras_vit's model with its contract built in.
    _, folder, _, preset = saved
    task = keras_hub.models.ImageClassifier.from_preset(preset)
    converter = task.preprocessor.image_converter
    assert isinstance(converter, keras_hub.layers.ViTImageConverter)
    assert converter.image_size == (32, 32)
    assert (converter.interpolation, converter.antialias) == ("bicubic", True)
    assert converter.crop_to_aspect_ratio  # crop_mode="center"
    np.testing.assert_allclose(converter.scale, PREP.scale)
    np.testing.assert_allclose(converter.offset, PREP.offset)
    pixels = np.random.default_rng(0).integers(0, 256, (2, 32, 32, 3))
    pixels = pixels.astype("float32")
    built_in = keras_vit.from_pretrained(folder, include_preprocessing=True)
    _close(task(task.preprocessor(pixels)), built_in(pixels))


def test_dinov2_backbone_preset(tmp_path):
    model = keras_vit.ViT(
        "test/8", image_size=32, include_top=False, pooling=None,
        num_registers=4, layer_scale_init=1e-5, no_embed_class=True,
        preprocessing=PREP,
    )  # fmt: skip
    randomize(model, seed=4)
    preset = save_keras_hub_preset(model, tmp_path / "dinov2", backbone="dinov2")
    assert sorted(os.listdir(preset)) == [
        "config.json",
        "image_converter.json",
        "metadata.json",
        "model.weights.h5",
    ]
    backbone = keras_hub.models.Backbone.from_preset(preset)
    assert isinstance(backbone, keras_hub.models.DINOV2Backbone)
    _close(backbone({"images": images()}), model(images()))
    converter = keras_hub.layers.ImageConverter.from_preset(preset)
    assert isinstance(converter, keras_hub.layers.DINOV2ImageConverter)
    np.testing.assert_allclose(converter.offset, PREP.offset)


def test_existing_folder_is_kept_unless_overwrite(saved, tokens, tmp_path):
    preset = str(tmp_path / "preset")
    shutil.copytree(saved[3], preset)
    with pytest.raises(FileExistsError, match="overwrite=True"):
        save_keras_hub_preset(tokens, preset)
    assert "task.json" in os.listdir(preset)
    save_keras_hub_preset(tokens, preset, overwrite=True)
    # Replaced whole: no task file of the classifier is left behind.
    assert "task.json" not in os.listdir(preset)
    backbone = keras_hub.models.Backbone.from_preset(preset)
    _close(backbone(images()), tokens(images()))
    assert sorted(os.listdir(tmp_path)) == ["preset"]  # no staging left


def test_refusals(saved, tmp_path):
    model = saved[0]
    with pytest.raises(ValueError, match="local folders"):
        save_keras_hub_preset(model, "gs://bucket/preset")
    gap = tiny_model(class_token=False, pooling="gap", fc_norm=True)
    with pytest.raises(ValueError, match="fc_norm"):
        save_keras_hub_preset(gap, tmp_path / "refused")
    assert not os.path.exists(tmp_path / "refused")
