"""Park & Kim's PyTorch ResNet state dicts, loaded into `ResNet` strictly.

The keys of `models/resnet.py` in github.com/xxxnell/how-do-vits-work
(branch `transformer`, commit 9571ff1; blocks from `models/resnet_dnn_block.py`,
head from `models/classifier_block.py`), and the `keras_vit.models.cnn.ResNet`
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
model = keras_vit.models.cnn.ResNet("50", num_classes=100, image_size=32,
                                    stem="cifar")
keras_vit.load_weights(model, "resnet_50_cifar100_691cc9a9e4.pth.tar")
```
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

import keras
import numpy as np

from keras_vit.models import layout as names
from keras_vit.models.cnn import layout as cnn_names
from keras_vit.models.cnn.layout import CNNLayout
from keras_vit.weights.checks import LoadPlan
from keras_vit.weights.checks import apply_plan
from keras_vit.weights.checks import check_finite
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.formats import pth as torch_file

_MAX_LISTED = 10
_BN = {
    "weight": "gamma",
    "bias": "beta",
    "running_mean": "moving_mean",
    "running_var": "moving_variance",
}
_LEAF = r"(?P<leaf>weight|bias|running_mean|running_var)"
_BLOCK = r"layer(?P<s>[1-9]\d*)\.(?P<b>\d+)\."


def _conv(weight):  # (out, in, h, w) -> (h, w, in, out)
    return np.transpose(weight, (2, 3, 1, 0))


def _linear(weight):  # (out, in) -> (in, out)
    return np.transpose(weight)


# (regex, variable path template, conversion)
RULES = (
    (r"layer0\.0\.weight", cnn_names.STEM_CONV + "/kernel", _conv),
    (r"layer0\.1\." + _LEAF, cnn_names.STEM_NORM + "/{bn}", None),
    (_BLOCK + r"conv(?P<n>[123])\.0\.weight", "{block}/conv_{n}/kernel", _conv),
    (_BLOCK + r"conv(?P<n>[123])\.1\." + _LEAF, "{block}/norm_{n}/{bn}", None),
    (_BLOCK + r"shortcut\.0\.weight", "{block}/shortcut/kernel", _conv),
    (_BLOCK + r"shortcut\.1\." + _LEAF, "{block}/shortcut_norm/{bn}", None),
    (r"classifier\.0\.dense\.weight", names.HEAD + "/kernel", _linear),
    (r"classifier\.0\.dense\.bias", names.HEAD + "/bias", None),
)
_COMPILED = tuple((re.compile(p), t, c) for p, t, c in RULES)
_DROPPED = re.compile(r".*\.num_batches_tracked")


def variable_path(key: str):
    """`(variable path, conversion)` of a PyTorch key, or `None` if unknown."""
    for regex, template, convert in _COMPILED:
        match = regex.fullmatch(key)
        if match is None:
            continue
        groups = match.groupdict()
        if "s" in groups:
            groups["block"] = cnn_names.block_name(
                int(groups["s"]), int(groups["b"]) + 1, "conv"
            )
        if "leaf" in groups:
            groups["bn"] = _BN[groups["leaf"]]
        return template.format(**groups), convert
    return None


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
            "(keras_vit.models.cnn.ResNet): PyTorch state dicts load into that "
            "family only (a PreActResNet or AlterNet has no PyTorch key map)."
        )


def plan_torch_resnet(
    model: keras.Model, state: Mapping[str, np.ndarray], source: str = "weights"
) -> LoadPlan:
    """Checks a PyTorch state dict against a `ResNet` and computes every value.

    Args:
        model: A model built by `keras_vit.models.cnn.ResNet`.
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
    variables = {variable.path: variable for variable in model.weights}
    has_head = any(layer.name == names.HEAD for layer in model.layers)
    values, origin, unexpected, notes = {}, {}, [], []
    dropped_head = []
    for key, value in state.items():
        if _DROPPED.fullmatch(key):
            continue
        found = variable_path(key)
        if found is None:
            unexpected.append(f"{key} {tuple(np.shape(value))}")
            continue
        path, convert = found
        if path.startswith(names.HEAD + "/") and not has_head:
            dropped_head.append(key)
            continue
        array = np.asarray(value)
        if not np.issubdtype(array.dtype, np.floating):
            raise CheckpointError(
                f"{source!r}: {key!r} has dtype {array.dtype}; weights must be "
                "floating point."
            )
        values[path] = convert(array) if convert is not None else array
        origin[path] = key
    if dropped_head:
        notes.append("The model has no head: the checkpoint's head is dropped.")
    unexpected += [
        f"{origin[p]} -> {p} (the model has no such variable)"
        for p in values
        if p not in variables
    ]
    missing = [p for p in variables if p not in values]
    mismatched = [
        f"{origin[p]} -> {p}: checkpoint {tuple(values[p].shape)} vs model "
        f"{tuple(variables[p].shape)}"
        for p in values
        if p in variables and tuple(values[p].shape) != tuple(variables[p].shape)
    ]
    if missing or unexpected or mismatched:
        parts = []
        if missing:
            parts.append(f"Missing keys:\n{_listing(missing)}")
        if unexpected:
            parts.append(f"Unexpected keys:\n{_listing(unexpected)}")
        if mismatched:
            parts.append(f"Mis-shaped keys:\n{_listing(mismatched)}")
        raise CheckpointError(
            f"{source!r} does not fit the model {model.name!r}; no weight was "
            "changed.\n" + "\n".join(parts),
            missing=missing,
            unexpected=unexpected,
            mismatched={
                p: (tuple(values[p].shape), tuple(variables[p].shape))
                for p in values
                if p in variables
                and tuple(values[p].shape) != tuple(variables[p].shape)
            },
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
        model: A model built by `keras_vit.models.cnn.ResNet` with the
            checkpoint's variant, stem and class count.
        weights: A `.pth` / `.pth.tar` file (read by
            `keras_vit.weights.formats.pth`, nothing in it is run) or a dict
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
        state = torch_file.read_state_dict(source)
    _check_model(model)
    plan = plan_torch_resnet(model, state, source)
    apply_plan(model, plan, progress)
    return plan.notes
