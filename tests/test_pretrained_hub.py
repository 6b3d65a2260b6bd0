"""Checkpoints by name from a Hugging Face Hub cache built on disk.

The tests never download. `hub_cache` lays the fixture repositories of
`tests/fixtures/hub/` (tiny timm and transformers models written by
`scripts/make_hub_fixtures.py` with timm 1.0.31 / transformers 5.23) out as
`huggingface_hub` reads its cache offline: `models--<org>--<name>/refs/main`
holding a commit hash and the files under `snapshots/<hash>/`. The models
are then loaded by the names users type and compared with what timm or
transformers computed.
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from helpers import HUB
from helpers import TIMM
from helpers import hub_cache
from helpers import hub_fixture

import keras_vit
from keras_vit.weights import sources
from keras_vit.weights.errors import WeightsNotFoundError


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return hub_cache(tmp_path_factory.mktemp("hf_home"))


def _close(ours, theirs, rel=1e-4):
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    scale = np.abs(theirs).max()
    assert ours.shape == theirs.shape
    assert np.abs(ours - theirs).max() <= rel * scale, (
        np.abs(ours - theirs).max() / scale
    )


@pytest.mark.parametrize("name", list(TIMM))
def test_timm_name_gives_timms_logits_and_contract(cache, name):
    model = keras_vit.from_pretrained(name, cache_dir=cache, local_files_only=True)
    fixture = hub_fixture(f"timm--{name}")
    _close(model(fixture["pixels"]), fixture["logits"])
    data_config = json.loads(str(fixture["data_config"]))
    prep = model.preprocessing
    assert prep.mean == pytest.approx(tuple(data_config["mean"]))
    assert prep.std == pytest.approx(tuple(data_config["std"]))
    assert prep.interpolation == data_config["interpolation"]
    assert prep.crop_fraction == pytest.approx(data_config["crop_pct"])
    assert prep.crop_mode == data_config["crop_mode"]
    assert prep.image_size == tuple(data_config["input_size"][1:])


def test_family_contracts_are_not_the_papers(cache):
    # DeiT III and DINOv2 were trained on ImageNet statistics, not [-1, 1].
    for name in ("deit3_small_patch16_224.fb_in22k_ft_in1k",
                 "vit_small_patch14_reg4_dinov2.lvd142m"):  # fmt: skip
        model = keras_vit.from_pretrained(name, cache_dir=cache, local_files_only=True)
        assert model.preprocessing.mean == keras_vit.models.IMAGENET_MEAN
        assert model.preprocessing.std == keras_vit.models.IMAGENET_STD


def test_transformers_vit_sharded_with_labels(cache):
    model = keras_vit.from_pretrained(
        "hf://google/vit-base-patch16-224", cache_dir=cache, local_files_only=True
    )
    fixture = hub_fixture("google--vit-base-patch16-224")
    _close(model(fixture["pixels"]), fixture["logits"])
    assert model.class_names == ("cat", "dog", "bird")
    assert model.preprocessing.interpolation == "bilinear"
    assert model.preprocessing.mean == (0.5, 0.5, 0.5)


def test_transformers_dinov2(cache):
    model = keras_vit.from_pretrained(
        "hf://facebook/dinov2-small", cache_dir=cache, local_files_only=True
    )
    fixture = hub_fixture("facebook--dinov2-small")
    _close(model(fixture["pixels"]), fixture["logits"])
    prep = model.preprocessing
    assert prep.mean == keras_vit.models.IMAGENET_MEAN
    assert (prep.crop_mode, prep.interpolation, prep.image_size) == (
        "center", "bicubic", (32, 32)
    )  # fmt: skip
    assert prep.crop_fraction == pytest.approx(32 / 36)


def test_tag_with_variant_reads_the_hub_repository(cache):
    # `deit3_in21k_ft_in1k` of S/16 is timm's repository of that name.
    model = keras_vit.from_pretrained(
        "deit3_in21k_ft_in1k", variant="S/16", cache_dir=cache, local_files_only=True
    )
    fixture = hub_fixture("timm--deit3_small_patch16_224.fb_in22k_ft_in1k")
    _close(model(fixture["pixels"]), fixture["logits"])


def test_overrides_give_a_fine_tuning_model(cache):
    name = "vit_base_patch16_224.augreg2_in21k_ft_in1k"
    model = keras_vit.from_pretrained(
        name, cache_dir=cache, local_files_only=True, num_classes=4, image_size=48
    )
    assert model.output_shape == (None, 4)
    assert model.input_shape == (None, 48, 48, 3)
    head = model.get_layer("head").get_weights()
    assert not np.any(head[0]) and not np.any(head[1])  # zero head: fine-tuning
    assert model.class_names is None


def test_offline_miss_names_repository_file_and_cache(tmp_path):
    cache = hub_cache(tmp_path, {})
    with pytest.raises(WeightsNotFoundError) as error:
        keras_vit.from_pretrained(
            "vit_large_patch16_224.augreg_in21k", cache_dir=cache, local_files_only=True
        )
    message = str(error.value)
    assert "timm/vit_large_patch16_224.augreg_in21k/config.json" in message
    assert cache in message and "main" in message


def test_unknown_name_suggests_close_ones():
    with pytest.raises(ValueError, match="Did you mean 'vit_b16.augreg_in21k'"):
        keras_vit.from_pretrained("vit_b16.augreg_in21")
    with pytest.raises(ValueError, match="hf://<org>/<repo>"):
        keras_vit.from_pretrained("hf://just-a-name")


def test_list_weights_takes_wildcards():
    dinov2 = keras_vit.weights.list_weights("vit_*_reg4_dinov2.*")
    assert [w.variant for w in dinov2] == ["S/14", "B/14", "L/14", "g/14"]
    augreg = {w.name for w in keras_vit.weights.list_weights("*augreg*")}
    assert "vit_b16.augreg_in21k_ft_in1k" in augreg  # the package's own name
    assert "vit_base_patch16_224.augreg2_in21k_ft_in1k" in augreg  # timm's
    # The package's table first, then timm's catalog.
    assert [w.tag for w in keras_vit.weights.list_weights("H/14")][0] == "imagenet21k"
    assert keras_vit.weights.list_weights("no*such*") == []


def test_missing_file_is_not_taken_for_a_name(tmp_path):
    path = os.path.join(tmp_path, "model.npz")
    assert not sources.is_name(path) and not sources.is_name("model.npz")
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    with pytest.raises(FileNotFoundError, match="No checkpoint file"):
        keras_vit.load_weights(model, "model.npz")


def test_names_load_in_a_fresh_process_from_hf_home(tmp_path):
    """The user's path: HF_HOME and HF_HUB_OFFLINE set, one call per name."""
    hub_cache(tmp_path)
    script = f"""
import json, numpy as np, keras_vit
out = {{}}
for name, fixture in [
    ("vit_base_patch16_224.augreg2_in21k_ft_in1k",
     "timm--vit_base_patch16_224.augreg2_in21k_ft_in1k"),
    ("hf://google/vit-base-patch16-224", "google--vit-base-patch16-224"),
    ("hf://timm/vit_small_patch14_reg4_dinov2.lvd142m@main",
     "timm--vit_small_patch14_reg4_dinov2.lvd142m"),
]:
    model = keras_vit.from_pretrained(name)
    data = np.load({HUB!r} + "/" + fixture + ".npz")
    diff = np.abs(np.asarray(model(data["pixels"])) - data["logits"]).max()
    out[name] = float(diff / np.abs(data["logits"]).max())
print(json.dumps(out))
"""
    env = dict(os.environ, HF_HOME=str(tmp_path), HF_HUB_OFFLINE="1")
    env.pop("HF_HUB_CACHE", None)
    result = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True,
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    diffs = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(diffs) == 3 and max(diffs.values()) < 1e-4, diffs


def test_the_tables_contracts_are_timms():
    """Every timm-hosted row of the table prepares inputs as timm's config."""
    with open(os.path.join(HUB, "timm_pretrained_cfgs.json")) as f:
        cfgs = json.load(f)
    with open(os.path.join(HUB, "..", "eva", "pretrained_cfgs.json")) as f:
        cfgs.update(json.load(f)["models"])  # The rotary families'.
    with open(os.path.join(HUB, "..", "aimv2", "aimv2.json")) as f:
        cfgs.update(
            {n: row["pretrained_cfg"] for n, row in json.load(f)["models"].items()}
        )  # AIMv2's.
    rows = [w for w in keras_vit.weights.PRETRAINED_WEIGHTS if w.timm_name]
    counts = collections.Counter(row.family for row in rows)
    assert counts == {  # Each family's timm rows, as its zoo file lists them.
        "deit": 4, "deit_distilled": 4, "deit3": 6, "dinov2": 3, "dinov2_swiglu": 1,
        "siglip": 4, "flexivit": 11, "dinov3": 17, "eva02": 16, "eva02_clip": 3,
        "pe_core": 5, "pe_lang": 4, "pe_spatial": 5, "rope_vit": 3,
        "rope_vit_mixed": 3, "rope_vit_ape": 3, "rope_vit_mixed_ape": 3,
        "aimv2": 14, "rpn": 1,
    }  # fmt: skip
    for row in rows:
        cfg = cfgs[row.timm_name]
        timm = keras_vit.Preprocessing.from_timm(cfg)
        # The configs' statistics are written to 6 decimals (CLIP's have 8).
        statistics = ("mean", "std")
        for name in statistics:
            got = getattr(row.preprocessing, name)
            assert got == pytest.approx(getattr(timm, name), abs=1e-6), row.timm_name
        rest = dict.fromkeys(statistics, 0.5)
        assert row.preprocessing.replace(**rest) == timm.replace(**rest), row.timm_name
        assert row.license == cfg["license"], row.timm_name


def test_constructor_weights_take_a_name_and_its_contract(cache, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", cache)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    name = "deit3_small_patch16_224.fb_in22k_ft_in1k"
    spec = keras_vit.models.variants.custom_spec(
        8, hidden_dim=32, depth=2, mlp_dim=64, num_heads=2
    )
    model = keras_vit.models.family_model(
        spec, "deit3", image_size=32, num_classes=10, weights=name
    )
    fixture = hub_fixture(f"timm--{name}")
    _close(model(fixture["pixels"]), fixture["logits"])
    assert model.preprocessing.mean == keras_vit.models.IMAGENET_MEAN
    assert model.pretrained_cfg["hf_hub_id"] == f"timm/{name}"  # as by name
    assert model.pretrained_cfg["tag"] == "fb_in22k_ft_in1k"
    # load_weights into a model built with the paper's contract gives it the
    # checkpoint's, the rescaling layer included.
    plain = keras_vit.ViT(
        spec, image_size=32, num_classes=10, include_preprocessing=True,
        layer_scale_init=1e-6, no_embed_class=True,
    )  # fmt: skip
    assert plain.preprocessing.mean == (0.5, 0.5, 0.5)
    notes = keras_vit.load_weights(plain, name)
    assert any("ImageNet" in n or "0.485" in n for n in notes), notes
    assert plain.preprocessing.mean == keras_vit.models.IMAGENET_MEAN
    raw = np.random.default_rng(0).uniform(0, 255, (2, 32, 32, 3)).astype("float32")
    mean = np.array(keras_vit.models.IMAGENET_MEAN, "float32")
    std = np.array(keras_vit.models.IMAGENET_STD, "float32")
    _close(plain(raw), model((raw / 255.0 - mean) / std), rel=1e-5)


def test_a_pinned_revision_and_checksum_are_enforced(cache, monkeypatch):
    import dataclasses

    from keras_vit.weights import registry

    name = "deit3_small_patch16_224.fb_in22k_ft_in1k"
    entry = registry.find_name(name)
    base = os.path.join(cache, f"models--timm--{name}")
    with open(os.path.join(base, "refs", "main")) as f:
        commit = f.read()
    weights = os.path.join(base, "snapshots", commit, "model.safetensors")
    digest = hashlib.sha256(open(weights, "rb").read()).hexdigest()

    def pin(**changes):
        table = tuple(
            dataclasses.replace(entry, **changes) if w.name == name else w
            for w in registry.PRETRAINED_WEIGHTS
        )
        monkeypatch.setattr(registry, "PRETRAINED_WEIGHTS", table)

    pin(revision=commit, sha256=digest)
    model = keras_vit.from_pretrained(name, cache_dir=cache, local_files_only=True)
    fixture = hub_fixture(f"timm--{name}")
    _close(model(fixture["pixels"]), fixture["logits"])
    pin(revision=commit, sha256="0" * 64)
    with pytest.raises(ValueError, match="does not have the SHA-256"):
        keras_vit.from_pretrained(name, cache_dir=cache, local_files_only=True)
    pin(revision="1" * 40, sha256=digest)
    with pytest.raises(WeightsNotFoundError, match="revision '1111"):
        keras_vit.from_pretrained(name, cache_dir=cache, local_files_only=True)


def test_a_real_size_timm_config_without_model_args(tmp_path):
    """timm's published configs name the architecture and leave out
    `model_args`: the heads come from its size word, the resolution from
    `pretrained_cfg`, and the variant is the table's row."""
    from doc_blocks import timm_checkpoint

    from keras_vit.weights.formats.safetensors import write_safetensors

    folder = tmp_path / "vit_small_patch16_224.augreg_in21k_ft_in1k"
    folder.mkdir()
    tensors = timm_checkpoint("S/16", 224, 1000)
    write_safetensors(folder / "model.safetensors", tensors)
    config = {
        "architecture": "vit_small_patch16_224",
        "num_classes": 1000,
        "num_features": 384,
        "global_pool": "token",
        "pretrained_cfg": {
            "tag": "augreg_in21k_ft_in1k", "input_size": [3, 224, 224],
            "interpolation": "bicubic", "crop_pct": 0.9, "crop_mode": "center",
            "mean": [0.5, 0.5, 0.5], "std": [0.5, 0.5, 0.5], "num_classes": 1000,
        },
    }  # fmt: skip
    (folder / "config.json").write_text(json.dumps(config))
    model = keras_vit.from_pretrained(str(folder))
    layout = keras_vit.ViTLayout.of(model)
    assert (layout.block(0).get_config()["num_heads"], layout.depth) == (6, 12)
    assert model.input_shape == (None, 224, 224, 3) and model.output_shape == (
        None, 1000
    )  # fmt: skip
    reference = keras_vit.ViT("S/16")
    keras_vit.load_weights(reference, str(folder / "model.safetensors"))
    x = np.random.default_rng(0).uniform(-1, 1, (1, 224, 224, 3)).astype("float32")
    np.testing.assert_array_equal(np.asarray(model(x)), np.asarray(reference(x)))
    assert model.preprocessing.crop_fraction == 0.9
