"""Unlucky and hostile inputs of the commands: FIFOs and devices in image
folders, a seed NumPy cannot take, binary class-name files.

Every case runs the installed `keras-vit` in a fresh process, with a
timeout (a command that hangs on a FIFO fails the test instead of stopping
the suite), and checks the exit status, what is printed and the files left
behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
from PIL import Image

import keras_vit

KERAS_VIT = os.path.join(os.path.dirname(sys.executable), "keras-vit")
TIMEOUT_S = 300  # A hang ends here, as a failure.
NOT_REGULAR = "not regular files (a FIFO, a socket, a device or a broken link)"
PNG_BYTES = b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"  # Not UTF-8 at byte 0.


def keras_vit_command(*args, cwd) -> subprocess.CompletedProcess:
    """`keras-vit ARGS` in `cwd`; a run past `TIMEOUT_S` fails the test."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    try:
        return subprocess.run(
            [KERAS_VIT, *map(str, args)],
            capture_output=True,
            text=True,
            cwd=cwd,
            env=env,
            timeout=TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"keras-vit {' '.join(map(str, args))} hung ({TIMEOUT_S} s)")


def error_line(result: subprocess.CompletedProcess) -> str:
    """The one line a refused command prints on stderr."""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr[-3000:]
    return lines[0]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    keras.config.set_dtype_policy("float32")
    path = tmp_path_factory.mktemp("model") / "vit.keras"
    keras_vit.ViT("test/4", image_size=16, num_classes=2).save(path)
    return path


@pytest.fixture
def data(tmp_path):
    """`data/{train,test}/{cat,dog}/` of four 16x16 PNGs each."""
    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for name in ("cat", "dog"):
            folder = tmp_path / "data" / split / name
            folder.mkdir(parents=True)
            for i in range(4):
                pixels = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")
    return tmp_path / "data"


def add_special_entries(folder, outside):
    """A FIFO, a link to a FIFO, a link to a device and a broken link, each
    named as an image: `folder/cat/x.png`, `dog/y.jpg`, `dog/z.png`,
    `cat/w.png`."""
    os.mkfifo(folder / "cat" / "x.png")
    os.mkfifo(outside / "elsewhere.fifo")
    os.symlink(outside / "elsewhere.fifo", folder / "dog" / "y.jpg")
    os.symlink("/dev/zero", folder / "dog" / "z.png")
    os.symlink(outside / "missing.png", folder / "cat" / "w.png")


# Folder datasets take regular files only ---------------------------------------


def test_validate_skips_fifos_devices_and_broken_links(model_file, data, tmp_path):
    add_special_entries(data / "test", tmp_path)
    result = keras_vit_command(
        "validate", "--model", model_file, "--data", "folder:data",
        "--split", "test", "--out", "val.json", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert (
        f"Skipped 4 file(s) under data/test that are {NOT_REGULAR}: "
        "cat/w.png, cat/x.png, dog/y.jpg, dog/z.png"
    ) in output, output
    record = json.loads((tmp_path / "val.json").read_text())
    assert record["num_images"] == 8
    assert record["skipped_files"] == 4


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_train_skips_a_fifo_in_a_class_folder(data, tmp_path):
    os.mkfifo(data / "train" / "cat" / "x.png")
    result = keras_vit_command(
        "train", "--config", "folder_finetune", "--set", "dataset=folder:data",
        "--set", "variant=test/4", "--set", "init_from=None",
        "--set", "image_size=16", "--set", "epochs=1",
        "--set", "global_batch_size=4", "--set", "workdir=run",
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert f"under data/train that are {NOT_REGULAR}: cat/x.png" in output, output
    assert (tmp_path / "run" / "final.keras").is_file()


def test_a_class_folder_of_fifos_only_is_refused_naming_them(
    model_file, data, tmp_path
):
    for image in (data / "test" / "cat").iterdir():
        image.unlink()
    os.mkfifo(data / "test" / "cat" / "x.png")
    result = keras_vit_command(
        "validate", "--model", model_file, "--data", "folder:data",
        "--split", "test", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    line = error_line(result)
    assert line.startswith("error: --data folder:data split 'test': "), line
    assert "class folder(s) cat hold no image file" in line, line
    assert "they hold only entries that are not regular files, e.g. cat/x.png" in line


def test_predict_refuses_a_fifo_as_not_a_file(model_file, tmp_path):
    os.mkfifo(tmp_path / "x.png")
    result = keras_vit_command("predict", "--model", model_file, "x.png", cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    assert "x.png" in error_line(result) and "not a file" in error_line(result)


# A seed NumPy cannot take -----------------------------------------------------


@pytest.mark.parametrize(
    "command, seed",
    [("train", "-1"), ("train", "4294967296"), ("pretrain_masked", "-1")],
)
def test_a_seed_out_of_range_is_refused_in_one_line(command, seed, tmp_path):
    result = keras_vit_command(
        command, "--set", f"seed={seed}", "--set", "workdir=run", cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert error_line(result) == f"error: seed={seed}: must be in [0, 4294967295]"
    assert not (tmp_path / "run").exists()


# Class-name files that are not text --------------------------------------------


def class_name_files(folder):
    """Files that are not one UTF-8 name per line, and the problem named."""
    (folder / "names.png").write_bytes(PNG_BYTES)
    (folder / "names.nul").write_bytes(b"cat\ndog\x00\n")
    (folder / "names.bom").write_bytes(b"\xef\xbb\xbfcat\n\xe9t\xe9\n")  # Latin-1
    os.mkfifo(folder / "names.fifo")
    return {
        "names.png": "not UTF-8 text (byte 0x89 at offset 0)",
        "names.bom": "not UTF-8 text (byte 0xe9 at offset 7)",
        "names.nul": "not a text file (a NUL byte at offset 7)",
        "names.fifo": "not a regular file",
    }


def test_a_binary_class_names_file_is_refused_in_one_line(model_file, tmp_path):
    """The default run's case of the two (large) tests below: a PNG given as
    `--class-names` is one error line, and nothing is exported."""
    class_name_files(tmp_path)
    result = keras_vit_command(
        "export", "--model", model_file, "--name", "vit", "--version", "1",
        "--class-names", "names.png", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert error_line(result) == (
        "error: --class-names: not UTF-8 text (byte 0x89 at offset 0): names.png"
    )
    assert not (tmp_path / "saved_models").exists()


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_export_refuses_class_names_that_are_not_text(model_file, tmp_path):
    for name, problem in class_name_files(tmp_path).items():
        result = keras_vit_command(
            "export", "--model", model_file, "--name", "vit", "--version", "1",
            "--class-names", name, cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr[-3000:]
        assert error_line(result) == f"error: --class-names: {problem}: {name}"
        assert not (tmp_path / "saved_models").exists()


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_predict_refuses_class_names_that_are_not_text(model_file, tmp_path):
    image = np.zeros((16, 16, 3), np.uint8)
    Image.fromarray(image).save(tmp_path / "cat.png")
    for name, problem in class_name_files(tmp_path).items():
        result = keras_vit_command(
            "predict", "--model", model_file, "--class-names", name, "cat.png",
            cwd=tmp_path,
        )  # fmt: skip
        assert result.returncode == 2, result.stderr[-3000:]
        assert error_line(result) == f"error: --class-names: {problem}: {name}"
    (tmp_path / "names.txt").write_text("\ufeffcat\n\n  dog  \n", encoding="utf-8")
    result = keras_vit_command(
        "predict", "--model", model_file, "--class-names", "names.txt",
        "--json", "cat.png", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    labels = {p["label"] for p in json.loads(result.stdout)["images"][0]["top_k"]}
    assert labels == {"cat", "dog"}  # The byte-order mark and spaces dropped.


def test_validate_refuses_a_class_map_that_is_a_fifo(model_file, data, tmp_path):
    os.mkfifo(tmp_path / "map.json")
    result = keras_vit_command(
        "validate", "--model", model_file, "--data", "folder:data",
        "--split", "test", "--class-map", "map.json", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-3000:]
    assert error_line(result) == (
        "error: --class-map 'map.json': cannot be read: not a regular file"
    )
