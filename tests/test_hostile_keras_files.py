"""Hostile `.keras` and `.weights.h5` files: refused in one line, as users meet them.

Each case runs as a user runs it, in a fresh process: the Python API
(`keras_vit.load_weights`, `keras_vit.ViT(weights=...)`) in
`python -c ...`, which reports what it raised, whether the model's weights
changed and how much its peak memory grew during the load; or the
installed `keras-vit` command, checked for its exit status, its one
`error:` line and the files it left. The files are made here with h5py
from a real `test/4` model's files: data taken from outside the file
(external storage, an external or soft link, a virtual dataset), shapes
claiming gigabytes to terabytes, records and configs that inflate past
what the file holds, and a group linked into itself.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile

import h5py
import keras
import numpy as np
import pytest
from hostile_files import CHECKPOINT_ERRORS

import keras_vit

TOKEN = "layers/class_token/vars/0"  # the class token, shape (1, 1, 32)
SECRET = (b"SECRET-API-KEY-0123456789abcdef" * 8)[:128]  # 32 float32
# The most a refused load may add to the process's peak memory. Loading the
# whole test/4 file adds a few MiB; every hostile file here would cost from
# 256 MiB to terabytes if its claims were believed.
GROWTH_BOUND_KIB = 128 << 10
BOMB_BYTES = 256 << 20  # what a bomb record inflates to
TIMEOUT = 600

# Loads argv[1] into a fresh test/4 model (or builds one with `weights=` when
# argv[2] is "constructor"); prints what was raised, whether the weights
# changed, and how far the resident memory rose above where it stood when
# the load began (Linux's peak, reset then: `VmHWM` after `clear_refs` 5).
CHILD = r"""
import json, sys
import numpy as np
import keras_vit

def status_kib(field):
    with open("/proc/self/status") as f:
        return int(next(l for l in f if l.startswith(field)).split()[1])

model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
before = [np.asarray(w).copy() for w in model.weights]
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak is now the current resident memory
baseline, error = status_kib("VmRSS:"), None
try:
    if sys.argv[2] == "constructor":
        keras_vit.ViT("test/4", image_size=16, num_classes=3, weights=sys.argv[1])
    else:
        keras_vit.load_weights(model, sys.argv[1])
except Exception as caught:  # MemoryError and RecursionError included
    error = [type(caught).__name__, str(caught)]
growth = status_kib("VmHWM:") - baseline
same = all(np.array_equal(a, np.asarray(w)) for a, w in zip(before, model.weights))
print(json.dumps({"error": error, "same": same, "growth_kib": growth}))
"""


def keras_vit_script() -> str:
    script = os.path.join(os.path.dirname(sys.executable), "keras-vit")
    assert os.path.exists(script), f"no keras-vit script beside {sys.executable}"
    return script


def environment() -> dict:
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def load_in_child(path, how: str = "load_weights", timeout=TIMEOUT) -> dict:
    """Runs `CHILD` on `path` in a fresh Python; returns its report."""
    process = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), how],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=environment(),
    )
    assert process.returncode == 0, process.stderr[-3000:]
    return json.loads(process.stdout.strip().splitlines()[-1])


def assert_refused(report: dict, *phrases: str) -> str:
    """One `CheckpointError` line naming `phrases`; the model unchanged,
    the peak memory within `GROWTH_BOUND_KIB`."""
    assert report["error"] is not None, "the file was loaded without an error"
    kind, message = report["error"]
    assert kind in CHECKPOINT_ERRORS, f"{kind}: {message[:2000]}"
    assert "\n" not in message, message
    for phrase in phrases:
        assert phrase in message, message
    assert report["same"], "the model's weights changed"
    assert report["growth_kib"] < GROWTH_BOUND_KIB, (
        f"the load grew the peak memory by {report['growth_kib'] >> 10} MiB"
    )
    return message


# Runs argv[2:] and writes its peak resident memory (KiB) to argv[1]: the
# command is the wrapper's only child, so `RUSAGE_CHILDREN` is its own.
PEAK_OF_COMMAND = r"""
import resource, subprocess, sys
status = subprocess.run(sys.argv[2:]).returncode
with open(sys.argv[1], "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss))
sys.exit(status)
"""
# A refused command's whole peak: TensorFlow and the command itself take
# well under 1 GiB; the hostile files below would take 2 to 9 GiB.
COMMAND_PEAK_BOUND_KIB = 3 << 19  # 1.5 GiB


def run_command(*argv, cwd, peak_file=None) -> subprocess.CompletedProcess:
    """Runs `keras-vit *argv`; with `peak_file`, its peak memory (KiB) is
    written there."""
    wrapper = [sys.executable, "-c", PEAK_OF_COMMAND, str(peak_file)]
    return subprocess.run(
        [*(wrapper if peak_file else []), keras_vit_script(), *map(str, argv)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        env=environment(),
    )


def assert_command_peak_within_bound(peak_file) -> None:
    peak = int(peak_file.read_text())
    assert peak < COMMAND_PEAK_BOUND_KIB, f"the command's peak: {peak >> 10} MiB"


def one_error_line(process) -> str:
    """The command's only stderr line, `error: ...`, with no traceback."""
    lines = [line for line in process.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), process.stderr[-3000:]
    return lines[0]


# -- the files ------------------------------------------------------------------


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A random test/4 model (16 px, 3 classes) and its two Keras files."""
    folder = tmp_path_factory.mktemp("saved")
    keras.config.set_dtype_policy("float32")
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    rng = np.random.default_rng(0)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.2, weight.shape).astype("float32"))
    model.save_weights(folder / "model.weights.h5")
    model.save(folder / "model.keras")
    return model, folder


def weights_copy(saved, tmp_path, name="hostile.weights.h5"):
    path = tmp_path / name
    shutil.copy(saved[1] / "model.weights.h5", path)
    return path


def secret_files(tmp_path):
    """A secret as raw bytes and as an HDF5 dataset `/secret` (1, 1, 32)."""
    raw = tmp_path / "secret.txt"
    raw.write_bytes(SECRET)
    hdf5 = tmp_path / "secret.h5"
    with h5py.File(hdf5, "w") as f:
        f["secret"] = np.frombuffer(SECRET, "<f4").reshape(1, 1, 32)
    return str(raw), str(hdf5)


def with_external_storage(saved, tmp_path):
    """The issue's reproducer: the class token's bytes in another file."""
    path = weights_copy(saved, tmp_path)
    raw, _ = secret_files(tmp_path)
    with h5py.File(path, "a") as f:
        del f[TOKEN]
        f.create_dataset(TOKEN, shape=(1, 1, 32), dtype="<f4", external=[(raw, 0, 128)])
    return path


def with_external_link(saved, tmp_path):
    path = weights_copy(saved, tmp_path)
    _, hdf5 = secret_files(tmp_path)
    with h5py.File(path, "a") as f:
        del f[TOKEN]
        f[TOKEN] = h5py.ExternalLink(hdf5, "/secret")
    return path


def with_soft_link(saved, tmp_path):
    path = weights_copy(saved, tmp_path)
    with h5py.File(path, "a") as f:
        f["stash"] = np.frombuffer(SECRET, "<f4").reshape(1, 1, 32)
        del f[TOKEN]
        f[TOKEN] = h5py.SoftLink("/stash")
    return path


def with_virtual_dataset(saved, tmp_path):
    path = weights_copy(saved, tmp_path)
    _, hdf5 = secret_files(tmp_path)
    layout = h5py.VirtualLayout(shape=(1, 1, 32), dtype="<f4")
    layout[:] = h5py.VirtualSource(hdf5, "secret", shape=(1, 1, 32))
    with h5py.File(path, "a") as f:
        del f[TOKEN]
        f.create_virtual_dataset(TOKEN, layout)
    return path


def with_fifo_source(saved, tmp_path, kind: str):
    """The class token taken from a FIFO: by an external link, or by a
    virtual dataset of unlimited extent (which HDF5 resolves as it opens
    the dataset). The source is made a FIFO once the file is written."""
    path = weights_copy(saved, tmp_path)
    fifo = tmp_path / "pipe"
    with h5py.File(fifo, "w") as f:
        f.create_dataset("x", shape=(1, 1, 32), maxshape=(1, 1, None), dtype="<f4")
    with h5py.File(path, "a") as f:
        del f[TOKEN]
        if kind == "external-link":
            f[TOKEN] = h5py.ExternalLink(str(fifo), "/x")
        else:
            layout = h5py.VirtualLayout((1, 1, 32), "<f4", maxshape=(1, 1, None))
            source = h5py.VirtualSource(
                str(fifo), "x", (1, 1, 32), maxshape=(1, 1, None)
            )
            unlimited = h5py.h5s.UNLIMITED
            layout[:, :, :unlimited] = source[:, :, :unlimited]
            f.create_virtual_dataset(TOKEN, layout, fillvalue=0)
    fifo.unlink()
    os.mkfifo(fifo)  # opening it for reading blocks until a writer comes
    return path


def with_claimed_floats(saved, tmp_path, count: int, where: str = TOKEN):
    """A chunked dataset claiming `count` floats, none of them stored: the
    file stays a few hundred kilobytes."""
    path = weights_copy(saved, tmp_path)
    with h5py.File(path, "a") as f:
        if where in f:
            del f[where]
        f.create_dataset(where, shape=(count,), dtype="<f4", chunks=(1 << 16,))
        group = f[where.rsplit("/", 1)[0]]
        group.attrs.setdefault("name", where.split("/")[1])
    return path


def with_huge_chunks(saved, tmp_path):
    """The class token's shape, stored (compressed) in one 256 MiB chunk."""
    path = weights_copy(saved, tmp_path)
    with h5py.File(path, "a") as f:
        del f[TOKEN]
        f.create_dataset(
            TOKEN,
            data=np.ones((1, 1, 32), "<f4"),
            maxshape=(None, None, None),
            chunks=(1, 1 << 11, 1 << 15),  # 256 MiB of float32
            compression="gzip",
        )
    return path


def with_group_cycle(saved, tmp_path):
    """A layer's group hard-linked to the `layers` group holding it."""
    path = weights_copy(saved, tmp_path)
    with h5py.File(path, "a") as f:
        f["layers/class_token/layers"] = f["layers"]
    return path


def keras_copy(saved, tmp_path, *, weights=None, config=None, name="hostile.keras"):
    """The saved `.keras` archive with its weights or config record replaced
    (`weights` bytes are deflated, as a bomb's are)."""
    path = tmp_path / name
    with (
        zipfile.ZipFile(saved[1] / "model.keras") as original,
        zipfile.ZipFile(path, "w") as target,
    ):
        for info in original.infolist():
            data = original.read(info)
            if info.filename == "model.weights.h5" and weights is not None:
                target.writestr(info.filename, weights, zipfile.ZIP_DEFLATED)
            elif info.filename == "config.json" and config is not None:
                target.writestr(info.filename, config, zipfile.ZIP_DEFLATED)
            else:
                target.writestr(info, data)
    return path


def saved_config(saved) -> dict:
    with zipfile.ZipFile(saved[1] / "model.keras") as archive:
        return json.loads(archive.read("config.json"))


def set_grid(node, grid) -> int:
    """Sets every position embedding's `grid_size` in a Keras config."""
    count = 0
    if isinstance(node, dict):
        inner = node.get("config")
        if isinstance(inner, dict) and inner.get("name") == "posembed_input":
            inner["grid_size"] = grid
            count += 1
        children = node.values()
    else:
        children = node if isinstance(node, list) else []
    return count + sum(set_grid(child, grid) for child in children)


# -- data from outside the file ---------------------------------------------------


@pytest.mark.parametrize(
    "build, says",
    [
        (with_external_storage, "stores its data in the external file(s)"),
        (with_external_link, "is an external link (to '/secret' in the file"),
        (with_soft_link, "is a soft link (to '/stash')"),
        (with_virtual_dataset, "is a virtual dataset, its data read from"),
    ],
    ids=["external-storage", "external-link", "soft-link", "virtual-dataset"],
)
def test_data_from_outside_the_file_is_refused_by_its_dataset(
    saved, tmp_path, build, says
):
    path = build(saved, tmp_path)
    message = assert_refused(load_in_child(path), f"/{TOKEN}", says)
    assert message.startswith(f"{str(path)!r} is refused: ")


@pytest.mark.parametrize("kind", ["external-link", "virtual-dataset"])
def test_a_source_that_would_block_is_never_opened(saved, tmp_path, kind):
    path = with_fifo_source(saved, tmp_path, kind)
    report = load_in_child(path, timeout=180)  # hangs when the FIFO is opened
    assert_refused(report, f"/{TOKEN}", str(tmp_path / "pipe"))


def test_the_constructor_refuses_the_issue_reproducer_too(saved, tmp_path):
    path = with_external_storage(saved, tmp_path)
    report = load_in_child(path, "constructor")
    assert_refused(report, f"'/{TOKEN}' stores its data in the external file(s)")


def test_a_keras_archive_holding_external_storage_is_refused(saved, tmp_path):
    inner = with_external_storage(saved, tmp_path)
    path = keras_copy(saved, tmp_path, weights=inner.read_bytes())
    assert_refused(load_in_child(path), f"/{TOKEN}", "external file(s)")


def test_a_group_linked_into_itself_is_refused(saved, tmp_path):
    path = with_group_cycle(saved, tmp_path)
    assert_refused(load_in_child(path), "'/layers", "is reached twice")


# -- claims past the memory bound --------------------------------------------------


@pytest.mark.parametrize(
    "count, where, says",
    [
        (1 << 40, TOKEN, "(the model's 'class_token/token' is (1, 1, 32))"),
        (1 << 36, TOKEN, "(the model's 'class_token/token' is (1, 1, 32))"),
        (1 << 29, TOKEN, "(the model's 'class_token/token' is (1, 1, 32))"),
        (1 << 29, "layers/extra/vars/0", "(a layer the model lacks)"),
    ],
    ids=["2**40-floats", "declared-past-keras-floor", "2**29-floats", "extra-layer"],
)
def test_a_claimed_shape_is_checked_before_anything_is_allocated(
    saved, tmp_path, count, where, says
):
    path = with_claimed_floats(saved, tmp_path, count, where)
    assert os.path.getsize(path) < 512 << 10
    message = assert_refused(
        load_in_child(path), f"the dataset '/{where}' of shape ({count},) float32", says
    )
    assert f"needs {count * 4} bytes, more than reading it may allocate" in message


def test_chunks_larger_than_their_dataset_are_refused(saved, tmp_path):
    path = with_huge_chunks(saved, tmp_path)
    assert os.path.getsize(path) < 1 << 20
    assert_refused(
        load_in_child(path),
        f"'/{TOKEN}' is stored in chunks of (1, 2048, 32768) (268435456 bytes)",
    )


def test_a_weights_record_inflating_past_the_bound_is_refused(saved, tmp_path):
    bomb = (saved[1] / "model.weights.h5").read_bytes() + bytes(BOMB_BYTES)
    path = keras_copy(saved, tmp_path, weights=bomb)
    assert os.path.getsize(path) < 1 << 20
    assert_refused(
        load_in_child(path),
        f"the zip record 'model.weights.h5' needs {len(bomb)} bytes",
    )


def test_a_compressed_keras_archive_still_loads(saved, tmp_path):
    """Keras stores its records; a re-compressed archive is no bomb."""
    weights = (saved[1] / "model.weights.h5").read_bytes()
    path = keras_copy(saved, tmp_path, weights=weights)
    with zipfile.ZipFile(path) as archive:
        info = archive.getinfo("model.weights.h5")
        assert info.compress_type == zipfile.ZIP_DEFLATED
        assert info.file_size > os.path.getsize(path)  # inflates past the file
    report = load_in_child(path)
    assert report["error"] is None and not report["same"], report


def test_a_record_inflating_past_its_declared_size_is_stopped(saved, tmp_path):
    """A forged header (a small declared size, a record that inflates to
    256 MiB) is stopped at the declared size."""
    bomb = (saved[1] / "model.weights.h5").read_bytes() + bytes(BOMB_BYTES)
    path = keras_copy(saved, tmp_path, weights=bomb)
    declared = len(bomb).to_bytes(4, "little")
    forged = (200_000).to_bytes(4, "little")
    data = path.read_bytes()
    assert data.count(declared) == 2  # the local header and the central one
    path.write_bytes(data.replace(declared, forged))
    assert_refused(load_in_child(path), "'model.weights.h5'")


# -- config.json ---------------------------------------------------------------


@pytest.mark.parametrize(
    "depth, says",
    [(100_000, "nested deeper than can be parsed"), (500, "nests deeper than 200")],
)
def test_a_deeply_nested_config_is_one_line(saved, tmp_path, depth, says):
    config = "[" * depth + "]" * depth
    path = keras_copy(saved, tmp_path, config=config)
    assert_refused(load_in_child(path), "config.json", says)


def test_an_infinite_grid_in_the_config_is_one_line(saved, tmp_path):
    config = saved_config(saved)
    assert set_grid(config, [float("inf"), 4]) == 1
    path = keras_copy(saved, tmp_path, config=json.dumps(config))
    assert_refused(load_in_child(path), "grid_size [inf, 4], not two positive integers")


def test_a_config_inflating_past_its_cap_is_refused(saved, tmp_path):
    config = b" " * BOMB_BYTES + json.dumps(saved_config(saved)).encode()
    path = keras_copy(saved, tmp_path, config=config)
    assert os.path.getsize(path) < 1 << 20
    assert_refused(
        load_in_child(path),
        f"its config.json declares {len(config)} bytes, more than the 8 MiB",
    )


def test_infinity_elsewhere_in_a_config_is_no_reason_to_refuse(saved, tmp_path):
    """Keras writes Python's `Infinity` for an infinite float setting."""
    config = saved_config(saved)
    config["config"]["an_infinite_setting"] = float("inf")
    path = keras_copy(saved, tmp_path, config=json.dumps(config))
    report = load_in_child(path)
    assert report["error"] is None and not report["same"], report


# -- the commands ---------------------------------------------------------------


def test_export_refuses_weights_from_outside_the_file(saved, tmp_path):
    path = with_external_storage(saved, tmp_path)
    process = run_command(
        "export", "--variant", "test/4", "--image-size", "16", "--num-classes", "3",
        "--weights", path, "--name", "vit", "--version", "1",
        "--base-dir", tmp_path / "models", cwd=tmp_path,
    )  # fmt: skip
    assert process.returncode == 2, process.stderr[-3000:]
    line = one_error_line(process)
    assert f"'/{TOKEN}' stores its data in the external file(s)" in line
    assert not (tmp_path / "models").exists()


def test_init_from_refuses_weights_from_outside_the_file(saved, tmp_path):
    path = with_external_link(saved, tmp_path)
    process = run_command(
        "train", "--config", "digits", "--set", "variant=test/4",
        "--set", f"init_from={path}", "--set", "epochs=1",
        "--set", f"workdir={tmp_path / 'run'}", cwd=tmp_path,
    )  # fmt: skip
    assert process.returncode == 2, process.stderr[-3000:]
    assert "Traceback" not in process.stderr
    assert f"'/{TOKEN}' is an external link" in process.stderr
    assert not (tmp_path / "run" / "config.json").exists()


@pytest.mark.parametrize("suffix", [".keras", ".weights.h5"])
def test_convert_refuses_data_from_outside_the_file(saved, tmp_path, suffix):
    inner = with_virtual_dataset(saved, tmp_path)
    if suffix == ".keras":
        path = keras_copy(saved, tmp_path, weights=inner.read_bytes())
    else:
        path = inner
    variant = ["--variant", "test/4"] if suffix == ".weights.h5" else []
    process = run_command("convert", path, "out.keras", *variant, cwd=tmp_path)
    assert process.returncode == 1, process.stderr[-3000:]
    assert f"'/{TOKEN}' is a virtual dataset" in one_error_line(process)
    assert not (tmp_path / "out.keras").exists()


def test_convert_refuses_a_claim_past_the_bound_within_it(saved, tmp_path):
    path = with_claimed_floats(saved, tmp_path, 1 << 29)
    peak = tmp_path / "peak"
    process = run_command(
        "convert", path, "out.keras", "--variant", "test/4", cwd=tmp_path,
        peak_file=peak,
    )  # fmt: skip
    assert process.returncode == 1, process.stderr[-3000:]
    assert f"the dataset '/{TOKEN}' of shape (536870912,)" in one_error_line(process)
    assert not (tmp_path / "out.keras").exists()
    assert_command_peak_within_bound(peak)


def test_init_from_a_keras_model_past_the_bound_is_never_read(saved, tmp_path):
    """Refused by the weights reader, the file is not handed to Keras's own
    loader either (which would read the 2 GiB dataset to name the misfit)."""
    inner = with_claimed_floats(saved, tmp_path, 1 << 29)
    path = keras_copy(saved, tmp_path, weights=inner.read_bytes())
    peak = tmp_path / "peak"
    process = run_command(
        "train", "--config", "digits", "--set", "variant=test/4",
        "--set", f"init_from={path}", "--set", "epochs=1",
        "--set", f"workdir={tmp_path / 'run'}", cwd=tmp_path, peak_file=peak,
    )  # fmt: skip
    assert process.returncode == 2, process.stderr[-3000:]
    assert "Traceback" not in process.stderr
    assert f"the dataset '/{TOKEN}' of shape (536870912,)" in process.stderr
    assert not (tmp_path / "run" / "config.json").exists()
    assert_command_peak_within_bound(peak)


# -- convert: each input told by its content -------------------------------------------


def _assert_same_weights(path, model):
    loaded = keras.saving.load_model(path)
    for a, b in zip(loaded.weights, model.weights, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


@pytest.mark.parametrize("output", ["out.keras", "out.weights.h5"])
def test_convert_writes_a_keras_model_again(saved, tmp_path, output):
    model, folder = saved
    process = run_command("convert", folder / "model.keras", output, cwd=tmp_path)
    assert process.returncode == 0, process.stderr[-3000:]
    assert f"Loading {folder / 'model.keras'}: a Keras model (.keras archive)" in (
        process.stdout
    )
    if output.endswith(".keras"):
        _assert_same_weights(tmp_path / output, model)
    else:
        fresh = keras_vit.ViT("test/4", image_size=16, num_classes=3)
        keras_vit.load_weights(fresh, tmp_path / output)
        for a, b in zip(fresh.weights, model.weights, strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_convert_refuses_model_options_for_a_keras_model(saved, tmp_path):
    process = run_command(
        "convert", saved[1] / "model.keras", "out.keras", "--num-classes", "5",
        cwd=tmp_path,
    )  # fmt: skip
    assert process.returncode == 2
    line = one_error_line(process)
    assert "--num-classes do not apply to" in line and "a Keras model" in line
    assert os.listdir(tmp_path) == []


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_convert_reads_a_weights_file_against_the_variant(saved, tmp_path):
    model, folder = saved
    process = run_command(
        "convert", folder / "model.weights.h5", "a.keras", cwd=tmp_path
    )
    assert process.returncode == 2
    line = one_error_line(process)
    assert "--variant is required" in line and "a Keras weights file" in line
    process = run_command(
        "convert", folder / "model.weights.h5", "a.keras", "--variant", "test/4",
        cwd=tmp_path,
    )  # fmt: skip
    assert process.returncode == 0, process.stderr[-3000:]
    assert "a Keras weights file (.weights.h5)" in process.stdout
    assert "image_size=(16, 16), num_classes=3" in process.stdout  # off the file
    _assert_same_weights(tmp_path / "a.keras", model)


def test_convert_reads_a_torch_file_as_one(tmp_path):
    """Park & Kim's timm ViT, a torch.save file: read as one (its missing
    query/key/value biases, which a converted model cannot drop, are then
    named)."""
    path = os.path.join(os.path.dirname(__file__), "fixtures", "parkkim_vit.pth.tar")
    process = run_command(
        "convert", path, "out.keras", "--variant", "32x2x128x2/2", cwd=tmp_path
    )
    assert f"Reading {path}: a torch.save checkpoint" in process.stdout
    assert process.returncode == 1, process.stderr[-3000:]
    assert "build it with `qkv_bias=False`" in process.stderr
    assert not (tmp_path / "out.keras").exists()


def test_convert_names_a_keras_model_under_another_name(saved, tmp_path):
    path = tmp_path / "model.npz"
    shutil.copy(saved[1] / "model.keras", path)
    process = run_command("convert", path, "out.keras", cwd=tmp_path)
    assert process.returncode == 2
    assert "is a Keras model (.keras archive) under another name" in (
        one_error_line(process)
    )
    assert not (tmp_path / "out.keras").exists()
