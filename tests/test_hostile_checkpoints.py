"""Small hostile checkpoints are refused in one line, at no cost in memory.

The rule: no reader allocates more than the file's own size plus the
model's parameter bytes (or, with no model, the stated cap of
`keras_vit.weights.formats.limits`), and every claim is checked before it
is allocated. Each file here is a few hundred bytes to a few megabytes
that a reader trusting its claims turned into about a gigabyte or more, or
into a traceback: an `.npz` header claiming 3.64 TiB, a deflated `.npz` or
`torch.save` record of 1 GiB of zeros, a `.safetensors` file whose tensors
all view one 4 MB range, a `torch.save` file whose 16,384 tensors each view
one 64 KiB storage, and `.safetensors` headers with `Infinity` or nested
100,000 lists deep.

Each case runs in a fresh process as a user runs it: the Python API
(`keras_vit.load_weights`, `keras_vit.ViT(weights=...)`) and the installed
`keras-vit` command (`convert`, `export --weights`, `train --set
init_from=...`, `analyze --images`). Each must end in one `CheckpointError`
line naming the key and the claim (an `error: ...` line and a non-zero exit
status for a command), leave the model unchanged and nothing behind, and
peak below the memory of a process that loads a real checkpoint plus
`_MARGIN_MIB`. Each case runs through one entry point by default, the
whole matrix with `--run-large`.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import subprocess
import sys
import tracemalloc
import zipfile
from collections.abc import Callable

import hostile_files
import numpy as np
import pytest

KERAS_VIT = os.path.join(os.path.dirname(sys.executable), "keras-vit")
TIMEOUT = 600
# What a refused file may cost over a process that loads a real checkpoint
# (measured here: about 800 MiB, TensorFlow's import; before these checks
# the cases peaked 1 to 2 GiB above it).
_MARGIN_MIB = 512


@dataclasses.dataclass(frozen=True)
class Case:
    """A hostile file and the one line that refuses it.

    Attributes:
        build: `build(path)` writes the file.
        name: Its file name.
        pattern: The line when the model is known: the key and the claim.
        capped: The line under the cap without a model (`convert`), when
            it differs.
        images: An `.npz` of images (`analyze --images`), not a checkpoint.
    """

    build: Callable
    name: str
    pattern: str
    capped: str | None = None
    images: bool = False


_NPZ_BOMB = (
    r"the array '{key}' of shape \(268435456,\) float32 needs 1073741824 bytes, "
    r"more than reading it may allocate"
)
_NPZ_CLAIM = (
    r"the array '{key}' of shape \(1000000, 1000000\) float32 needs "
    r"4000000000000 bytes but its record holds 0"
)
CASES = {
    "npz header claims 3.64 TiB": Case(
        hostile_files.npz_claiming_terabytes, "claim.npz", _NPZ_CLAIM.format(key="cls")
    ),
    "npz record inflates to 1 GiB": Case(
        hostile_files.npz_bomb, "bomb.npz", _NPZ_BOMB.format(key="cls")
    ),
    "safetensors tensors overlap": Case(
        hostile_files.safetensors_overlapping,
        "overlap.safetensors",
        r"tensor 'blocks.1.mlp.fc1.weight' at bytes \[0, 4194304\) overlaps "
        r"'blocks.0.mlp.fc1.weight'",
    ),
    "safetensors header has Infinity": Case(
        hostile_files.safetensors_infinite_offset,
        "infinity.safetensors",
        r"unreadable header, not valid JSON \(the constant Infinity is not JSON\)",
    ),
    # With a model, 200 KB of header is refused for what parsing it may
    # cost (32 bytes of objects a byte) before it is parsed; under the cap,
    # it is parsed and refused for its depth.
    "safetensors header nested 100000 deep": Case(
        hostile_files.safetensors_deeply_nested,
        "nested.safetensors",
        r"the safetensors header of 200061 bytes needs 6401952 bytes, more than "
        r"reading it may allocate",
        capped=r"unreadable header, not valid JSON \(nested deeper than can be "
        r"parsed\)",
    ),
    "pth views repeat one storage": Case(
        hostile_files.pth_repeated_views,
        "views.pth",
        r"tensor 'w\d+' of size \(16384,\), stride \(1,\) and offset 0 needs 65536 "
        r"bytes, more than reading it may allocate",
    ),
    "pth record inflates to 1 GiB": Case(
        hostile_files.pth_bomb,
        "bomb.pth",
        r"the zip record 'archive/data/0' needs 1073741824 bytes, more than "
        r"reading it may allocate",
    ),
    "images npz header claims 3.64 TiB": Case(
        functools.partial(hostile_files.npz_claiming_terabytes, key="images"),
        "images_claim.npz",
        _NPZ_CLAIM.format(key="images"),
        images=True,
    ),
    "images npz record inflates to 1 GiB": Case(
        functools.partial(hostile_files.npz_bomb, key="images"),
        "images_bomb.npz",
        _NPZ_BOMB.format(key="images"),
        images=True,
    ),
}
# The cases each entry point runs by default, each case once (the whole
# matrix with --run-large).
_DEFAULT = {
    "load_weights": {
        "npz header claims 3.64 TiB",
        "npz record inflates to 1 GiB",
        "safetensors header has Infinity",
    },
    "ViT(weights=)": {"pth record inflates to 1 GiB"},
    "convert": {"safetensors header nested 100000 deep"},
    "export": {"safetensors tensors overlap"},
    "train": {"pth views repeat one storage"},
    "analyze": {"images npz record inflates to 1 GiB"},
}
# `convert` reads `.npz` and `.safetensors` checkpoints; `analyze --images`
# an `.npz` of images; the others any checkpoint.
_READS = {"convert": (".npz", ".safetensors")}


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    """`hostile(case) -> path`: each file built once, when first asked for."""
    folder = tmp_path_factory.mktemp("hostile")

    @functools.cache
    def path_of(case: str) -> str:
        path = folder / CASES[case].name
        CASES[case].build(path)
        return str(path)

    return path_of


# A fresh process that loads `path` as a user does and prints one JSON
# line: the error it ended in, whether the model changed, its peak memory.
_API = r"""
import json, resource, sys
import numpy as np
import keras_vit
how, path = sys.argv[1:3]
out = {}
try:
    if how == "load_weights":
        model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
        before = [w.copy() for w in model.get_weights()]
        try:
            keras_vit.load_weights(model, path)
        finally:
            out["unchanged"] = all(
                np.array_equal(a, b) for a, b in zip(before, model.get_weights())
            )
    else:
        keras_vit.ViT("test/4", image_size=16, num_classes=3, weights=path)
    out["error"] = None
except Exception as error:
    out["error"] = [type(error).__name__, str(error)]
out["peak_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps(out))
"""

# Runs a command and writes its peak memory (the largest of its processes)
# to the file named first.
_PEAK_OF = r"""
import resource, subprocess, sys
status = subprocess.run(sys.argv[2:]).returncode
with open(sys.argv[1], "w") as f:
    f.write(str(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024))
sys.exit(status)
"""


def _env():
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def run_api(how: str, path: str, cwd) -> dict:
    process = subprocess.run(
        [sys.executable, "-c", _API, how, path],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert process.returncode == 0, process.stderr[-3000:]
    return json.loads(process.stdout.strip().splitlines()[-1])


def run_command(argv, cwd, peak_file):
    """`(completed process, peak MiB)` of the installed command `argv`."""
    process = subprocess.run(
        [sys.executable, "-c", _PEAK_OF, str(peak_file), KERAS_VIT, *argv],
        cwd=cwd,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    return process, float(open(peak_file).read())


@pytest.fixture(scope="module")
def peak_bound(tmp_path_factory):
    """The peak (MiB) a refusal may reach: a process that loads a real
    checkpoint of the model, plus `_MARGIN_MIB`."""
    folder = tmp_path_factory.mktemp("baseline")
    import keras_vit

    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    path = folder / "real.npz"
    np.savez(path, **keras_vit.weights.from_model(model).params)
    result = run_api("load_weights", str(path), folder)
    assert result["error"] is None, result
    return result["peak_mib"] + _MARGIN_MIB


def _matrix(how):
    for case, row in CASES.items():
        if row.images != (how == "analyze") or not row.name.endswith(
            _READS.get(how, "")
        ):
            continue
        marks = () if case in _DEFAULT[how] else (pytest.mark.large,)
        yield pytest.param(case, id=case, marks=marks)


def _one_line(message: str, pattern: str, path: str):
    assert "\n" not in message, message
    assert re.search(pattern, message), message
    assert path in message, message


@pytest.mark.parametrize("case", _matrix("load_weights"))
def test_load_weights_refuses_in_one_line_at_no_cost(
    case, hostile, peak_bound, tmp_path
):
    path, pattern = hostile(case), CASES[case].pattern
    result = run_api("load_weights", path, tmp_path)
    print(f"peak {result['peak_mib']:.0f} MiB (bound {peak_bound:.0f}): {result}")
    assert result["error"] is not None, result
    kind, message = result["error"]
    assert kind in hostile_files.CHECKPOINT_ERRORS, result
    _one_line(message, pattern, path)
    assert result["unchanged"], result
    assert result["peak_mib"] < peak_bound, result
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("case", _matrix("ViT(weights=)"))
def test_vit_weights_refuses_in_one_line_at_no_cost(
    case, hostile, peak_bound, tmp_path
):
    path, pattern = hostile(case), CASES[case].pattern
    result = run_api("ViT(weights=)", path, tmp_path)
    print(f"peak {result['peak_mib']:.0f} MiB (bound {peak_bound:.0f}): {result}")
    assert result["error"] is not None, result
    kind, message = result["error"]
    assert kind in hostile_files.CHECKPOINT_ERRORS, result
    _one_line(message, pattern, path)
    assert result["peak_mib"] < peak_bound, result
    assert os.listdir(tmp_path) == []


_MODEL = ["--variant", "test/4", "--image-size", "16", "--num-classes", "3"]
# command -> (its arguments for a checkpoint `path`, its exit status when
# the checkpoint is refused: `convert` exits 1 for a checkpoint that does
# not fit, the run commands 2).
_COMMANDS = {
    "convert": (lambda path: ["convert", path, "out.keras", "--variant", "test/4"], 1),
    "export": (
        lambda path: ["export", *_MODEL, "--weights", path, "--name", "vit",
                      "--version", "1", "--base-dir", "served"],
        2,
    ),
    "train": (
        lambda path: ["train", "--config", "digits", "--set", "variant=test/4",
                      "--set", f"init_from={path}", "--set", "epochs=1",
                      "--set", "workdir=run"],
        2,
    ),
    "analyze": (
        lambda path: ["analyze", *_MODEL[:4], "--images", path, "--out", "analysis"],
        2,
    ),
}  # fmt: skip


def _command_matrix():
    for command in _COMMANDS:
        for param in _matrix(command):
            case = param.values[0]
            yield pytest.param(
                command, case, id=f"{command}: {case}", marks=param.marks
            )


@pytest.mark.parametrize("command, case", _command_matrix())
def test_commands_refuse_in_one_line_at_no_cost(
    command, case, hostile, peak_bound, tmp_path
):
    path, pattern = hostile(case), CASES[case].pattern
    if command == "convert":  # no model yet: the stated cap
        pattern = CASES[case].capped or pattern
    work = tmp_path / "work"
    work.mkdir()
    arguments, status = _COMMANDS[command]
    process, peak = run_command(arguments(path), work, tmp_path / "peak")
    print(f"peak {peak:.0f} MiB (bound {peak_bound:.0f}), exit {process.returncode}")
    print(process.stderr[-1500:])
    assert process.returncode == status, process.stderr[-3000:]
    assert "Traceback" not in process.stderr, process.stderr[-3000:]
    # The loader's line, whole (`train` puts its own line before it).
    lines = [line.strip() for line in process.stderr.splitlines()]
    line = next((x for x in lines if re.search(pattern, x)), None)
    assert line is not None, process.stderr[-3000:]
    _one_line(line, pattern, path)
    assert "error: " in process.stderr
    assert peak < peak_bound, (peak, peak_bound)
    assert os.listdir(work) == []  # no output, no run folder, no partial file


# -- The shared helpers, in this process --------------------------------------


def _lying_zip(path, declared: int, nbytes: int) -> None:
    """A deflated record `data` of `nbytes` zeros that declares `declared`."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as z:
        z.writestr("data", bytes(nbytes))
    raw = bytearray(open(path, "rb").read())
    size = nbytes.to_bytes(4, "little")
    assert raw.count(size) == 2  # the local and the central header
    raw[:] = raw.replace(size, declared.to_bytes(4, "little"))
    open(path, "wb").write(raw)


def test_a_zip_record_is_inflated_no_further_than_it_declares(tmp_path):
    from keras_vit.weights.errors import CheckpointError
    from keras_vit.weights.formats import limits

    path = tmp_path / "lying.zip"
    _lying_zip(path, declared=1024, nbytes=64 << 20)
    budget = limits.budget_for(None, path)
    tracemalloc.start()
    with zipfile.ZipFile(path) as archive:
        with pytest.raises(CheckpointError) as info:
            limits.read_member(archive, archive.getinfo("data"), path, budget)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    message = str(info.value)
    assert "\n" not in message and "'data'" in message and "corrupt" in message
    assert peak < 4 << 20, peak  # a chunk, not the 64 MiB it holds


def test_a_record_past_the_budget_is_refused_before_inflating(tmp_path):
    from keras_vit.weights.errors import CheckpointError
    from keras_vit.weights.formats import limits

    path = tmp_path / "big.zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("data", bytes(8 << 20))
    budget = limits.ReadBudget(1 << 20, "1 MiB for this test")
    budget.add_file(path)
    tracemalloc.start()
    with zipfile.ZipFile(path) as archive:
        with pytest.raises(CheckpointError, match=r"'data' needs 8388608 bytes"):
            limits.read_member(archive, archive.getinfo("data"), path, budget)
    assert tracemalloc.get_traced_memory()[1] < 1 << 20
    tracemalloc.stop()


def test_the_budget_is_the_files_plus_the_models_parameters(tmp_path):
    import keras_vit
    from keras_vit.weights.formats import limits

    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    parameters = sum(w.size * 4 for w in model.get_weights())
    budget = limits.ReadBudget.for_model(model)
    path = tmp_path / "a.npz"
    path.write_bytes(bytes(1000))
    budget.add_file(path)
    budget.add_file(path)  # once per file
    assert budget.limit == parameters + 1000
    default = limits.ReadBudget.default()
    default.add_file(path)
    assert default.limit == 4 * 1000 + (64 << 20)


@pytest.mark.parametrize(
    "text, problem",
    [
        (b'{"a": NaN}', "the constant NaN is not JSON"),
        (b'{"a": -Infinity}', "the constant -Infinity is not JSON"),
        (b'{"a": 1e400}', "the number 1e400 is not finite"),
        (b'{"a": ' + b"9" * 5000 + b"}", "Exceeds the limit"),
        (b"[" * 100_000 + b"]" * 100_000, "nested deeper than can be parsed"),
        (b'{"a": "\xff"}', "invalid start byte"),
    ],
)
def test_json_headers_are_parsed_strictly(text, problem):
    from keras_vit.weights.errors import CheckpointError
    from keras_vit.weights.formats import limits

    with pytest.raises(CheckpointError) as info:
        limits.parse_json(text, "x.safetensors", "header")
    assert problem in str(info.value) and "\n" not in str(info.value)
