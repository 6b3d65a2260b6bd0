"""LoRA adapters on a ViT: enable, save and load the adapter file, merge.

Built on Keras 3's own primitive: `Dense.enable_lora` for the MLP and
`MultiHeadSelfAttention.enable_lora` (the same contract for the fused
kernels). See `docs/finetuning.md` for the measured trade-offs.

Example:

```python
model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
keras_vit.finetune.enable_lora(model, rank=4, alpha=8)
# ... train: only the adapters and the head are trainable ...
keras_vit.finetune.save_lora_weights(model, "adapters.npz")
plain = keras_vit.finetune.merge_lora(model)  # for keras_vit.export.export
```
"""

from __future__ import annotations

import hashlib
import json
import warnings

import keras
import numpy as np

from keras_vit import atomic
from keras_vit import keras_internals
from keras_vit._export import export
from keras_vit.layers.attention import QKV
from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.models.layout import HEAD_LAYERS
from keras_vit.models.layout import ViTLayout
from keras_vit.models.options import LORA_TARGETS
from keras_vit.utils import subset_of
from keras_vit.weights import architecture
from keras_vit.weights.dialects.ours import checkpoint_layout

_LORA_KEYS = ("lora_rank", "lora_alpha", "lora_targets")
# The adapter file's record of its base model: a JSON string stored under a
# key no variable path can take (paths hold "/").
RECORD_KEY = "__base_model__"
_RECORD_FORMAT = 1


def _attention_targets(targets) -> tuple[str, ...]:
    names = []
    for target in targets:
        names += list(QKV) if target == "qkv" else [target]
    return tuple(n for n in ("query", "key", "value", "out") if n in names)


def _is_adapter(variable) -> bool:
    return "lora_kernel" in variable.name


def _head_variables(model):
    return [
        v for layer in model.layers if layer.name in HEAD_LAYERS for v in layer.weights
    ]


@export("keras_vit.finetune.enable_lora")
def enable_lora(
    model: keras.Model,
    rank: int = 8,
    alpha: float = 16.0,
    targets=("qkv", "out", "mlp"),
) -> keras.Model:
    """Adds LoRA adapters to every block and freezes everything else but the head.

    Each targeted projection `W` becomes `W + (alpha / rank) A B` with `B`
    zero-initialised (the model's outputs are unchanged until training),
    following Keras's `Dense.enable_lora`. Afterwards only the adapters and
    the head layers (`head`, `pre_logits`, `head_dist`) are trainable.

    Args:
        model: A keras_vit ViT, built.
        rank: The adapters' rank. Defaults to 8.
        alpha: Scale numerator. Defaults to 16.
        targets: Among `"qkv"` (query, key and value), `"query"`, `"key"`,
            `"value"`, `"out"` (attention output) and `"mlp"` (both MLP
            dense layers). Defaults to `("qkv", "out", "mlp")`.

    Returns:
        `model`, changed in place.

    Example:

    >>> model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    >>> enable_lora(model, rank=2, alpha=4, targets=("qkv",))
    >>> sum(int(np.prod(v.shape)) for v in model.trainable_weights)
    """
    targets = subset_of(targets, LORA_TARGETS, "targets")
    if int(rank) <= 0:
        raise ValueError(f"`rank` must be positive. Received: rank={rank}")
    layout = ViTLayout.of(model)
    blocks = [layout.block(i) for i in range(layout.depth)]
    if any(b.attention.lora_enabled or b.mlp_dense_1.lora_enabled for b in blocks):
        raise ValueError(f"LoRA is already enabled on model {model.name!r}.")
    attention = _attention_targets(targets)
    for block in blocks:
        if attention:
            block.attention.enable_lora(int(rank), float(alpha), attention)
        if "mlp" in targets:
            for dense in (block.mlp_dense_1, block.mlp_dense_2):
                dense.enable_lora(int(rank), lora_alpha=float(alpha))
    head = {id(v) for v in _head_variables(model)}
    for variable in model.weights:
        variable.trainable = _is_adapter(variable) or id(variable) in head
    # Functions traced before the change would run without the adapters.
    model.train_function = model.test_function = model.predict_function = None
    return model


@export("keras_vit.finetune.lora_variables")
def lora_variables(model: keras.Model) -> dict[str, keras.Variable]:
    """The adapters and the head's variables, by path: what fine-tuning changes."""
    values = {v.path: v for v in model.weights if _is_adapter(v)}
    if not values:
        raise ValueError(f"Model {model.name!r} has no LoRA adapters.")
    values.update({v.path: v for v in _head_variables(model)})
    return values


def _adapters(model) -> dict:
    """Rank, alpha and targets of the model's adapters (they are the same in
    every block: `enable_lora` sets them once)."""
    block = ViTLayout.of(model).block(0)
    attention, dense = block.attention, block.mlp_dense_1
    targets = list(attention.lora_targets) if attention.lora_enabled else []
    if dense.lora_enabled:
        targets.append("mlp")
    source = attention if attention.lora_enabled else dense
    return {
        "rank": int(source.lora_rank),
        "alpha": float(source.lora_alpha),
        "targets": targets,
    }


def _base_fingerprint(model) -> str:
    """SHA-256 of the frozen base: every variable but the adapters and head."""
    head = {id(v) for v in _head_variables(model)}
    digest = hashlib.sha256()
    for variable in sorted(model.weights, key=lambda v: v.path):
        if _is_adapter(variable) or id(variable) in head:
            continue
        value = np.ascontiguousarray(variable.numpy())
        digest.update(f"{variable.path} {value.dtype} {value.shape}".encode())
        digest.update(value.tobytes())
    return digest.hexdigest()


def base_model_record(model: keras.Model) -> dict:
    """What an adapter file records about the model its adapters were made for.

    The architecture read off the model's weights (width, depth, heads, MLP
    width, patch size, hybrid backbone: `keras_vit.weights.Architecture`),
    its patch grid, prefix tokens and input channels, the adapters' rank,
    alpha and targets, and a SHA-256 of the frozen base weights.

    Example:

    >>> model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    >>> enable_lora(model, rank=2)
    >>> base_model_record(model)["architecture"]["patch_size"]
    [4, 4]
    """
    layout = ViTLayout.of(model)
    keys, _ = checkpoint_layout(model)
    arch = architecture.describe({k: t.shape for k, t in keys.items()})
    return {
        "format": _RECORD_FORMAT,
        "architecture": {
            "name": arch.name,
            "hidden_dim": arch.hidden_dim,
            "depth": arch.depth,
            "num_heads": arch.num_heads,
            "mlp_dim": arch.mlp_dim,
            "patch_size": None if arch.patch_size is None else list(arch.patch_size),
            "backbone": None
            if arch.backbone is None
            else [list(arch.backbone[0]), arch.backbone[1]],
        },
        "grid_size": list(layout.grid_size),
        "num_prefix_tokens": layout.num_prefix_tokens,
        "channels": layout.channels,
        "lora": _adapters(model),
        "base_sha256": _base_fingerprint(model),
    }


def _record_differences(saved: dict, current: dict) -> list[str]:
    """`"field: file X, model Y"` for each identity field that differs."""
    pairs = [
        (f"{field}", saved["architecture"].get(field), current["architecture"][field])
        for field in current["architecture"]
        if field != "name"
    ]
    pairs += [
        (field, saved.get(field), current[field])
        for field in ("grid_size", "num_prefix_tokens", "channels")
    ]
    pairs += [
        (f"lora {field}", saved.get("lora", {}).get(field), current["lora"][field])
        for field in ("rank", "alpha", "targets")
    ]
    return [
        f"{field}: file {_shown(old)}, model {_shown(new)}"
        for field, old, new in pairs
        if old != new
    ]


def _shown(value) -> str:
    return str(tuple(value)) if isinstance(value, list) else str(value)


@export("keras_vit.finetune.save_lora_weights")
def save_lora_weights(model: keras.Model, path: str) -> None:
    """Writes the adapters and the head alone to an `.npz` file.

    The file also records the base model (`base_model_record`: the
    architecture, patch grid, adapter rank, alpha and targets, and a
    fingerprint of the frozen weights), which `load_lora_weights` checks.
    It is complete or absent: written to a temporary file in the same
    directory, flushed, synced and renamed over `path`.
    """
    if not str(path).endswith(".npz"):
        raise ValueError(f"The adapter file must end in '.npz'. Received: {path}")
    arrays = {
        k: keras.ops.convert_to_numpy(v) for k, v in lora_variables(model).items()
    }
    arrays[RECORD_KEY] = np.array(json.dumps(base_model_record(model)))

    def write(partial):
        with open(partial, "wb") as file:
            np.savez(file, **arrays)

    atomic.atomic_write(path, write)


@export("keras_vit.finetune.load_lora_weights")
def load_lora_weights(model: keras.Model, path: str) -> None:
    """Loads a `save_lora_weights` file into a model with the same adapters.

    Everything is checked before anything is assigned: a file whose keys,
    shapes or values (NaN, inf) differ from the model's adapters and head,
    or that was saved from another base model (another architecture, patch
    size, patch grid, or adapter rank, alpha or targets: the file's record
    says which), raises a `ValueError` naming the difference and leaves the
    model unchanged. Adapters made on other base weights of the same
    architecture (another checkpoint) load with a warning. A file without a
    record (written by an older keras_vit) loads with a warning that it
    could not be checked.
    """
    variables = lora_variables(model)
    try:
        with np.load(path, allow_pickle=False) as file:
            arrays = {key: file[key] for key in file.files}
        record = arrays.pop(RECORD_KEY, None)
        if record is not None:
            record = json.loads(str(record))
            if not isinstance(record, dict) or "architecture" not in record:
                raise ValueError("its base-model record is malformed")
    except FileNotFoundError:
        raise
    except Exception as error:
        raise ValueError(f"{path}: not a readable adapter file ({error}).") from None
    missing = sorted(set(variables) - set(arrays))
    unexpected = sorted(set(arrays) - set(variables))
    if missing or unexpected:
        raise ValueError(
            f"{path} does not fit model {model.name!r}: missing {missing[:3]}, "
            f"unexpected {unexpected[:3]} ({len(missing)} / {len(unexpected)})."
        )
    for key, variable in variables.items():
        if tuple(arrays[key].shape) != tuple(variable.shape):
            raise ValueError(
                f"{path}: {key!r} has shape {arrays[key].shape}; the model's "
                f"is {tuple(variable.shape)}."
            )
        if not np.all(np.isfinite(arrays[key])):
            raise ValueError(f"{path}: {key!r} has non-finite values.")
    if record is None:
        warnings.warn(
            f"{path} does not record the base model its adapters were made for "
            "(it was written by an older keras_vit), so that cannot be checked; "
            "save it again with save_lora_weights to record it.",
            stacklevel=2,
        )
    else:
        current = base_model_record(model)
        differ = _record_differences(record, current)
        if differ:
            raise ValueError(
                f"{path} was saved from another base model "
                f"({record['architecture'].get('name')}; this one is "
                f"{current['architecture']['name']}): {'; '.join(differ)}. "
                "No weight was changed."
            )
        if record.get("base_sha256") != current["base_sha256"]:
            warnings.warn(
                f"The base weights of model {model.name!r} differ from those the "
                f"adapters in {path} were made on (same architecture, another "
                "checkpoint or changed weights); they are loaded, but may not "
                "apply.",
                stacklevel=2,
            )
    for key, variable in variables.items():
        variable.assign(arrays[key])


def _strip_lora(config):
    if isinstance(config, dict):
        return {k: _strip_lora(v) for k, v in config.items() if k not in _LORA_KEYS}
    if isinstance(config, list):
        return [_strip_lora(v) for v in config]
    return config


@export("keras_vit.finetune.merge_lora")
def merge_lora(model: keras.Model) -> keras.Model:
    """A plain copy of `model` with every adapter added into its kernel.

    The copy has no adapter variables and all variables trainable; its
    outputs equal the adapted model's (to float32 rounding), and it exports
    with `keras_vit.export.export` like any other model.
    """
    merged = {}
    for layer in keras_internals.flatten_layers(model):
        if isinstance(layer, MultiHeadSelfAttention) and layer.lora_enabled:
            qkv, out = layer.merged_kernels()
            merged[layer.qkv_kernel.path] = qkv
            merged[layer.out_kernel.path] = out
        elif isinstance(layer, keras.layers.Dense) and layer.lora_enabled:
            merged[keras_internals.dense_kernel_variable(layer).path] = layer.kernel
    if not merged:
        raise ValueError(f"Model {model.name!r} has no LoRA adapters to merge.")
    plain = model.__class__.from_config(_strip_lora(model.get_config()))
    values = {v.path: v for v in model.weights if not _is_adapter(v)}
    for variable in plain.weights:
        if variable.path not in values:
            raise ValueError(
                f"The merged copy has no counterpart for {variable.path!r}."
            )
        value = merged.get(variable.path, values[variable.path])
        variable.assign(keras.ops.cast(value, variable.dtype))
    return plain
