"""What a timm or Hub user expects of checkpoints by name, against the
libraries that wrote them.

The repositories are the tiny ones of `tests/fixtures/hub/` written by timm
and transformers themselves (`scripts/make_hub_fixtures.py`), laid out as a
Hub cache on disk (`helpers.hub_cache`); the catalog of timm names is
`keras_vit/models/zoo/timm_catalog.json`, written from timm by
`scripts/make_timm_catalog.py`, and checked here against timm's
`pretrained_cfg`s recorded in `tests/fixtures/hub/timm_pretrained_cfgs.json`.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import keras
import numpy as np
import pytest
from helpers import HUB
from helpers import hub_cache
from helpers import hub_fixture
from helpers import keras_vit_script

import keras_vit
from keras_vit.models.zoo import timm_catalog
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.errors import WeightsNotFoundError

AUGREG = "vit_base_patch16_224.augreg2_in21k_ft_in1k"


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return hub_cache(tmp_path_factory.mktemp("hf_home"))


def _relative(ours, theirs) -> float:
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    assert ours.shape == theirs.shape
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


# -- transformers repositories: their size, resampling and epsilon ----------


def test_transformers_dinov2_runs_at_its_processors_crop(cache):
    # As facebook/dinov2-*: a position table for 64 px (518 there), a
    # processor cropping 32 px (224); AutoModel resamples the table.
    with open(os.path.join(HUB, "facebook--dinov2-small", "config.json")) as f:
        assert json.load(f)["image_size"] == 64
    model = keras_vit.from_pretrained(
        "hf://facebook/dinov2-small", cache_dir=cache, local_files_only=True
    )
    assert model.input_shape[1:3] == (32, 32)
    assert model.preprocessing.image_size == (32, 32)
    fixture = hub_fixture("facebook--dinov2-small")
    assert _relative(model(fixture["pixels"]), fixture["logits"]) < 1e-5


def test_transformers_vit_resamples_and_normalises_as_transformers(cache):
    fixture = hub_fixture("google--vit-base-patch16-224")
    model = keras_vit.from_pretrained(
        "hf://google/vit-base-patch16-224", cache_dir=cache, local_files_only=True
    )
    # config.json's layer_norm_eps (1e-12), not timm's 1e-6.
    block = model.get_layer("encoderblock_0")
    assert block.layer_norm_epsilon == 1e-12
    assert _relative(model(fixture["pixels"]), fixture["logits"]) < 5e-6
    other = fixture["pixels_other"]  # (2, 48, 40, 3)
    # Another size: transformers' interpolate_pos_encoding, by default.
    resized = keras_vit.from_pretrained(
        "hf://google/vit-base-patch16-224",
        cache_dir=cache,
        local_files_only=True,
        image_size=other.shape[1:3],
    )
    assert _relative(resized(other), fixture["logits_other"]) < 5e-6
    bilinear = keras_vit.from_pretrained(
        "hf://google/vit-base-patch16-224",
        cache_dir=cache,
        local_files_only=True,
        image_size=other.shape[1:3],
        resample_method="reference",
    )
    assert _relative(bilinear(other), fixture["logits_other"]) > 1e-4


# -- names you can list ------------------------------------------------------


def test_list_weights_lists_timm_names_keras_vit_builds():
    tiny = keras_vit.weights.list_weights("vit_tiny*")
    names = [w.name for w in tiny]
    assert "vit_tiny_patch16_224.augreg_in21k_ft_in1k" in names
    row = next(w for w in tiny if w.name == "vit_tiny_patch16_224.augreg_in21k_ft_in1k")
    assert (row.family, row.variant, row.num_classes) == ("vit", "Ti/16", 1000)
    assert row.license == "apache-2.0" and not row.pinned
    assert row.hub_repo == "timm/vit_tiny_patch16_224.augreg_in21k_ft_in1k"
    assert row.preprocessing.mean == (0.5, 0.5, 0.5)
    # The package's own names and tags are still there, and searchable.
    assert "vit_b16.augreg_in21k" in {w.name for w in keras_vit.weights.list_weights()}
    dinov2 = keras_vit.weights.list_weights(family="dinov2")
    assert dinov2 and all(w.family == "dinov2" for w in dinov2)
    with pytest.raises(ValueError, match="Unknown family 'dinov9'"):
        keras_vit.weights.list_weights(family="dinov9")


def test_the_catalogs_contracts_are_timms():
    """Every catalog row that timm's recorded pretrained_cfgs have states
    the same contract (timm wrote both)."""
    with open(os.path.join(HUB, "timm_pretrained_cfgs.json")) as f:
        timm_cfgs = json.load(f)
    rows = {w.name: w for w in timm_catalog.checkpoints()}
    shared = sorted(set(rows) & set(timm_cfgs))
    assert len(shared) > 50
    for name in shared:
        cfg, row = timm_cfgs[name], rows[name]
        assert row.num_classes == cfg["num_classes"], name
        assert row.license == cfg.get("license"), name
        assert row.preprocessing.mean == pytest.approx(tuple(cfg["mean"])), name
        assert row.preprocessing.std == pytest.approx(tuple(cfg["std"])), name
        assert row.preprocessing.interpolation == cfg["interpolation"], name
        assert row.image_size == cfg["input_size"][-1], name
    # Each row is a timm name from_pretrained takes, of a registered family.
    families = {f.name for f in keras_vit.models.zoo.families()}
    for row in rows.values():
        assert keras_vit.weights.sources.TIMM_NAME.match(row.name), row.name
        assert row.family in families, row.name


def test_a_listed_name_fetches_and_an_unlisted_one_says_so(cache):
    model = keras_vit.from_pretrained(AUGREG, cache_dir=cache, local_files_only=True)
    assert model.output_shape == (None, 10)
    empty = os.path.join(os.path.dirname(cache), "empty")
    listed = "vit_tiny_patch16_224.augreg_in21k_ft_in1k"
    with pytest.raises(WeightsNotFoundError) as error:
        keras_vit.from_pretrained(listed, cache_dir=empty, local_files_only=True)
    message = str(error.value)
    assert "needs one download" in message and "Did you mean" not in message
    with pytest.raises(WeightsNotFoundError) as error:
        keras_vit.from_pretrained(
            "vit_tiny_patch16_224.augreg_in21k_ft_in1kk",
            cache_dir=empty,
            local_files_only=True,
        )
    message = str(error.value)
    assert "is not among the checkpoints of timm" in message
    assert f"Did you mean {listed!r}" in message


# -- the pretrained config ---------------------------------------------------


def test_pretrained_cfg_is_timms_and_survives_keras_files_and_folders(cache, tmp_path):
    model = keras_vit.from_pretrained(AUGREG, cache_dir=cache, local_files_only=True)
    cfg = model.pretrained_cfg
    with open(os.path.join(HUB, f"timm--{AUGREG}", "config.json")) as f:
        written = json.load(f)
    assert cfg["hf_hub_id"] == f"timm/{AUGREG}"
    assert cfg["architecture"] == written["architecture"]
    assert cfg["tag"] == "augreg2_in21k_ft_in1k"
    for key in ("license", "mean", "std", "crop_pct", "interpolation", "input_size"):
        assert cfg[key] == written["pretrained_cfg"][key], key
    with pytest.raises(TypeError):
        cfg["license"] = "mine"  # read-only
    kept = ("hf_hub_id", "architecture", "tag", "license", "mean", "input_size")
    path = os.path.join(tmp_path, "model.keras")
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert {k: loaded.pretrained_cfg[k] for k in kept} == {k: cfg[k] for k in kept}
    folder = keras_vit.save_pretrained(loaded, os.path.join(tmp_path, "folder"))
    again = keras_vit.from_pretrained(folder)
    assert {k: again.pretrained_cfg[k] for k in kept} == {k: cfg[k] for k in kept}
    with open(os.path.join(folder, "config.json")) as f:
        saved = json.load(f)
    # timm's own fields only, and not where the weights came from.
    assert "hf_hub_id" not in saved["pretrained_cfg"]
    assert saved["pretrained_cfg"]["tag"] == "augreg2_in21k_ft_in1k"
    assert saved["pretrained_cfg"]["license"] == cfg["license"]
    # A model built without a checkpoint has none.
    assert keras_vit.ViT("test/4", image_size=16, num_classes=3).pretrained_cfg is None


# -- recovering from a bad cache ---------------------------------------------


def test_a_truncated_cached_file_names_the_way_out(tmp_path, monkeypatch):
    import huggingface_hub

    cache = hub_cache(tmp_path, {f"timm/{AUGREG}": f"timm--{AUGREG}"})
    (snapshot,) = os.listdir(
        os.path.join(cache, f"models--timm--{AUGREG}", "snapshots")
    )
    weights = os.path.join(
        cache, f"models--timm--{AUGREG}", "snapshots", snapshot, "model.safetensors"
    )
    good = weights + ".good"
    shutil.copy(weights, good)
    with open(weights, "r+b") as f:  # a download cut short
        f.truncate(os.path.getsize(weights) // 2)
    with pytest.raises(CheckpointError) as error:
        keras_vit.from_pretrained(AUGREG, cache_dir=cache, local_files_only=True)
    assert "force_download=True" in str(error.value)
    assert "--force-download" in str(error.value)

    # The step works: force_download reaches huggingface_hub, which fetches
    # the file again (here: the Hub's copy is the good file).
    real = huggingface_hub.hf_hub_download
    forced = []

    def download(repo_id, filename, **kwargs):
        forced.append(kwargs.get("force_download"))
        offline = {"force_download": False, "local_files_only": True}
        path = real(repo_id, filename, **{**kwargs, **offline})
        if kwargs.get("force_download") and filename == "model.safetensors":
            shutil.copy(good, path)
        return path

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    model = keras_vit.from_pretrained(
        AUGREG, cache_dir=cache, local_files_only=False, force_download=True
    )
    assert forced and all(forced)
    fixture = hub_fixture(f"timm--{AUGREG}")
    assert _relative(model(fixture["pixels"]), fixture["logits"]) < 1e-4


def test_a_timm_folder_without_its_heads_is_refused_in_one_line(tmp_path):
    # timm writes no model_args for a default architecture; a name without
    # a size word (timm's test_vit, aimv2_*) then records no head count.
    folder = tmp_path / "mystery"
    shutil.copytree(os.path.join(HUB, f"timm--{AUGREG}"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["architecture"] = "mystery_vit_patch8"
    config.pop("model_args", None)
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="does not record its attention heads"):
        keras_vit.from_pretrained(str(folder))


def test_the_command_line_forces_a_download(tmp_path):
    """`--force-download` reaches huggingface_hub: offline, it can only say
    that it cannot, in one line, exit 2."""
    hub_cache(tmp_path, {f"timm/{AUGREG}": f"timm--{AUGREG}"})
    env = dict(os.environ, HF_HOME=str(tmp_path), HF_HUB_OFFLINE="1")
    env.pop("HF_HUB_CACHE", None)
    image = os.path.join(HUB, "images", "a.jpg")
    command = [keras_vit_script(), "predict", "--model", AUGREG, image]
    run = subprocess.run(
        [*command, "--force-download"], env=env, capture_output=True, text=True
    )
    assert run.returncode == 2, run.stderr
    errors = [line for line in run.stderr.splitlines() if line.startswith("error")]
    assert len(errors) == 1, run.stderr
    assert "force_download needs the network" in errors[0], run.stderr


def test_a_timm_config_without_model_args_gets_timms_heads():
    """timm's published configs of `vit_betwixt_*`, `vit_mediumd_*`, ...
    record no heads and their names no size word: the catalog has timm's."""
    from keras_vit.weights.blueprint import num_heads_of

    config = {"architecture": "vit_betwixt_patch16_reg4_gap_256"}
    assert num_heads_of("timm", config, 640) == 10  # not 640 // 64
    with open(os.path.join(HUB, "timm_architectures.json")) as f:
        recorded = json.load(f)  # timm's own, for the zoo's architectures
    assert len(recorded) > 50
    for arch, args in recorded.items():
        assert timm_catalog.num_heads(arch) == args["num_heads"], arch


def _renamed(tmp_path, architecture: str):
    """The tiny timm repository, its config naming another architecture."""
    folder = tmp_path / architecture
    shutil.copytree(os.path.join(HUB, f"timm--{AUGREG}"), folder)
    config = json.loads((folder / "config.json").read_text())
    config["architecture"] = architecture
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def test_timm_architectures_keras_vit_computes_otherwise_are_refused(tmp_path):
    # The catalog's check found this one far from timm: never a silent model.
    far = _renamed(tmp_path, "eva02_enormous_patch14_clip_224")
    with pytest.raises(CheckpointError, match="does not compute timm's"):
        keras_vit.from_pretrained(far)
    quick = _renamed(tmp_path, "vit_base_patch16_clip_quickgelu_224")
    with pytest.raises(CheckpointError, match="QuickGELU"):
        keras_vit.from_pretrained(quick)
    # Close to timm but over the check's 1e-4: loaded, with a warning.
    close = _renamed(tmp_path, "beit3_base_patch16_224")
    with pytest.warns(UserWarning, match="over the 1e-4"):
        model = keras_vit.from_pretrained(close)
    fixture = hub_fixture(f"timm--{AUGREG}")
    assert _relative(model(fixture["pixels"]), fixture["logits"]) < 1e-4
