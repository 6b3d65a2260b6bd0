r"""Walks one config through a training run: which files it enters, how often.

Runs a recipe's command line in this process (`recipes.train` unless
`--recipe` says another) with a profiler (`sys.setprofile`) that records
every call of a keras_vit function that receives the run's config (an
argument that is a `RunConfig`, the config's own methods included), from
the command line's parsing to the run's end. Two counts per file:

- *entries*: the config enters a file when one of its functions is called
  while none of the file's functions (of those given the config) is
  running; consecutive entries into one file are one. A recipe's step
  that the run engine calls while the recipe's `run` is still running is
  not an entry: the config never left the file.
- *stays* (the stricter count): consecutive calls in one file are one stay;
  every call into a file after a call in another is a new one.

```bash
python scripts/walk_config.py                       # digits, 1 epoch of 2 steps
python scripts/walk_config.py --sequence            # and the path, stay by stay
python scripts/walk_config.py --recipe pretrain_masked -- --config masked_digits
python scripts/walk_config.py -- --set variant=test/4
```

Arguments after `--` go to the recipe's command line, after the defaults
(`--set epochs=1 --set steps_per_epoch=2 --set verbose=0`, a temporary
`workdir`). Run it with `PYTHONPATH=<another checkout>` to walk that one.
"""

from __future__ import annotations

import argparse
import collections
import importlib
import os
import sys
import tempfile

# Code flags of a function taking `*args` and `**kwargs` (`inspect.CO_*`).
_VARARGS, _VARKEYWORDS = 0x04, 0x08


def _given_config(frame, config_type) -> bool:
    """Whether the called function received a `config_type` as an argument
    (or in a tuple, list or dict argument)."""
    code = frame.f_code
    count = code.co_argcount + code.co_kwonlyargcount
    count += bool(code.co_flags & _VARARGS) + bool(code.co_flags & _VARKEYWORDS)
    for name in code.co_varnames[:count]:
        value = frame.f_locals.get(name)
        values = value.values() if isinstance(value, dict) else value
        if isinstance(value, config_type) or (
            isinstance(value, (tuple, list, dict))
            and any(isinstance(v, config_type) for v in values)
        ):
            return True
    return False


def walk(recipe: str, argv: list[str]) -> list[tuple[str, str, bool]]:
    """`[(file, function, entered)]`: the calls given the config, in order.

    `entered` is whether the call entered its file: no function of that file
    given the config was running.

    Args:
        recipe: The module under `keras_vit.recipes` whose `main` runs.
        argv: Its command line.
    """
    from keras_vit.recipes.configs.base import RunConfig

    package = os.path.dirname(importlib.import_module("keras_vit").__file__)
    root = os.path.dirname(package)
    module = importlib.import_module(f"keras_vit.recipes.{recipe}")
    calls, running = [], []  # running: [(frame, file)] of the calls recorded

    def profile(frame, event, arg):
        if event == "return":
            if running and running[-1][0] is frame:
                running.pop()
            return
        if event != "call" or not frame.f_code.co_filename.startswith(package):
            return
        if not _given_config(frame, RunConfig):
            return
        path = os.path.relpath(frame.f_code.co_filename, root)
        entered = all(file != path for _, file in running)
        calls.append((path, frame.f_code.co_name, entered))
        running.append((frame, path))

    sys.setprofile(profile)
    try:
        module.main(argv)
    finally:
        sys.setprofile(None)
    return calls


def stays(calls, entries_only: bool = False) -> list[tuple[str, list[str]]]:
    """`[(file, [functions])]`: consecutive calls in one file, grouped.

    With `entries_only`, the calls that entered their file, grouped.

    Example:

    ```python
    stays([("a.py", "f", True), ("a.py", "g", False), ("b.py", "h", True)])
    # [("a.py", ["f", "g"]), ("b.py", ["h"])]
    ```
    """
    grouped = []
    for path, function, entered in calls:
        if entries_only and not entered:
            continue
        if grouped and grouped[-1][0] == path:
            grouped[-1][1].append(function)
        else:
            grouped.append((path, [function]))
    return grouped


def table(calls) -> str:
    """Per file, its entries and stays (most entries first), then totals."""
    entries = collections.Counter(p for p, _ in stays(calls, entries_only=True))
    counts = collections.Counter(p for p, _ in stays(calls))
    width = max((len(p) for p in counts), default=4)
    lines = [f"{'file':<{width}}  entries  stays"]
    for path, _ in sorted(counts.items(), key=lambda i: (-entries[i[0]], -i[1])):
        lines.append(f"{path:<{width}}  {entries[path]:>7}  {counts[path]:>5}")
    lines.append(
        f"{sum(entries.values())} entries and {sum(counts.values())} stays "
        f"over {len(counts)} files"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    split = argv.index("--") if "--" in argv else len(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", default="train")
    parser.add_argument(
        "--sequence", action="store_true", help="print the path, stay by stay"
    )
    args = parser.parse_args(argv[:split])
    with tempfile.TemporaryDirectory() as folder:
        command = [
            "--set", "epochs=1", "--set", "steps_per_epoch=2", "--set", "verbose=0",
            "--set", f"workdir={os.path.join(folder, 'run')!r}", *argv[split + 1 :],
        ]  # fmt: skip
        calls = walk(args.recipe, command)
    if args.sequence:
        for path, functions in stays(calls):
            shown = functions if len(functions) < 8 else [*functions[:3], "..."]
            print(f"{path}: {', '.join(shown)}")  # noqa: T201
    print(table(calls))  # noqa: T201


if __name__ == "__main__":
    main()
