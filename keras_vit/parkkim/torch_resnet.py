"""Park & Kim's PyTorch ResNet state dicts, loaded into `ResNet` strictly.

The keys of `models/resnet.py` in github.com/xxxnell/how-do-vits-work
(branch `transformer`, commit 9571ff1; blocks from `models/resnet_dnn_block.py`,
head from `models/classifier_block.py`), and the `keras_vit.parkkim.cnn.ResNet`
variable each one fills:

| PyTorch key | Keras variable |
|---|---|
| `layer0.0.weight` | `stem_conv/kernel` |
| `layer0.1.*` | `stem_norm/*` |
| `layer{s}.{b}.conv{n}.0.weight` | `stage{s}_block{b+1}/conv_{n}/kernel` |
| `layer{s}.{b}.conv{n}.1.*` | `stage{s}_block{b+1}/norm_{n}/*` |
| `layer{s}.{b}.shortcut.0.weight` | `stage{s}_block{b+1}/shortcut/kernel` |
| `layer{s}.{b}.shortcut.1.*` | `stage{s}_block{b+1}/shortcut_norm/*` |
| `classifier.0.dense.{weight,bias}` | `head/{kernel,bias}` |

A BatchNorm's `*` is `weight`, `bias`, `running_mean`, `running_var` in
PyTorch and `gamma`, `beta`, `moving_mean`, `moving_variance` in Keras;
`*.num_batches_tracked` (a training counter) is left out. Convolution
kernels go from PyTorch's `(out, in, h, w)` to `(h, w, in, out)`, the linear
kernel from `(out, in)` to `(in, out)`. As for the ViT checkpoints, every
key is checked before any weight changes.

Example:

```python
model = keras_vit.parkkim.cnn.ResNet("50", num_classes=100, image_size=32,
                                    stem="cifar")
keras_vit.load_weights(model, "resnet_50_cifar100_691cc9a9e4.pth.tar")
```
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import keras
import numpy as np

from keras_vit.models import layout as names
from keras_vit.parkkim import pth as torch_file
from keras_vit.parkkim.cnn import layout as cnn_names
from keras_vit.parkkim.cnn.layout import CNNLayout
from keras_vit.weights.checks import LoadPlan
from keras_vit.weights.checks import apply_plan
from keras_vit.weights.checks import check_finite
from keras_vit.weights.dialects.convert import conv_to_hwio
from keras_vit.weights.dialects.convert import transpose
from keras_vit.weights.dialects.rules import Dialect
from keras_vit.weights.dialects.rules import Rule
from keras_vit.weights.dialects.rules import find
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.formats.limits import ReadBudget

_MAX_LISTED = 10
# PyTorch's BatchNorm2d parameters and buffers -> Keras's BatchNormalization
# variables.
_BATCH_NORM = {
    "weight": "gamma",
    "bias": "beta",
    "running_mean": "moving_mean",
    "running_var": "moving_variance",
}
_LAYER = r"layer(?P<s>[1-9]\d*)\.(?P<b>\d+)\."  # blocks from 0 (`shift` below)
_BLOCK = "stage{s}_" + cnn_names.BLOCK_KINDS["conv"] + "{b}"


def _batch_norm(source: str, layer: str) -> tuple[Rule, ...]:
    """`source.{weight,bias,running_mean,running_var}` -> `layer/{gamma,...}`."""
    return tuple(
        Rule(source + r"\." + leaf, f"{layer}/{variable}")
        for leaf, variable in _BATCH_NORM.items()
    )


# PyTorch key -> Keras variable path of `keras_vit.parkkim.cnn.ResNet`.
RULES = (
    Rule(r".*\.num_batches_tracked", None),  # a training counter: left out
    Rule(r"layer0\.0\.weight", cnn_names.STEM_CONV + "/kernel", conv_to_hwio),
    *_batch_norm(r"layer0\.1", cnn_names.STEM_NORM),
    Rule(_LAYER + r"conv(?P<n>[123])\.0\.weight", _BLOCK + "/conv_{n}/kernel",
         conv_to_hwio),
    *_batch_norm(_LAYER + r"conv(?P<n>[123])\.1", _BLOCK + "/norm_{n}"),
    Rule(_LAYER + r"shortcut\.0\.weight", _BLOCK + "/shortcut/kernel", conv_to_hwio),
    *_batch_norm(_LAYER + r"shortcut\.1", _BLOCK + "/shortcut_norm"),
    Rule(r"classifier\.0\.dense\.weight", names.HEAD + "/kernel", transpose),
    Rule(r"classifier\.0\.dense\.bias", names.HEAD + "/bias"),
)  # fmt: skip


def recognizes(keys) -> bool:
    """Whether a key set is the authors' ResNet's (`layer0.*`, `layer1.*`)."""
    return any(key.startswith(("layer0.", "layer1.")) for key in keys)


DIALECT = Dialect(
    "Park & Kim's PyTorch ResNet",
    RULES,
    recognizes,
    shift={"b": 1},  # PyTorch counts a stage's blocks from 0, the layout from 1
    example="layer1.0.conv1.0.weight",
)


def variable_path(key: str) -> str | None:
    """The `ResNet` variable path a PyTorch key fills, or `None` for a key
    that is unknown or left out (`*.num_batches_tracked`)."""
    match = find(key, DIALECT)
    return None if match is None else match.key


def _listing(items) -> str:
    items = list(items)
    shown = "\n".join(f"  {item}" for item in items[:_MAX_LISTED])
    more = len(items) - _MAX_LISTED
    return shown + (f"\n  ... and {more} more" if more > 0 else "")


def _check_model(model: keras.Model) -> None:
    if not CNNLayout.describes(model) or any(
        layer.name == cnn_names.HEAD_RELU for layer in model.layers
    ):
        raise CheckpointError(
            f"{model.name!r} is not a post-activation ResNet "
            "(keras_vit.parkkim.cnn.ResNet): PyTorch state dicts load into that "
            "family only (a PreActResNet or AlterNet has no PyTorch key map)."
        )


def _translate(state: Mapping[str, np.ndarray], source: str, has_head: bool):
    """`DIALECT`'s rules over `state`.

    Returns `(values, origin, unknown, dropped_head)`: `{variable path:
    converted array}`, `{variable path: PyTorch key}`, the keys no rule
    matches (with their shapes) and the head keys a headless model drops.
    """
    values, origin, unknown, dropped_head = {}, {}, [], []
    for key, value in state.items():
        match = find(key, DIALECT)
        if match is None:
            unknown.append(f"{key} {tuple(np.shape(value))}")
            continue
        if match.key is None:  # left out on purpose
            continue
        if match.key.startswith(names.HEAD + "/") and not has_head:
            dropped_head.append(key)
            continue
        array = np.asarray(value)
        if not np.issubdtype(array.dtype, np.floating):
            raise CheckpointError(
                f"{source!r}: {key!r} has dtype {array.dtype}; weights must be "
                "floating point."
            )
        try:
            values[match.key] = match.rule.convert(array, None)
        except ValueError:  # not a kernel's rank: reported as mis-shaped
            values[match.key] = array
        origin[match.key] = key
    return values, origin, unknown, dropped_head


def plan_torch_resnet(
    model: keras.Model, state: Mapping[str, np.ndarray], source: str = "weights"
) -> LoadPlan:
    """Checks a PyTorch state dict against a `ResNet` and computes every value.

    The keys are translated by `DIALECT` (the one rule engine,
    `keras_vit.weights.dialects.rules`) into the model's variable paths,
    then compared with the model's variables strictly.

    Args:
        model: A model built by `keras_vit.parkkim.cnn.ResNet`.
        state: `{PyTorch key: array}` (anything with `.shape` that NumPy can
            read).
        source: What the state dict was read from, for messages.

    Returns:
        A `keras_vit.weights.checks.LoadPlan`; nothing is assigned yet.

    Raises:
        CheckpointError: another family, unknown, missing or mis-shaped
            keys (all listed, with both shapes), non-float weights, or NaN or
            infinite values.
    """
    _check_model(model)
    check_finite(state, source)  # named by the file's own keys
    variables = {variable.path: tuple(variable.shape) for variable in model.weights}
    has_head = any(layer.name == names.HEAD for layer in model.layers)
    values, origin, unexpected, dropped_head = _translate(state, source, has_head)
    notes = []
    if dropped_head:
        notes.append("The model has no head: the checkpoint's head is dropped.")
    unexpected += [
        f"{origin[p]} -> {p} (the model has no such variable)"
        for p in values
        if p not in variables
    ]
    missing = [p for p in variables if p not in values]
    mismatched = {
        p: (tuple(value.shape), variables[p])
        for p, value in values.items()
        if p in variables and tuple(value.shape) != variables[p]
    }
    if missing or unexpected or mismatched:
        parts = []
        if missing:
            parts.append(f"Missing keys:\n{_listing(missing)}")
        if unexpected:
            parts.append(f"Unexpected keys:\n{_listing(unexpected)}")
        if mismatched:
            listed = [
                f"{origin[p]} -> {p}: checkpoint {theirs} vs model {ours}"
                for p, (theirs, ours) in mismatched.items()
            ]
            parts.append(f"Mis-shaped keys:\n{_listing(listed)}")
        raise CheckpointError(
            f"{source!r} does not fit the model {model.name!r}; no weight was "
            "changed.\n" + "\n".join(parts),
            missing=missing,
            unexpected=unexpected,
            mismatched=mismatched,
        )
    return LoadPlan({p: values[p] for p in variables}, notes)


def load_torch_resnet(
    model: keras.Model,
    weights: str | os.PathLike | Mapping[str, np.ndarray],
    progress: keras.utils.Progbar | None = None,
) -> list[str]:
    """Loads a PyTorch state dict of Park & Kim's ResNet into a `ResNet`.

    `keras_vit.load_weights` calls this for a CNN; call that instead.

    Args:
        model: A model built by `keras_vit.parkkim.cnn.ResNet` with the
            checkpoint's variant, stem and class count.
        weights: A `.pth` / `.pth.tar` file (read by
            `keras_vit.parkkim.pth`, nothing in it is run) or a dict
            `{PyTorch key: array}`.
        progress: An optional `keras.utils.Progbar` advanced per variable.

    Returns:
        Notes on what was adapted (a dropped head).

    Raises:
        CheckpointError: see `plan_torch_resnet`; also an unreadable file or
            a file that is not a PyTorch file.
        FileNotFoundError: a path that does not exist.
    """
    if isinstance(weights, Mapping):
        state, source = weights, "a dict of arrays"
    elif not isinstance(weights, (str, os.PathLike)):
        raise TypeError(
            f"A {model.name!r} CNN loads a `torch.save` file path or a dict "
            f"{{PyTorch key: array}}; received {type(weights).__name__}."
        )
    else:
        source = os.fspath(weights)
        if not os.path.exists(source):
            raise FileNotFoundError(f"No checkpoint file at {source!r}.")
        if not torch_file.is_torch_file(source):
            raise CheckpointError(
                f"{source!r} is not a PyTorch file: a {model.name!r} CNN loads "
                "`torch.save` state dicts (.pth, .pth.tar); use "
                "`model.load_weights` for a Keras weights file."
            )
        budget = ReadBudget.for_model(model)  # file size + parameter bytes
        state = torch_file.read_state_dict(source, budget=budget)
    plan = plan_torch_resnet(model, state, source)
    apply_plan(model, plan, progress)
    return plan.notes
