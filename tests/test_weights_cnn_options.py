"""`load_weights` on a CNN: the ViT-only options and other sources are refused."""

import numpy as np
import pytest

import keras_vit
from keras_vit.parkkim.cnn import ResNet


@pytest.fixture(scope="module")
def resnet():
    return ResNet("test", num_classes=3, image_size=16, stem="cifar")


@pytest.mark.parametrize(
    "option",
    [
        {"resample_method": "bicubic"},
        {"keep_pre_logits": True},
        {"resample_patch": "flexivit"},
        {"tag_variant": "B/16"},
        {"checkpoint_grid_size": (2, 2)},
    ],
)
def test_vit_only_options_are_refused_for_a_cnn(resnet, option, tmp_path):
    before = [w.copy() for w in resnet.get_weights()]
    name = next(iter(option))
    with pytest.raises(TypeError, match=f"{name} only apply to a ViT"):
        keras_vit.load_weights(resnet, str(tmp_path / "absent.pth"), **option)
    for old, new in zip(before, resnet.get_weights(), strict=True):
        np.testing.assert_array_equal(old, new)


def test_a_model_as_the_source_of_a_cnn_is_one_line(resnet):
    with pytest.raises(TypeError, match="loads a `torch.save` file path or a dict"):
        keras_vit.load_weights(resnet, resnet)


def test_the_defaults_reach_the_torch_reader(resnet, tmp_path):
    with pytest.raises(FileNotFoundError, match="No checkpoint file"):
        keras_vit.load_weights(resnet, str(tmp_path / "absent.pth"))
