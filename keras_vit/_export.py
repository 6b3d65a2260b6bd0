"""Public names, written once: where they are defined.

`@export("keras_vit.ViT", "keras_vit.models.ViT")` above a class or a
function says in which packages it is public; a constant, which carries no
name of its own, says it with a call after its assignment:
`export("keras_vit.VARIANTS").constant(__name__, "VARIANTS")`. A name is
public under its own name only, and only in a package that holds the module
defining it (or a module of its own that imports it).

The marks only record: `scripts/generate_api.py` imports every module,
reads them (`exports()`) with the model zoo's constructors (each family's
`Family.exported`), and writes each package's `__init__.pyi`. A package's
`__init__.py` serves the names of its stub on first use
(`lazy_loader.attach_stub`); type checkers read the same stub. The idea is
keras-hub's `keras_hub_export` and its generated API packages; here the
generated part is a stub, and the packages import lazily from it.

This module imports nothing: every module of keras_vit may use it.

Example:

```python
from keras_vit._export import export


@export("keras_vit.models.mine")
def mine():
    ...


SIZES = {"S": 384}
export("keras_vit.models.SIZES").constant(__name__, "SIZES")
```
"""

from __future__ import annotations

# Every public path -> (the module that defines it, its name there).
_EXPORTS: dict[str, tuple[str, str]] = {}
_ROOT = "keras_vit"


class _Export:
    """The mark of one name: its public paths (see the module)."""

    def __init__(self, paths: tuple[str, ...]):
        self.paths = paths

    def __call__(self, symbol):
        """Marks a class or function; returns it unchanged."""
        self.constant(symbol.__module__, symbol.__name__)
        return symbol

    def constant(self, module: str, name: str) -> None:
        """Marks `name`, defined in the module called `module`."""
        for path in self.paths:
            package, _, public = path.rpartition(".")
            if public != name:
                raise ValueError(f"{path}: {module}.{name} is public as {name!r}.")
            taken = _EXPORTS.setdefault(path, (module, name))
            if taken != (module, name):
                raise ValueError(
                    f"{path} is exported twice: by {taken[0]} and by {module}."
                )


def export(*paths: str) -> _Export:
    """Marks a public name: `@export(path, ...)`, or `.constant(module, name)`.

    Args:
        *paths: Its public paths, e.g. `"keras_vit.ViT"`; each ends with the
            name it marks and lies in `keras_vit`.

    Raises:
        ValueError: a path outside keras_vit, or (when the mark is applied)
            a path that renames the name or that another name holds.

    Example:

    ```python
    @export("keras_vit.predict")
    def predict(model, images): ...
    ```
    """
    for path in paths:
        if not path.startswith(_ROOT + ".") or "" in path.split("."):
            raise ValueError(f"{path!r} is not a public path in {_ROOT}.")
    return _Export(tuple(paths))


def exports() -> dict[str, tuple[str, str]]:
    """`{public path: (defining module, name)}` of the modules imported so far.

    Example:

    ```python
    exports()["keras_vit.ViT"]  # ('keras_vit.models.vit', 'ViT')
    ```
    """
    return dict(_EXPORTS)


class MovedError(ImportError):
    """A public name that moved: the message names its new place.

    An `ImportError`, not an `AttributeError`: Python replaces an
    `AttributeError` raised during `from package import name` with its own
    "cannot import name" message, which would not say where the name went.
    """


def moved(getattr_, package: str, names: dict[str, str]):
    """A package's `__getattr__` that answers a name that moved with a
    `MovedError` naming its new place, and any other name as `getattr_` does.

    Args:
        getattr_: The package's `__getattr__` (e.g. `lazy_loader`'s).
        package: The package's name (`__name__`).
        names: `{old name: its new public path}`.

    Example:

    ```python
    __getattr__ = moved(__getattr__, __name__, {"families": "keras_vit.models.zoo"})
    ```
    """

    def __getattr__(name: str):
        if name in names:
            raise MovedError(f"{package}.{name} moved: use {names[name]} instead.")
        return getattr_(name)

    return __getattr__
