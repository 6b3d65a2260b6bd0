"""Probes keras_vit as a hostile or an unlucky user would, one fresh process a case.

Each case runs the installed `keras-vit` script (found beside
`sys.executable`) or the Python API (`python -c ...`) in a fresh process,
in a folder of its own, with a timeout, and measures the process's peak
resident memory (`os.wait4`: the largest of the process and the children it
waited for). Whatever `keras_vit` those processes import is the one probed:
set `PYTHONPATH` to probe another checkout (the first case prints the path).

Each outcome is put in exactly one class, the first that applies:

- `data lost`: a destination that existed before the case is gone or torn.
- `hang`: no exit within the timeout.
- `runaway allocation`: a peak above the bound (`--bound-mib`), or a
  `MemoryError` (or another failed allocation) in what the process printed.
- `false success`: exit 0 (no exception, an answered request) where the
  input must be refused, or something written that must not be: a local
  folder named after a URL (`./gs:/bucket`), hidden debris a later run does
  not remove, a model holding another file's bytes, an output left by a
  refused command, a warning's text lost.
- `traceback`: a Python traceback (or a `--- Logging error ---`), a crash
  by a signal, an exception raised from inside another library (the Python
  API), or a failure that is not one error line.
- `one-line refusal`: a non-zero exit whose stderr ends in one error
  message and no traceback: an `error: ...` (or exception) line, followed
  at most by indented lines detailing it (a list of keys); the API: one
  exception line raised by keras_vit's own code; a served request: an
  `InvalidArgumentError` for that request, the next one still answered.
- `ok`: a success.

Each case also says what it should give (`ok`, a refusal, or either) and,
for a refusal, words the error must contain to name the problem; a case
gives what it should (`as_expected`) when both hold. Controls (legitimate
inputs) make sure the probe is not "everything is refused".

The cases cover the failures of "Security and faults, third pass": files
that read data from outside themselves, small files claiming huge memory,
outputs at URLs, image bombs sent to the served model, FIFOs in image
folders, inputs that used to end in tracebacks (seeds, class-name files,
JSON headers, read-only and full disks, Ctrl-C), interrupted saves, the
routing of `convert`'s inputs and TensorFlow's log records after
`import keras_vit`. The hostile files come from the builders of the tests
(`tests/hostile_files.py`, `tests/test_hostile_*.py`, `tests/fault_runs.py`,
`tests/test_save_faults.py`, `tests/test_url_outputs.py`).

Read-only and full disks are small tmpfs mounts in a private mount
namespace (`unshare --user --map-root-user --mount`), as
`tests/test_save_faults.py` makes them; signals are sent by the process to
itself at a named instant (`tests/fault_runs.py`).

Writes `results.jsonl` (one line a case, with the commands, exit statuses,
peaks, the end of stderr and the class), `meta.json` and `summary.md`
under `--out`. `--compare A B` prints two runs' tables side by side.

Example:

```
nice -n 10 python scripts/probe_hostile.py --out /tmp/probe/after
PYTHONPATH=/path/to/old/checkout nice -n 10 python scripts/probe_hostile.py \\
    --out /tmp/probe/before
python scripts/probe_hostile.py --compare /tmp/probe/before /tmp/probe/after
python scripts/probe_hostile.py --list --only 'serving'
```
"""

from __future__ import annotations

import argparse
import concurrent.futures
import dataclasses
import datetime
import functools
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import types
import zipfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"
KERAS_VIT = os.path.join(os.path.dirname(sys.executable), "keras-vit")

CLASSES = (
    "data lost",
    "hang",
    "runaway allocation",
    "false success",
    "traceback",
    "one-line refusal",
    "ok",
)
ITEMS = {
    "1": "data from outside the file (HDF5)",
    "2": "small files, big memory",
    "3": "URL outputs",
    "4": "served image bombs",
    "5": "FIFOs in folder datasets",
    "6": "tracebacks instead of one line",
    "7": "interrupted saves",
    "8": "convert's input routing",
    "10": "TensorFlow's log records",
    "control": "controls (legitimate inputs)",
}
# What a failed allocation prints, in Python, NumPy, TensorFlow and C++.
RUNAWAY = re.compile(
    r"MemoryError|Unable to allocate|std::bad_alloc|ResourceExhausted|"
    r"OOM when allocating|Cannot allocate memory"
)
ERROR_LINE = re.compile(r"^(error: |[A-Za-z_][\w.]*(Error|Exception|Interrupt)\b)")
TRACEBACK = ("Traceback (most recent call last)", "--- Logging error ---")
ABSOLUTE_PATH = re.compile(r"(?<![\w:/])/[^\s'\"]+")
# Hidden entries a save leaves when it is killed, in each version.
DEBRIS = re.compile(r"^\.(partial-|tmp_pretrained_|tmp_replaced_|.*\.partial-)")
TRAIN_TINY = [
    "variant=test/4",
    "image_size=16",
    "epochs=1",
    "steps_per_epoch=1",
    "global_batch_size=8",
    "val_split=None",
    "monitor_images=0",
    "verbose=0",
]

# The tiny model's head reads the class token (digits' config pools).
TOKEN_POOLING = ["encoder.class_token=true", "encoder.pooling=token"]

H = types.SimpleNamespace()  # The tests' builders, imported by `load_helpers`.


def load_helpers() -> None:
    """Imports the builders and fault helpers of the tests into `H`."""
    sys.path.insert(0, str(TESTS))
    import fault_runs
    import hostile_files
    import test_hostile_inputs
    import test_hostile_keras_files
    import test_hostile_serving
    import test_save_faults
    import test_url_outputs

    H.fr, H.hf = fault_runs, hostile_files
    H.keras_files, H.serving = test_hostile_keras_files, test_hostile_serving
    H.inputs, H.saves, H.urls = test_hostile_inputs, test_save_faults, test_url_outputs


# -- running a process ---------------------------------------------------------


@dataclasses.dataclass
class Run:
    """One process a case started, and how it ended."""

    label: str
    argv: list
    expect: str  # "ok", "refusal", "either", "killed", "signalled"
    rc: int | None = None
    timed_out: bool = False
    seconds: float = 0.0
    peak_mib: float = 0.0
    stdout: str = ""
    stderr: str = ""
    report: dict | None = None  # The `PROBE-REPORT` JSON a Python child printed.
    cls: str = ""
    reason: str = ""
    message: str = ""  # The error message, whole: what must name the problem.
    killed_mib: float = 0.0  # Killed for holding this much memory.

    def record(self) -> dict:
        shown = [
            a if len(a) < 300 else a[:120] + "...<script>" for a in map(str, self.argv)
        ]
        report = dict(self.report or {})
        for key in ("traceback",):
            if isinstance(report.get("error"), dict):
                report["error"] = {
                    k: v for k, v in report["error"].items() if k != key
                } | {"traceback_tail": report["error"].get(key, "")[-1500:]}
        return {
            "label": self.label,
            "argv": shown,
            "expect": self.expect,
            "rc": self.rc,
            "timed_out": self.timed_out,
            "killed_mib": round(self.killed_mib),
            "seconds": round(self.seconds, 1),
            "peak_mib": round(self.peak_mib),
            "class": self.cls,
            "reason": self.reason,
            "message": self.message[:3000],
            "report": report or None,
            "stdout_tail": self.stdout[-1500:],
            "stderr_tail": self.stderr[-3000:],
        }


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


_PAGE_MIB = os.sysconf("SC_PAGE_SIZE") / 2**20


def session_rss_mib(session: int) -> float:
    """The resident memory of every process in `session`, together."""
    pages = 0
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()  # From field 3, state.
        if int(fields[3]) == session:  # Field 6: the session.
            pages += int(fields[21])  # Field 24: resident pages.
    return pages * _PAGE_MIB


def run_process(run: Run, *, cwd, env, timeout, log, kill_mib) -> Run:
    """Runs `run.argv` in its own session; fills in how it ended.

    The peak is `ru_maxrss` of `os.wait4` on the process: its own peak or
    that of the largest child it waited for. A process past `timeout` is
    killed with its whole process group, and so is one whose session holds
    more than `kill_mib` resident (checked each second): a bomb that is
    decoded by mistake must not take the machine's memory.
    """
    log.parent.mkdir(parents=True, exist_ok=True)
    out_path, err_path = Path(f"{log}.out"), Path(f"{log}.err")
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        started = time.monotonic()
        process = subprocess.Popen(
            [str(a) for a in run.argv],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            start_new_session=True,
        )
        polls = 0
        while True:
            pid, status, usage = os.wait4(process.pid, os.WNOHANG)
            if pid:
                break
            polls += 1
            if polls % 20 == 0 and session_rss_mib(process.pid) > kill_mib:
                run.killed_mib = session_rss_mib(process.pid)
            if time.monotonic() - started > timeout or run.killed_mib:
                run.timed_out = not run.killed_mib
                _kill_group(process.pid)
                pid, status, usage = os.wait4(process.pid, 0)
                break
            time.sleep(0.05)
        run.seconds = time.monotonic() - started
        process.returncode = run.rc = os.waitstatus_to_exitcode(status)
        _kill_group(process.pid)  # Anything it left running.
    run.peak_mib = usage.ru_maxrss / 1024
    run.stdout = out_path.read_text(errors="replace")
    run.stderr = err_path.read_text(errors="replace")
    for line in run.stdout.splitlines():
        if line.startswith("PROBE-REPORT "):
            run.report = json.loads(line[len("PROBE-REPORT ") :])
    if run.timed_out:
        run.rc = None
    return run


# -- classifying ---------------------------------------------------------------


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def classify_run(run: Run, bound_mib: float, package: str) -> None:
    """Sets `run.cls` and `run.reason` (the module docstring's rules)."""

    def put(cls, reason):
        run.cls, run.reason = cls, reason

    if run.timed_out:
        return put("hang", f"no exit after {run.seconds:.0f} s")
    if run.killed_mib:
        return put("runaway allocation", f"killed holding {run.killed_mib:.0f} MiB")
    if run.peak_mib > bound_mib:
        return put("runaway allocation", f"peak {run.peak_mib:.0f} MiB")
    found = RUNAWAY.search(run.stderr + json.dumps(run.report or {}))
    if found:
        line = next((x for x in _lines(run.stderr) if found.group(0) in x), "")
        return put("runaway allocation", (line or found.group(0))[:300])
    tb = any(marker in run.stderr for marker in TRACEBACK)
    last = (_lines(run.stderr) or [""])[-1][:500]
    if run.expect == "killed" and run.rc == -signal.SIGKILL:
        return put("ok", "killed (SIGKILL) as planned")
    if run.expect == "signalled" and run.rc in (-signal.SIGTERM, -signal.SIGINT):
        return put("ok", f"ended by its signal (exit {run.rc})")
    if run.rc == 0 and run.report is not None and "error" in run.report:
        return _classify_report(run, package, tb)
    if run.rc == 0:
        if run.expect == "refusal":
            return put("false success", "exit 0 for an input that must be refused")
        if tb:
            return put("traceback", "exit 0, with a traceback on stderr")
        return put("ok", "exit 0")
    if run.rc is not None and run.rc < 0:
        name = signal.Signals(-run.rc).name
        return put("traceback", f"died of {name}" + (f": {last}" if last else ""))
    if tb:
        return put("traceback", f"exit {run.rc}: {last}")
    message = _error_message(run.stderr)
    if message:
        run.message = "\n".join(message)
        more = f" (+{len(message) - 1} indented lines)" if len(message) > 1 else ""
        return put("one-line refusal", message[0][:500] + more)
    return put("traceback", f"exit {run.rc} without one error line: {last!r}")


def _error_message(stderr: str) -> list[str]:
    """The lines of the last error message on stderr: an `error: ...` (or
    exception) line, and the indented lines that detail it (a key list)."""
    lines = _lines(stderr)
    for at in range(len(lines) - 1, -1, -1):
        if ERROR_LINE.match(lines[at]):
            rest = lines[at + 1 :]
            return lines[at:] if all(x[:1].isspace() for x in rest) else []
    return []


def _classify_report(run: Run, package: str, tb: bool) -> None:
    """A Python child's own account: an API call or a served request."""
    error = run.report["error"]
    served = run.report.get("served", False)
    if error is None:
        if run.expect == "refusal":
            what = "answered" if served else "no exception"
            run.cls, run.reason = "false success", f"{what} for an input to refuse"
        elif tb:
            run.cls, run.reason = "traceback", "a traceback on stderr"
        else:
            run.cls, run.reason = "ok", "no exception" if not served else "answered"
        return
    line = run.message = f"{error['type']}: {error['message']}"
    if served:
        if error["type"] != "InvalidArgumentError":
            run.cls, run.reason = "traceback", line[:500]
        elif not run.report.get("next_ok", True):
            run.cls, run.reason = "traceback", "the next request failed: " + line[:400]
        else:
            parts = [x.strip() for x in line.splitlines() if x.strip()]
            run.cls, run.reason = "one-line refusal", " | ".join(parts)[:500]
        return
    if error["type"] == "KeyboardInterrupt":
        run.cls, run.reason = "one-line refusal", "KeyboardInterrupt raised"
        return
    own = error["module"].startswith("keras_vit") or (
        package and error["raised_in"].startswith(package)
    )
    if "\n" in error["message"].strip() or not error["message"].strip():
        run.cls, run.reason = "traceback", f"not one line: {line[:400]!r}"
    elif not own:
        where = error["raised_in"]
        run.cls, run.reason = "traceback", f"raised in {where}: {line[:400]}"
    else:
        run.cls, run.reason = "one-line refusal", line[:500]


@dataclasses.dataclass
class Outcome:
    """What a case ran, and what it found on disk and in the model."""

    runs: list
    lost: list = dataclasses.field(default_factory=list)
    forbidden: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)


def classify_case(outcome: Outcome) -> tuple[str, str]:
    """The case's class: the first of `CLASSES` that any of its runs or
    checks gives."""
    found = [(run.cls, f"{run.label}: {run.reason}") for run in outcome.runs]
    found += [("data lost", text) for text in outcome.lost]
    found += [("false success", text) for text in outcome.forbidden]
    return min(found, key=lambda pair: CLASSES.index(pair[0]))


# -- the case's folders and files ------------------------------------------------


@dataclasses.dataclass
class Dirs:
    """A case's folders: its inputs, the commands' working folder, logs."""

    root: Path

    @property
    def files(self) -> Path:
        return self.root / "files"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def logs(self) -> Path:
        return self.root / "logs"


def snapshot(path: Path) -> dict | None:
    """`{relative path: sha1}` of a file or a folder; `None` when absent."""
    if not os.path.lexists(path):
        return None
    if path.is_file():
        return {"": hashlib.sha1(path.read_bytes()).hexdigest()}
    return {
        str(p.relative_to(path)): hashlib.sha1(p.read_bytes()).hexdigest()
        for p in sorted(path.rglob("*"))
        if p.is_file()
    }


def whole(path: Path) -> bool:
    """Whether `path` is a whole output: a `.keras` archive, a `.weights.h5`
    file, a pretrained folder or a SavedModel version."""
    try:
        if path.is_file() and path.suffix == ".keras":
            with zipfile.ZipFile(path) as archive:
                names = set(archive.namelist())
                return archive.testzip() is None and "config.json" in names
        if path.is_file() and path.name.endswith(".weights.h5"):
            import h5py

            with h5py.File(path, "r") as f:
                return "layers" in f or len(f) > 0
        if (path / "saved_model.pb").is_file():
            return (path / "variables" / "variables.index").is_file()
        if (path / "config.json").is_file():
            json.loads((path / "config.json").read_text())
            data = (path / "model.safetensors").read_bytes()
            size = int.from_bytes(data[:8], "little")
            header = json.loads(data[8 : 8 + size])
            end = max(
                v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"
            )
            return len(data) == 8 + size + end
    except Exception:
        return False
    return False


def check_kept(before: dict | None, path: Path, outcome: Outcome, what: str) -> None:
    """`data lost` unless `path` is as it was, or whole and new."""
    after = snapshot(path)
    if before is None:
        return
    if after is None:
        outcome.lost.append(f"{what} existed before and is gone")
    elif after != before and not whole(path):
        outcome.lost.append(f"{what} existed before and is torn")


def url_named(root: Path) -> list[str]:
    """Local paths under `root` with a colon in a name: `./gs:/bucket`."""
    return [
        str(Path(folder, name).relative_to(root))
        for folder, dirs, names in os.walk(root)
        for name in [*dirs, *names]
        if ":" in name
    ]


def debris(folder: Path) -> list[str]:
    """Hidden entries a killed save leaves in `folder`."""
    if not folder.is_dir():
        return []
    return sorted(name for name in os.listdir(folder) if DEBRIS.match(name))


def files_under(path: Path) -> list[str]:
    if path.is_file():
        return [path.name]
    return [str(p) for p in path.rglob("*") if p.is_file()] if path.is_dir() else []


def holds(root: Path, needle: bytes) -> list[str]:
    """Files under `root` whose bytes contain `needle`."""
    found = []
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            try:
                if needle in path.read_bytes():
                    found.append(str(path.relative_to(root)))
            except OSError:
                pass
    return found


# -- the probe ------------------------------------------------------------------


class Probe:
    """Runs cases against the `keras_vit` that child processes import."""

    def __init__(self, out: Path, timeout: float, bound_mib: float, kill_mib: float):
        self.out, self.timeout, self.bound_mib = out, timeout, bound_mib
        self.kill_mib = kill_mib
        self.setup = out / "setup"
        self.package = ""  # The probed package's folder, from the setup child.
        self.lock, self.built = threading.Lock(), set()

    # Environments and processes.

    def env(self, extra=None, drop=()) -> dict:
        env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}
        env.pop(H.fr.FAULT_ENV, None)
        env.update(extra or {})
        for name in drop:
            env.pop(name, None)
        return env

    def run(self, d: Dirs, label, argv, expect, *, env=None, timeout=None, cwd=None):
        run = Run(label, list(argv), expect)
        d.work.mkdir(parents=True, exist_ok=True)
        count = len(list(d.logs.glob("*.err"))) if d.logs.exists() else 0
        stem = re.sub(r"[^\w.-]+", "_", label)
        run_process(
            run,
            cwd=cwd or d.work,
            env=env or self.env(),
            timeout=timeout or self.timeout,
            log=d.logs / f"{count}-{stem}",
            kill_mib=self.kill_mib,
        )
        classify_run(run, self.bound_mib, self.package)
        return run

    def cli(self, d, *args, expect, label=None, **options) -> Run:
        label = label or f"keras-vit {args[0]}"
        return self.run(d, label, [KERAS_VIT, *args], expect, **options)

    def python(self, d, code, *args, expect, label="python -c", **options) -> Run:
        return self.run(
            d, label, [sys.executable, "-c", code, *args], expect, **options
        )

    def faulted(self, d, fault, *args, expect, label, **options) -> Run:
        """`keras-vit ARGS` (the console script's own entry point) with
        `fault` installed, as `tests/test_save_faults.py` runs it."""
        code = H.saves._CONSOLE.format(here=str(TESTS))
        env = self.env({H.fr.FAULT_ENV: json.dumps(dataclasses.asdict(fault))})
        argv = [sys.executable, "-c", code, *args]
        return self.run(d, label, argv, expect, env=env, **options)

    def on_disk(self, d, args, *, size, expect, fill=0, read_only=False, preload=None):
        """`keras-vit ARGS` with a small tmpfs mounted at `d.work / "disk"`
        in a private mount namespace: `fill` bytes taken (or "all"),
        `preload` (`{name: source}`) copied in first, then made read-only.
        The disk's files are copied to `d.root / "disk-after"`."""
        disk, copy = d.work / "disk", d.root / "disk-after"
        disk.mkdir(parents=True, exist_ok=True)
        lines = [
            "set -u",
            "D=$1; COPY=$2; shift 2",
            f'mount -t tmpfs -o size={size} tmpfs "$D" || '
            '{ echo "probe: cannot mount a tmpfs" >&2; exit 97; }',
        ]
        for name, source in (preload or {}).items():
            lines.append(f'cp -a "{source}" "$D/{name}"')
        if fill == "all":
            lines.append('cat /dev/zero > "$D/filler" 2>/dev/null')
        elif fill:
            lines.append(f'head -c {fill} /dev/zero > "$D/filler"')
        if read_only:
            lines.append('mount -o remount,ro "$D" || exit 97')
        lines += [
            '"$@"',
            "rc=$?",
            'mkdir -p "$COPY" && (cd "$D" && tar --exclude=./filler -cf - .) | '
            'tar -C "$COPY" -xf -',
            "exit $rc",
        ]
        words = [str(a).format(disk=disk) for a in args]
        argv = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c",
                "\n".join(lines), "sh", disk, copy, KERAS_VIT, *words]  # fmt: skip
        run = self.run(d, f"keras-vit {args[0]} (on a tmpfs)", argv, expect)
        if "probe: cannot mount a tmpfs" in run.stderr:
            raise RuntimeError("cannot mount a private tmpfs (unshare)")
        return run

    # Files every case may use, made once by the probed package.

    def make_setup(self) -> dict:
        """A tiny model in each format, a random model's two Keras files
        (`saved/`), its SavedModel and the images; returns what the child
        reports (the package's path)."""
        shutil.rmtree(self.setup, ignore_errors=True)
        self.setup.mkdir(parents=True)
        d = Dirs(self.setup / "_run")
        run = self.python(
            d, _SETUP, self.setup, expect="ok", label="setup", cwd=self.setup
        )
        if run.rc != 0 or run.report is None:
            raise RuntimeError(f"setup failed: {run.stderr[-3000:]}")
        self.package = os.path.dirname(run.report["keras_vit"])
        # What the `keras-vit` script imports: its folder first on the path.
        code = (
            "import sys; sys.path[0] = sys.argv[1]; "
            "import keras_vit.recipes.__main__ as m; print('PROBE-REPORT', "
            "__import__('json').dumps({'script_imports': m.__file__}))"
        )
        script = self.python(d, code, os.path.dirname(KERAS_VIT), expect="ok",
                             label="the script's import", cwd=self.setup)  # fmt: skip
        run.report["script_imports"] = (script.report or {}).get("script_imports")
        if not str(run.report["script_imports"]).startswith(self.package):
            raise RuntimeError(f"the keras-vit script imports {script.stdout!r}")
        export = self.cli(
            d, "export", "--model", self.setup / "tiny.keras", "--name", "vit",
            "--version", "1", "--base-dir", self.setup / "served", expect="ok",
            label="setup export", cwd=self.setup,
        )  # fmt: skip
        if export.rc != 0:
            raise RuntimeError(f"setup export failed: {export.stderr[-3000:]}")
        make_folder_data(self.setup / "data")
        import numpy as np
        from PIL import Image

        Image.fromarray(np.full((16, 16, 3), 120, np.uint8)).save(
            self.setup / "cat.png"
        )
        return run.report

    @property
    def saved(self):
        """`(model, folder)` as the keras-file builders of the tests take it."""
        return (None, self.setup / "saved")

    def shared(self, name: str) -> str:
        """A hostile file too costly to build for each case, built once."""
        # Named neutrally: a refusal must name the problem, not the file.
        index = list(SHARED_BUILDERS).index(name)
        path = self.setup / "hostile" / f"file{index}.{name.split('.', 1)[1]}"
        with self.lock:
            if name not in self.built:
                path.parent.mkdir(exist_ok=True)
                SHARED_BUILDERS[name](self, path)
                self.built.add(name)
        return str(path)


def make_folder_data(root: Path) -> None:
    """`root/{train,test}/{cat,dog}/` of four 16x16 PNGs each."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for split in ("train", "test"):
        for name in ("cat", "dog"):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(4):
                pixels = rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(folder / f"{i}.png")


# Made by the probed package: tiny.{keras,weights.h5,npz} (seed 0), its
# pretrained folder, two.keras (two classes, as the folder dataset has),
# images.npz, and `saved/model.{weights.h5,keras}` of a random model (the
# fixture of tests/test_hostile_keras_files.py).
_SETUP = r"""
import json, os, sys
import keras_vit
import keras, numpy as np
from keras_vit.weights.checkpoint import from_model
out = sys.argv[1]
keras.config.set_dtype_policy("float32")
keras.utils.set_random_seed(0)
model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
model.save(os.path.join(out, "tiny.keras"))
model.save_weights(os.path.join(out, "tiny.weights.h5"))
np.savez(os.path.join(out, "tiny.npz"), **from_model(model).params)
keras_vit.save_pretrained(model, os.path.join(out, "pretrained"))
two = keras_vit.ViT("test/4", image_size=16, num_classes=2)
two.save(os.path.join(out, "two.keras"))
images = np.random.default_rng(0).integers(0, 256, (8, 16, 16, 3), dtype=np.uint8)
np.savez(os.path.join(out, "images.npz"), images=images)
rng = np.random.default_rng(0)
for weight in model.weights:
    weight.assign(rng.normal(0, 0.2, weight.shape).astype("float32"))
os.makedirs(os.path.join(out, "saved"))
model.save_weights(os.path.join(out, "saved", "model.weights.h5"))
model.save(os.path.join(out, "saved", "model.keras"))
print("PROBE-REPORT " + json.dumps({"keras_vit": keras_vit.__file__}))
"""

# Shared by the Python children: an exception as the probe classifies it.
_PRELUDE = r"""
import json, sys, traceback
def describe(error):
    frames = traceback.extract_tb(error.__traceback__)
    return {"type": type(error).__name__, "module": type(error).__module__,
            "message": str(error)[:4000],
            "raised_in": frames[-1].filename if frames else "",
            "traceback": traceback.format_exc()[-4000:]}
def report(value):
    print("PROBE-REPORT " + json.dumps(value), flush=True)
"""

# `keras_vit.load_weights(model, path)` or `keras_vit.ViT(..., weights=path)`.
_API_LOAD = (
    _PRELUDE
    + r"""
import numpy as np
import keras_vit
mode, path, secret = sys.argv[1], sys.argv[2], bytes.fromhex(sys.argv[3])
out = {"keras_vit": keras_vit.__file__, "error": None}
model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
before = [np.asarray(w).copy() for w in model.weights]
try:
    if mode == "load_weights":
        keras_vit.load_weights(model, path)
    else:
        model = keras_vit.ViT("test/4", image_size=16, num_classes=3, weights=path)
except Exception as error:
    out["error"] = describe(error)
weights = [np.asarray(w) for w in model.weights]
out["changed"] = not all(np.array_equal(a, b) for a, b in zip(before, weights))
out["secret"] = bool(secret) and any(secret in w.tobytes() for w in weights)
report(out)
"""
)

# `keras_vit.save_pretrained(model, url)`; what is at the URL afterwards,
# read by this process (a `ram://` file system lives in it).
_API_SAVE_URL = (
    _PRELUDE
    + r"""
import keras_vit
import tensorflow as tf
url = sys.argv[1]
out = {"error": None}
model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
try:
    keras_vit.save_pretrained(model, url)
except Exception as error:
    out["error"] = describe(error)
try:
    out["listed"] = sorted(tf.io.gfile.listdir(url))
except Exception as error:
    out["listed"] = None
report(out)
"""
)

# `keras_vit.save_pretrained` with an optional fault (`tests/fault_runs.py`);
# what it raised, and the folder's parent afterwards.
_API_SAVE = (
    _PRELUDE
    + r"""
import os
sys.path.insert(0, sys.argv[5])
import fault_runs, keras_vit
folder, classes, overwrite, fault = sys.argv[1:5]
if fault != "none":
    fault_runs.inject(fault_runs.Fault(**json.loads(fault)))
model = keras_vit.ViT("test/4", image_size=16, num_classes=int(classes))
out = {"error": None}
try:
    keras_vit.save_pretrained(model, folder, overwrite=overwrite == "overwrite")
except BaseException as error:
    out["error"] = describe(error)
out["parent"] = sorted(os.listdir(os.path.dirname(os.path.abspath(folder))))
report(out)
"""
)

_API_UMASK = (
    _PRELUDE
    + r"""
import os, stat
import keras_vit
os.umask(0o022)
model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
folder = keras_vit.save_pretrained(model, "my-vit")
modes = {"folder": oct(stat.S_IMODE(os.stat(folder).st_mode))}
for entry in os.scandir(folder):
    modes[entry.name] = oct(stat.S_IMODE(entry.stat().st_mode))
report({"error": None, "modes": modes})
"""
)

# One request to the served `serving_bytes` (a process that never imports
# keras_vit), then a valid one: is the server still answering?
_SERVE = (
    _PRELUDE
    + r"""
import resource
import tensorflow as tf
model_dir, valid, *files = sys.argv[1:]
def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
served = tf.saved_model.load(model_dir).signatures["serving_bytes"]
limit = status("VmSize") + (6 << 30)  # A bomb decoded by mistake fails here.
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
batch = [open(path, "rb").read() for path in files]
out = {"served": True, "error": None}
try:
    result = served(image_bytes=tf.constant(batch, dtype=tf.string))
    out["shape"] = list(result["probabilities"].shape)
except tf.errors.OpError as error:
    out["error"] = {"type": type(error).__name__, "module": "tensorflow",
                    "message": error.message[:2000], "raised_in": ""}
try:
    served(image_bytes=tf.constant([open(valid, "rb").read()]))
    out["next_ok"] = True
except Exception as error:
    out["next_ok"] = False
report(out)
"""
)

# After `import keras_vit`: one record through a logging channel.
_LOGGING = {
    "tf.get_logger": "import tensorflow as tf\ntf.get_logger().warning('{text}')",
    "warnings.warn": "import warnings\nwarnings.warn('{text}')",
    "absl.logging": (
        "from absl import flags, logging\nflags.FLAGS(['probe'])\n"
        "logging.use_absl_handler()\nlogging.warning('{text}')"
    ),
}

# -- the catalogue ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """One probe: `run(probe, dirs) -> Outcome`.

    Attributes:
        expect: "ok", "refusal" or "either" (a refusal or a success).
        mention: A refusal names the problem when its error line contains
            one of these (lower case).
        control: A legitimate input.
    """

    id: str
    item: str
    title: str
    expect: str
    run: Callable
    mention: tuple = ()
    control: bool = False
    timeout: float | None = None


CASES: dict[str, Case] = {}


def add(id, item, title, expect, run, mention=(), control=False, timeout=None):
    if id in CASES:
        raise ValueError(f"two cases named {id}")
    CASES[id] = Case(id, item, title, expect, run, tuple(mention), control, timeout)


def secret() -> bytes:
    return H.keras_files.SECRET


# Builders: `build(probe, dirs) -> path` of the input file.


def keras_files(name):
    """A builder of `tests/test_hostile_keras_files.py`, on the probe's files."""

    def build(p, d):
        return str(getattr(H.keras_files, name)(p.saved, d.files))

    return build


def inside_keras(name):
    """The `.keras` archive whose weights record is `name`'s hostile file."""

    def build(p, d):
        inner = getattr(H.keras_files, name)(p.saved, d.files)
        return str(
            H.keras_files.keras_copy(p.saved, d.files, weights=inner.read_bytes())
        )

    return build


def claimed_floats(count, keras=False):
    def build(p, d):
        inner = H.keras_files.with_claimed_floats(p.saved, d.files, count)
        if not keras:
            return str(inner)
        return str(
            H.keras_files.keras_copy(p.saved, d.files, weights=inner.read_bytes())
        )

    return build


def hostile_file(name, builder, **options):
    """A builder of `tests/hostile_files.py`, into the case's files."""

    def build(p, d):
        path = d.files / name
        getattr(H.hf, builder)(path, **options)
        return str(path)

    return build


def shared(name):
    return lambda p, d: p.shared(name)


def safetensors_header(header: bytes):
    def build(p, d):
        path = d.files / "hostile.safetensors"
        H.hf._safetensors(path, header, bytes(128))
        return str(path)

    return build


def keras_config(config_of):
    """The saved `.keras` with its config replaced by `config_of(config)`."""

    def build(p, d):
        config = config_of(H.keras_files.saved_config(p.saved))
        return str(H.keras_files.keras_copy(p.saved, d.files, config=config))

    return build


def _infinite_grid(config):
    if H.keras_files.set_grid(config, [float("inf"), 4]) != 1:
        raise ValueError("the saved config has no position embedding's grid_size")
    return json.dumps(config)


def _infinite_elsewhere(config):
    config["config"]["an_infinite_setting"] = float("inf")
    return json.dumps(config)


def _keras_weights_bomb(p, path):
    """The weights record: the real HDF5 file, then 1 GiB of zeros."""
    weights = (p.setup / "saved" / "model.weights.h5").read_bytes()
    source = p.setup / "saved" / "model.keras"
    with zipfile.ZipFile(source) as original, H.hf._deflating(path) as target:
        for info in original.infolist():
            if info.filename == "model.weights.h5":
                H.hf._deflated_zeros(target, info.filename, weights, 1 << 30)
            else:
                target.writestr(info, original.read(info))


def _keras_config_bomb(p, path):
    """`config.json`: 1 GiB of spaces, then the config."""
    config = json.dumps(H.keras_files.saved_config(p.saved)).encode()
    source = p.setup / "saved" / "model.keras"
    spaces = b" " * (1 << 20)
    with zipfile.ZipFile(source) as original, H.hf._deflating(path) as target:
        for info in original.infolist():
            if info.filename != "config.json":
                target.writestr(info, original.read(info))
                continue
            with target.open("config.json", "w", force_zip64=True) as record:
                for _ in range(1024):
                    record.write(spaces)
                record.write(config)


def _keras_record_lies(p, path):
    """The weights record inflates to 256 MiB but declares 200,000 bytes
    (as `tests/test_hostile_keras_files.py` forges it)."""
    bomb = (p.setup / "saved" / "model.weights.h5").read_bytes() + bytes(256 << 20)
    built = H.keras_files.keras_copy(p.saved, path.parent, weights=bomb, name=path.name)
    data = built.read_bytes()
    declared = len(bomb).to_bytes(4, "little")
    if data.count(declared) != 2:  # The local header and the central one.
        raise ValueError("cannot find the record's declared size to forge")
    built.write_bytes(data.replace(declared, (200_000).to_bytes(4, "little")))


SHARED_BUILDERS = {
    "bomb.npz": lambda p, path: H.hf.npz_bomb(path),
    "images_bomb.npz": lambda p, path: H.hf.npz_bomb(path, key="images"),
    "bomb.pth": lambda p, path: H.hf.pth_bomb(path),
    "views.pth": lambda p, path: H.hf.pth_repeated_views(path),
    "overlap.safetensors": lambda p, path: H.hf.safetensors_overlapping(path),
    "weights_bomb.keras": _keras_weights_bomb,
    "config_bomb.keras": _keras_config_bomb,
    "lying_record.keras": _keras_record_lies,
}


# Runners: `run(probe, dirs) -> Outcome`.


def api_load(build, mode, expect="refusal"):
    """The Python API loads the built file into a fresh tiny model."""

    def run(p, d):
        path = build(p, d)
        r = p.python(
            d, _API_LOAD, mode, path, secret().hex(), expect=expect, label=mode
        )
        outcome = Outcome([r])
        report = r.report or {}
        if report.get("secret"):
            outcome.forbidden.append("the model holds the secret file's bytes")
        if report.get("error") and report.get("changed") and mode == "load_weights":
            outcome.forbidden.append("a refused load changed the model")
        if expect == "ok" and r.report and not report.get("error"):
            if mode == "load_weights" and not report.get("changed"):
                outcome.forbidden.append("load_weights loaded nothing")
        return outcome

    return run


def _tiny_model_args():
    return ["--variant", "test/4", "--model-image-size", "16", "--num-classes", "3"]


def _sets(*items):
    return [word for item in items for word in ("--set", item)]


# `keras-vit` arguments that read a checkpoint `path`, and the outputs that
# must not be left when the checkpoint is refused.
ENTRY_POINTS = {
    "convert": (
        lambda path: ["convert", path, "out.keras", "--variant", "test/4"],
        ["out.keras"],
    ),
    "export": (
        lambda path: [
            "export",
            *_tiny_model_args(),
            "--weights",
            path,
            "--name",
            "vit",
            "--version",
            "1",
            "--base-dir",
            "served",
        ],
        ["served"],
    ),  # fmt: skip
    "train": (
        lambda path: [
            "train",
            "--config",
            "digits",
            *_sets(*TRAIN_TINY, *TOKEN_POOLING, f"init_from={path}", "workdir=run"),
        ],
        ["run/final.keras"],
    ),  # fmt: skip
    "analyze": (
        lambda path: [
            "analyze",
            "--variant",
            "test/4",
            "--image-size",
            "16",
            "--num-classes",
            "3",
            "--images",
            path,
            "--only",
            "attention",
            "--max-images",
            "8",
            "--out",
            "analysis",
        ],
        ["analysis"],
    ),  # fmt: skip
}


def reads(build, entry, expect="refusal"):
    """The built file read through `entry`: the Python API or a command."""
    if entry == "load_weights":
        return api_load(build, "load_weights", expect)
    if entry == "ViT(weights=)":
        return api_load(build, "constructor", expect)
    return command_reads(build, entry, expect)


def command_reads(build, entry, expect="refusal", keep=None):
    """`keras-vit ENTRY` reads the built file. `keep`: an existing output
    (`out.keras`, a copy of the tiny model) that a refusal must leave as it
    was (then `--overwrite` is passed)."""

    def run(p, d):
        path = build(p, d)
        arguments, outputs = ENTRY_POINTS[entry]
        argv = arguments(path)
        before = None
        if keep:
            d.work.mkdir(parents=True, exist_ok=True)
            shutil.copy(p.setup / "tiny.keras", d.work / keep)
            before = snapshot(d.work / keep)
            argv = [*argv, "--overwrite"]
        r = p.cli(d, *argv, expect=expect)
        outcome = Outcome([r])
        if keep:
            check_kept(before, d.work / keep, outcome, keep)
        if expect == "refusal" and r.rc not in (0, None) and not keep:
            left = [f for name in outputs for f in files_under(d.work / name)]
            if left:
                outcome.forbidden.append(f"refused, yet wrote {left[:3]}")
        found = holds(d.work, secret()[:64])
        if found:
            outcome.forbidden.append(f"its output holds the secret: {found[:3]}")
        return outcome

    return run


def cli_run(args_of, expect, *, env=None, outputs=(), check=None, timeout=None):
    """`keras-vit ARGS` (`args_of(probe, dirs)`), with the variables of
    `env()` added; `check(probe, dirs, run, outcome)` adds what it finds."""

    def run(p, d):
        args = args_of(p, d)
        extra = p.env(env()) if env else None  # `env()`: more variables.
        r = p.cli(d, *args, expect=expect, env=extra, timeout=timeout)
        outcome = Outcome([r])
        if expect == "refusal" and r.rc not in (0, None):
            left = [f for name in outputs for f in files_under(d.work / name)]
            if left:
                outcome.forbidden.append(f"refused, yet wrote {left[:3]}")
        if check:
            check(p, d, r, outcome)
        return outcome

    return run


# Item 1: data from outside the file. ---------------------------------------------

# Each file, through each entry point that reads it.
OUTSIDE = {
    "external-storage": ("with_external_storage", ("external",),
                         ("load_weights", "ViT(weights=)", "convert", "export",
                          "train")),
    "external-link": ("with_external_link", ("link",), ("load_weights", "train")),
    "virtual-dataset": ("with_virtual_dataset", ("virtual",),
                        ("load_weights", "ViT(weights=)", "convert")),
}  # fmt: skip
for slug, (name, says, entries) in OUTSIDE.items():
    for entry in entries:
        add(f"1/{slug}/{entry}", "1",
            f".weights.h5 with {slug.replace('-', ' ')} into {entry}", "refusal",
            reads(keras_files(name), entry), says)  # fmt: skip
add(
    "1/soft-link/load_weights",
    "1",
    ".weights.h5 with a soft link into load_weights",
    "refusal",
    api_load(keras_files("with_soft_link"), "load_weights"),
    ("link",),
)
add("1/group-cycle/load_weights", "1",
    ".weights.h5 whose group is linked into itself, into load_weights", "refusal",
    api_load(keras_files("with_group_cycle"), "load_weights"),
    ("twice", "cycle", "itself", "loop"))  # fmt: skip
add(
    "1/keras-external-storage/load_weights",
    "1",
    ".keras holding external storage into load_weights",
    "refusal",
    api_load(inside_keras("with_external_storage"), "load_weights"),
    ("external",),
)
add("1/keras-virtual-dataset/convert", "1",
    ".keras holding a virtual dataset into convert", "refusal",
    cli_run(lambda p, d: ["convert", inside_keras("with_virtual_dataset")(p, d),
                          "out.keras"], "refusal", outputs=["out.keras"]),
    ("virtual",))  # fmt: skip
add(
    "1/keras-external-link/train",
    "1",
    ".keras holding an external link as train init_from",
    "refusal",
    command_reads(inside_keras("with_external_link"), "train"),
    ("link",),
)


# Item 2: small files, big memory. ---------------------------------------------------

NPZ_CLAIM = hostile_file("claim.npz", "npz_claiming_terabytes")
for entry in ("load_weights", "ViT(weights=)", "export", "train"):
    add(f"2/npz-claims-3.64TiB/{entry}", "2",
        f"240-byte .npz claiming (10**6, 10**6) float32, into {entry}", "refusal",
        reads(NPZ_CLAIM, entry), ("cls",))  # fmt: skip
add("2/npz-claims-3.64TiB/convert-over-existing", "2",
    "240-byte .npz claiming 3.64 TiB, convert --overwrite onto an existing "
    "out.keras (which must stay)", "refusal",
    command_reads(NPZ_CLAIM, "convert", keep="out.keras"), ("cls",))  # fmt: skip
add("2/npz-images-claims-3.64TiB/analyze", "2",
    "images .npz claiming 3.64 TiB, into analyze --images", "refusal",
    command_reads(hostile_file("y.npz", "npz_claiming_terabytes", key="images"),
                  "analyze"), ("images",))  # fmt: skip
for entry in ("load_weights", "convert"):
    add(f"2/npz-inflates-1GiB/{entry}", "2",
        f"5 MB .npz whose record inflates to 1 GiB, into {entry}", "refusal",
        reads(shared("bomb.npz"), entry), ("cls",))  # fmt: skip
add(
    "2/npz-images-inflates-1GiB/analyze",
    "2",
    "5 MB images .npz inflating to 1 GiB, into analyze --images",
    "refusal",
    command_reads(shared("images_bomb.npz"), "analyze"),
    ("images",),
)
for entry in ("load_weights", "convert"):
    add(
        f"2/safetensors-overlap/{entry}",
        "2",
        f"4 MB .safetensors whose 256 tensors view one range, into {entry}",
        "refusal",
        reads(shared("overlap.safetensors"), entry),
        ("overlap",),
    )
add(
    "2/pth-repeated-views/load_weights",
    "2",
    "0.7 MB torch.save of 16384 views of one storage, into load_weights",
    "refusal",
    api_load(shared("views.pth"), "load_weights"),
    ("'w",),
)
add(
    "2/pth-repeated-views/train",
    "2",
    "0.7 MB torch.save of 16384 views of one storage, as train init_from",
    "refusal",
    command_reads(shared("views.pth"), "train"),
    ("'w",),
)
add(
    "2/pth-inflates-1GiB/ViT(weights=)",
    "2",
    "5 MB torch.save whose storage inflates to 1 GiB, into ViT(weights=)",
    "refusal",
    api_load(shared("bomb.pth"), "constructor"),
    ("archive/data/0", "w0"),
)
add(
    "2/pth-inflates-1GiB/export",
    "2",
    "5 MB torch.save whose storage inflates to 1 GiB, into export --weights",
    "refusal",
    command_reads(shared("bomb.pth"), "export"),
    ("archive/data/0", "w0"),
)
add(
    "2/pth-inflates-1GiB/convert",
    "2",
    "5 MB torch.save whose storage inflates to 1 GiB, into convert",
    "refusal",
    command_reads(shared("bomb.pth"), "convert"),
    ("archive/data/0", "w0"),
)
for count, label in ((1 << 40, "2**40"), (1 << 29, "2**29")):
    add(f"2/h5-claims-{label}-floats/load_weights", "2",
        f"chunked .weights.h5 dataset claiming {label} floats, into load_weights",
        "refusal", api_load(claimed_floats(count), "load_weights"),
        ("class_token", "/layers"))  # fmt: skip
add(
    "2/h5-claims-2**29-floats/convert",
    "2",
    "chunked .weights.h5 dataset claiming 2**29 floats, into convert",
    "refusal",
    command_reads(claimed_floats(1 << 29), "convert"),
    ("class_token", "/layers"),
)
add("2/keras-claims-2**29-floats/train", "2",
    ".keras whose weights claim 2**29 floats, as train init_from", "refusal",
    command_reads(claimed_floats(1 << 29, keras=True), "train"),
    ("class_token", "/layers"))  # fmt: skip
add(
    "2/h5-chunks-256MiB/load_weights",
    "2",
    ".weights.h5 storing the class token in one 256 MiB chunk, into load_weights",
    "refusal",
    api_load(keras_files("with_huge_chunks"), "load_weights"),
    ("chunk",),
)
add(
    "2/keras-weights-record-inflates-1GiB/load_weights",
    "2",
    ".keras whose weights record inflates to 1 GiB, into load_weights",
    "refusal",
    api_load(shared("weights_bomb.keras"), "load_weights"),
    ("model.weights.h5",),
)
add("2/keras-weights-record-inflates-1GiB/convert", "2",
    ".keras whose weights record inflates to 1 GiB, into convert", "refusal",
    cli_run(lambda p, d: ["convert", p.shared("weights_bomb.keras"), "out.keras"],
            "refusal", outputs=["out.keras"]), ("model.weights.h5",))  # fmt: skip
add(
    "2/keras-config-inflates-1GiB/load_weights",
    "2",
    ".keras whose config.json inflates to 1 GiB, into load_weights",
    "refusal",
    api_load(shared("config_bomb.keras"), "load_weights"),
    ("config.json",),
)
add("2/keras-record-lies-about-its-size/load_weights", "2",
    ".keras whose weights record declares 200 KB and inflates to 256 MiB, into "
    "load_weights", "refusal", api_load(shared("lying_record.keras"), "load_weights"),
    ("model.weights.h5",))  # fmt: skip


# Item 3: URL outputs. ----------------------------------------------------------


def no_local_url(p, d, r, outcome):
    named = url_named(d.work)
    if named:
        outcome.forbidden.append(f"wrote local paths named after a URL: {named[:3]}")


def unreachable() -> dict:
    return H.urls.UNREACHABLE


def _timm() -> str:
    return str(TESTS / "fixtures" / "timm_vit.safetensors")


URL_COMMANDS = {
    "convert-folder": lambda p, url: ["convert", p.setup / "tiny.keras", url],
    "convert-file": lambda p, url: ["convert", _timm(), url + ".keras",
                                    "--variant", "test/8"],
    "analyze": lambda p, url: ["analyze", "--model", p.setup / "tiny.keras",
                               "--images", "digits", "--only", "filters",
                               "--out", url],
    "fewshot": lambda p, url: ["fewshot", "--model", p.setup / "tiny.keras",
                               "--shots", "1", "--max-test-examples", "20",
                               "--out", url + ".json"],
    "export": lambda p, url: ["export", "--model", p.setup / "tiny.keras",
                              "--name", "vit", "--version", "1", "--base-dir", url],
    "train": lambda p, url: ["train", "--config", "digits",
                             *_sets(*TRAIN_TINY, f"workdir={url}")],
}  # fmt: skip
for command, url, expect, env in (
    ("convert-folder", "gs://bucket/my-vit", "refusal", True),
    ("convert-file", "gs://bucket/my-vit", "refusal", True),
    ("convert-folder", "gs:/bucket/my-vit", "refusal", False),
    ("convert-folder", "ram://bucket/my-vit", "ok", False),
    ("convert-file", "ram://bucket/my-vit", "ok", False),
    ("analyze", "gs://bucket/figures", "refusal", True),
    ("analyze", "gs:/bucket/figures", "refusal", False),
    ("analyze", "ram://bucket/figures", "ok", False),
    ("fewshot", "gs://bucket/fewshot", "refusal", True),
    ("fewshot", "gs:/bucket/fewshot", "refusal", False),
    ("export", "gs:/bucket/models", "refusal", False),
    ("train", "gs:/b/run", "refusal", False),
    ("train", "gs://b/run", "refusal", True),
):
    reach = " (out of reach)" if env else ""
    mention = ("gs://", "url", "slash") if expect == "refusal" else ()
    add(f"3/{command}/{url}", "3", f"keras-vit {command} writing to {url}{reach}",
        expect,
        cli_run(functools.partial(lambda p, d, c, u: URL_COMMANDS[c](p, u),
                                  c=command, u=url),
                expect, env=unreachable if env else None, check=no_local_url),
        mention)  # fmt: skip


def api_save_url(url, expect, env=False):
    def run(p, d):
        extra = p.env(unreachable()) if env else None
        r = p.python(d, _API_SAVE_URL, url, expect=expect, label="save_pretrained",
                     env=extra)  # fmt: skip
        outcome = Outcome([r])
        no_local_url(p, d, r, outcome)
        listed = (r.report or {}).get("listed")
        if expect == "ok" and r.cls == "ok" and not listed:
            outcome.forbidden.append(f"nothing at {url} after it returned")
        return outcome

    return run


add(
    "3/save_pretrained/gs://bucket/my-vit",
    "3",
    "save_pretrained to gs://bucket/my-vit (out of reach)",
    "refusal",
    api_save_url("gs://bucket/my-vit", "refusal", env=True),
    ("gs://",),
)
add(
    "3/save_pretrained/gs:/bucket/my-vit",
    "3",
    "save_pretrained to gs:/bucket/my-vit (a slash missing)",
    "refusal",
    api_save_url("gs:/bucket/my-vit", "refusal"),
    ("gs:/", "slash", "url"),
)
add(
    "3/save_pretrained/ram://bucket/my-vit",
    "3",
    "save_pretrained to ram://bucket/my-vit",
    "ok",
    api_save_url("ram://bucket/my-vit", "ok"),
)


# Item 4: image bombs sent to the served model. --------------------------------------


def serve(images_of, expect):
    """One request of `images_of() -> [bytes]` to the setup's SavedModel."""

    def run(p, d):
        d.files.mkdir(parents=True, exist_ok=True)
        paths = []
        for i, data in enumerate(images_of()):
            paths.append(d.files / f"image_{i}.bin")
            paths[-1].write_bytes(data)
        valid = d.files / "valid.png"
        valid.write_bytes(H.serving.valid_images()["png"])
        model = p.setup / "served" / "vit" / "1"
        r = p.python(d, _SERVE, model, valid, *paths, expect=expect,
                     label="serving_bytes")  # fmt: skip
        return Outcome([r])

    return run


def _bomb(name):
    return lambda: [H.serving.BOMBS[name][0]()]


for name in (
    "png 20000x20000", "gif 20000x20000", "gif of 10 frames of 3000x3000",
    "gif canvas of 60000x60000", "jpeg header 65500x65500",
    "webp lossless 16384x16384", "webp extended 16384x16384",
    "webp lossy header 16383x16383", "bmp header 20000x20000",
):  # fmt: skip
    add(f"4/bomb/{name}", "4", f"serving_bytes: a {name} image bomb", "refusal",
        serve(_bomb(name), "refusal"), ("pixels",))  # fmt: skip
add(
    "4/bomb/batch with a bomb",
    "4",
    "serving_bytes: a batch of a PNG, a 20000x20000 PNG bomb and a JPEG",
    "refusal",
    serve(
        lambda: [
            H.serving.valid_images()["png"],
            H.serving.png_bomb(20000, 20000),
            H.serving.valid_images()["jpeg"],
        ],
        "refusal",
    ),
    ("pixels",),
)
for name in ("png cut in its header", "not an image", "empty"):
    add(f"4/damaged/{name}", "4", f"serving_bytes: {name}", "refusal",
        serve(functools.partial(lambda n: [H.serving.damaged_images()[n][0]], name),
              "refusal"))  # fmt: skip
for kind in ("png", "jpeg", "gif animated", "webp"):
    add(f"4/valid/{kind}", "4", f"serving_bytes: a valid {kind}", "ok",
        serve(functools.partial(lambda k: [H.serving.valid_images()[k]], kind), "ok"),
        control=True)  # fmt: skip


# Item 5: FIFOs and special files in folder datasets. ---------------------------------


def folder_case(args_of, prepare, expect, names=()):
    """`keras-vit` on a copy of the setup's folder dataset at `work/data`,
    `prepare(work, data)` having added special files. A success must name
    the files it skipped (`names`)."""

    def run(p, d):
        d.work.mkdir(parents=True, exist_ok=True)
        shutil.copytree(p.setup / "data", d.work / "data")
        outside = d.root / "outside"
        outside.mkdir(exist_ok=True)
        prepare(d.work / "data", outside)
        r = p.cli(d, *args_of(p, d), expect=expect)
        outcome = Outcome([r])
        said = r.stdout + r.stderr
        if r.rc == 0 and names and not all(n in said for n in names):
            outcome.forbidden.append(f"succeeded without naming the skipped {names}")
        return outcome

    return run


def _unix_socket(path: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()  # The socket file stays.


def _validate(p, d):
    return ["validate", "--model", p.setup / "two.keras", "--data", "folder:data",
            "--split", "test", "--out", "val.json"]  # fmt: skip


def _train_folder(p, d):
    return ["train", "--config", "folder_finetune",
            *_sets("dataset=folder:data", "variant=test/4", "init_from=None",
                   "image_size=16", "epochs=1", "global_batch_size=4",
                   "workdir=run")]  # fmt: skip


def _only_fifos(data, outside):
    for image in (data / "test" / "cat").iterdir():
        image.unlink()
    os.mkfifo(data / "test" / "cat" / "x.png")


add("5/train/fifo", "5", "train on a folder dataset with a FIFO cat/x.png", "either",
    folder_case(_train_folder, lambda data, o: os.mkfifo(data / "train/cat/x.png"),
                "either", ["x.png"]), ("x.png",))  # fmt: skip
add("5/validate/fifo", "5", "validate a folder dataset with a FIFO cat/x.png",
    "either",
    folder_case(_validate, lambda data, o: os.mkfifo(data / "test/cat/x.png"),
                "either", ["x.png"]), ("x.png",))  # fmt: skip
add("5/validate/special-entries", "5",
    "validate with a FIFO, a link to a FIFO, a link to /dev/zero and a broken "
    "link, named as images", "either",
    folder_case(_validate,
                lambda data, o: H.inputs.add_special_entries(data / "test", o),
                "either", ["x.png", "y.jpg", "z.png", "w.png"]))  # fmt: skip
add("5/validate/socket", "5", "validate with a Unix socket dog/s.png", "either",
    folder_case(_validate, lambda data, o: _unix_socket(data / "test/dog/s.png"),
                "either", ["s.png"]))  # fmt: skip
add(
    "5/validate/fifos-only",
    "5",
    "validate with a class folder holding only a FIFO",
    "refusal",
    folder_case(_validate, _only_fifos, "refusal"),
    ("x.png", "cat"),
)
add("5/predict/fifo", "5", "predict a FIFO named x.png", "refusal",
    folder_case(lambda p, d: ["predict", "--model", p.setup / "tiny.keras", "x.png"],
                lambda data, o: os.mkfifo(data.parent / "x.png"), "refusal"),
    ("x.png",))  # fmt: skip


# Item 6: inputs that ended in tracebacks. ---------------------------------------------

# Settings that make a run that is not refused short.
QUICK = {
    "train": ["--config", "digits", *_sets(*TRAIN_TINY)],
    "pretrain_masked": ["--config", "masked_digits",
                        *_sets(*TRAIN_TINY[:6], "fewshot_every=0", "verbose=0")],
}  # fmt: skip
for command, seed in (
    ("train", "-1"),
    ("train", "4294967296"),
    ("pretrain_masked", "-1"),
):
    add(f"6/seed/{command} seed={seed}", "6", f"{command} --set seed={seed}", "refusal",
        cli_run(functools.partial(
            lambda p, d, c, s: [c, *QUICK[c], *_sets(f"seed={s}", "workdir=run")],
            c=command, s=seed), "refusal", outputs=["run"]), ("seed",))  # fmt: skip


def class_names_case(command, name):
    def args_of(p, d):
        d.work.mkdir(parents=True, exist_ok=True)
        H.inputs.class_name_files(d.work)
        if command == "export":
            return ["export", "--model", p.setup / "tiny.keras", "--name", "vit",
                    "--version", "1", "--class-names", name]  # fmt: skip
        shutil.copy(p.setup / "cat.png", d.work / "cat.png")
        return ["predict", "--model", p.setup / "tiny.keras", "--class-names", name,
                "cat.png"]  # fmt: skip

    outputs = ["saved_models"] if command == "export" else []
    return cli_run(args_of, "refusal", outputs=outputs)


for command, names in (
    ("export", ("names.png", "names.bom", "names.fifo")),
    ("predict", ("names.png", "names.fifo")),
):
    for name in names:
        add(f"6/class-names/{command} {name}", "6",
            f"{command} --class-names {name} (not one UTF-8 name a line)", "refusal",
            class_names_case(command, name), ("class-names", name))  # fmt: skip
add("6/class-map/validate fifo", "6", "validate --class-map a FIFO", "refusal",
    folder_case(lambda p, d: [*_validate(p, d), "--class-map", "map.json"],
                lambda data, o: os.mkfifo(data.parent / "map.json"), "refusal"),
    ("class-map", "map.json"))  # fmt: skip

JSON_HEADERS = {
    "Infinity": b'{"cls_token":{"dtype":"F32","shape":[1,1,32],"data_offsets":'
    b'[0,Infinity]}}',
    "NaN": b'{"cls_token":{"dtype":"F32","shape":[1,1,32],"data_offsets":[0,NaN]}}',
    "1e400": b'{"cls_token":{"dtype":"F32","shape":[1,1,32],"data_offsets":[0,1e400]}}',
    "5000 digits": b'{"cls_token":{"dtype":"F32","shape":[1,1,32],"data_offsets":[0,'
    + b"9" * 5000 + b"]}}",
    "nested 100000 deep": b'{"cls_token":{"dtype":"F32","shape":' + b"[" * 100_000
    + b"]" * 100_000 + b',"data_offsets":[0,128]}}',
}  # fmt: skip
for name, header in JSON_HEADERS.items():
    add(f"6/safetensors-header/{name}/load_weights", "6",
        f".safetensors header with {name}, into load_weights", "refusal",
        api_load(safetensors_header(header), "load_weights"),
        ("header", "json"))  # fmt: skip
for name in ("Infinity", "nested 100000 deep"):
    for entry in ("convert",):
        add(f"6/safetensors-header/{name}/{entry}", "6",
            f".safetensors header with {name}, into {entry}", "refusal",
            command_reads(safetensors_header(JSON_HEADERS[name]), entry),
            ("header", "json"))  # fmt: skip
add("6/keras-config/nested 100000 deep/load_weights", "6",
    ".keras whose config.json nests 100000 lists, into load_weights", "refusal",
    api_load(keras_config(lambda c: "[" * 100_000 + "]" * 100_000), "load_weights"),
    ("config.json",))  # fmt: skip
add("6/keras-config/nested 500 deep/convert", "6",
    ".keras whose config.json nests 500 lists, into convert", "refusal",
    cli_run(lambda p, d: ["convert",
                          keras_config(lambda c: "[" * 500 + "]" * 500)(p, d),
                          "out.keras"], "refusal", outputs=["out.keras"]),
    ("config.json", "nest"))  # fmt: skip
add("6/keras-config/grid [inf, 4]/load_weights", "6",
    ".keras whose position embedding's grid_size is [inf, 4], into load_weights",
    "refusal", api_load(keras_config(_infinite_grid), "load_weights"),
    ("grid_size",))  # fmt: skip


def disk_case(args_of, *, size, fill=0, read_only=False, keep=None):
    """`keras-vit` writing to a small tmpfs (`{disk}` in its arguments);
    `keep`: `(name, source)` preloaded on the disk, which must stay."""

    def run(p, d):
        preload = {keep[0]: keep[1](p)} if keep else None
        r = p.on_disk(d, args_of(p), size=size, fill=fill, read_only=read_only,
                      preload=preload, expect="refusal")  # fmt: skip
        outcome = Outcome([r])
        after = d.root / "disk-after"
        if keep:
            check_kept(snapshot(Path(keep[1](p))), after / keep[0], outcome, keep[0])
            kept = {keep[0]}
        else:
            kept = set()
        left = [
            str(path.relative_to(after))
            for path in after.rglob("*")
            if path.is_file() and path.relative_to(after).parts[0] not in kept
        ]
        if left:
            outcome.notes.append(f"left on the disk: {left[:5]}")
        partial = [x for x in left if DEBRIS.match(Path(x).name)]
        if partial:
            outcome.forbidden.append(f"left partial files: {partial[:3]}")
        return outcome

    return run


_TINY = lambda p: p.setup / "tiny.keras"  # noqa: E731
DISK_CASES = {
    "read-only/convert .keras": (
        lambda p: ["convert", _timm(), "{disk}/vit.keras", "--variant", "test/8"],
        dict(size="1m", read_only=True), ("read-only",)),
    "read-only/convert folder": (
        lambda p: ["convert", _TINY(p), "{disk}/my-vit"],
        dict(size="1m", read_only=True), ("read-only",)),
    "read-only and full/convert .weights.h5": (
        lambda p: ["convert", _timm(), "{disk}/vit.weights.h5", "--variant", "test/8"],
        dict(size="1m", fill="all", read_only=True), ("read-only",)),
    "read-only/convert --overwrite an existing .keras": (
        lambda p: ["convert", _timm(), "{disk}/vit.keras", "--variant", "test/8",
                   "--overwrite"],
        dict(size="1m", read_only=True, keep=("vit.keras", _TINY)), ("read-only",)),
    "read-only/analyze": (
        lambda p: ["analyze", "--model", _TINY(p), "--images", "digits", "--only",
                   "filters", "--out", "{disk}/figures"],
        dict(size="1m", read_only=True), ("read-only",)),
    "read-only/fewshot": (
        lambda p: ["fewshot", "--model", _TINY(p), "--shots", "1",
                   "--max-test-examples", "20", "--out", "{disk}/fewshot.json"],
        dict(size="1m", read_only=True), ("read-only",)),
    "read-only/export": (
        lambda p: ["export", "--model", _TINY(p), "--name", "vit", "--version", "1",
                   "--base-dir", "{disk}/models"],
        dict(size="1m", read_only=True), ("read-only",)),
    "full/convert folder": (
        lambda p: ["convert", _TINY(p), "{disk}/my-vit"],
        dict(size="1m", fill="all"), ("disk full", "no space")),
    "full/convert --overwrite an existing folder": (
        lambda p: ["convert", _TINY(p), "{disk}/my-vit", "--overwrite"],
        dict(size="2m", fill="all",
             keep=("my-vit", lambda p: p.setup / "pretrained")),
        ("disk full", "no space")),
    "full/export": (
        lambda p: ["export", "--model", _TINY(p), "--name", "vit", "--version", "1",
                   "--base-dir", "{disk}/models"],
        dict(size="2m", fill=1_900_000), ("disk full", "no space")),
    "full/fewshot": (
        lambda p: ["fewshot", "--model", _TINY(p), "--shots", "1",
                   "--max-test-examples", "20", "--out", "{disk}/fewshot.json"],
        dict(size="1m", fill="all"), ("disk full", "no space")),
    "full/analyze": (
        lambda p: ["analyze", "--model", _TINY(p), "--images", "digits",
                   "--max-images", "8", "--out", "{disk}/figures", "--only",
                   "filters,position,attention,distance,rollout,fourier"],
        dict(size="2m", fill=2_097_152 - 108 * 1024), ("disk full", "no space")),
}  # fmt: skip
for name, (args_of, options, says) in DISK_CASES.items():
    disk, command = name.split("/")
    add(f"6/disk/{name}", "6", f"keras-vit {command} on a {disk} "
        "disk", "refusal", disk_case(args_of, **options), says)  # fmt: skip


# Items 6 and 7: signals during saves, then the same command again. -------------------


def _convert_args(p, kind, out):
    if kind == "folder":
        return ["convert", p.setup / "tiny.keras", out / "my-vit"]
    return ["convert", _timm(), out / f"vit{kind}", "--variant", "test/8"]


def interrupted_convert(kind, fault_of, signal_name, keep=False):
    """`convert` stopped by `signal_name` at the fault, then run again: the
    output whole, no debris; with `keep`, an existing output (replaced with
    `--overwrite`) old or new, never lost."""

    def run(p, d):
        out = d.work / "out"
        out.mkdir(parents=True)
        args = _convert_args(p, kind, out)
        target = Path(args[2])
        before = None
        if keep:
            shutil.copytree(p.setup / "pretrained", target)
            before = snapshot(target)
            args = [*args, "--overwrite"]
        expect = {"SIGKILL": "killed", "SIGTERM": "signalled"}.get(
            signal_name, "refusal"
        )
        fault = fault_of().with_action(signal_name)
        first = p.faulted(
            d, fault, *args, expect=expect, label=f"convert ({signal_name})"
        )
        outcome = Outcome([first])
        if first.rc == 0:
            outcome.notes.append("the fault did not fire: the save ended first")
        if keep:
            check_kept(before, target, outcome, "the existing output")
        if signal_name == "SIGINT" and first.cls == "one-line refusal":
            left = sorted(os.listdir(out))
            if left != ([target.name] if keep else []):
                outcome.forbidden.append(f"interrupted, yet left {left}")
        again = p.cli(d, *args, expect="ok", label="convert again")
        outcome.runs.append(again)
        left = debris(out)
        if left:
            outcome.forbidden.append(f"debris left after the second run: {left}")
        if again.rc == 0 and not whole(target):
            outcome.forbidden.append(f"the second run left {target.name} torn")
        return outcome

    return run


def _killed_writes(kind):
    return lambda: H.saves.KILLED_WRITES[kind]


def _save_h5():
    return H.fr.Fault("keras:Model.save_weights", "after")


for kind, signal_name, item in (
    (".keras", "SIGINT", "6"),
    ("folder", "SIGINT", "6"),
    (".keras", "SIGKILL", "7"),
    ("folder", "SIGKILL", "7"),
    (".weights.h5", "SIGKILL", "7"),
    (".weights.h5", "SIGTERM", "7"),
    ("folder", "SIGTERM", "7"),
):
    fault_of = _save_h5 if kind == ".weights.h5" else _killed_writes(kind)
    expect = {"SIGINT": "refusal", "SIGTERM": "either"}.get(signal_name, "ok")
    add(f"{item}/{signal_name}/convert {kind}", item,
        f"{signal_name} while convert writes a {kind}, then the same command again",
        expect, interrupted_convert(kind, fault_of, signal_name),
        ("interrupted",) if signal_name != "SIGKILL" else ())  # fmt: skip
add(
    "7/SIGKILL/convert --overwrite an existing folder",
    "7",
    "SIGKILL while convert --overwrite replaces a folder, then the same command",
    "ok",
    interrupted_convert("folder", _killed_writes("folder"), "SIGKILL", keep=True),
)


def interrupted_export(signal_name):
    def run(p, d):
        base = d.work / "models"
        args = ["export", "--model", p.setup / "tiny.keras", "--name", "vit",
                "--version", "1", "--base-dir", base]  # fmt: skip
        fault = H.fr.Fault("keras_vit.export.savedmodel:_write_metadata", "before",
                           action=signal_name)  # fmt: skip
        expect = "killed" if signal_name == "SIGKILL" else "refusal"
        first = p.faulted(
            d, fault, *args, expect=expect, label=f"export ({signal_name})"
        )
        again = p.cli(d, *args, expect="ok", label="export again")
        outcome = Outcome([first, again])
        left = [x for folder, dirs, names in os.walk(base) for x in dirs + names
                if DEBRIS.match(x) or ".staging" in x or x.startswith(".")]  # fmt: skip
        if left:
            outcome.forbidden.append(f"debris left after the second run: {left[:3]}")
        if again.rc == 0 and not whole(base / "vit" / "1"):
            outcome.forbidden.append("the second run left the version torn")
        return outcome

    return run


add(
    "6/SIGINT/export",
    "6",
    "SIGINT while export writes, then the same command",
    "refusal",
    interrupted_export("SIGINT"),
    ("interrupted",),
)
add(
    "7/SIGKILL/export",
    "7",
    "SIGKILL while export writes, then the same command",
    "ok",
    interrupted_export("SIGKILL"),
)


def interrupted_save_pretrained(signal_name, fault_of, *, replace=False):
    """`save_pretrained` (the Python API) stopped at the fault, then called
    again. With `replace`, the folder exists and `overwrite=True` replaces it:
    the old folder must be there until the new one is; after a SIGKILL, the
    next save beside it must put the old one back."""

    def run(p, d):
        d.work.mkdir(parents=True)
        folder = d.work / "my-vit"
        overwrite = "overwrite" if replace else "keep"
        before = None
        if replace:
            shutil.copytree(p.setup / "pretrained", folder)
            before = snapshot(folder)
        fault = json.dumps(dataclasses.asdict(fault_of().with_action(signal_name)))
        expect = "killed" if signal_name == "SIGKILL" else "refusal"
        label = f"save_pretrained ({signal_name})"
        first = p.python(d, _API_SAVE, folder, 5, overwrite, fault, TESTS,
                         expect=expect, label=label)  # fmt: skip
        outcome = Outcome([first])
        if replace and signal_name == "SIGKILL":
            beside = p.python(
                d,
                _API_SAVE,
                d.work / "another",
                4,
                "keep",
                "none",
                TESTS,
                expect="ok",
                label="save_pretrained beside it",
            )
            outcome.runs.append(beside)  # fmt: skip
        if replace:
            check_kept(before, folder, outcome, "the replaced folder")
        again = p.python(d, _API_SAVE, folder, 5, overwrite, "none", TESTS,
                         expect="ok", label="save_pretrained again")  # fmt: skip
        outcome.runs.append(again)
        left = debris(d.work)
        if left:
            outcome.forbidden.append(f"debris left after the second call: {left}")
        if again.cls == "ok" and not whole(folder):
            outcome.forbidden.append("the second call left the folder torn")
        return outcome

    return run


add("6/SIGINT/save_pretrained", "6",
    "SIGINT (KeyboardInterrupt) while save_pretrained writes, then the same call",
    "refusal", interrupted_save_pretrained("SIGINT", _killed_writes("folder")),
    ("keyboardinterrupt", "interrupt"))  # fmt: skip
add(
    "7/SIGKILL/save_pretrained",
    "7",
    "SIGKILL while save_pretrained writes, then the same call",
    "ok",
    interrupted_save_pretrained("SIGKILL", _killed_writes("folder")),
)
add(
    "7/SIGINT/save_pretrained overwrite between renames",
    "7",
    "KeyboardInterrupt between save_pretrained(overwrite=True)'s two renames",
    "refusal",
    interrupted_save_pretrained(
        "SIGINT", lambda: H.saves.BETWEEN_RENAMES, replace=True
    ),
    ("keyboardinterrupt", "interrupt"),
)
add("7/SIGKILL/save_pretrained overwrite between renames", "7",
    "SIGKILL between save_pretrained(overwrite=True)'s two renames, then a save "
    "beside it", "ok",
    interrupted_save_pretrained("SIGKILL", lambda: H.saves.BETWEEN_RENAMES,
                                replace=True))  # fmt: skip


def save_pretrained_control(p, d):
    d.work.mkdir(parents=True)
    folder = d.work / "my-vit"
    r = p.python(d, _API_SAVE, folder, 3, "keep", "none", TESTS, expect="ok",
                 label="save_pretrained")  # fmt: skip
    outcome = Outcome([r])
    if r.cls == "ok" and not whole(folder):
        outcome.forbidden.append("the folder is not whole")
    return outcome


def umask_case(p, d):
    r = p.python(d, _API_UMASK, expect="ok", label="save_pretrained (umask 022)")
    outcome = Outcome([r])
    modes = (r.report or {}).get("modes") or {}
    wrong = {
        k: v for k, v in modes.items() if v != ("0o755" if k == "folder" else "0o644")
    }
    if wrong:
        outcome.forbidden.append(f"modes not by the umask 022: {wrong}")
    return outcome


add(
    "7/umask/save_pretrained",
    "7",
    "save_pretrained under umask 022: a 0755 folder of 0644 files",
    "ok",
    umask_case,
)


# Item 8: convert's inputs, told by their content. -----------------------------------


def _class_token(path: Path):
    """The class token's bytes in a `.keras` or `.weights.h5` file."""
    import io

    import h5py

    if path.suffix == ".keras":
        with zipfile.ZipFile(path) as archive:
            data = io.BytesIO(archive.read("model.weights.h5"))
    else:
        data = path
    with h5py.File(data, "r") as f:
        found = []
        f.visititems(
            lambda name, obj: (
                found.append(obj[()].tobytes())
                if isinstance(obj, h5py.Dataset) and "class_token" in name
                else None
            )
        )
        return found[0] if found else None


def convert_routing(source_of, output, extra=(), expect="ok"):
    def run(p, d):
        source = source_of(p, d)
        r = p.cli(d, "convert", source, output, *extra, expect=expect)
        outcome = Outcome([r])
        target = d.work / output
        if expect == "ok" and r.rc == 0:
            try:
                same = _class_token(target) == _class_token(p.setup / "tiny.keras")
            except Exception as error:
                same = False
                outcome.notes.append(f"{output} unreadable: {error}")
            if not same:
                outcome.forbidden.append(f"{output} does not hold the source's weights")
        if expect == "refusal" and r.rc not in (0, None) and target.exists():
            outcome.forbidden.append(f"refused, yet wrote {output}")
        return outcome

    return run


def _renamed(name):
    def source(p, d):
        d.files.mkdir(parents=True, exist_ok=True)
        shutil.copy(p.setup / "tiny.keras", d.files / name)
        return d.files / name

    return source


add(
    "8/convert .keras to .keras",
    "8",
    "convert X.keras Y.keras",
    "ok",
    convert_routing(lambda p, d: p.setup / "tiny.keras", "out.keras"),
)
add(
    "8/convert .keras to .weights.h5",
    "8",
    "convert X.keras Y.weights.h5",
    "ok",
    convert_routing(lambda p, d: p.setup / "tiny.keras", "out.weights.h5"),
)
add("8/convert .weights.h5 to .keras", "8",
    "convert X.weights.h5 Y.keras --variant test/4", "ok",
    convert_routing(lambda p, d: p.setup / "tiny.weights.h5", "out.keras",
                    ["--variant", "test/4"]))  # fmt: skip
add("8/convert .weights.h5 without --variant", "8",
    "convert X.weights.h5 Y.keras without --variant", "refusal",
    convert_routing(lambda p, d: p.setup / "tiny.weights.h5", "out.keras",
                    expect="refusal"), ("--variant",))  # fmt: skip
add("8/convert .keras named .npz", "8", "convert a .keras model named X.npz",
    "refusal", convert_routing(_renamed("model.npz"), "out.keras", expect="refusal"),
    ("keras model", "keras archive"))  # fmt: skip
add(
    "8/convert .keras --num-classes",
    "8",
    "convert X.keras Y.keras --num-classes 5",
    "refusal",
    convert_routing(
        lambda p, d: p.setup / "tiny.keras",
        "out.keras",
        ["--num-classes", "5"],
        expect="refusal",
    ),
    ("num-classes",),
)
add("8/convert .pth.tar", "8",
    "convert a torch.save file (Park & Kim's ViT, which lacks qkv biases)", "refusal",
    convert_routing(lambda p, d: TESTS / "fixtures" / "parkkim_vit.pth.tar",
                    "out.keras", ["--variant", "32x2x128x2/2"], expect="refusal"),
    ("torch", "qkv"))  # fmt: skip


# Item 10: TensorFlow's log records after `import keras_vit`. -------------------------


def logging_case(channel):
    text = f"PROBE-{channel.upper().replace('.', '-')}-TEXT"
    code = (
        "import keras_vit\n" + _LOGGING[channel].format(text=text) + "\nprint('DONE')"
    )

    def run(p, d):
        env = p.env(drop=("TF_CPP_MIN_LOG_LEVEL", "KERAS_VIT_VERBOSE"))
        r = p.python(
            d, code, expect="ok", label=f"import keras_vit; {channel}", env=env
        )
        outcome = Outcome([r])
        count = r.stderr.count(text)
        if r.rc == 0 and count != 1:
            outcome.forbidden.append(f"the record's text printed {count} times")
        return outcome

    return run


for channel in _LOGGING:
    add(
        f"10/{channel}",
        "10",
        f"a {channel} warning after import keras_vit",
        "ok",
        logging_case(channel),
    )


# Controls: legitimate inputs through the same entry points. -------------------


CONTROLS = {
    "load_weights a .weights.h5": api_load(
        lambda p, d: str(p.setup / "tiny.weights.h5"), "load_weights", "ok"),
    "ViT(weights=) an .npz": api_load(lambda p, d: str(p.setup / "tiny.npz"),
                                      "constructor", "ok"),
    "load_weights a .keras with Infinity in its config": api_load(
        keras_config(_infinite_elsewhere), "load_weights", "ok"),
    "convert an .npz": command_reads(lambda p, d: str(p.setup / "tiny.npz"), "convert",
                                     "ok"),
    "export --weights an .npz": command_reads(lambda p, d: str(p.setup / "tiny.npz"),
                                              "export", "ok"),
    "train init_from a .weights.h5": command_reads(
        lambda p, d: str(p.setup / "tiny.weights.h5"), "train", "ok"),
    "analyze --images an .npz": command_reads(lambda p, d: str(p.setup / "images.npz"),
                                              "analyze", "ok"),
    "convert a .keras to a folder": cli_run(
        lambda p, d: ["convert", p.setup / "tiny.keras", "my-vit"], "ok"),
    "convert a timm .safetensors": cli_run(
        lambda p, d: ["convert", _timm(), "vit.keras", "--variant", "test/8"], "ok"),
    "export a .keras": cli_run(
        lambda p, d: ["export", "--model", p.setup / "tiny.keras", "--name", "vit",
                      "--version", "1"], "ok"),
    "fewshot": cli_run(
        lambda p, d: ["fewshot", "--model", p.setup / "tiny.keras", "--shots", "1",
                      "--max-test-examples", "20", "--out", "fewshot.json"], "ok"),
    "predict a PNG": cli_run(
        lambda p, d: ["predict", "--model", p.setup / "tiny.keras",
                      p.setup / "cat.png"], "ok"),
    "validate a folder dataset": folder_case(_validate, lambda data, o: None, "ok"),
    "save_pretrained a local folder": lambda p, d: save_pretrained_control(p, d),
}  # fmt: skip
for name, run in CONTROLS.items():
    add(f"control/{name}", "control", name, "ok", run, control=True)


# -- running the catalogue -------------------------------------------------------


def run_case(p: Probe, case: Case) -> dict:
    # Numbered, not named: the words of a case's id must not reach its paths.
    d = Dirs(p.out / "cases" / f"{list(CASES).index(case.id):03d}")
    shutil.rmtree(d.root, ignore_errors=True)
    d.files.mkdir(parents=True)
    (d.root / "id.txt").write_text(case.id + "\n")
    started = time.monotonic()
    try:
        outcome = case.run(p, d)
        cls, reason = classify_case(outcome)
        named = url_named(d.work) if d.work.exists() else []
        if named and not any("URL" in f for f in outcome.forbidden):
            outcome.forbidden.append(
                f"wrote local paths named after a URL: {named[:3]}"
            )
            cls, reason = classify_case(outcome)
    except Exception as error:  # The probe's own failure: shown, not counted.
        import traceback

        return {"id": case.id, "item": case.item, "title": case.title,
                "class": "probe error", "reason": repr(error),
                "traceback": traceback.format_exc()[-3000:]}  # fmt: skip
    last = [run for run in outcome.runs if run.cls not in ("ok",)] or outcome.runs
    # The words of the errors, without the paths they quote.
    text = ABSOLUTE_PATH.sub(" ", " ".join(f"{r.reason} {r.message}" for r in last))
    text = text.lower()
    if case.expect == "ok":
        expected = cls == "ok"
    elif case.expect == "either":
        expected = cls in ("ok", "one-line refusal")
    else:
        expected = cls == "one-line refusal"
    named = not case.mention or any(m in text for m in case.mention)
    if cls == "one-line refusal" and case.expect != "ok" and not named:
        expected = False
        outcome.notes.append(f"the error names none of {list(case.mention)}")
    return {
        "id": case.id,
        "dir": str(d.root),
        "item": case.item,
        "title": case.title,
        "control": case.control,
        "expect": case.expect,
        "class": cls,
        "reason": reason,
        "as_expected": expected,
        "names_the_problem": named if case.expect != "ok" else None,
        "lost": outcome.lost,
        "forbidden": outcome.forbidden,
        "notes": outcome.notes,
        "seconds": round(time.monotonic() - started, 1),
        "peak_mib": round(max((r.peak_mib for r in outcome.runs), default=0)),
        "runs": [r.record() for r in outcome.runs],
    }


def odd(record: dict) -> bool:
    """A failure that looks like a checkout caught mid-edit."""
    text = json.dumps(record.get("runs", []))
    return record["class"] == "probe error" or (
        not record.get("as_expected")
        and re.search(r"ImportError|ModuleNotFoundError|SyntaxError|IndentationError|"
                      r"NameError|circular import", text) is not None
    )  # fmt: skip


def summary(records: list[dict]) -> str:
    """The tables: cases per class, and per issue item and class."""
    counted = [r for r in records if r["class"] in CLASSES]
    lines = [
        f"cases: {len(records)} ({sum(r.get('control', False) for r in records)} "
        f"controls); as expected: {sum(bool(r.get('as_expected')) for r in counted)}"
    ]
    lines += ["", "| class | cases |", "|---|---:|"]
    by_class = Counter(r["class"] for r in records)
    for cls in (*CLASSES, "probe error"):
        if cls in CLASSES or by_class[cls]:
            lines.append(f"| {cls} | {by_class[cls]} |")
    head = "| item | " + " | ".join(CLASSES) + " | not as expected | cases |"
    lines += ["", head, "|---" * (len(CLASSES) + 3) + "|"]
    for item, title in ITEMS.items():
        rows = [r for r in records if r["item"] == item]
        if not rows:
            continue
        counts = Counter(r["class"] for r in rows)
        unexpected = sum(not r.get("as_expected") for r in rows)
        cells = " | ".join(str(counts[c]) for c in CLASSES)
        lines.append(f"| {item}: {title} | {cells} | {unexpected} | {len(rows)} |")
    lines += ["", "Not as expected:"]
    for r in records:
        if not r.get("as_expected"):
            lines.append(f"- {r['id']}: {r['class']}: {r['reason'][:300]}")
            for text in r.get("lost", []) + r.get("forbidden", []) + r.get("notes", []):
                if text not in r["reason"]:
                    lines.append(f"    {text[:300]}")
    return "\n".join(lines)


def compare(before_dir: Path, after_dir: Path) -> str:
    """Two runs' tables side by side, and the cases whose class changed."""
    runs = []
    for folder in (before_dir, after_dir):
        with open(folder / "results.jsonl") as f:
            runs.append({r["id"]: r for r in map(json.loads, f)})
    before, after = runs
    lines = [f"cases: {len(before)} before, {len(after)} after", "",
             "| class | before | after |", "|---|---:|---:|"]  # fmt: skip
    counts = [Counter(r["class"] for r in run.values()) for run in runs]
    for cls in (*CLASSES, "probe error"):
        if cls in CLASSES or counts[0][cls] or counts[1][cls]:
            lines.append(f"| {cls} | {counts[0][cls]} | {counts[1][cls]} |")
    expected = [sum(bool(r.get("as_expected")) for r in run.values()) for run in runs]
    lines.append(f"| (as expected) | {expected[0]} | {expected[1]} |")
    lines += ["", "| item | " + " | ".join(CLASSES) + " | not as expected |",
              "|---" * (len(CLASSES) + 2) + "|"]  # fmt: skip
    for item, title in ITEMS.items():
        cells = []
        for cls in (*CLASSES, None):
            pair = []
            for run in runs:
                rows = [r for r in run.values() if r["item"] == item]
                if cls is None:
                    pair.append(sum(not r.get("as_expected") for r in rows))
                else:
                    pair.append(sum(r["class"] == cls for r in rows))
            cells.append(f"{pair[0]} → {pair[1]}")
        lines.append(f"| {item}: {title} | " + " | ".join(cells) + " |")
    lines += ["", "Changed:"]
    for id in after:
        if id in before and before[id]["class"] != after[id]["class"]:
            lines.append(f"- {id}: {before[id]['class']} → {after[id]['class']}")
    return "\n".join(lines)


def git_state(package: str) -> dict:
    tree = os.path.dirname(package)

    def git(*args):
        return subprocess.run(["git", "-C", tree, *args], capture_output=True,
                              text=True).stdout.strip()  # fmt: skip

    status = git("status", "--porcelain")
    return {
        "tree": tree,
        "commit": git("rev-parse", "HEAD"),
        "changed_files": len(status.splitlines()) if status else 0,
        "diff_sha1": hashlib.sha1(git("diff", "HEAD").encode()).hexdigest(),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, help="results folder (emptied first)")
    parser.add_argument("--only", help="a regular expression: the case ids to run")
    parser.add_argument("--jobs", type=int, default=1, help="cases at once (default 1)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=120,
        help="seconds a process may run: past it, a hang",
    )
    parser.add_argument(
        "--bound-mib",
        type=float,
        default=1536,
        help="peak resident memory past which a case is a runaway "
        "allocation (default 1536 MiB)",
    )
    parser.add_argument(
        "--kill-mib",
        type=float,
        default=8192,
        help="resident memory (all of a case's processes) at which "
        "it is killed, a runaway allocation (default 8192 MiB)",
    )
    parser.add_argument("--list", action="store_true", help="list the cases and stop")
    parser.add_argument(
        "--no-retry",
        action="store_true",
        help="do not re-run a case that fails oddly (an import "
        "error: a checkout being edited)",
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="run the --only cases again into an earlier --out, "
        "replacing their results and keeping the others'",
    )
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args(argv)  # fmt: skip

    if args.compare:
        print(compare(*args.compare))
        return 0
    cases = [c for c in CASES.values() if not args.only or re.search(args.only, c.id)]
    if args.list:
        for c in cases:
            print(f"{c.id:70s} {c.expect:8s} {c.title}")
        print(f"{len(cases)} cases")
        return 0
    if args.out is None:
        parser.error("--out is required")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # This process's own imports.
    load_helpers()
    previous = {}
    if args.update:  # Run `cases` again; keep the other results.
        with open(args.out / "results.jsonl") as f:
            previous = {r["id"]: r for r in map(json.loads, f)}
    else:
        shutil.rmtree(args.out / "cases", ignore_errors=True)
    args.out.mkdir(parents=True, exist_ok=True)
    probe = Probe(args.out, args.timeout, args.bound_mib, args.kill_mib)
    started, clock = time.monotonic(), datetime.datetime.now().astimezone()
    setup = probe.make_setup()
    meta = {
        "started": clock.isoformat(timespec="seconds"),
        "keras_vit": setup["keras_vit"],
        "keras_vit_script_imports": setup["script_imports"],
        "git": git_state(probe.package),
        "python": sys.executable,
        "keras_vit_script": KERAS_VIT,
        "PYTHONPATH": os.environ.get("PYTHONPATH"),
        "timeout_s": args.timeout,
        "bound_mib": args.bound_mib,
        "kill_mib": args.kill_mib,
        "cases": len(cases),
        "only": args.only,
    }
    print(f"probing {meta['keras_vit']} ({meta['git']['commit'][:7]}, "
          f"{meta['git']['changed_files']} files changed): {len(cases)} cases",
          flush=True)  # fmt: skip
    records = []
    name = "results.update.jsonl" if args.update else "results.jsonl"
    results = open(args.out / name, "w")

    def one(case):
        record = run_case(probe, case)
        if odd(record) and not args.no_retry:
            first = {k: record.get(k) for k in ("class", "reason")}
            record = run_case(probe, case)
            record["retried_after"] = first
        return record

    with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for record in pool.map(one, cases):
            records.append(record)
            results.write(json.dumps(record) + "\n")
            results.flush()
            mark = "  " if record.get("as_expected") else "!!"
            print(
                f"{mark} {record['class']:18s} {record.get('seconds', 0):6.1f}s "
                f"{record.get('peak_mib', 0):5d}MiB {record['id']}",
                flush=True,
            )
    results.close()
    meta["seconds"] = round(time.monotonic() - started)
    meta["finished"] = (
        datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    )
    if args.update:
        fresh = {r["id"]: r for r in records}
        for record in fresh.values():
            record["updated"] = meta["started"]
        order = [c for c in CASES if c in previous or c in fresh]
        records = [fresh.get(c, previous.get(c)) for c in order]
        with open(args.out / "results.jsonl", "w") as f:
            f.writelines(json.dumps(r) + "\n" for r in records)
        update = {**meta, "cases": sorted(fresh)}
        meta = json.loads((args.out / "meta.json").read_text())
        meta.setdefault("updates", []).append(update)
    (args.out / "meta.json").write_text(json.dumps(meta, indent=2))
    table = summary(records)
    updates = "".join(
        f"updated {u['started']} ({u['seconds']} s, {len(u['cases'])} cases, diff "
        f"sha1 {u['git']['diff_sha1'][:12]})\n"
        for u in meta.get("updates", [])
    )
    (args.out / "summary.md").write_text(
        f"keras_vit: {meta['keras_vit']}\ncommit: {meta['git']['commit']} "
        f"({meta['git']['changed_files']} files changed, diff sha1 "
        f"{meta['git']['diff_sha1'][:12]})\nstarted {meta['started']}, "
        f"{meta['seconds']} s\n{updates}\n{table}\n"
    )
    print(table)
    print(f"{meta['seconds']} s; results in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
