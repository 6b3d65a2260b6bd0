"""Checkpoint names on the command line: `init_from`, `--model`, `--weights`.

`train`'s `init_from` takes every name `keras_vit.from_pretrained` takes
(`hf://org/repo`, a timm name, a tag), found by the weights library from
a Hub cache built on disk (`helpers.hub_cache`), offline; an unknown name,
or one whose files cannot be found, is one line, exit status 2, before
anything is written. The same for `predict`, `validate`, `convert` and
`export` (a name not in the cache offline cannot be told from one that
exists nowhere: both are argument errors). And `validate` on a folder that
is no dataset says what the folder holds and what it reads.

The training run itself is checked where the recipe builds its model
(`train.build_model`: the call that loads `init_from`), a whole run being
too slow here; the refusal runs as a user runs it, through the installed
`keras-vit` script, with `HF_HOME` and `HF_HUB_OFFLINE=1`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import subprocess

import numpy as np
import pytest
from helpers import HUB
from helpers import digits_run_config
from helpers import hub_cache
from helpers import keras_vit_script
from PIL import Image

from keras_vit.recipes import convert
from keras_vit.recipes import export
from keras_vit.recipes import predict
from keras_vit.recipes import rundir
from keras_vit.recipes import train
from keras_vit.recipes import validate
from keras_vit.recipes.configs.base import ConfigError
from keras_vit.recipes.configs.base import override
from keras_vit.recipes.initialise import check_init_from

DEIT3 = "deit3_small_patch16_224.fb_in22k_ft_in1k"  # Tiny: 32 wide, patch 8.
# Well formed, in no cache: `timm/vit_tiny_patch16_224.nonexistent_tag`.
UNCACHED = "vit_tiny_patch16_224.nonexistent_tag"


@pytest.fixture
def offline_hub(tmp_path, monkeypatch):
    """The fixture repositories in a Hub cache, read offline, in-process."""
    from huggingface_hub import constants

    cache = hub_cache(tmp_path / "hf_home")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", cache)
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def _exit(main, argv, capsys) -> tuple[int, list[str]]:
    """`main(argv)`'s exit status and its `error:` lines."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    return exit_.value.code, [x for x in err.splitlines() if x.startswith("error: ")]


# -- train: init_from ------------------------------------------------------------
def test_init_from_a_hub_name_fits_by_the_overrides_it_names(offline_hub, tmp_path):
    """The misfit names every override (the class token's position row
    too); with them, the recipe's model starts from the cached checkpoint:
    timm's logits."""
    config = digits_run_config(
        tmp_path / "run", f"init_from='hf://timm/{DEIT3}'", "image_size=32"
    )
    check_init_from(config, urls=True, resolve=True)
    rundir.check_paths(config)  # A name is no path: no file system asked.
    with pytest.raises(ValueError) as misfit:
        train.build_model(config, 10, say=lambda _: None)
    first = str(misfit.value).splitlines()[0]
    assert first.startswith(f"init_from='hf://timm/{DEIT3}' does not fit"), first
    fixes = re.findall(r"--set (\S+)", first)
    assert set(fixes) == {
        "encoder.class_token=true", "encoder.pooling=token",
        "encoder.layer_scale_init=1e-5", "encoder.no_embed_class=true",
        "variant=32x2x64xH/8",
    }  # fmt: skip
    fixed = override(config, [fix.replace("xH/", "x2/") for fix in fixes])
    said = []
    model = train.build_model(fixed, 10, say=said.append)
    assert said[0] == f"Initialised from hf://timm/{DEIT3}."
    with np.load(os.path.join(HUB, f"timm--{DEIT3}.npz")) as fixture:
        logits = np.asarray(model(fixture["pixels"], training=False))
        np.testing.assert_allclose(logits, fixture["logits"], rtol=1e-4, atol=1e-4)


def test_init_from_names_are_checked_by_the_library(offline_hub, tmp_path):
    def config(value):
        return digits_run_config(tmp_path / "run", f"init_from={value!r}")

    for name in (f"hf://timm/{DEIT3}", f"hf-hub:timm/{DEIT3}", "augreg_in21k"):
        check_init_from(config(name))  # The command line's check: no file.
        rundir.check_paths(config(name))
    check_init_from(config(f"hf://timm/{DEIT3}@main"), urls=True, resolve=True)
    refused = {
        "not_a_checkpoint": "Unknown weights 'not_a_checkpoint': not a file",
        "hf://no_org": "is not a Hub repository name",
        f"hf://timm/{UNCACHED}": f"timm/{UNCACHED}/config.json at revision 'main' "
        f"is not in the Hub cache {offline_hub!r} (offline mode",
        UNCACHED: f"is not in the Hub cache {offline_hub!r}",
    }
    for value, reason in refused.items():
        with pytest.raises(ConfigError) as error:
            check_init_from(config(value), urls=True, resolve=True)
        message = str(error.value)
        assert message.startswith(f"init_from={value!r}: ") and reason in message
        assert "\n" not in message, message
    assert not (tmp_path / "run").exists()


def test_train_refuses_an_uncached_hub_name_in_one_line_writing_nothing(tmp_path):
    hub_cache(tmp_path)
    env = dict(os.environ, HF_HOME=str(tmp_path), HF_HUB_OFFLINE="1")
    env.pop("HF_HUB_CACHE", None)
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    workdir = tmp_path / "run"
    process = subprocess.run(
        [keras_vit_script(), "train", "--set", f"init_from=hf://timm/{UNCACHED}",
         "--set", f"workdir={workdir}", "--set", "epochs=1"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert process.returncode == 2, process.stderr[-3000:]
    assert "Traceback" not in process.stderr
    (line,) = [x for x in process.stderr.splitlines() if x.startswith("error: ")]
    assert line.startswith(
        f"error: init_from='hf://timm/{UNCACHED}': timm/{UNCACHED}/config.json "
        f"at revision 'main' is not in the Hub cache {str(tmp_path / 'hub')!r}"
    ), line
    assert "huggingface-cli download" in line
    assert not workdir.exists()


# -- predict, validate, convert, export: a name that cannot be found ------------
def test_a_name_that_cannot_be_found_exits_2_in_one_line(offline_hub, tmp_path, capsys):
    """Not in the cache offline (a name that exists nowhere cannot be told
    from one not yet downloaded), or unknown: an argument error, exit 2."""
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(tmp_path / "a.png")
    os.makedirs(tmp_path / "images" / "cat")
    Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(tmp_path / "images/cat/1.png")
    not_cached = f"is not in the Hub cache {offline_hub!r}"
    images = f"folder:{tmp_path / 'images'}"
    hub = f"hf://timm/{UNCACHED}"
    cases = [
        (predict.main, ["--model", UNCACHED, str(tmp_path / "a.png")], not_cached),
        (predict.main, ["--model", hub, str(tmp_path / "a.png")], not_cached),
        (predict.main, ["--model", "not_a_name", str(tmp_path / "a.png")],
         "Unknown weights 'not_a_name'"),
        (validate.main, ["--model", hub, "--data", images], not_cached),
        (convert.main, [hub, str(tmp_path / "out.keras")], not_cached),
        (export.main, ["--variant", "test/8", "--weights", hub, "--name", "x",
                       "--version", "1", "--base-dir", str(tmp_path / "exported")],
         not_cached),
    ]  # fmt: skip
    for main, argv, reason in cases:
        code, lines = _exit(main, argv, capsys)
        assert code == 2 and len(lines) == 1, (argv, code, lines)
        assert reason in lines[0], lines[0]
    assert not (tmp_path / "out.keras").exists()
    assert not (tmp_path / "exported").exists()


# -- validate: a folder that is no dataset -------------------------------------
def test_validate_says_what_a_folder_holds_and_the_layouts_it_reads(tmp_path, capsys):
    folder = tmp_path
    layouts = (
        "validate reads folder:DIR as DIR/<class>/<image files> (all its images) "
        "or as split sub-folders DIR/validation/<class>/<image files> (or test/, "
        "train/; --split picks one)"
    )
    flat = folder / "flat"
    flat.mkdir()
    for i in range(2):
        Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(flat / f"{i}.png")
    (folder / "empty").mkdir()
    cases = {
        "flat": f"{str(flat)!r} holds 2 image files but no class sub-folders to "
        "label them",
        "empty": f"{str(folder / 'empty')!r} is an empty folder",
        "missing": f"there is no folder {str(folder / 'missing')!r}",
    }
    for name, problem in cases.items():
        data = f"folder:{folder / name}"
        code, lines = _exit(
            validate.main, ["--model", "unused.keras", "--data", data], capsys
        )
        assert code == 2 and lines == [f"error: --data {data}: {problem}; {layouts}"]
    # Only a train/ split (and a val/ folder): never validated silently.
    for split in ("train", "val"):
        os.makedirs(folder / "splits" / split / "cat")
    data = f"folder:{folder / 'splits'}"
    code, lines = _exit(validate.main, ["--model", "x.keras", "--data", data], capsys)
    assert code == 2 and lines == [
        f"error: --data {data} has a train/ split but no validation/ or test/ one: "
        f"pass --split train to validate on its training images, or --data "
        f"folder:{folder / 'splits' / 'val'} to validate on the images in val/"
    ]


def test_a_name_is_no_path_for_the_url_checks(tmp_path):
    """`hf://` is no file system's scheme: the run's path checks leave a
    checkpoint name to the weights library, and still refuse a URL."""
    config = digits_run_config(tmp_path, f"init_from='hf://timm/{DEIT3}'")
    rundir.check_paths(config)
    with pytest.raises(ConfigError, match="no file system for s3://"):
        rundir.check_paths(dataclasses.replace(config, init_from="s3://b/pre.npz"))
