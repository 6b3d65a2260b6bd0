"""The demo checkpoints of `keras-vit compare`: its default runs, trained once.

The default comparison trains four networks over three seeds (twelve runs);
on 2 CPU cores that training takes longer than all of its analyses (the
measured times are in `docs/parkkim.md`). So `keras-vit compare` analyses
these checkpoints by default: a run whose recipe equals a shipped run's
(its `TrainConfig`, seed included, the run-only fields such as `workdir`
aside) loads the shipped weights instead of training; any other run (another
recipe, model or seed) is trained as before, and `--retrain` trains them all.

The files, in `keras_vit/parkkim/demo_checkpoints/`:

- `<model>_seed<s>.npz`: every weight of the model, keyed by its Keras
  variable path, stored in float16 (half the size of float32) and loaded into
  the float32 model. Every number recorded for it is measured on these
  rounded weights.
- `manifest.json`: for each run, its file's sha256 and size, its recipe, and
  what it reached (test accuracy and loss, the last epoch's training loss,
  the training time and the machine it was measured on). A file whose sha256
  differs is refused before it is read.

They are made by one command, `python -m keras_vit.parkkim.make_demo`.

Example:

```python
from keras_vit.parkkim import compare, demo
from keras_vit.parkkim.configs.compare import get_config

run_config = compare.train_config(get_config(), "vit", 0, "runs/compare")
shipped = demo.find(run_config)  # a DemoRun, or None for another recipe
model = compare.build_run_model(run_config, num_classes=10)
demo.load(model, shipped)
shipped.results["test_accuracy"]
```
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import pathlib

import numpy as np

from keras_vit import atomic

# Where the shipped checkpoints are (package data).
DIRECTORY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo_checkpoints")
MANIFEST = "manifest.json"
# The dtype the weights are stored in.
STORED_DTYPE = "float16"


class DemoCheckpointError(RuntimeError):
    """A shipped checkpoint that cannot be used (one line, naming the file and
    what is wrong: its sha256, its keys or shapes)."""


@dataclasses.dataclass(frozen=True)
class DemoRun:
    """One shipped checkpoint.

    Attributes:
        name: The run's name, `<model>_seed<s>` (as in the comparison's
            `runs/`).
        file: The `.npz` file, relative to the directory.
        sha256: Its SHA-256, checked before it is read.
        bytes: Its size.
        recipe: The run's `TrainConfig` without the run-only fields, as JSON
            (`recipe_of`).
        results: What it reached: `test_accuracy`, `test_loss` (on the whole
            test split, with the rounded weights), `train_loss` (the last
            epoch's), `train_seconds`, `epochs`, `parameters`.
    """

    name: str
    file: str
    sha256: str
    bytes: int
    recipe: dict
    results: dict


def recipe_of(train_config) -> dict:
    """A `TrainConfig` as the manifest records it: every field but the
    run-only ones (`RUN_ONLY_FIELDS`: name, workdir, verbose, ...), as JSON."""
    from keras_vit.recipes.configs.base import RUN_ONLY_FIELDS

    fields = dataclasses.asdict(train_config)
    recipe = {k: v for k, v in fields.items() if k not in RUN_ONLY_FIELDS}
    return json.loads(json.dumps(recipe, default=list))  # Tuples as lists.


def manifest(directory: str = DIRECTORY) -> dict[str, DemoRun]:
    """The shipped runs by name (`{}` when there is no manifest).

    Raises:
        DemoCheckpointError: The manifest is there but cannot be read.
    """
    path = os.path.join(directory, MANIFEST)
    if not os.path.exists(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            runs = json.load(f)["runs"]
        return {name: DemoRun(name=name, **entry) for name, entry in runs.items()}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise DemoCheckpointError(
            f"{path}: not a demo-checkpoint manifest ({error}); reinstall "
            "keras_vit, or pass --retrain to train every run"
        ) from error


def find(train_config, directory: str = DIRECTORY) -> DemoRun | None:
    """The shipped run of this run's name and recipe, or `None`."""
    run = manifest(directory).get(train_config.name)
    if run is None or _shipped_recipe(run, train_config) != recipe_of(train_config):
        return None
    return run


def differences(train_config, directory: str = DIRECTORY) -> list[str]:
    """The recipe fields in which this run differs from the shipped run of
    its name (`[]` when they agree or nothing of that name is shipped)."""
    run = manifest(directory).get(train_config.name)
    if run is None:
        return []
    wanted = recipe_of(train_config)
    shipped = _shipped_recipe(run, train_config)
    keys = sorted(set(wanted) | set(shipped))
    return [key for key in keys if wanted.get(key) != shipped.get(key)]


def _shipped_recipe(run: DemoRun, train_config) -> dict:
    """The shipped run's recipe, a field it does not record (one added to
    the config, or to `EncoderOptions`, after the run was made) at its
    default: an option added later defaults to what was done before."""
    defaults = recipe_of(type(train_config)())
    recipe = dict(run.recipe)
    for key, default in defaults.items():
        if key not in recipe:
            recipe[key] = default
        elif isinstance(default, dict) and isinstance(recipe[key], dict):
            recipe[key] = {**default, **recipe[key]}
    return recipe


def load(model, run: DemoRun, directory: str = DIRECTORY):
    """Sets `model`'s weights to the shipped run's; returns `model`.

    The file's sha256 is checked first, then that its keys and shapes are
    the model's, all of them; the model is changed only when everything
    agrees.

    Raises:
        DemoCheckpointError: The file is missing, its sha256 differs from the
            manifest's, or its keys or shapes are not the model's.
    """
    path = os.path.join(directory, run.file)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as error:
        raise DemoCheckpointError(
            f"{path}: {error.strerror or error}; reinstall keras_vit, or pass "
            "--retrain to train every run"
        ) from error
    digest = hashlib.sha256(data).hexdigest()
    if digest != run.sha256:
        raise DemoCheckpointError(
            f"{path}: sha256 {digest} is not the manifest's {run.sha256} (a "
            "damaged or changed file); reinstall keras_vit, or pass --retrain "
            "to train every run"
        )
    with np.load(io.BytesIO(data), allow_pickle=False) as stored:
        arrays = {key: stored[key] for key in stored.files}
    variables = _variables(model)
    problems = _mismatches(variables, arrays)
    if problems:
        raise DemoCheckpointError(f"{path} does not fit {model.name}: {problems}")
    for key, variable in variables.items():
        variable.assign(arrays[key].astype(variable.dtype))
    return model


def save(model, path: str) -> tuple[str, int]:
    """Writes `model`'s weights as a demo checkpoint (float16, keyed by
    variable path), whole or not at all; returns `(sha256, bytes)`."""
    arrays = {
        key: np.asarray(variable.numpy()).astype(STORED_DTYPE)
        for key, variable in _variables(model).items()
    }
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)  # Uncompressed: float weights hardly compress.
    data = buffer.getvalue()
    atomic.write_bytes(pathlib.Path(path), data, overwrite=True)
    return hashlib.sha256(data).hexdigest(), len(data)


def _variables(model) -> dict:
    """The model's variables (trainable and not) by path, in order.

    Raises:
        DemoCheckpointError: Two variables share a path.
    """
    variables = {}
    for variable in model.weights:
        if variable.path in variables:
            raise DemoCheckpointError(
                f"{model.name}: two variables are named {variable.path!r}"
            )
        variables[variable.path] = variable
    return variables


def _mismatches(variables: dict, arrays: dict) -> str:
    """What keeps `arrays` from being `variables`' values, or `""`."""
    missing = [key for key in variables if key not in arrays]
    unexpected = [key for key in arrays if key not in variables]
    shapes = [
        f"{key} {tuple(arrays[key].shape)} for {tuple(variable.shape)}"
        for key, variable in variables.items()
        if key in arrays and tuple(arrays[key].shape) != tuple(variable.shape)
    ]
    problems = []
    for label, items in (
        ("missing", missing),
        ("unexpected", unexpected),
        ("wrong shapes", shapes),
    ):
        if items:
            problems.append(f"{len(items)} {label} ({', '.join(items)})")
    return "; ".join(problems)
