"""`keras-vit <command> [arguments]`: every recipe from one console script.

Example:

```bash
keras-vit train --config digits
keras-vit compare --config compare_quick
keras-vit export --model runs/digits/final.keras --name digits --version 1
keras-vit predict --model vit_base_patch16_224.augreg2_in21k_ft_in1k cat.jpg
keras-vit validate --model runs/digits/final.keras --data folder:images/
python -m keras_vit.recipes train --help
```
"""

from __future__ import annotations

import importlib
import sys

from keras_vit import plugins
from keras_vit.recipes import cli
from keras_vit.recipes.commands import COMMANDS


def commands() -> dict[str, tuple[str, str]]:
    """`{name: (module, summary)}`: the built-in and registered commands,
    then those of installed plug-ins (`keras_vit.plugins.commands`, read
    without importing the plug-ins); a built-in name wins."""
    table = dict(COMMANDS)
    for name, command in plugins.commands().items():
        table.setdefault(name, (command.module, command.summary))
    return table


def usage() -> str:
    """The `keras-vit --help` text: every registered command."""
    table = commands()
    width = max(map(len, table)) + 2
    lines = [f"  {name:<{width}} {summary}" for name, (_, summary) in table.items()]
    return (
        "usage: keras-vit <command> [arguments]\n\n"
        "commands (keras-vit <command> --help for each):\n" + "\n".join(lines) + "\n"
    )


def main(argv: list[str] | None = None, *, invoked_as: str = "keras-vit {command}"):
    """Runs `keras-vit <command> ...`; returns the command's result.

    Args:
        argv: The command and its arguments; defaults to `sys.argv[1:]`.
        invoked_as: How usage lines name the command (the checkout's
            forwarders pass `"python -m recipes.{command}"`).
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(usage(), end="")  # noqa: T201
        raise SystemExit(0 if argv else cli.EXIT_USAGE)
    command = argv[0].replace("-", "_")
    table = commands()
    if command not in table:
        cli.fail(
            f"unknown command {argv[0]!r}; choose from {', '.join(table)} "
            f"(see keras-vit --help){plugins.failure_note()}"
        )
    cli.invoked_as(invoked_as)
    module = importlib.import_module(table[command][0])
    return module.main(argv[1:])


def exit_status(result) -> int:
    """The exit status of a command whose `main` returned `result`.

    A command's `main` returns its exit status as an `int` (e.g. `convert`:
    1 for a checkpoint that does not fit), or, when it succeeded, its result
    (a dict, a path) or `None`: status 0. Most failures exit earlier, through
    `keras_vit.recipes.cli.fail`, with their own status.

    Example:

    ```python
    sys.exit(exit_status(main(["convert", "in.npz", "out.keras"])))
    ```
    """
    if isinstance(result, int) and not isinstance(result, bool):
        return result
    return 0


def console() -> int:
    """The `keras-vit` console script: runs `main`; returns the command's
    exit status (see `exit_status`)."""
    return exit_status(main())


if __name__ == "__main__":
    sys.exit(console())
