"""Every output at a URL is written through `tf.io.gfile` or refused in one line.

`keras-vit convert`, `analyze --out`, `fewshot --out`, `export --base-dir`,
a run's `workdir` and `keras_vit.save_pretrained` take URLs. Each test runs
the installed `keras-vit` script (or the Python API) in a fresh process, as
a user does, and checks the exit status, what is printed and what is left
behind: a URL's files are in its file system (`ram://`, TensorFlow's
in-memory one, read back by the same process), and nothing ever lands in a
local folder named after the URL (`./gs:/bucket/...`). A `gs://` bucket out
of reach fails in one line, quickly; a path with a slash missing
(`gs:/bucket/run`) is refused before any work, naming the URL it means.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import fault_runs as fr
import pytest

KERAS_VIT = os.path.join(os.path.dirname(sys.executable), "keras-vit")
TIMM_VIT = os.path.join(fr.ROOT, "tests", "fixtures", "timm_vit.safetensors")
# A bucket out of reach, whatever the network: every request goes to a port
# nothing listens on, is tried once, and no credentials are looked for.
UNREACHABLE = {
    **{name: "http://127.0.0.1:9" for name in ("https_proxy", "http_proxy")},
    **{name: "http://127.0.0.1:9" for name in ("HTTPS_PROXY", "HTTP_PROXY")},
    "GCS_RETRY_CONFIG_MAX_RETRIES": "1",
    "GCS_RETRY_CONFIG_INIT_DELAY_TIME_US": "1000",
    "GOOGLE_AUTH_TOKEN_FOR_TESTING": "none",
}


def _keras_vit(*arguments, cwd, env=None, timeout=300):
    """Runs the installed `keras-vit` script; returns the completed process."""
    assert os.path.exists(KERAS_VIT), f"no keras-vit script beside {sys.executable}"
    return subprocess.run(
        [KERAS_VIT, *map(str, arguments)],
        cwd=cwd,
        env=fr.environment(**(env or {})),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _python(code: str, *arguments, cwd, env=None):
    """Runs `code` in a fresh Python; returns the JSON of its last line."""
    process = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, arguments)],
        cwd=cwd,
        env=fr.environment(**(env or {})),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    return json.loads(process.stdout.strip().splitlines()[-1])


def _one_error_line(process) -> str:
    """The only line on stderr, an `error: ...` (no traceback)."""
    lines = fr.error_lines(process.stderr)
    assert "Traceback" not in process.stderr, process.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), process.stderr[-3000:]
    return lines[0]


def _named_after_a_url(root) -> list[str]:
    """Local paths under `root` with a colon: folders like `./gs:/bucket`."""
    return [
        os.path.join(folder, name)
        for folder, dirs, files in os.walk(root)
        for name in [*dirs, *files]
        if ":" in name
    ]


@pytest.fixture(scope="module")
def tiny_keras(tmp_path_factory):
    """A `.keras` model of a tiny ViT (what a run's `final.keras` is); its
    weights, hence its figures' sizes, the same in every session."""
    import keras

    import keras_vit

    keras.utils.set_random_seed(0)
    path = tmp_path_factory.mktemp("model") / "tiny.keras"
    keras_vit.ViT("test/4", image_size=16, num_classes=3).save(path)
    return path


@pytest.mark.parametrize(
    "output", ["gs://bucket/my-vit", "gs://bucket/my-vit.keras"], ids=["folder", "file"]
)
def test_convert_to_a_bucket_out_of_reach_is_one_line_and_nothing_local(
    tmp_path, tiny_keras, output
):
    source, *options = (
        [tiny_keras] if output.endswith("vit") else [TIMM_VIT, "--variant", "test/8"]
    )
    started = time.monotonic()

    process = _keras_vit(
        "convert", source, output, *options, cwd=tmp_path, env=UNREACHABLE
    )

    assert process.returncode == 1, process.stderr[-3000:]
    line = _one_error_line(process)
    assert line.startswith(f"error: {output}: ") and "connect" in line, line
    assert "Wrote" not in process.stdout
    assert time.monotonic() - started < 120
    assert os.listdir(tmp_path) == []  # No `./gs:/bucket/my-vit`.


@pytest.mark.parametrize(
    "command, flag",
    [
        (["convert", "{model}", "gs:/bucket/my-vit"], "output"),
        (["analyze", "--model", "{model}", "--images", "digits", "--out",
          "gs:/bucket/my-vit"], "--out"),
        (["fewshot", "--model", "{model}", "--out", "gs:/bucket/my-vit"], "--out"),
        (["export", "--model", "{model}", "--name", "vit", "--version", "1",
          "--base-dir", "gs:/bucket/my-vit"], "--base-dir"),
    ],
    ids=["convert", "analyze", "fewshot", "export"],
)  # fmt: skip
def test_a_url_with_a_slash_missing_is_refused_before_any_work(
    tmp_path, tiny_keras, command, flag
):
    arguments = [part.format(model=tiny_keras) for part in command]

    process = _keras_vit(*arguments, cwd=tmp_path)

    assert process.returncode == 2, process.stderr[-3000:]
    assert _one_error_line(process) == (
        f"error: {flag}='gs:/bucket/my-vit' is a URL with a slash missing, not a "
        "local path: did you mean 'gs://bucket/my-vit'? (a local folder of that "
        "name is written './gs:/bucket/my-vit')"
    )
    assert os.listdir(tmp_path) == []


def test_a_run_directory_with_a_slash_missing_is_refused(tmp_path):
    process = _keras_vit(
        "train", *fr.argv("gs:/b/run", [*fr.TRAIN, "epochs=1", "steps_per_epoch=1"]),
        cwd=tmp_path,
    )  # fmt: skip

    assert process.returncode == 2, process.stderr[-3000:]
    line = _one_error_line(process)
    assert line.startswith("error: workdir='gs:/b/run' is a URL with a slash missing")
    assert "did you mean 'gs://b/run'?" in line
    assert os.listdir(tmp_path) == []  # Not trained into `./gs:/b/run`.


_CONVERT_TO_RAM = """
import json, os, sys, tempfile
import keras, numpy as np
import keras_vit
from keras_vit import paths
from keras_vit.recipes.__main__ import exit_status, main

model_file, timm_file = sys.argv[1:3]
codes = [
    exit_status(main(["convert", model_file, "ram://bucket/my-vit"])),
    exit_status(main(["convert", timm_file, "ram://bucket/vit.keras",
                      "--variant", "test/8"])),
]
with tempfile.TemporaryDirectory() as local:  # from_pretrained reads a folder
    for name in paths.listdir("ram://bucket/my-vit"):
        paths.copy_file(f"ram://bucket/my-vit/{name}", os.path.join(local, name))
    pixels = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3))
    folder_same = np.array_equal(
        keras_vit.from_pretrained(local)(pixels),
        keras.saving.load_model(model_file)(pixels),
    )
converted = keras.saving.load_model("ram://bucket/vit.keras", compile=False)
print(json.dumps({
    "codes": codes,
    "bucket": paths.listdir("ram://bucket"),
    "folder": paths.listdir("ram://bucket/my-vit"),
    "folder_same": bool(folder_same),
    "converted_input": list(converted.input_shape),
}))
"""


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_convert_writes_a_folder_and_a_file_at_a_url(tmp_path, tiny_keras):
    result = _python(_CONVERT_TO_RAM, tiny_keras, TIMM_VIT, cwd=tmp_path)

    assert result["codes"] == [0, 0]
    assert result["bucket"] == ["my-vit", "vit.keras"]  # No temporary object.
    assert result["folder"] == ["README.md", "config.json", "model.safetensors"]
    assert result["folder_same"]  # Whole: the same model read back.
    assert result["converted_input"] == [None, 32, 32, 3]
    assert _named_after_a_url(tmp_path) == []  # No `./ram:/bucket`.


_SAVE_PRETRAINED_TO_RAM = """
import json, os, tempfile
import numpy as np
import keras_vit
from keras_vit import paths

model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
other = keras_vit.ViT("test/4", image_size=16, num_classes=5)
url = "ram://bucket/models/my-vit"
result = {"returned": keras_vit.save_pretrained(model, url)}
result["files"] = paths.listdir(url)
try:
    keras_vit.save_pretrained(other, url)
except FileExistsError as error:
    result["kept"] = str(error)
keras_vit.save_pretrained(other, url, overwrite=True)
with paths.open_file(f"{url}/config.json") as f:
    result["replaced_classes"] = __import__("json").load(f)["num_classes"]
paths.remove(f"{url}/config.json")  # What a killed upload leaves: no marker.
keras_vit.save_pretrained(model, url)  # Replaced without overwrite=True.
with tempfile.TemporaryDirectory() as local:
    for name in paths.listdir(url):
        paths.copy_file(f"{url}/{name}", os.path.join(local, name))
    pixels = np.random.default_rng(0).uniform(-1, 1, (2, 16, 16, 3))
    loaded = keras_vit.from_pretrained(local)
    result["same"] = bool(np.array_equal(loaded(pixels), model(pixels)))
result["after_kill"] = paths.listdir(url)
result["parent"] = paths.listdir("ram://bucket/models")
print(json.dumps(result))
"""


def test_save_pretrained_writes_a_url_through_its_file_system(tmp_path):
    result = _python(_SAVE_PRETRAINED_TO_RAM, cwd=tmp_path)

    assert result["returned"] == "ram://bucket/models/my-vit"
    assert result["files"] == ["README.md", "config.json", "model.safetensors"]
    assert result["kept"].endswith("exists; pass overwrite=True to replace it.")
    assert result["replaced_classes"] == 5
    assert result["after_kill"] == result["files"] and result["same"]
    assert result["parent"] == ["my-vit"]  # No staging or temporary object.
    assert _named_after_a_url(tmp_path) == []


_SAVE_PRETRAINED_UNREACHABLE = """
import json, time
import keras_vit

model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
started = time.monotonic()
try:
    keras_vit.save_pretrained(model, "gs://bucket/my-vit")
    print(json.dumps({"raised": None}))
except OSError as error:
    print(json.dumps({"raised": type(error).__name__, "message": str(error),
                      "seconds": time.monotonic() - started}))
"""


def test_save_pretrained_to_a_bucket_out_of_reach_raises_and_writes_nothing(
    tmp_path,
):
    result = _python(_SAVE_PRETRAINED_UNREACHABLE, cwd=tmp_path, env=UNREACHABLE)

    assert result["raised"] is not None, "save_pretrained claimed success"
    assert "gs://bucket/my-vit" in result["message"]
    assert "\n" not in result["message"] and result["seconds"] < 60
    assert os.listdir(tmp_path) == []


_ANALYZE_AND_FEWSHOT_TO_RAM = """
import json, sys
from keras_vit import paths
from keras_vit.recipes.__main__ import exit_status, main

model_file = sys.argv[1]
codes = [
    exit_status(main(["analyze", "--model", model_file, "--images", "digits",
                      "--only", "filters,position", "--out", "ram://b/figures"])),
    exit_status(main(["fewshot", "--model", model_file, "--shots", "1",
                      "--max-test-examples", "20", "--out", "ram://b/fewshot.json"])),
]
pngs = {}
for name in paths.listdir("ram://b/figures"):
    with paths.open_file(f"ram://b/figures/{name}", "rb") as f:
        pngs[name] = f.read(8).hex()
with paths.open_file("ram://b/fewshot.json") as f:
    record = json.load(f)
print(json.dumps({"codes": codes, "pngs": pngs, "bucket": paths.listdir("ram://b"),
                  "accuracy": sorted(record["accuracy"])}))
"""


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_analyze_and_fewshot_write_their_outputs_at_a_url(tmp_path, tiny_keras):
    result = _python(_ANALYZE_AND_FEWSHOT_TO_RAM, tiny_keras, cwd=tmp_path)

    assert result["codes"] == [0, 0]
    png = "89504e470d0a1a0a"  # The PNG signature: whole files.
    assert result["pngs"] == {"filters.png": png, "position.png": png}
    assert result["bucket"] == ["fewshot.json", "figures"]
    assert result["accuracy"] == ["1shot"]
    assert _named_after_a_url(tmp_path) == []


@pytest.mark.parametrize("command", ["analyze", "fewshot"])
def test_analyze_and_fewshot_to_a_bucket_out_of_reach_fail_first_in_one_line(
    tmp_path, tiny_keras, command
):
    extra = ["--images", "digits"] if command == "analyze" else []
    out = "gs://bucket/figures" if command == "analyze" else "gs://bucket/f.json"

    process = _keras_vit(command, "--model", tiny_keras, *extra, "--out", out,
                         cwd=tmp_path, env=UNREACHABLE)  # fmt: skip

    assert process.returncode == 1, process.stderr[-3000:]
    line = _one_error_line(process)
    assert line.startswith(f"error: --out: {out}") and "connect" in line, line
    assert process.stdout == ""  # Refused before the model was run.
    assert os.listdir(tmp_path) == []
