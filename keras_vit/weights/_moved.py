"""The names of the old `weights.npz` and `weights.safetensors` that moved.

The two old modules held file formats, key dialects and the key vocabulary
at once; their paths now answer with the format modules
(`keras_vit._imports.MOVED`). Their other names are found, with a
`DeprecationWarning` naming the new home, through `forward`; the old names
go in a later release. The names that have no drop-in replacement
(`REMOVED`) raise an `AttributeError` naming what to use instead.
"""

from __future__ import annotations

import importlib
import warnings

from keras_vit import _imports

# old module -> {old name: "new.module:new_name"}
OLD_NAMES = {
    "keras_vit.weights.formats.npz": {
        "Target": "keras_vit.weights.dialects.ours:Target",
        "checkpoint_layout": "keras_vit.weights.dialects.ours:checkpoint_layout",
        "to_checkpoint": "keras_vit.weights.dialects.ours:to_checkpoint",
        "POSEMB_KEY": "keras_vit.weights.keys:POSEMB_KEY",
        "EMBEDDING_KEY": "keras_vit.weights.keys:EMBEDDING_KEY",
        "HEAD_KEYS": "keras_vit.weights.keys:HEAD_KEYS",
        "DIST_HEAD_KEYS": "keras_vit.weights.keys:DIST_HEAD_KEYS",
        "PRE_LOGITS_KEYS": "keras_vit.weights.keys:PRE_LOGITS_KEYS",
    },
    "keras_vit.weights.formats.safetensors": {
        "to_original_layout": "keras_vit.weights.checkpoint:to_original_layout",
        "fold_class_position": (
            "keras_vit.weights.dialects.convert:fold_class_position"
        ),
    },
}


# old module -> {removed name: what to use instead}
_OURS = "keras_vit.weights.dialects.ours"
REMOVED = {
    "keras_vit.weights.formats.npz": {
        "RENAMES": (
            f"{_OURS}.RULES (Rule objects, not (key, path, part) triples), or "
            f"{_OURS}.checkpoint_layout(model) for each key's variable path and part"
        ),
        "variable_path": (
            f"{_OURS}.checkpoint_layout(model), whose Target.path is each "
            "key's variable path"
        ),
    },
    "keras_vit.weights.formats.safetensors": {
        "detect_layout": (
            "keras_vit.weights.checkpoint.dialect_of(keys), a Dialect (its .name) "
            "or None"
        ),
        "is_big_vision": "keras_vit.weights.dialects.big_vision.recognizes(keys)",
    },
}


def forward(module: str):
    """A module `__getattr__` that answers `OLD_NAMES[module]` with a warning.

    Example:

    ```python
    __getattr__ = forward(__name__)
    ```
    """
    names, gone = OLD_NAMES[module], REMOVED[module]

    def __getattr__(name):
        if name in gone:
            raise _imports.removed(module, name, gone[name])
        if name not in names:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        new_module, new_name = names[name].split(":")
        warnings.warn(
            f"{name} moved to {new_module}.{new_name}; import it from there (the "
            "old name will be removed in a later release).",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(new_module), new_name)

    return __getattr__
