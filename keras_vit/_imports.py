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


def removed(module: str, name: str, instead: str) -> AttributeError:
    """The error for a public name that is gone, naming what replaces it.

    Example:

    ```python
    raise removed(__name__, "RENAMES", "keras_vit.weights.dialects.ours.RULES")
    ```
    """
    return AttributeError(
        f"module {module!r} has no attribute {name!r}: it was removed; use {instead}."
    )


def lazy_exports(
    package: str, exports: dict[str, str], gone: dict[str, str] | None = None
):
    """`(__getattr__, __dir__)` for a package whose names load on first use.

    Args:
        package: The package's `__name__`.
        exports: `{public name: module}`; a module whose last component
            is the name (`"keras_vit.analysis"` for `analysis`) is exported
            itself. A name that `MOVED` lists under the package is imported
            from its old path, with the deprecation warning.
        gone: `{removed name: what to use instead}`, for the error (`removed`).

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
            if gone and name in gone:
                raise removed(package, name, gone[name])
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
    """Finds the old names of `MOVED`; loads them as the new module.

    Importlib sets the module's `__spec__` to the old name's spec after
    `create_module`; `exec_module` puts the new module's own spec back, so
    that `importlib.reload(new module)` still finds it.
    """

    def __init__(self):
        self._specs = {}  # new module name -> its own spec, while loading

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
        module = importlib.import_module(new)
        self._specs[new] = module.__spec__
        return module

    def exec_module(self, module):
        """Nothing to run: the new module is imported; its spec goes back."""
        module.__spec__ = self._specs.pop(module.__name__)


class _AfterKeras(importlib.abc.MetaPathFinder):
    """Runs `register_serializables` once Keras has finished importing.

    Not while a keras_vit module is half-imported: the registered modules
    import `keras_vit.layers` and the models, so when a keras_vit module
    imports Keras (`import keras_vit.layers` before `import keras`), the
    registration waits until the outermost keras_vit import is done. Keras's
    and keras_vit's loaders are wrapped (`_ThenRegister`) to count them.
    """

    def __init__(self):
        self._local = threading.local()
        self._depth = 0  # modules of keras or keras_vit being executed
        self._keras_loaded = False

    def find_spec(self, name, path=None, target=None):
        ours = name == "keras" or (name.startswith("keras_vit.") and name not in MOVED)
        if not ours or name in sys.modules or getattr(self._local, "busy", False):
            return None
        self._local.busy = True
        try:  # The real spec, from the finders after this one.
            spec = importlib.util.find_spec(name)
        finally:
            self._local.busy = False
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _ThenRegister(spec.loader, self)
        return spec

    def run(self, name: str, exec_module) -> None:
        """Executes one module, then registers when the time has come."""
        self._depth += 1
        try:
            exec_module()
        finally:
            self._depth -= 1
        self._keras_loaded = self._keras_loaded or name == "keras"
        if self._keras_loaded and self._depth == 0 and self in sys.meta_path:
            sys.meta_path.remove(self)
            register_serializables()


class _ThenRegister(importlib.abc.Loader):
    """A module's own loader, counted by `_AfterKeras`."""

    def __init__(self, loader, finder):
        self._loader, self._finder = loader, finder

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._finder.run(module.__name__, lambda: self._loader.exec_module(module))

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
