"""`save_pretrained` -> `from_pretrained` round trips, `push_to_hub` against a
stand-in for the Hub API, and `keras-vit convert` of a run's model."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
from helpers import keras_vit_script
from helpers import randomize

import keras_vit
from keras_vit import pretrained

OPTION_SETS = {
    "paper": dict(),
    "deit3": dict(layer_scale_init=1e-6, no_embed_class=True),
    "dinov2": dict(num_registers=4, layer_scale_init=1e-5, no_embed_class=True),
    "siglip": dict(class_token=False, pooling="map", no_embed_class=True),
    "gap_fc_norm_qk_norm": dict(class_token=False, pooling="gap", fc_norm=True,
                                qk_norm=True),
    "rpn": dict(keras_vit.FAMILIES["rpn"].arguments()),
    "tanh_gelu_no_proj_bias": dict(gelu_approximate=True, proj_bias=False),
    "dinov2_swiglu": dict(num_registers=4, layer_scale_init=1e-5,
                          no_embed_class=True, mlp="swiglu"),
}  # fmt: skip
# The timm architecture and model_args each option set is written with.
WRITTEN_AS = {
    "rpn": ("vit_base_patch16_rpn_224", {}),
    "tanh_gelu_no_proj_bias": (
        "vit_base_patch16_224",
        {"act_layer": "gelu_tanh", "proj_bias": False},
    ),
    # timm's SwiGLUPacked is twice the width after its gate (64) before it.
    "dinov2_swiglu": ("vit_giant_patch14_reg4_dinov2", {"mlp_ratio": 4.0}),
}


def _model(options, **kwargs):
    kwargs.setdefault("num_classes", 3)
    model = keras_vit.ViT("test/4", image_size=16, **options, **kwargs)
    randomize(model, seed=1)
    return model


def _pixels(seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (2, 16, 16, 3)).astype("float32")


@pytest.mark.parametrize("kind", list(OPTION_SETS))
def test_round_trip_is_bit_exact(tmp_path, kind):
    prep = keras_vit.Preprocessing(
        mean=keras_vit.models.IMAGENET_MEAN, std=keras_vit.models.IMAGENET_STD,
        interpolation="bicubic", crop_fraction=0.9, crop_mode="center",
        antialias=True, image_size=(16, 16),
    )  # fmt: skip
    model = _model(OPTION_SETS[kind], preprocessing=prep)
    folder = keras_vit.save_pretrained(
        model, tmp_path / "saved", class_names=["a", "b", "c"]
    )
    assert sorted(os.listdir(folder)) == [
        "README.md",
        "config.json",
        "model.safetensors",
    ]
    loaded = keras_vit.from_pretrained(folder)
    x = _pixels()
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(model(x)))
    assert loaded.preprocessing == prep
    assert loaded.class_names == ("a", "b", "c")
    layout = keras_vit.ViTLayout.of(loaded)
    assert layout.encoder_options == keras_vit.ViTLayout.of(model).encoder_options
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    # timm's Hub config, read by timm.create_model(pretrained=True, ...).
    assert config["num_classes"] == 3 and config["label_names"] == ["a", "b", "c"]
    assert config["pretrained_cfg"]["mean"] == list(keras_vit.models.IMAGENET_MEAN)
    assert config["pretrained_cfg"]["crop_pct"] == 0.9
    assert config["model_args"]["embed_dim"] == 32
    architecture, args = WRITTEN_AS.get(kind, (config["architecture"], {}))
    assert config["architecture"] == architecture
    assert args.items() <= config["model_args"].items()


@pytest.mark.parametrize(
    "options, unwritten",
    [
        (dict(embedding_norm=True), "embedding_norm=True"),
        (dict(norm="rms", class_token=False, pooling="gap"), "norm='rms'"),
        (dict(layer_norm_epsilon=1e-12), "layer_norm_epsilon=1e-12"),
        (dict(res_post_norm=True, mlp="swiglu"), "res_post_norm=True"),
    ],
)
def test_what_timm_cannot_build_is_refused_and_nothing_written(
    tmp_path, options, unwritten
):
    """An option neither timm's architecture nor its model_args has is
    named, and no folder is left: timm would build another network."""
    model = _model(options)
    with pytest.raises(ValueError, match="as a timm folder") as info:
        keras_vit.save_pretrained(model, tmp_path / "saved")
    assert unwritten in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "saved").exists()


def test_headless_round_trip(tmp_path):
    model = _model(OPTION_SETS["dinov2"], include_top=False)
    folder = keras_vit.save_pretrained(model, tmp_path / "enc")
    loaded = keras_vit.from_pretrained(folder)
    x = _pixels(1)
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(model(x)))
    assert "head" not in [layer.name for layer in loaded.layers]


def test_existing_folder_is_kept_unless_overwrite(tmp_path):
    model = _model({})
    folder = keras_vit.save_pretrained(model, tmp_path / "m")
    before = open(os.path.join(folder, "model.safetensors"), "rb").read()
    with pytest.raises(FileExistsError, match="overwrite=True"):
        keras_vit.save_pretrained(_model({}, num_classes=5), folder)
    assert open(os.path.join(folder, "model.safetensors"), "rb").read() == before


def test_a_failed_write_leaves_the_old_folder_and_no_debris(tmp_path, monkeypatch):
    model = _model({})
    folder = keras_vit.save_pretrained(model, tmp_path / "m")
    files = {n: open(os.path.join(folder, n), "rb").read() for n in os.listdir(folder)}

    def disk_full(tensors, path):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(pretrained, "_write_safetensors", disk_full)
    with pytest.raises(OSError, match="No space"):
        keras_vit.save_pretrained(_model({}, num_classes=5), folder, overwrite=True)
    with pytest.raises(OSError, match="No space"):
        keras_vit.save_pretrained(model, tmp_path / "new")
    assert sorted(os.listdir(tmp_path)) == ["m"]  # no temporary folder left
    assert {n: open(os.path.join(folder, n), "rb").read() for n in files} == files


class _FakeApi:
    """Records what `push_to_hub` asks of `huggingface_hub.HfApi`."""

    calls: list = []
    store: str = ""

    def __init__(self, token=None, **kwargs):
        self.token = token

    def create_repo(self, repo_id, private=None, exist_ok=False, token=None):
        _FakeApi.calls.append(("create_repo", repo_id, private, exist_ok))

    def upload_folder(
        self, repo_id, folder_path, revision, commit_message, create_pr, token
    ):
        _FakeApi.calls.append(("upload_folder", repo_id, revision, commit_message))
        shutil.copytree(folder_path, os.path.join(_FakeApi.store, repo_id))

        class Info:
            commit_url = f"https://huggingface.co/{repo_id}/commit/0"

        return Info()


def test_push_to_hub_uploads_a_loadable_folder(tmp_path, monkeypatch):
    import huggingface_hub

    _FakeApi.calls, _FakeApi.store = [], str(tmp_path / "hub")
    monkeypatch.setattr(huggingface_hub, "HfApi", _FakeApi)
    model = _model(OPTION_SETS["deit3"])
    url = keras_vit.push_to_hub(
        model, "me/tiny-vit", private=True, metrics={"top1": 0.5}, license="mit"
    )
    assert url == "https://huggingface.co/me/tiny-vit/commit/0"
    assert [c[0] for c in _FakeApi.calls] == ["create_repo", "upload_folder"]
    assert _FakeApi.calls[0] == ("create_repo", "me/tiny-vit", True, True)
    uploaded = os.path.join(_FakeApi.store, "me/tiny-vit")
    card = open(os.path.join(uploaded, "README.md")).read()
    assert "license: mit" in card and "| top1 | 0.5 |" in card
    loaded = keras_vit.from_pretrained(uploaded)
    x = _pixels(2)
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(model(x)))


def test_convert_writes_a_runs_model_as_a_folder(tmp_path):
    """`keras-vit convert final.keras DIR`: the run's metrics in the card."""
    run = tmp_path / "run"
    run.mkdir()
    model = _model(
        OPTION_SETS["deit3"],
        preprocessing=keras_vit.models.Preprocessing(
            mean=keras_vit.models.IMAGENET_MEAN, std=keras_vit.models.IMAGENET_STD
        ),
    )
    model.class_names = ["x", "y", "z"]
    model.save(run / "final.keras")
    (run / "results.json").write_text(json.dumps({"test": {"accuracy": 0.75}}))
    (run / "config.json").write_text(json.dumps({"epochs": 3}))
    out = tmp_path / "folder"
    result = subprocess.run(
        [keras_vit_script(), "convert", str(run / "final.keras"), str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    assert "Wrote" in result.stdout
    card = (out / "README.md").read_text()
    assert "| accuracy | 0.75 |" in card and '"epochs": 3' in card
    loaded = keras_vit.from_pretrained(str(out))
    x = _pixels(3)
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(model(x)))
    assert loaded.class_names == ("x", "y", "z")
    assert loaded.preprocessing.mean == keras_vit.models.IMAGENET_MEAN
    again = subprocess.run(
        [keras_vit_script(), "convert", str(run / "final.keras"), str(out)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert again.returncode == 2 and "--overwrite" in again.stderr


def test_keras_file_keeps_the_contract_and_class_names(tmp_path):
    prep = keras_vit.Preprocessing(
        mean=keras_vit.models.IMAGENET_MEAN, std=keras_vit.models.IMAGENET_STD,
        interpolation="bicubic", crop_fraction=0.875, crop_mode="center",
    )  # fmt: skip
    model = _model({}, preprocessing=prep, include_preprocessing=True)
    model.class_names = ["a", "b", "c"]
    model.save(tmp_path / "m.keras")
    import keras

    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert loaded.preprocessing == prep and loaded.class_names == ("a", "b", "c")
    assert loaded.get_config()["preprocessing"] == prep.get_config()
    raw = np.random.default_rng(0).uniform(0, 255, (2, 16, 16, 3)).astype("float32")
    np.testing.assert_array_equal(np.asarray(loaded(raw)), np.asarray(model(raw)))
    expected = (raw / 255.0 - np.array(prep.mean)) / np.array(prep.std)
    plain = _model({}, preprocessing=prep)
    plain.set_weights(model.get_weights())
    np.testing.assert_allclose(
        np.asarray(model(raw)), np.asarray(plain(expected.astype("float32"))),
        rtol=1e-5, atol=1e-5,
    )  # fmt: skip


def test_weights_from_a_keras_file_bring_its_contract(tmp_path):
    """Fine-tuning from a saved DeiT III keeps ImageNet's statistics."""
    source = keras_vit.models.family_model(
        "test/4", "deit3", image_size=16, num_classes=3
    )
    source.class_names = ["a", "b", "c"]
    source.save(tmp_path / "deit3.keras")
    target = _model(OPTION_SETS["deit3"])
    assert target.preprocessing == keras_vit.Preprocessing()
    notes = keras_vit.load_weights(target, str(tmp_path / "deit3.keras"))
    assert "Inputs are now prepared as the weights were" in notes[-1]
    assert target.preprocessing == source.preprocessing
    assert target.class_names == ("a", "b", "c")
    other = _model(OPTION_SETS["deit3"])  # from the model in memory too
    keras_vit.load_weights(other, source)
    assert other.preprocessing == source.preprocessing
