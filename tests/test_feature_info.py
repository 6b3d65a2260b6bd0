"""timm's `feature_info` for keras_vit models: `keras_vit.feature_info`.

Each block's map has a layer name, channels and a reduction (input pixels
per map cell), which a detection or segmentation neck is built from. Checked
against what timm 1.0.31 reports for the tiny Hub fixtures' architectures
and the hybrid of `tests/fixtures/timm_hybrid.*`
(`tests/fixtures/timm_feature_info.json`, written by
`scripts/make_feature_info_fixture.py`), and against the real shapes of the
maps `feature_extractor(..., spatial=True)` returns, for every family:
static, dynamic and padded ViTs, a hybrid, PreActResNet and AlterNet.
"""

from __future__ import annotations

import json
import os

import keras
import pytest
from helpers import TIMM
from helpers import hub_cache
from helpers import images

import keras_vit
from keras_vit.models import FeatureInfo
from keras_vit.models.layout import LayoutError
from keras_vit.models.variants import ResNetSpec
from keras_vit.models.variants import custom_spec

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "timm_feature_info.json")


@pytest.fixture(scope="module")
def timm_info() -> dict:
    with open(FIXTURE) as f:
        return json.load(f)["models"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return hub_cache(tmp_path_factory.mktemp("hf_home"))


def _blocks(out_indices):
    """timm's `out_indices` as `blocks`: an int n is the last n blocks."""
    return range(-out_indices, 0) if isinstance(out_indices, int) else out_indices


def _assert_maps_have_the_info(model, info, size):
    """The extractor's maps are `(B, H / reduction, W / reduction, num_chs)`
    (rounded up: a padded model pads the input to whole cells)."""
    extractor = keras_vit.feature_extractor(
        model, blocks=info.out_indices, include_pooled=False,
        include_tokens=False, spatial=True,
    )  # fmt: skip
    assert extractor.feature_info == info
    maps = extractor(images(batch=1, size=size))
    assert sorted(maps) == sorted(f"block_{i}" for i in info.out_indices)
    for i in info.out_indices:
        step = info.reduction(i)
        expected = (1, -(-size[0] // step), -(-size[1] // step), info.channels(i))
        assert tuple(maps[f"block_{i}"].shape) == expected, (i, info[i])
    return maps


def _assert_timms(model, timm):
    """Every selection of the fixture: timm's indices, channels, reductions
    and map shapes (timm's NCHW, here channels last); the block names are
    ours (`encoderblock_i` for timm's `blocks.i`)."""
    everything = keras_vit.feature_info(model)
    assert len(everything) == len(timm["feature_info"])
    for ours, theirs in zip(everything.info, timm["feature_info"], strict=True):
        assert ours["num_chs"] == theirs["num_chs"]
        assert ours["reduction"] == theirs["reduction"]
        assert theirs["module"] == f"blocks.{ours['index']}"
        assert ours["module"] == f"encoderblock_{ours['index']}"
    for selection in timm["selections"]:
        info = keras_vit.feature_info(model, blocks=_blocks(selection["out_indices"]))
        assert list(info.out_indices) == selection["resolved"]
        assert info.channels() == selection["num_chs"]
        assert info.reduction() == selection["reduction"]
        assert info.module_name() == [
            name.replace("blocks.", "encoderblock_") for name in selection["module"]
        ]
    # The widest selection's maps, against timm's shapes and the info.
    widest = max(timm["selections"], key=lambda s: len(s["resolved"]))
    info = keras_vit.feature_info(model, blocks=_blocks(widest["out_indices"]))
    maps = _assert_maps_have_the_info(model, info, (32, 32))
    shapes = [tuple(maps[f"block_{i}"].shape) for i in info.out_indices]
    assert shapes == [(n, h, w, c) for n, c, h, w in widest["shapes"]]


@pytest.mark.parametrize("name", list(TIMM))
def test_hub_models_feature_info_is_timms(cache, timm_info, name):
    model = keras_vit.from_pretrained(
        f"hf-hub:timm/{name}", cache_dir=cache, local_files_only=True
    )
    _assert_timms(model, timm_info[name])


def test_hybrid_reduction_is_the_resnet_stride_times_the_patch(timm_info):
    # timm: a patch-1 embedding on a ResNetV2 (1, 1) map of stride 8.
    model = keras_vit.ViT(
        "test/8", image_size=32, num_classes=10, backbone=ResNetSpec((1, 1), width=32)
    )
    _assert_timms(model, timm_info["timm_hybrid"])


def _family_model(family):
    """A tiny model of `family`, and the input sizes its maps are checked at."""
    if family == "vit":
        return keras_vit.ViT("test/4", image_size=(16, 24), num_classes=3), [(16, 24)]
    if family == "dynamic_padded_p14":
        spec = custom_spec(14, hidden_dim=32, depth=2, mlp_dim=64, num_heads=2)
        model = keras_vit.ViT(
            spec, image_size=28, num_classes=3, num_registers=4,
            dynamic_image_size=True, dynamic_image_pad=True,
        )  # fmt: skip
        return model, [(30, 40), (56, 28)]  # 30 x 40 px pad to 3 x 3 cells
    cnn = {"preact_resnet": keras_vit.PreActResNet, "alternet": keras_vit.AlterNet}
    return cnn[family]("test", image_size=16, num_classes=3), [(16, 16)]


@pytest.mark.parametrize(
    "family", ["vit", "dynamic_padded_p14", "preact_resnet", "alternet"]
)
def test_every_familys_maps_have_their_channels_and_reduction(family):
    model, sizes = _family_model(family)
    info = keras_vit.feature_info(model)
    assert [entry["index"] for entry in info.info] == list(range(len(info)))
    for name in info.module_name():  # the blocks' own layers
        model.get_layer(name)
    for size in sizes:
        _assert_maps_have_the_info(model, info, size)


def test_cnn_stages_keep_their_channels_and_strides():
    info = keras_vit.feature_info(keras_vit.AlterNet("test", image_size=16))
    # stage 1 keeps the 16 px (a CIFAR stem), stage 2 halves it; the MSA
    # block keeps its stage's map.
    assert info.module_name() == ["stage1_block1", "stage2_block1", "stage2_msa2"]
    assert info.channels() == [8, 16, 16] and info.reduction() == [1, 2, 2]


def test_blocks_select_as_timms_out_indices():
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    info = keras_vit.feature_info
    assert info(model).out_indices == (0, 1)  # "all"
    assert info(model, blocks=range(-1, 0)).out_indices == (1,)  # out_indices=1
    assert info(model, blocks=[-1, 0, -2]).out_indices == (0, 1)  # sorted, distinct
    assert info(model, blocks=-2).out_indices == (0,)  # one index, as before
    assert info(model, blocks=None).out_indices == ()
    assert info(model, blocks=[]).out_indices == ()
    with pytest.raises(ValueError, match=r"Block index 2 is out of range for a model "
                       r"with 2 blocks: indices run from -2 to 1"):  # fmt: skip
        info(model, blocks=[0, 2])
    with pytest.raises(ValueError, match="Block index -3 is out of range"):
        keras_vit.feature_extractor(model, blocks=range(-3, 0))
    with pytest.raises(ValueError, match="must be an int. Received: 1.5"):
        info(model, blocks=[1.5])
    with pytest.raises(ValueError, match="'all'"):
        info(model, blocks="last")
    with pytest.raises(LayoutError):
        info(keras.Sequential([keras.Input((4,)), keras.layers.Dense(2)]))


def test_feature_info_accessors_answer_as_timms():
    entries = [
        {"module": f"encoderblock_{i}", "num_chs": 32 * (i + 1), "reduction": 4}
        for i in range(3)
    ]
    info = FeatureInfo(entries, out_indices=[-1, 0])
    assert info.out_indices == (0, 2) and len(info) == 3
    # `idx=None`: the selection; an int or a list: those blocks, selected or not.
    assert info.channels() == [32, 96] and info.channels(1) == 64
    assert info.channels([1, 2]) == [64, 96] and info.reduction(-1) == 4
    assert info.module_name() == ["encoderblock_0", "encoderblock_2"]
    assert info.get_dicts(keys=["num_chs"]) == [{"num_chs": 32}, {"num_chs": 96}]
    assert info.get_dicts(idx=1) == {**entries[1], "index": 1}
    assert info.from_other([1]).channels() == [64]
    info[0]["num_chs"] = 0  # a copy: the info is unchanged
    assert info.channels(0) == 32 and entries[0] == {
        "module": "encoderblock_0", "num_chs": 32, "reduction": 4,
    }  # fmt: skip
    with pytest.raises(ValueError, match=r"lacks \['reduction'\]"):
        FeatureInfo([{"module": "m", "num_chs": 1}])
    with pytest.raises(ValueError, match="indices run from -3 to 2"):
        FeatureInfo(entries, out_indices=[3])


def test_extractor_carries_its_feature_info():
    # (An extractor with the attribute still saves and loads: the round
    # trip of tests/test_spatial_features.py.)
    model = keras_vit.ViT(
        "test/4", image_size=16, num_classes=3, dynamic_image_size=True
    )
    extractor = keras_vit.feature_extractor(model, blocks=[-1])
    assert extractor.feature_info == keras_vit.feature_info(model, blocks=[-1])
    assert extractor.feature_info.reduction() == [4]
    assert keras_vit.feature_extractor(model, blocks=None).feature_info.channels() == []
