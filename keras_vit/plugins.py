"""Plug-ins: installed packages that add to keras_vit's tables by name.

A plug-in adds model architectures, datasets, checkpoint formats, shipped
configs and `keras-vit` commands without the core importing it. It says
what it adds in its distribution's metadata, as Python entry points (the
standard mechanism, `importlib.metadata`), in two groups:

- `keras_vit.plugins`: a module whose import registers the plug-in's
  architectures (`keras_vit.models.architectures.register`), datasets
  (`keras_vit.data.datasets.register_source`), checkpoint formats
  (`keras_vit.weights.formats.register_format`), config packages
  (`keras_vit.recipes.configs.base.register_config_package`) and Keras
  classes. `load_plugins()` imports each once. The core calls it where a
  name it does not know may be a plug-in's: an unknown architecture, a
  dataset name that is not built in, a checkpoint file no built-in format
  claims, an unknown `--config` name, a saved `.keras` file or a model no
  built-in architecture describes.
- `keras_vit.plugins.commands`: one entry point per `keras-vit` command, each a
  `Command` (the module whose `main(argv)` runs it, and a one-line
  summary) held by a light module, so that `keras-vit --help` lists the
  commands without importing the plug-ins or TensorFlow (`commands()`).

The Park & Kim wing (`keras_vit.parkkim`) is such a plug-in; its
`pyproject.toml` table:

```toml
[project.entry-points."keras_vit.plugins"]
parkkim = "keras_vit.parkkim.plugin"

[project.entry-points."keras_vit.plugins.commands"]
compare = "keras_vit.parkkim.commands:COMPARE"
```

A plug-in that fails to import is logged once and left out; the core keeps
working, and the messages of a lookup that fails name it
(`failure_note()`).

This module imports the standard library only: the command table is read
before anything heavy is imported.

Example:

```python
from keras_vit import plugins

plugins.load_plugins()  # e.g. ('parkkim',): the installed plug-ins, loaded
sorted(plugins.commands())  # e.g. ['compare']
```
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
import threading
from importlib import metadata

PLUGIN_GROUP = "keras_vit.plugins"
# The console script's names (pyproject.toml `[project.scripts]`).
_COMMAND_NAMES = ("keras-vit", "keras-vit.exe")
COMMAND_GROUP = "keras_vit.plugins.commands"

logger = logging.getLogger(__name__)

# The state of each entry point, by `(group, name)`: loaded (its value) or
# failed (a one-line reason). Guarded by `_LOCK`, re-entrant because a
# plug-in's import may itself look a name up.
_LOADED: dict[tuple[str, str], object] = {}
_FAILED: dict[tuple[str, str], str] = {}
_FOUND: dict[str, list[metadata.EntryPoint]] = {}  # by group
_LOCK = threading.RLock()


@dataclasses.dataclass(frozen=True)
class Command:
    """A `keras-vit` command a plug-in adds (entry point group
    `keras_vit.plugins.commands`).

    Attributes:
        module: The module whose `main(argv)` runs the command; imported
            only when the command runs.
        summary: The one line `keras-vit --help` shows.

    Example:

    ```python
    COMPARE = Command("keras_vit.parkkim.compare", "Park & Kim's comparison")
    ```
    """

    module: str
    summary: str


def _entry_points(group: str) -> list[metadata.EntryPoint]:
    """The group's entry points, each `(name, value)` once (a distribution
    found twice on the path lists its entry points twice), by name; read
    from the installed distributions once per process."""
    if group not in _FOUND:
        found = metadata.entry_points(group=group)
        unique = {(ep.name, ep.value): ep for ep in found}
        _FOUND[group] = sorted(unique.values(), key=lambda ep: ep.name)
    return _FOUND[group]


def _load(group: str) -> dict[str, object]:
    """Loads each entry point of `group` not tried before; returns the
    loaded ones, `{name: value}`."""
    with _LOCK:
        for entry_point in _entry_points(group):
            key = (group, entry_point.name)
            if key in _LOADED or key in _FAILED:
                continue
            _FAILED[key] = "still loading"  # Re-entrant lookups skip it.
            try:
                value = entry_point.load()
            except Exception as error:  # A broken plug-in must not stop the core.
                reason = " ".join(f"{type(error).__name__}: {error}".split())
                _FAILED[key] = reason
                logger.warning(
                    "keras_vit plug-in %r (%s) failed to load and is left out: %s",
                    entry_point.name,
                    entry_point.value,
                    reason,
                )
                continue
            del _FAILED[key]
            _LOADED[key] = value
        return {name: value for (g, name), value in _LOADED.items() if g == group}


def load_plugins() -> tuple[str, ...]:
    """Imports every installed plug-in (entry point group
    `keras_vit.plugins`) not imported before; a plug-in that fails to import
    is logged once and skipped.

    Returns:
        The names of the plug-ins loaded, e.g. `("parkkim",)`.
    """
    return tuple(sorted(_load(PLUGIN_GROUP)))


def commands() -> dict[str, Command]:
    """The `keras-vit` commands installed plug-ins add (entry point group
    `keras_vit.plugins.commands`), by name; imports only the light modules that
    hold each `Command`. An entry point that is not a `Command` is logged
    and left out."""
    found = {}
    for name, value in _load(COMMAND_GROUP).items():
        if isinstance(value, Command):
            found[name] = value
        elif (COMMAND_GROUP, name) not in _FAILED:
            _FAILED[(COMMAND_GROUP, name)] = f"not a Command: {value!r}"
            logger.warning(
                "keras_vit command %r is not a keras_vit.plugins.Command and is "
                "left out: %r",
                name,
                value,
            )
    return found


def in_command() -> bool:
    """Whether this process is the `keras-vit` console script.

    There `--help` answers without TensorFlow, so packages that would
    register their Keras classes on import (the wing's, `keras_vit.parkkim`)
    wait until a command or a lookup needs them (`load_plugins`).
    """
    argv = getattr(sys, "argv", None) or [""]
    return os.path.basename(argv[0]) in _COMMAND_NAMES


def failed_plugins() -> dict[str, str]:
    """`{plug-in name: why it failed to load}` for the plug-ins and commands
    tried so far."""
    with _LOCK:
        return {
            name: reason
            for (_, name), reason in _FAILED.items()
            if reason != "still loading"
        }


def failure_note() -> str:
    """`""`, or a sentence naming the plug-ins that failed to load, for the
    message of a lookup that found nothing (its name may be theirs)."""
    failed = failed_plugins()
    if not failed:
        return ""
    listed = "; ".join(f"{name}: {reason}" for name, reason in sorted(failed.items()))
    return f" (plug-ins that failed to load: {listed})"
