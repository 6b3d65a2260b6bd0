"""The model card of a pretrained folder: what the Hub reads, and its snippets.

The front matter is parsed by `huggingface_hub.ModelCard` (the Hub's own
reader); the card's keras_vit snippet is executed against a Hub cache built
on disk (`helpers.hub_cache`, offline), and `push_to_hub` runs against a
stand-in for `huggingface_hub.HfApi`. The card's timm snippet needs timm and
torch, which the tests do not have: `scripts/check_model_card.py` executes
it.
"""

from __future__ import annotations

import json
import os
import re
import shutil

import huggingface_hub
import numpy as np
import pytest
from helpers import hub_cache
from helpers import images
from helpers import randomize
from helpers import tiny_model
from PIL import Image

import keras_vit
from keras_vit.model_card import card_fields
from keras_vit.model_card import render_card

REPO = "me/tiny-vit"
HOSTILE = 'a: "b" #c\nd \\ é 🙂'  # YAML's specials, a newline, non-ASCII


def _snippets(card: str) -> dict[str, str]:
    """The card's Python blocks, by the library named above each."""
    found = re.findall(r"With (\w+)[^\n]*\n\n```python\n(.*?)\n```", card, re.S)
    return dict(found)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A classifier and an encoder saved as folders, with their models."""
    root = tmp_path_factory.mktemp("saved")
    folders = {}
    for kind, top in (("classifier", True), ("encoder", False)):
        model = tiny_model(include_top=top)
        randomize(model, seed=3)
        folder = keras_vit.save_pretrained(
            model, root / kind, repo_id=REPO, metrics={"top1": 0.5}, license="mit",
            model_card={"datasets": ["cifar10"], "tags": ["tiny"],
                        "details": {"Dataset": "ImageNet-1k"}},
        )  # fmt: skip
        folders[kind] = (model, folder)
    return folders


@pytest.mark.parametrize("kind", ["classifier", "encoder"])
def test_the_hub_reads_timm_its_task_licence_and_metrics(saved, kind):
    _, folder = saved[kind]
    data = huggingface_hub.ModelCard.load(os.path.join(folder, "README.md")).data
    assert data.library_name == "timm"  # what loads the folder; not keras
    task = (
        "image-classification" if kind == "classifier" else "image-feature-extraction"
    )
    assert data.pipeline_tag == task
    assert data.license == "mit"
    assert data.tags == [task, "timm", "keras_vit", "vision-transformer", "tiny"]
    assert data.metrics == ["top1"]
    assert data.datasets == ["cifar10", "imagenet-1k"]  # timm's `Dataset` too
    card = open(os.path.join(folder, "README.md"), encoding="utf-8").read()
    assert "| top1 | 0.5 |" in card and "<" not in card
    snippets = _snippets(card)
    assert f'keras_vit.from_pretrained("hf://{REPO}")' in snippets["keras_vit"]
    assert f'timm.create_model("hf-hub:{REPO}", pretrained=True)' in snippets["timm"]


def test_hostile_values_stay_one_value_each(saved):
    _, folder = saved["classifier"]
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    fields = {"tags": [HOSTILE, "true", "1.0"], "license": "other",
              "license_name": HOSTILE, "datasets": "org/data-set"}  # fmt: skip
    card = render_card(config, metrics={HOSTILE: 1}, repo_id=REPO, fields=fields)
    data = huggingface_hub.ModelCard(card).data
    assert data.tags[-3:] == [HOSTILE, "true", "1.0"]  # strings, not a bool, a float
    assert data.license_name == HOSTILE and data.metrics == [HOSTILE]
    assert data.datasets == ["org/data-set"]
    assert '| a: "b" #c d \\ é 🙂 | 1 |' in card  # one table row


@pytest.mark.parametrize("kind", ["classifier", "encoder"])
def test_the_keras_vit_snippet_loads_the_model_from_the_hub(
    saved, kind, tmp_path, monkeypatch
):
    model, folder = saved[kind]
    cache = hub_cache(tmp_path, {REPO: os.path.abspath(folder)})
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", cache)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.chdir(tmp_path)
    Image.new("RGB", (40, 48), (200, 30, 90)).save("image.jpg")
    card = open(os.path.join(folder, "README.md"), encoding="utf-8").read()
    namespace = {}
    exec(_snippets(card)["keras_vit"], namespace)  # noqa: S102 - the card's code
    loaded = namespace["model"]
    x = images()
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(model(x)))
    if kind == "encoder":
        assert namespace["features"].shape == (1, 32)


def test_a_folder_card_loads_from_the_folder(tmp_path):
    folder = keras_vit.save_pretrained(tiny_model(), tmp_path / "my-vit")
    card = open(os.path.join(folder, "README.md"), encoding="utf-8").read()
    snippets = _snippets(card)
    assert f"keras_vit.from_pretrained({json.dumps(str(folder))})" in card
    assert f'"local-dir:{folder}"' in snippets["timm"]
    # A URL's card: a local copy of the folder, by its name.
    with open(os.path.join(folder, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    card = render_card(config, folder="gs://bucket/models/my-vit")
    assert 'keras_vit.from_pretrained("my-vit")' in card
    assert "From a local copy of `gs://bucket/models/my-vit`" in card


class _FakeApi:
    """Records what `push_to_hub` asks of `huggingface_hub.HfApi`; the
    repository of a bare name is `me/<name>`, as the Hub's for user `me`."""

    calls: list = []
    store: str = ""

    def __init__(self, token=None, **kwargs):
        _FakeApi.calls.append(("HfApi", token, kwargs.get("library_name")))

    def create_repo(self, repo_id, private=None, exist_ok=False, token=None):
        _FakeApi.calls.append(("create_repo", repo_id, private, exist_ok))
        return huggingface_hub.RepoUrl(
            f"https://huggingface.co/{repo_id if '/' in repo_id else 'me/' + repo_id}"
        )

    def upload_folder(self, *, repo_id, folder_path, revision, commit_message,
                      create_pr, token):  # fmt: skip
        _FakeApi.calls.append(("upload_folder", repo_id, revision, create_pr))
        shutil.copytree(folder_path, os.path.join(_FakeApi.store, repo_id))
        url = f"https://huggingface.co/{repo_id}"
        return huggingface_hub.CommitInfo(
            commit_url=f"{url}/commit/0", commit_message=commit_message,
            commit_description="", oid="0" * 40,
            pr_url=f"{url}/discussions/1" if create_pr else None,
        )  # fmt: skip


@pytest.fixture
def fake_hub(tmp_path, monkeypatch):
    _FakeApi.calls, _FakeApi.store = [], str(tmp_path / "hub")
    monkeypatch.setattr(huggingface_hub, "HfApi", _FakeApi)
    return _FakeApi


def test_push_to_hub_opens_a_pr_with_the_card_filled_in(saved, fake_hub):
    model, _ = saved["classifier"]
    url = keras_vit.push_to_hub(
        model, REPO, token="t", revision="dev", create_pr=True, metrics={"top1": 0.5},
        model_card={"description": "Tiny.", "citation": "@misc{tiny}"},
    )  # fmt: skip
    assert url == f"https://huggingface.co/{REPO}/discussions/1"
    assert fake_hub.calls == [
        ("HfApi", "t", "keras_vit"),
        ("create_repo", REPO, None, True),
        ("upload_folder", REPO, "dev", True),
    ]
    card = open(
        os.path.join(fake_hub.store, REPO, "README.md"), encoding="utf-8"
    ).read()
    snippets = _snippets(card)
    assert f'from_pretrained("hf://{REPO}@dev")' in snippets["keras_vit"]
    assert f'create_model("hf-hub:{REPO}@dev", pretrained=True)' in snippets["timm"]
    assert "<" not in card and "# tiny-vit" in card and "@misc{tiny}" in card


def test_push_to_hub_names_the_owner_the_hub_gave(saved, fake_hub):
    model, _ = saved["encoder"]
    url = keras_vit.push_to_hub(model, "tiny-vit")
    assert url == "https://huggingface.co/me/tiny-vit/commit/0"
    assert fake_hub.calls[-1] == ("upload_folder", "me/tiny-vit", None, False)
    card = open(os.path.join(fake_hub.store, "me/tiny-vit", "README.md")).read()
    assert 'from_pretrained("hf://me/tiny-vit")' in card


def test_bad_card_fields_stop_before_the_hub_is_asked(saved, fake_hub, tmp_path):
    model, _ = saved["encoder"]
    with pytest.raises(ValueError, match=r"Unknown model card fields \['Licence'\]"):
        keras_vit.push_to_hub(model, REPO, model_card={"Licence": "mit"})
    with pytest.raises(ValueError, match="Two licences"):
        keras_vit.push_to_hub(model, REPO, license="mit", model_card={"license": "x"})
    with pytest.raises(TypeError, match=r"model_card\['tags'\] must be a str or"):
        keras_vit.save_pretrained(model, tmp_path / "m", model_card={"tags": [1]})
    assert fake_hub.calls == [] and not os.path.exists(tmp_path / "m")
    assert card_fields({"license": "mit"}, "mit") == {"license": "mit"}
