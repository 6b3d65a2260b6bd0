"""Fault injection for training runs: one tiny run, faults at named instants.

A fault is `Fault(target, when, nth, action)`: the `nth` call of `target`
(`"module:attribute.path"`, e.g. `"keras_vit.atomic:save_model"`) whose
arguments mention `match` gets `action` `when` ("before" or "after") the
call. Actions:

- `"SIGKILL"`, `"SIGTERM"`, `"SIGINT"`: the process sends itself the real
  signal (SIGTERM and SIGINT then raise where the program stands, as they
  do when sent from outside);
- `"enospc"`: the call writes its file, which is then cut in half and the
  call fails as a full disk makes it fail (`OSError` errno 28, h5py's
  wording);
- `"fill"`: fills the file system of the matched path, leaving `leave`
  bytes free, before the call writes (a real full disk; `FILLER` holds the
  bytes, remove it to free them);
- `"pause"`: creates the file `$KERAS_VIT_FAULT_READY` and sleeps (for
  tests that act on a live run).

`inject(fault)` patches this process (tests that need no SIGKILL);
`run_command(...)` runs `python -m recipes.<recipe>` in a subprocess with
the fault installed from `$KERAS_VIT_FAULT`.

Example:

```python
fault = Fault("keras_vit.atomic:save_model", "after", match="final.keras")
process = run_command(train_argv(workdir), fault.with_action("SIGKILL"))
```
"""

from __future__ import annotations

import dataclasses
import errno
import glob
import importlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
FAULT_ENV = "KERAS_VIT_FAULT"
READY_ENV = "KERAS_VIT_FAULT_READY"
FILLER = "filler.bin"

# Two epochs of two steps of a tiny model, with the digits test split (360
# images) evaluated at the end; dropout and stochastic depth on, so that an
# exact resume needs every random stream restored.
TRAIN = [
    "variant=test/4",
    "image_size=16",
    "global_batch_size=8",
    "epochs=2",
    "steps_per_epoch=2",
    "warmup_steps=1",
    "dropout_rate=0.1",
    "drop_path_rate=0.1",
    "crop_area_range=(0.3, 1.0)",
    "val_split=None",
    "monitor_images=0",
    "verbose=0",
]
PRETRAIN = [
    "variant=test/4",
    "image_size=16",
    "global_batch_size=8",
    "epochs=2",
    "steps_per_epoch=2",
    "warmup_steps=1",
    "fewshot_every=0",
    "monitor_images=0",
    "verbose=0",
]


@dataclasses.dataclass(frozen=True)
class Fault:
    """Where a fault strikes and what it does (see the module docstring)."""

    target: str
    when: str = "after"
    nth: int = 1
    match: str | None = None
    action: str = "SIGKILL"
    leave: int = 0

    def with_action(self, action: str, **changes) -> Fault:
        return dataclasses.replace(self, action=action, **changes)

    @property
    def name(self) -> str:
        where = f"[{self.match}]" if self.match else ""
        return f"{self.action}-{self.when}-{self.target}{where}#{self.nth}"


def inject(fault: Fault):
    """Patches `fault.target` in this process; returns the function undoing it."""
    module_name, _, path = fault.target.partition(":")
    owner = importlib.import_module(module_name)
    *parents, name = path.split(".")
    for parent in parents:
        owner = getattr(owner, parent)
    original = getattr(owner, name)
    raw = vars(owner).get(name)  # None: inherited (a class's method).
    calls = []

    def patched(*args, **kwargs):
        text = " ".join(map(str, [*args, *kwargs.values()]))
        hit = fault.match is None or fault.match in text
        if hit:
            calls.append(1)
        fire = hit and len(calls) == fault.nth
        if fire and fault.action == "enospc":
            _fail_like_a_full_disk(original, args, kwargs)
        if fire and fault.when == "before":
            _act(fault, args)
        result = original(*args, **kwargs)
        if fire and fault.when == "after":
            _act(fault, args)
        return result

    setattr(owner, name, patched)

    def undo():
        if raw is not None:
            setattr(owner, name, raw)
        else:
            delattr(owner, name)

    return undo


def install_from_environment() -> None:
    """`inject` the fault that `$KERAS_VIT_FAULT` describes (JSON), if any."""
    spec = os.environ.get(FAULT_ENV)
    if spec:
        inject(Fault(**json.loads(spec)))


def _act(fault: Fault, args) -> None:
    if fault.action in ("SIGKILL", "SIGTERM", "SIGINT"):
        if (
            fault.action == "SIGINT"
            and signal.getsignal(signal.SIGINT) is signal.SIG_IGN
        ):
            # Started in the background of a non-interactive shell (as CI may
            # start the suite), the process inherits SIGINT ignored and Python
            # installs no KeyboardInterrupt; a terminal's Ctrl-C reaches a
            # foreground process, which has it.
            signal.signal(signal.SIGINT, signal.default_int_handler)
        os.kill(os.getpid(), getattr(signal, fault.action))
        time.sleep(0.01)  # SIGTERM/SIGINT: their handler raises here.
    elif fault.action == "pause":
        with open(os.environ[READY_ENV], "w") as f:
            f.write(str(os.getpid()))
        while True:
            time.sleep(1)
    elif fault.action == "fill":
        fill_disk(_path_in(args), fault.leave)
    elif fault.action != "enospc":
        raise ValueError(f"unknown fault action {fault.action!r}")


def _path_in(args) -> str:
    for arg in args:
        if isinstance(arg, (str, os.PathLike)):
            return os.fspath(arg)
    raise ValueError("the patched call has no path argument")


def _fail_like_a_full_disk(original, args, kwargs):
    """Writes half the file, then fails as h5py does on a full disk."""
    path = _path_in(args)
    original(*args, **kwargs)
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) // 2)
    raise OSError(
        errno.ENOSPC,
        "Can't synchronously write data (file write failed: filename = "
        f"'{path}', errno = 28, error message = 'No space left on device')",
    )


def fill_disk(path: str, leave: int) -> None:
    """Fills the file system of `path` until `leave` bytes are free.

    The bytes go to `FILLER` at the file system's mount point.
    """
    directory = os.path.abspath(path)
    while not os.path.ismount(directory):
        directory = os.path.dirname(directory)
    filler = os.path.join(directory, FILLER)
    free = shutil.disk_usage(directory).free
    with open(filler, "wb") as f:
        remaining = max(free - leave, 0)
        block = b"\0" * (1 << 16)
        while remaining > 0:
            try:
                remaining -= f.write(block[: min(len(block), remaining)])
            except OSError:
                break
            f.flush()


def argv(workdir, overrides=TRAIN, *extra) -> list[str]:
    """`--set` arguments of the tiny run in `workdir`."""
    out = []
    for item in [*overrides, f"workdir='{workdir}'", *extra]:
        out += ["--set", item]
    return out


def train_argv(workdir, *extra) -> list[str]:
    return ["--config", "digits", *argv(workdir, TRAIN, *extra)]


def pretrain_argv(workdir, *extra) -> list[str]:
    return ["--config", "masked_digits", *argv(workdir, PRETRAIN, *extra)]


_SCRIPT = """
import sys
sys.path.insert(0, {here!r})
import fault_runs
fault_runs.install_from_environment()
from keras_vit.recipes import {recipe}
{recipe}.main(sys.argv[1:])
"""


def command(recipe: str, arguments: list[str]) -> list[str]:
    """The command line running `recipes.<recipe>` with the fault hook."""
    script = _SCRIPT.format(here=HERE, recipe=recipe)
    return [sys.executable, "-c", script, *arguments]


def environment(fault: Fault | None = None, **extra) -> dict:
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **extra}
    env["PYTHONPATH"] = os.pathsep.join(
        [ROOT, *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    env.pop(FAULT_ENV, None)
    if fault is not None:
        env[FAULT_ENV] = json.dumps(dataclasses.asdict(fault))
    return env


def run_command(arguments, fault=None, recipe="train", timeout=300):
    """Runs the recipe in a subprocess; returns the `CompletedProcess`."""
    return subprocess.run(
        command(recipe, arguments),
        cwd=ROOT,
        env=environment(fault),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def error_lines(stderr: str) -> list[str]:
    """The lines of `stderr`, without blank ones."""
    return [line for line in stderr.splitlines() if line.strip()]


def csv_epochs(workdir) -> list[int]:
    """The epoch column of `metrics.csv`."""
    with open(os.path.join(workdir, "metrics.csv")) as f:
        return [int(line.split(",")[0]) for line in f.read().splitlines()[1:]]


def csv_rows(workdir) -> dict:
    """`{epoch: {key: value}}` of `metrics.csv`, without timings."""
    with open(os.path.join(workdir, "metrics.csv")) as f:
        lines = f.read().splitlines()
    keys = lines[0].split(",")[1:]
    rows = {}
    for line in lines[1:]:
        epoch, *values = line.split(",")
        pairs = zip(keys, values, strict=True)
        rows[int(epoch)] = {k: float(v) for k, v in pairs if k != "steps_per_second"}
    return rows


def tensorboard_steps(workdir, tag="epoch_loss", run="train") -> list[int]:
    """The steps (epochs) at which `tag` was logged, from the event files."""
    import tensorflow as tf
    from tensorflow.core.util import event_pb2

    steps = []
    pattern = os.path.join(workdir, "tensorboard", run, "events.out.tfevents.*")
    for path in sorted(glob.glob(pattern)):
        try:
            for record in tf.data.TFRecordDataset(path):
                event = event_pb2.Event.FromString(record.numpy())
                steps += [event.step for v in event.summary.value if v.tag == tag]
        except tf.errors.DataLossError:
            pass  # A record cut by the kill: the ones before it count.
    return sorted(steps)


def results(workdir) -> dict:
    """`results.json`, without what depends on the clock."""
    with open(os.path.join(workdir, "results.json")) as f:
        record = json.load(f)
    record.pop("seconds", None)
    for key in ("final",):
        if isinstance(record.get(key), dict):
            record[key].pop("steps_per_second", None)
    return record


def model_weights(path) -> list:
    import keras

    import keras_vit  # noqa: F401  (registers every serializable class)

    return keras.saving.load_model(path, compile=False).get_weights()


def leftovers(workdir) -> list[str]:
    """Temporary files, backups and locks a finished run must not leave."""
    found = glob.glob(os.path.join(workdir, "**", ".partial-*"), recursive=True)
    for name in ("backup", ".lock"):
        if os.path.lexists(os.path.join(workdir, name)):
            found.append(name)
    found += glob.glob(os.path.join(workdir, "backup.discarded*"))
    return found
