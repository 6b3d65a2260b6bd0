"""What every command line shares, importable without TensorFlow.

- `ArgumentParser`: argparse, but an error is one line, `error: ...`, exit 2.
- `parse_image_size` / `image_size_arg`: `224`, `224,320` or `224x320`.
- `quiet_tensorflow`: hides TensorFlow's C++ start-up chatter unless asked.
- `load_model`: a `.keras` file or a `keras_vit.ViT(variant)`, one behaviour.
- `fail`: the one-line error exit.
- `handle_termination` / `interrupted`: SIGTERM stops a command as Ctrl-C
  does, and either ends in one line (exit 143 / 130), not a traceback.

Commands import TensorFlow only after their arguments are checked, so that
`--help` and every argument error answer at once.

Example:

```python
parser = ArgumentParser(prog=prog("x"), description="...")
parser.add_argument("--image-size", type=image_size_arg, default=None)
args = parser.parse_args()
quiet_tensorflow(args.verbose)
```
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading

from keras_vit.recipes.configs.base import parse_image_size

EXIT_USAGE = 2  # A bad argument or config value, as argparse exits.
EXIT_FAILED = 1  # The run itself failed (e.g. diverged, a full disk).
EXIT_FINISHED = 3  # The run had already finished: nothing was done.
EXIT_SIGINT = 128 + signal.SIGINT  # 130: interrupted by Ctrl-C.
EXIT_SIGTERM = 128 + signal.SIGTERM  # 143: stopped by SIGTERM.
VERBOSE_ENV = "KERAS_VIT_VERBOSE"  # Set to 1 to keep TensorFlow's C++ logs.


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program was (see `handle_termination`).

    A `KeyboardInterrupt`, so that code which cleans up after Ctrl-C (a
    partial file removed, a lock released) does the same for SIGTERM.
    """


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
    """`argparse.ArgumentParser` whose errors are one line (`error: ...`)."""

    def error(self, message):
        fail(f"{message} (see {self.prog} --help)")


class CommandError(SystemExit):
    """Exits with `code`; `str()` is the message (printed once, by `fail`)."""

    def __init__(self, message: str, code: int = EXIT_USAGE):
        super().__init__(code)
        self.message = message

    def __str__(self):
        return self.message


def fail(message: str, code: int = EXIT_USAGE):
    """Prints `error: message` on stderr and exits with `code` (default 2).

    Raises:
        CommandError: a `SystemExit` with that code, whose `str()` is the
            message.
    """
    print(f"error: {message}", file=sys.stderr, flush=True)  # noqa: T201
    raise CommandError(message, code)


@contextlib.contextmanager
def handle_termination():
    """Within this context, SIGTERM raises `Terminated` in the main thread.

    Python's default for SIGTERM is to die at once, without cleaning up or
    saying anything. The first SIGTERM raises; later ones are ignored while
    the program unwinds (send SIGKILL to stop it at once). The previous
    handler is restored on exit. Outside the main thread this does nothing.

    A signal handler's exception can land where Python swallows it (a
    `__del__`, a weakref callback: "Exception ignored in ..."); the program
    would then go on with SIGTERM ignored. So the request is also recorded:
    `raise_if_terminated()`, called at safe points (the recipes: every
    training step), raises `Terminated` again while it is pending.

    Example:

    ```python
    with handle_termination():
        try:
            work()
        except KeyboardInterrupt as error:  # Ctrl-C or SIGTERM
            interrupted(error)
    ```
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminate(signum, frame):
        global _TERMINATING
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        _TERMINATING = True
        raise Terminated("SIGTERM")

    global _TERMINATING
    previous = signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        _TERMINATING = False
        signal.signal(signal.SIGTERM, previous)


# A SIGTERM was received and its `Terminated` has not left the command yet.
_TERMINATING = False


def raise_if_terminated() -> None:
    """Raises `Terminated` while a SIGTERM is pending (see `handle_termination`).

    For safe points of a long computation: a `Terminated` that Python
    swallowed (raised in a `__del__` or a weakref callback) is raised again
    here, so that the command still stops.
    """
    if _TERMINATING:
        raise Terminated("SIGTERM")


def interrupted(error: KeyboardInterrupt):
    """Exits in one line after Ctrl-C (status 130) or SIGTERM (143).

    The line says where the run stopped and how to go on, from the
    `stopped_at` and `resume_hint` attributes the run put on `error` (e.g.
    `recipes.common.Setup`); without them, that it stopped before starting.

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
        help="weights for --variant: a keras_vit.weights tag or a checkpoint "
        "file (.npz, .safetensors, .keras, .weights.h5)",
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


def add_verbose_flag(parser: argparse.ArgumentParser) -> None:
    """`--tf-logs`: keep TensorFlow's C++ logs (also `KERAS_VIT_VERBOSE=1`)."""
    parser.add_argument(
        "--tf-logs",
        action="store_true",
        help=f"show TensorFlow's C++ logs (or set {VERBOSE_ENV}=1)",
    )


def quiet_tensorflow(verbose: bool = False) -> None:
    """Imports TensorFlow without its C++ start-up chatter (CUDA stubs,
    oneDNN and CPU-feature notes), unless `verbose` or `KERAS_VIT_VERBOSE=1`.

    Sets `TF_CPP_MIN_LOG_LEVEL=3` (unless set already) for later C++ logs
    (e.g. the failed `cuInit` of a machine without a GPU).
    TensorFlow 2.21 prints its first notes before that variable is read, so
    the import itself runs with the process's stderr (file descriptor 2)
    pointed at `/dev/null`; Python errors are raised after it is restored.
    """
    if verbose or os.environ.get(VERBOSE_ENV, "") not in ("", "0"):
        return
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if "tensorflow" in sys.modules:
        return
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            import tensorflow  # noqa: F401
    finally:
        os.dup2(saved, 2)
        os.close(saved)


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


def load_model(
    path: str | None = None,
    *,
    variant: str | None = None,
    weights: str | None = None,
    num_classes: int = 1000,
    image_size: int | tuple[int, int] | None = None,
    channels: int = 3,
    representation_size: int | None = None,
):
    """The model a command works on: a saved `.keras` file or a new ViT.

    Args:
        path: A `.keras` file written by `model.save` (a classifier, an
            encoder, a masked-patch pre-training model). Loaded with
            `compile=False`: no command needs the optimizer.
        variant: Without `path`: the variant to build, e.g. `"B/16"`.
        weights: For `variant`: a `keras_vit.weights` tag or a checkpoint
            file (`.npz`, `.safetensors`, `.keras`, `.weights.h5`).
        num_classes: For `variant`: the head's classes; 0 builds no head
            (`include_top=False`, the pooled features). Defaults to 1000.
        image_size: For `variant`, the size to build (default 224); for a
            file, a size other than its own rebuilds it with resampled
            position embeddings.
        channels: For `variant`. Defaults to 3.
        representation_size: `pre_logits` width for `variant`; by default
            the weights tag's, if it has one.

    Raises:
        ValueError: a missing or unreadable file (truncated, damaged, not a
            model), or neither `path` nor `variant`; in one line.
    """
    if not path and not variant:
        raise ValueError("pass --model FILE.keras, or --variant (and --weights)")
    if path and weights:
        raise ValueError("--weights goes with --variant, not --model")
    import keras

    import keras_vit
    import keras_vit.models.masked_patch  # noqa: F401  (registers its layers)

    if path:
        if not os.path.isfile(path):
            raise ValueError(f"no model file at {path!r}")
        model = _load_file(keras, path)
        if image_size is not None:
            size = _pair(image_size)
            if tuple(model.input_shape[1:3]) != size:
                model = keras_vit.with_image_size(model, size)
        return model
    if representation_size is None and weights:
        from keras_vit.weights import list_weights

        known = [w for w in list_weights(variant) if w.tag == weights]
        representation_size = known[0].representation_size if known else None
    model = keras_vit.ViT(
        variant,
        num_classes=max(num_classes, 1),
        include_top=num_classes > 0,
        image_size=_pair(image_size or 224),
        channels=channels,
        representation_size=representation_size,
        weights=weights or None,
    )
    return model


def _load_file(keras, path: str):
    """`keras.saving.load_model(path)`; a file it cannot read is a one-line
    `ValueError` (Keras says "File not found" for a truncated `.keras`)."""
    import zipfile

    if path.endswith(".keras") and not zipfile.is_zipfile(path):
        raise ValueError(
            f"{path!r} is not a readable .keras file: not a zip archive "
            "(truncated, or another format)"
        )
    try:
        return keras.saving.load_model(path, compile=False)
    except (zipfile.BadZipFile, OSError, EOFError, KeyError, TypeError) as error:
        first = (str(error).strip() or type(error).__name__).splitlines()[0]
        raise ValueError(f"cannot load {path!r} (damaged?): {first}") from error


def _pair(size) -> tuple[int, int]:
    return (size, size) if isinstance(size, int) else tuple(size)


# -- the recipes that run a config ---------------------------------------------
def add_run_arguments(parser, configs: list[str], default: str = "digits") -> None:
    """The arguments of the recipes that run a config (`train`,
    `pretrain_masked`, `compare`): `--config`, `--set`, `--strategy`,
    `--fresh`, `--allow-changes`, `--tf-logs`."""
    parser.add_argument(
        "--config",
        default=default,
        help=f"a shipped config ({', '.join(configs)}) or a .py file defining "
        f"get_config(); default: {default}",
    )
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
    add_verbose_flag(parser)


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
    if isinstance(error, OSError):
        path = error.filename or config.resolved_workdir()
        if error.filename2:
            path = f"{path} -> {error.filename2}"
        reason = error.strerror or str(error).splitlines()[0]
        fail(f"{path}: {reason}; {hint}", EXIT_FAILED)


def parse_config(args, kind) -> object:
    """The config the command line names, or a one-line error (exit 2)."""
    from keras_vit.recipes.configs.base import ConfigError
    from keras_vit.recipes.configs.base import load_config
    from keras_vit.recipes.configs.base import override

    assignments = list(args.set)
    if args.strategy:
        assignments.append(f"strategy={args.strategy}")
    try:
        return override(load_config(args.config, kind), assignments)
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
            quiet_tensorflow(args.tf_logs)
            from keras_vit import atomic
            from keras_vit.recipes.common import RunCompleted
            from keras_vit.recipes.common import RunDiverged
            from keras_vit.recipes.common import RunFinished
            from keras_vit.recipes.common import WorkdirBusy

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
            except RunDiverged as error:
                fail(str(error), EXIT_FAILED)
            except Exception as error:  # noqa: BLE001  (file system errors)
                _fail_on_file_error(error, config, atomic)
                raise
        except KeyboardInterrupt as error:  # Ctrl-C, or SIGTERM (`Terminated`).
            interrupted(error)
