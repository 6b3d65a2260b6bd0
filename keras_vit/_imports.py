"""What `import keras_vit` does: lazy names, registration, moved modules.

`import keras_vit` loads no framework by itself: configs and command lines
that only need `keras_vit.models.options` stay fast. Three mechanisms, each
small, live here:

- **Lazy names** (`lazy_exports`): a package lists its public names and the
  module defining each; a name is imported on first access (PEP 562).
- **Registration** (`register_serializables`): the classes a `.keras` file
  names (`"keras_vit>TransformerBlock"`, the masked-patch model, ...) must be
  registered before Keras reads the file. They are imported as soon as Keras
  is: at `import keras_vit` when Keras is already loaded, otherwise right
  after Keras finishes loading. So `import keras_vit` then
  `keras.saving.load_model(path)` works in either import order.
- **Moved modules** (`MOVED`): an import of an old module path is answered
  with the new module itself (the same object) and a `DeprecationWarning`.

Example:

```python
import keras_vit  # fast: no framework yet
model = keras_vit.ViT("test/4", image_size=16)  # imports keras_vit.models
```
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import threading
import warnings

# old module -> new module. The old names go in a later release.
MOVED = {
    "keras_vit.training.atomic": "keras_vit.atomic",
    "keras_vit.export.files": "keras_vit.atomic",
    "keras_vit.masked_patch": "keras_vit.models.masked_patch",
    "keras_vit.fewshot": "keras_vit.analysis.fewshot",
    "keras_vit.hardware": "keras_vit.training.hardware",
    "keras_vit.models.cnn_layout": "keras_vit.models.cnn.layout",
    "keras_vit.models.cnn_variants": "keras_vit.models.cnn.variants",
    "keras_vit.models.alternet": "keras_vit.models.cnn.alternet",
    "keras_vit.models.preact_resnet": "keras_vit.models.cnn.preact_resnet",
    "keras_vit.weights.npz": "keras_vit.weights.formats.npz",
    "keras_vit.weights.safetensors": "keras_vit.weights.formats.safetensors",
}

# The modules whose classes a saved `.keras` file can name (the layers, the
# model classes, and the optimizer and schedule of a training checkpoint).
# None of them imports TensorFlow.
SERIALIZABLES = (
    "keras_vit.layers",
    "keras_vit.models.functional",
    "keras_vit.models.masked_patch",
    "keras_vit.training.optimizers",
    "keras_vit.training.schedules",
)


def lazy_exports(package: str, exports: dict[str, str]):
    """`(__getattr__, __dir__)` for a package whose names load on first use.

    Args:
        package: The package's `__name__`.
        exports: `{public name: module}`; a module whose last component
            is the name (`"keras_vit.analysis"` for `analysis`) is exported
            itself. A name that `MOVED` lists under the package is imported
            from its old path, with the deprecation warning.

    Example:

    ```python
    __getattr__, __dir__ = lazy_exports(__name__, {"ViT": "keras_vit.models.vit"})
    ```
    """

    def __getattr__(name):
        module_name = exports.get(name)
        if module_name is None:
            if f"{package}.{name}" in MOVED:
                return importlib.import_module(f"{package}.{name}")
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(module_name)
        is_module = module_name.rsplit(".", 1)[-1] == name
        value = module if is_module else getattr(module, name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__


def register_serializables() -> None:
    """Imports the modules that register keras_vit's serializable classes."""
    for name in SERIALIZABLES:
        importlib.import_module(name)


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


class _AfterKeras(importlib.abc.MetaPathFinder):
    """Runs `register_serializables` once Keras has finished importing."""

    def __init__(self):
        self._local = threading.local()

    def find_spec(self, name, path=None, target=None):
        if name != "keras" or getattr(self._local, "busy", False):
            return None
        self._local.busy = True
        try:  # The real spec, from the finders after this one.
            spec = importlib.util.find_spec("keras")
        finally:
            self._local.busy = False
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ThenRegister(spec.loader, self)
        return spec


class _ThenRegister(importlib.abc.Loader):
    """Keras's own loader, then keras_vit's registration (one time)."""

    def __init__(self, loader, finder):
        self._loader, self._finder = loader, finder

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        if self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        register_serializables()

    def __getattr__(self, name):  # get_code, get_source, is_package, ...
        return getattr(self._loader, name)


def install() -> None:
    """Called by `import keras_vit` (idempotent)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
    if "keras" in sys.modules:
        register_serializables()
    elif not any(isinstance(f, _AfterKeras) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterKeras())
