"""Saves under faults: signals, kills, read-only and full disks.

`keras-vit convert`, `export`, `analyze`, `fewshot` and
`keras_vit.save_pretrained` write their outputs whole or not at all. Each
test breaks a real save at a named instant (`fault_runs`: the process sends
itself the signal there) or runs it on a real read-only or full file system
(a small tmpfs in a private mount namespace), in a fresh process, as a user
runs it; then it checks the exit status, that the error is one line (no
traceback), what is left on disk, and that the same command run again
finishes the job. A kill leaves hidden debris (`.partial-<pid>@<host>-*`
files, `.<name>.partial-*` staging folders) that the next save of the same
output removes, never a live process's; replacing a folder never loses it.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import subprocess
import sys
import textwrap

import fault_runs as fr
import pytest
from fault_runs import Fault

from keras_vit import atomic

KERAS_VIT = os.path.join(os.path.dirname(sys.executable), "keras-vit")
TIMM_VIT = os.path.join(fr.ROOT, "tests", "fixtures", "timm_vit.safetensors")
HOST = atomic._host()

# `keras-vit <command>` with the fault of `$KERAS_VIT_FAULT` installed: the
# console script's own code (`keras_vit.recipes.__main__.console`), imported
# first, as the script does (it quiets TensorFlow's import).
_CONSOLE = """
import sys
from keras_vit.recipes.__main__ import console
sys.path.insert(0, {here!r})
import fault_runs
fault_runs.install_from_environment()
sys.exit(console())
"""


def _keras_vit(*arguments, cwd, fault=None):
    """Runs `keras-vit ARGUMENTS`: the installed script, or with `fault` the
    same entry point with the fault installed. Returns the process."""
    if fault is None:
        assert os.path.exists(KERAS_VIT), f"no keras-vit beside {sys.executable}"
        command = [KERAS_VIT]
    else:
        command = [sys.executable, "-c", _CONSOLE.format(here=fr.HERE)]
    return subprocess.run(
        [*command, *map(str, arguments)],
        cwd=cwd,
        env=fr.environment(fault),
        capture_output=True,
        text=True,
        timeout=300,
    )


def _python(code: str, *arguments, cwd, check=True):
    """Runs `code` in a fresh Python (`fault_runs` importable); returns the
    process and the JSON of its last line (or `None`)."""
    process = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, arguments)],
        cwd=cwd,
        env=fr.environment(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    if check:
        assert process.returncode == 0, process.stderr[-3000:]
    lines = process.stdout.strip().splitlines()
    return process, (json.loads(lines[-1]) if lines else None)


def _one_error_line(process) -> str:
    """The only line on stderr, an `error: ...` (no traceback)."""
    lines = fr.error_lines(process.stderr)
    assert "Traceback" not in process.stderr, process.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: "), process.stderr[-3000:]
    return lines[0]


def _hidden(folder) -> list[str]:
    """The hidden entries in `folder`: a save's temporary files and folders."""
    return sorted(name for name in os.listdir(folder) if name.startswith("."))


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


def _convert_arguments(kind, out, tiny_keras) -> list:
    """`keras-vit convert` arguments writing `kind` into folder `out`."""
    if kind == "folder":
        return ["convert", tiny_keras, out / "my-vit"]
    return ["convert", TIMM_VIT, out / f"vit{kind}", "--variant", "test/8"]


# -- killed saves: the next save removes their debris ------------------------

KILLED_WRITES = {
    ".keras": Fault("keras:Model.save", "after"),
    ".weights.h5": Fault("keras:Model.save_weights", "after"),
    # The staging folder holds the weights; the folder is not renamed yet.
    "folder": Fault("keras_vit.pretrained:_write_safetensors", "after"),
}


@pytest.mark.parametrize(
    "kind", [".keras", "folder", pytest.param(".weights.h5", marks=pytest.mark.large)]
)
def test_debris_of_a_killed_convert_is_removed_by_the_same_command(
    tmp_path, tiny_keras, kind
):
    out = tmp_path / "out"
    out.mkdir()
    arguments = _convert_arguments(kind, out, tiny_keras)

    killed = _keras_vit(*arguments, cwd=tmp_path, fault=KILLED_WRITES[kind])

    assert killed.returncode == -9, killed.stderr[-3000:]
    assert os.listdir(out) and os.listdir(out) == _hidden(out)  # Debris only.
    again = _keras_vit(*arguments, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert os.listdir(out) == [arguments[2].name]  # Whole; no debris left.
    if kind == "folder":
        assert sorted(os.listdir(arguments[2])) == [
            "README.md", "config.json", "model.safetensors"
        ]  # fmt: skip


def _reaped_pid() -> int:
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def test_only_debris_of_dead_writers_on_this_host_is_removed(tmp_path):
    dead, live = _reaped_pid(), subprocess.Popen(["sleep", "60"])
    try:
        debris = {
            "dead": f".partial-{dead}@{HOST}-vit.keras",
            "live": f".partial-{live.pid}@{HOST}-vit.keras",
            "elsewhere": f".partial-{dead}@another-host-vit.keras",
            "another file's": f".partial-{dead}@{HOST}-other.keras",
        }
        for name in debris.values():
            (tmp_path / name).write_bytes(b"torn")

        atomic.write_text(tmp_path / "vit.keras", "whole")

        left = sorted(os.listdir(tmp_path))
        assert left == sorted(["vit.keras", *list(debris.values())[1:]])
    finally:
        live.kill()
        live.wait()


# -- replacing a folder never loses it ---------------------------------------

_SAVE = """
import json, os, sys
sys.path.insert(0, {here!r})
import fault_runs, keras_vit

out, classes, overwrite, fault = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
if fault != "none":
    fault_runs.inject(fault_runs.Fault(**json.loads(fault)))
model = keras_vit.ViT("test/4", image_size=16, num_classes=classes)
try:
    keras_vit.save_pretrained(model, out, overwrite=overwrite == "overwrite")
    outcome = "saved"
except KeyboardInterrupt:
    outcome = "interrupted"
print(json.dumps(outcome))
"""

# Between the two renames of a replacement: the old folder moved aside, the
# new one not yet in its place.
BETWEEN_RENAMES = Fault("os:rename", "before", nth=2, match="my-vit")


def _save(folder, classes, *, overwrite=False, fault=None, check=True):
    """`save_pretrained` of a tiny ViT with `classes` classes, in a fresh
    process with `fault`; returns the process and what it printed."""
    spec = "none" if fault is None else json.dumps(dataclasses.asdict(fault))
    how = "overwrite" if overwrite else "keep"
    return _python(
        _SAVE.format(here=fr.HERE), folder, classes, how, spec,
        cwd=folder.parent, check=check,
    )  # fmt: skip


def _classes(folder) -> int:
    with open(folder / "config.json") as f:
        return json.load(f)["num_classes"]


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_an_interrupted_replacement_keeps_the_old_folder(tmp_path):
    folder = tmp_path / "my-vit"
    _save(folder, 3)

    _, outcome = _save(
        folder, 5, overwrite=True, fault=BETWEEN_RENAMES.with_action("SIGINT")
    )

    assert outcome == "interrupted"
    assert os.listdir(tmp_path) == ["my-vit"] and _classes(folder) == 3
    _, outcome = _save(folder, 5, overwrite=True)  # The same call again.
    assert outcome == "saved" and os.listdir(tmp_path) == ["my-vit"]
    assert _classes(folder) == 5


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_a_replacement_killed_between_its_renames_is_put_back_by_the_next_save(
    tmp_path,
):
    folder = tmp_path / "my-vit"
    _save(folder, 3)

    killed, _ = _save(folder, 5, overwrite=True, check=False,
                      fault=BETWEEN_RENAMES.with_action("SIGKILL"))  # fmt: skip

    assert killed.returncode == -9, killed.stderr[-3000:]
    assert not folder.exists() and len(_hidden(tmp_path)) == 2  # Old and new.
    _, outcome = _save(tmp_path / "another", 4)  # Any save next to it.
    assert outcome == "saved" and _classes(folder) == 3  # The old one, back.
    assert sorted(os.listdir(tmp_path)) == ["another", "my-vit"]
    _, outcome = _save(folder, 5, overwrite=True)  # The killed call, again.
    assert _classes(folder) == 5 and _hidden(tmp_path) == []


_UMASK = """
import json, os, stat, sys
import keras_vit

model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
modes = {}
for umask, name in ((0o022, "public"), (0o077, "private")):
    os.umask(umask)
    folder = keras_vit.save_pretrained(model, os.path.join(sys.argv[1], name))
    found = {("dir", stat.S_IMODE(os.stat(folder).st_mode))}
    for entry in os.scandir(folder):
        found.add(("file", stat.S_IMODE(entry.stat().st_mode)))
    modes[name] = sorted([kind, oct(mode)] for kind, mode in found)
print(json.dumps(modes))
"""


def test_save_pretrained_permissions_follow_the_umask(tmp_path):
    _, modes = _python(_UMASK, tmp_path, cwd=tmp_path)

    assert modes["public"] == [["dir", "0o755"], ["file", "0o644"]]
    assert modes["private"] == [["dir", "0o700"], ["file", "0o600"]]


# -- Ctrl-C and SIGTERM: one line, nothing left, the same command finishes ---

INTERRUPTIONS = {
    "convert-.keras-SIGINT": (".keras", KILLED_WRITES[".keras"].with_action("SIGINT")),
    "convert-folder-SIGINT": ("folder", KILLED_WRITES["folder"].with_action("SIGINT")),
    "convert-.weights.h5-SIGTERM": (
        ".weights.h5", Fault("keras:Model.save_weights", "after", action="SIGTERM")
    ),
}  # fmt: skip


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
@pytest.mark.parametrize("case", list(INTERRUPTIONS))
def test_an_interrupted_convert_is_one_line_and_the_same_command_finishes(
    tmp_path, tiny_keras, case
):
    kind, fault = INTERRUPTIONS[case]
    out = tmp_path / "out"
    out.mkdir()
    arguments = _convert_arguments(kind, out, tiny_keras)
    target = arguments[2]

    stopped = _keras_vit(*arguments, cwd=tmp_path, fault=fault)

    signal_name, code = (
        ("SIGTERM", 143) if fault.action == "SIGTERM" else ("Ctrl-C", 130)
    )
    assert stopped.returncode == code, stopped.stderr[-3000:]
    assert _one_error_line(stopped) == (
        f"error: interrupted ({signal_name}) before {target} was written; "
        f"{target} was left as it was: rerun the same command"
    )
    assert os.listdir(out) == []  # Nothing partial.
    again = _keras_vit(*arguments, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert os.listdir(out) == [target.name]


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_an_interrupted_export_is_one_line_and_the_same_command_finishes(
    tmp_path, tiny_keras
):
    base = tmp_path / "models"
    arguments = ["export", "--model", tiny_keras, "--name", "vit", "--version", "1",
                 "--base-dir", base]  # fmt: skip
    # The SavedModel is in its staging folder; its metadata is not written.
    fault = Fault(
        "keras_vit.export.savedmodel:_write_metadata", "before", action="SIGINT"
    )

    stopped = _keras_vit(*arguments, cwd=tmp_path, fault=fault)

    assert stopped.returncode == 130, stopped.stderr[-3000:]
    assert _one_error_line(stopped) == (
        f"error: interrupted (Ctrl-C) before {base / 'vit' / '1'} was written; "
        "nothing was written: rerun the same command"
    )
    assert not base.exists()  # No staging folder, nor the folders made for it.
    again = _keras_vit(*arguments, cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert os.listdir(base / "vit") == ["1"]
    assert (base / "vit" / "1" / "saved_model.pb").is_file()


# -- read-only and full disks: one line, nothing partial --------------------

_DISKS = """
set -u
disk() {  # NAME SIZE FILL(bytes, or "all") READ_ONLY(0/1)
    mkdir -p "$DISK/$1" && mount -t tmpfs -o "size=$2" tmpfs "$DISK/$1" || exit 97
    if [ "$3" = all ]; then cat /dev/zero > "$DISK/$1/filler" 2>/dev/null
    elif [ "$3" != 0 ]; then head -c "$3" /dev/zero > "$DISK/$1/filler"; fi
    if [ "$4" = 1 ]; then mount -o remount,ro "$DISK/$1" || exit 97; fi
}
run() {  # CASE COMMAND...
    name=$1; shift
    "$@" > "$OUT/$name.out" 2> "$OUT/$name.err"
    echo $? > "$OUT/$name.rc"
}
"""


def _on_disks(tmp_path, disks: dict, cases: dict) -> dict:
    """Runs each `keras-vit` command of `cases` on tmpfs `disks` mounted in
    a private mount namespace (`unshare`: no root needed).

    Args:
        disks: `{name: (size, fill, read_only)}`; `fill` in bytes or "all".
        cases: `{case: keras-vit arguments}`; `{disk}` in an argument is the
            mount point of that disk.

    Returns:
        `{case: (exit status, stdout, stderr)}`, with `"files"`: the paths
        left on each disk (its filler aside), and each disk's content
        copied under `tmp_path / "copies"`.
    """
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) for a private tmpfs")
    root, out = tmp_path / "disks", tmp_path / "out"
    root.mkdir(), out.mkdir()
    lines = [_DISKS]
    for name, (size, fill, read_only) in disks.items():
        lines.append(f"disk {name} {size} {fill} {int(read_only)}")
    mounts = {name: str(root / name) for name in disks}
    for case, arguments in cases.items():
        words = [KERAS_VIT, *(str(a).format(**mounts) for a in arguments)]
        lines.append(f"run {case} {shlex.join(words)}")
    for name in disks:
        lines.append(
            f'find "$DISK/{name}" -mindepth 1 ! -name filler > "$OUT/{name}.files"; '
            f'cp -a "$DISK/{name}" "$OUT/copy-{name}"'
        )
    process = subprocess.run(
        ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
         "\n".join(lines)],
        cwd=tmp_path,
        env=fr.environment(DISK=str(root), OUT=str(out)),
        capture_output=True,
        text=True,
        timeout=1200,
    )  # fmt: skip
    if process.returncode == 97 or not all(
        (out / f"{case}.rc").exists() for case in cases
    ):
        pytest.skip(f"cannot mount a private tmpfs here: {process.stderr[-300:]}")
    results = {
        case: (
            int((out / f"{case}.rc").read_text()),
            (out / f"{case}.out").read_text(),
            (out / f"{case}.err").read_text(),
        )
        for case in cases
    }
    results["files"] = {
        name: sorted((out / f"{name}.files").read_text().split()) for name in disks
    }
    results["mounts"] = mounts
    results["copies"] = {name: out / f"copy-{name}" for name in disks}
    return results


class _Process:
    def __init__(self, result):
        self.returncode, self.stdout, self.stderr = result


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_a_read_only_disk_is_one_line_and_never_called_full(tmp_path, tiny_keras):
    results = _on_disks(
        tmp_path,
        {"ro": ("1m", 0, True), "ro_and_full": ("1m", "all", True)},
        {
            "convert-keras": ["convert", TIMM_VIT, "{ro}/vit.keras",
                              "--variant", "test/8"],
            "convert-folder": ["convert", tiny_keras, "{ro}/my-vit"],
            "convert-h5-full": ["convert", TIMM_VIT, "{ro_and_full}/vit.weights.h5",
                                "--variant", "test/8"],
            "analyze": ["analyze", "--model", tiny_keras, "--images", "digits",
                        "--only", "filters", "--out", "{ro}/figures"],
            "fewshot": ["fewshot", "--model", tiny_keras, "--shots", "1",
                        "--max-test-examples", "20", "--out", "{ro}/fewshot.json"],
        },
    )  # fmt: skip
    ro, ro_and_full = results["mounts"]["ro"], results["mounts"]["ro_and_full"]
    expected = {
        "convert-keras": f"{ro}/vit.keras ({ro} is mounted read-only)",
        "convert-folder": f"{ro}/my-vit ({ro} is mounted read-only)",
        "convert-h5-full": f"{ro_and_full}/vit.weights.h5 ({ro_and_full} is mounted "
        "read-only)",
        "analyze": f"{ro}/figures ({ro} is mounted read-only)",
        "fewshot": f"{ro}/fewshot.json ({ro} is mounted read-only)",
    }
    for case, where in expected.items():
        process = _Process(results[case])
        assert process.returncode == 1, (case, process.stderr[-3000:])
        flag = "--out: " if case in ("analyze", "fewshot") else ""
        assert _one_error_line(process) == (
            f"error: {flag}read-only file system: could not write {where}"
        ), case
    assert results["files"] == {"ro": [], "ro_and_full": []}


def _whole_png(path) -> bool:
    data = path.read_bytes()
    return data.startswith(b"\x89PNG\r\n\x1a\n") and data.endswith(b"IEND\xaeB`\x82")


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_a_full_disk_is_one_line_and_leaves_nothing_partial(tmp_path, tiny_keras):
    # 192 KiB free: room for a part of a SavedModel (about 330 KB). 108 KiB:
    # for the first four figures (92 KiB), not the fifth (32 KiB more).
    results = _on_disks(
        tmp_path,
        {
            "full": ("1m", "all", False),
            "export": ("2m", 1_900_000, False),
            "figures": ("2m", 2_097_152 - 108 * 1024, False),
        },
        {
            "convert-folder": ["convert", tiny_keras, "{full}/my-vit"],
            "fewshot": ["fewshot", "--model", tiny_keras, "--shots", "1",
                        "--max-test-examples", "20", "--out", "{full}/fewshot.json"],
            "export": ["export", "--model", tiny_keras, "--name", "vit",
                       "--version", "1", "--base-dir", "{export}/models"],
            "analyze": ["analyze", "--model", tiny_keras, "--images", "digits",
                        "--max-images", "8", "--out", "{figures}/figures", "--only",
                        "filters,position,attention,distance,rollout,fourier"],
        },
    )  # fmt: skip
    mounts = results["mounts"]
    starts = {
        "convert-folder": f"error: disk full: could not write {mounts['full']}/my-vit "
        f"(No space left on device on {mounts['full']}, ",
        "fewshot": f"error: --out: disk full: could not write {mounts['full']}/"
        f"fewshot.json (No space left on device on {mounts['full']}, ",
        "export": "error: not exported: disk full: could not write "
        f"{mounts['export']}/models/vit/1 (No space left on device on "
        f"{mounts['export']}, ",
        "analyze": f"error: disk full: could not write {mounts['figures']}/figures/",
    }
    for case, start in starts.items():
        process = _Process(results[case])
        assert process.returncode == 1, (case, process.stderr[-3000:])
        assert _one_error_line(process).startswith(start), case
    assert "shots  accuracy" in results["fewshot"][1]  # Printed before the file.
    assert results["files"]["full"] == [] and results["files"]["export"] == []
    figures = results["copies"]["figures"] / "figures"
    written = sorted(os.listdir(figures))
    assert written and all(_whole_png(figures / name) for name in written)
    order = "filters,position,attention,distance,rollout,fourier".split(",")
    whole = [
        f"{mounts['figures']}/figures/{n}.png" for n in order if f"{n}.png" in written
    ]
    line = _one_error_line(_Process(results["analyze"]))
    assert line.endswith(f"; whole: {', '.join(whole)}"), line
    assert 0 < len(whole) < len(order)  # The disk filled up part-way.
