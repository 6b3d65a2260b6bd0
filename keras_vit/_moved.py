"""Modules that moved: the old import path still works, with a warning.

`MOVED` maps each old module name to its new one. `install()` (called by
`import keras_vit`) adds an import hook that answers an import of an old
name with the new module itself (the same object, so classes and registered
layers stay one) and a `DeprecationWarning` naming the new path. Both
`import keras_vit.masked_patch` and `from keras_vit import masked_patch`
go through it.

Example:

```python
from keras_vit import masked_patch  # DeprecationWarning: use keras_vit.models...
```
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# old module -> new module. The old names go in a later release.
MOVED = {
    "keras_vit.training.atomic": "keras_vit.atomic",
    "keras_vit.export.files": "keras_vit.atomic",
}


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old names of `MOVED`; loads them as the new module."""

    def find_spec(self, name, path=None, target=None):
        if name not in MOVED:
            return None
        return importlib.util.spec_from_loader(name, self)

    def create_module(self, spec):
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}; import it from there (the old name "
            "will be removed in a later release).",
            DeprecationWarning,
            stacklevel=2,  # Past create_module; warnings skips importlib's frames.
        )
        return importlib.import_module(new)

    def exec_module(self, module):
        """Nothing to run: the new module is already imported."""


def install() -> None:
    """Adds the hook once (idempotent)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
