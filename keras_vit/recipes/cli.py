"""What every command line shares (this module imports no framework itself).

- `ArgumentParser`: argparse, but an error is one line, `error: ...`, exit 2.
- `parse_image_size` / `image_size_arg`: `224`, `224,320` or `224x320`.
- `load_model`: a `.keras` file or a `keras_vit.ViT(variant)`, one behaviour
  (`keras_vit.loading.load_model`).
- `fail`: the one-line error exit.
- `handle_termination` (from `keras_vit.recipes.termination`) /
  `interrupted`: SIGTERM stops a command as Ctrl-C does, and either ends in
  one line (exit 143 / 130), not a traceback.

Commands check their arguments before any work, so that `--help` and every
argument error answer in one line.

Example:

```python
parser = ArgumentParser(prog=prog("x"), description="...")
parser.add_argument("--image-size", type=image_size_arg, default=None)
args = parser.parse_args()
```
"""

from __future__ import annotations

import argparse
import signal
import sys

from keras_vit.recipes.configs.base import parse_image_size
from keras_vit.recipes.termination import Terminated
from keras_vit.recipes.termination import handle_termination

EXIT_USAGE = 2  # A bad argument or config value, as argparse exits.
EXIT_FAILED = 1  # The run itself failed (e.g. diverged, a full disk).
EXIT_FINISHED = 3  # The run had already finished: nothing was done.
EXIT_SIGINT = 128 + signal.SIGINT  # 130: interrupted by Ctrl-C.
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143: stopped by SIGTERM.


# How the commands were started, for their usage lines: `python -m
# recipes.<command>` from a checkout, or the `keras-vit` console script
# (`keras_vit.recipes.__main__` sets it).
_INVOKED_AS = "python -m recipes.{command}"


def prog(command: str) -> str:
    """The name a command's `--help` and errors give it, e.g.
    `"python -m recipes.train"` or `"keras-vit train"`."""
    return _INVOKED_AS.format(command=command)


def invoked_as(pattern: str) -> None:
    """Sets how `prog` names commands (`"keras-vit {command}"`)."""
    global _INVOKED_AS
    _INVOKED_AS = pattern


class ArgumentParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose errors are one line (`error: ...`).

    Once the arguments are read, the command is going to run: the model API
    is imported then (`import keras_vit` does not import it in the
    `keras-vit` command, so that `--help` and a bad argument answer without
    TensorFlow).
    """

    def error(self, message):
        fail(f"{message} (see {self.prog} --help)")

    def parse_args(self, args=None, namespace=None):
        parsed = super().parse_args(args, namespace)
        # Here, not at the top: the model API imports TensorFlow.
        from keras_vit import _model_api  # noqa: F401

        return parsed


class CommandError(SystemExit):
    """Exits with `code`; `str()` is the message (printed once, by `fail`)."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(code)
        self.message = message

    def __str__(self):
        return self.message


def error_text(message: str) -> str:
    """`message` as the commands print an error: `error: ` before its first
    line, its other lines (e.g. the keys a checkpoint lacks) indented by two
    spaces, blank lines dropped.

    Example:

    >>> print(error_text("no fit; missing keys:\\n  cls"))
    error: no fit; missing keys:
        cls
    """
    lines = [line.rstrip() for line in str(message).strip().splitlines()]
    lines = [line for line in lines if line] or [""]
    return "\n".join([f"error: {lines[0]}", *(f"  {line}" for line in lines[1:])])


def report_error(message: str) -> None:
    """Prints `error_text(message)` on stderr (for a command that then
    returns its exit status instead of raising)."""
    print(error_text(message), file=sys.stderr, flush=True)  # noqa: T201


def fail(message: str, code: int = EXIT_USAGE):
    """Prints the error (`error_text`) on stderr and exits with `code`
    (default 2). A message of several lines is printed whole, its first line
    after `error: ` and the others indented; never a traceback.

    Raises:
        CommandError: a `SystemExit` with that code, whose `str()` is the
            message.
    """
    report_error(message)
    raise CommandError(message, code)


def interrupted(error: KeyboardInterrupt):
    """Exits in one line after Ctrl-C (status 130) or SIGTERM (143).

    The line says where the run stopped and how to go on, from the
    `stopped_at` and `resume_hint` attributes the run put on `error` (e.g.
    `keras_vit.recipes.rundir.Setup`); without them, that it stopped before starting.

    Raises:
        CommandError: always.
    """
    terminated = isinstance(error, Terminated)
    how = "SIGTERM" if terminated else "Ctrl-C"
    where = getattr(error, "stopped_at", "before the run started")
    hint = getattr(error, "resume_hint", "nothing was changed: rerun the same command")
    fail(
        f"interrupted ({how}) {where}; {hint}",
        EXIT_SIGTERM if terminated else EXIT_SIGINT,
    )


def image_size_arg(text: str) -> tuple[int, int]:
    """`parse_image_size` as an argparse `type=`."""
    try:
        return parse_image_size(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_pretrained_model_argument(parser: argparse.ArgumentParser) -> None:
    """`--model`: a `.keras` file or a name `keras_vit.from_pretrained` loads."""
    parser.add_argument(
        "--model",
        required=True,
        help="a .keras file, or a name keras_vit.from_pretrained loads (e.g. "
        "vit_base_patch16_224.augreg2_in21k_ft_in1k, a tag, hf://org/repo)",
    )
    parser.add_argument(
        "--force-download",
        action="store_true",
        help="download the --model checkpoint's files again even when cached "
        "(a cached file cut short or corrupt)",
    )


def positive_int_arg(text: str) -> int:
    """A count of at least 1, as an argparse `type=`."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"not a positive integer: {text!r}")
    return value


def num_classes_arg(text: str) -> int:
    """Class count for a built model: 0 means headless (`include_top=False`)."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"not a class count: {text!r} (0 = no head)")
    return value


def add_model_arguments(parser: argparse.ArgumentParser, size_flag: str) -> None:
    """`--model FILE | --variant V`, `--weights`, `--num-classes` and a size.

    Args:
        parser: The command's parser.
        size_flag: The flag of the size `--variant` is built at (e.g.
            `"--image-size"`); `224` or `224x320`, default 224.
    """
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--model", help="a saved .keras model")
    source.add_argument("--variant", help='a variant to build, e.g. "B/16" or "test/4"')
    parser.add_argument(
        "--weights",
        help="weights for --variant: a keras_vit.weights tag, a checkpoint name "
        "(hf://org/repo, a timm name) or a checkpoint file (.npz, .safetensors, "
        ".keras, .weights.h5)",
    )
    parser.add_argument(
        "--num-classes",
        type=num_classes_arg,
        default=1000,
        help="classes of --variant's head (default 1000); 0 builds no head "
        "(include_top=False: the pooled features)",
    )
    parser.add_argument(
        size_flag,
        type=image_size_arg,
        default=(224, 224),
        help="the size --variant is built (and its weights trained) at: 224 or "
        "224x320 (default 224)",
    )
    # Where `model_from_args` finds that size.
    parser.set_defaults(model_size_dest=size_flag.lstrip("-").replace("-", "_"))


def model_from_args(args: argparse.Namespace):
    """`load_model` for the flags of `add_model_arguments`.

    The size flag applies to `--variant` only: a `--model` file keeps its own.
    """
    size = getattr(args, args.model_size_dest)
    return load_model(
        args.model,
        variant=args.variant,
        weights=args.weights,
        num_classes=args.num_classes,
        image_size=None if args.model else size,
    )


def load_model(path: str | None = None, **kwargs):
    """`keras_vit.loading.load_model`: a checked `.keras` file or a new ViT
    (imported when called: it imports TensorFlow)."""
    from keras_vit.loading import load_model as load

    return load(path, **kwargs)


# -- the recipes that run a config ---------------------------------------------
def add_run_arguments(
    parser,
    configs: list[str],
    default: str = "digits",
    *,
    kind: type | None = None,
    dataset_hint: str | None = None,
) -> None:
    """The arguments of the recipes that run a config (`train`,
    `pretrain_masked`, `compare`): `--config`, `--set`, `--strategy`,
    `--fresh`, `--allow-changes`.

    Args:
        parser: The command's parser.
        configs: The shipped configs it runs, for the help.
        default: The config run without `--config`. A `--set dataset=...`
            without `--config` is refused (see `parse_config`): the default
            recipe is made for its own dataset.
        kind: The config class; its fields, types, defaults and meanings
            are listed at the end of `--help` (`config_help`).
        dataset_hint: What that refusal suggests instead (e.g. the config
            for an image folder); by default, the shipped configs.
    """
    parser.add_argument(
        "--config",
        default=None,
        help=f"a shipped config ({', '.join(configs)}) or a .py file defining "
        f"get_config(); default: {default}, except with --set dataset=..., "
        "which needs a --config (the default recipe is made for its own data)",
    )
    parser.set_defaults(
        default_config=default,
        dataset_hint=dataset_hint or f"pass --config ({', '.join(configs)})",
    )
    if kind is not None:
        from keras_vit.recipes.config_help import describe_fields

        parser.formatter_class = argparse.RawDescriptionHelpFormatter
        parser.epilog = describe_fields(kind)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a config field, e.g. --set epochs=3 --set "
        "image_size=32x48 --set crop_area_range='(0.5, 1.0)'; repeatable",
    )
    parser.add_argument(
        "--strategy",
        default=None,
        help="force a distribution strategy: auto, default, one_device, "
        "mirrored, multi_worker, tpu (same as --set strategy=...)",
    )
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="start again: move what a previous run left in the run directory "
        "(its backup, results, models, logs) aside, to old-<UTC time>/ in it",
    )
    parser.add_argument(
        "--allow-changes",
        action="store_true",
        help="resume from a backup made with another config (e.g. a lower "
        "learning_rate after a divergence)",
    )


def _fail_on_file_error(error: Exception, config, atomic) -> None:
    """One line (exit 1) for a full disk or another `OSError`; else returns.

    A full disk may come from outside `keras_vit.atomic` (TensorFlow's
    summary writer, the lock file, a folder being moved), in TensorFlow's
    words: it gets the same line as `atomic.DiskFull`.
    """
    hint = getattr(error, "resume_hint", "rerun the same command")
    code = atomic.disk_full_code(error)
    if code is not None:
        if not isinstance(error, atomic.DiskFull):
            path = getattr(error, "filename", None) or config.resolved_workdir()
            error = atomic.DiskFull(path, code)
        fail(
            f"{error}; what was written before is whole: free some space, then {hint}",
            EXIT_FAILED,
        )
    tf_errors = getattr(sys.modules.get("tensorflow"), "errors", None)
    if tf_errors is not None and isinstance(error, tf_errors.OpError):
        from keras_vit import paths  # E.g. a bucket that cannot be reached.

        hinted, error = error, paths.as_os_error(error)
        hint = getattr(hinted, "resume_hint", hint)
    if isinstance(error, OSError):
        path = error.filename or config.resolved_workdir()
        if error.filename2:
            path = f"{path} -> {error.filename2}"
        reason = error.strerror or str(error).strip() or type(error).__name__
        first, _, rest = reason.partition("\n")  # The rest printed below it.
        fail(f"{path}: {first}; {hint}" + (f"\n{rest}" if rest else ""), EXIT_FAILED)


def parse_config(args, kind) -> object:
    """The config the command line names, or a one-line error (exit 2): a
    value that does not fit, a config run without the dataset it needs, or
    a `--set dataset=...` without `--config` (the default recipe is made for
    its own data: it is not run on another silently)."""
    from keras_vit.recipes.configs.base import ConfigError
    from keras_vit.recipes.configs.base import load_config
    from keras_vit.recipes.configs.base import override
    from keras_vit.recipes.configs.base import require_dataset

    assignments = list(args.set)
    if args.strategy:
        assignments.append(f"strategy={args.strategy}")
    name = args.config
    try:
        if name is None:  # The command's default recipe, for its own data.
            name = getattr(args, "default_config", "digits")
            default = load_config(name, kind)
            datasets = [
                text.strip()
                for key, _, text in (a.partition("=") for a in assignments)
                if key.strip() == "dataset"
            ]
            if datasets and datasets[-1].strip("'\"") != default.dataset:
                fail(
                    f"--set dataset={datasets[-1]} without --config would run "
                    f"the {name!r} recipe, made for {default.dataset!r}, on it: "
                    f"{getattr(args, 'dataset_hint', 'pass --config')}"
                )
        config = override(load_config(name, kind), assignments)
        require_dataset(config)
        return config
    except ConfigError as error:
        fail(str(error))


def run_command(run_fn, kind, parser, argv, aliases=None, precheck=None):
    """Runs a config recipe from its command line; returns `run_fn`'s result.

    Args:
        run_fn: `run_fn(config, fresh=..., allow_changes=...)`, the recipe.
        kind: Its config class.
        parser: A parser with `add_run_arguments`.
        argv: The command-line arguments.
        aliases: `{old config name: config name}`.
        precheck: `precheck(config)`, raising `ConfigError` for what can be
            refused before TensorFlow is imported (e.g. a missing file).

    Every failure is one line on stderr (`error: ...`) and an exit status:
    2 an argument or config error, or the run directory is in use by
    another run; 1 the run failed (diverged, a full disk, another error of
    the file system, naming the path); 3 the run had already finished
    (nothing was done); 130 Ctrl-C, 143 SIGTERM (the line says how to
    resume). A run whose end was interrupted after its results were saved
    is completed (its leftover backup removed): one line, exit status 0,
    and `None` is returned.
    """
    from keras_vit.recipes.configs.base import ConfigError

    args = parser.parse_args(argv)
    args.config = (aliases or {}).get(args.config, args.config)
    config = parse_config(args, kind)
    if precheck is not None:
        try:
            precheck(config)
        except ConfigError as error:
            fail(str(error))
    with handle_termination():
        try:
            from keras_vit import atomic
            from keras_vit.recipes.rundir import RunCompleted
            from keras_vit.recipes.rundir import RunFailed
            from keras_vit.recipes.rundir import RunFinished
            from keras_vit.recipes.rundir import WorkdirBusy

            try:
                return run_fn(
                    config, fresh=args.fresh, allow_changes=args.allow_changes
                )
            except (ConfigError, WorkdirBusy) as error:
                fail(str(error))
            except RunCompleted as error:  # Its interrupted end is now done.
                print(str(error), flush=True)  # noqa: T201
                return None
            except RunFinished as error:
                fail(str(error), EXIT_FINISHED)
            except RunFailed as error:  # Diverged, or a worker was lost.
                fail(str(error), EXIT_FAILED)
            except Exception as error:  # noqa: BLE001  (file system errors)
                _fail_on_file_error(error, config, atomic)
                raise
        except KeyboardInterrupt as error:  # Ctrl-C, or SIGTERM (`Terminated`).
            interrupted(error)
