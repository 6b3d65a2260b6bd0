"""Imports TensorFlow, without the notes it prints before its log settings.

TensorFlow prints a few notes while it is imported (the CUDA stub looking
for drivers, "All log messages before absl::InitializeLog() ...") before it
reads `TF_CPP_MIN_LOG_LEVEL`, so that variable cannot hide them. `import
keras_vit` imports TensorFlow first, through this module (the model API,
`keras_vit._model_api`; a `keras-vit` command imports it once its arguments
are read), and queries the devices (where a machine without a GPU driver
logs "failed call to cuInit"), with the process's standard error (file
descriptor 2) pointed at `/dev/null` for the length of both: what C++ code
writes there is dropped, while Python's own output (`sys.stderr`: warnings,
tracebacks) still reaches the real standard error. A command's output and
its one-line errors are then all that reaches the terminal.

For that, `sys.stderr` is a stand-in while TensorFlow is imported, and
whatever took hold of it then (TensorFlow's logger, absl's and JAX's log
handlers bind `sys.stderr` when they are made) writes, once the import is
over, to the `sys.stderr` of before: a later `tf.get_logger().warning(...)`
prints its text as it would without keras_vit.

Nothing is hidden when TensorFlow was imported before keras_vit, when
`KERAS_VIT_VERBOSE` is set (other than `0`), or when `TF_CPP_MIN_LOG_LEVEL`
is `0`. TensorFlow's later logs follow `TF_CPP_MIN_LOG_LEVEL` as usual.

Example:

```bash
KERAS_VIT_VERBOSE=1 python -c "import keras_vit"  # TensorFlow's notes too
```
"""

from __future__ import annotations

import io
import logging
import os
import sys

VERBOSE_ENV = "KERAS_VIT_VERBOSE"


def _verbose() -> bool:
    return (
        os.environ.get(VERBOSE_ENV, "") not in ("", "0")
        or os.environ.get("TF_CPP_MIN_LOG_LEVEL") == "0"
    )


def import_tensorflow() -> None:
    """Imports TensorFlow with its start-up notes hidden (see the module).

    Example:

    ```python
    import_tensorflow()
    import tensorflow as tf  # already imported: nothing is printed
    ```
    """
    if "tensorflow" in sys.modules or _verbose():
        import tensorflow  # noqa: F401

        return
    sys.stderr.flush()
    saved = os.dup(2)
    python_stderr = sys.stderr
    stand_in = None
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            if _writes_to_fd_2(python_stderr):  # Python's own output stays.
                real_fd_2 = open(saved, "w", buffering=1, closefd=False)
                stand_in = _StderrStandIn(real_fd_2)
                sys.stderr = stand_in
            import tensorflow as tf

            # The first device query is where a machine without a GPU driver
            # logs "failed call to cuInit"; it takes well under a millisecond.
            tf.config.list_physical_devices()
    finally:
        if stand_in is not None:
            if sys.stderr is stand_in:
                sys.stderr = python_stderr
            stand_in.forward_to(python_stderr)
            real_fd_2.close()
            _rebind_log_handlers(stand_in, python_stderr)
        os.dup2(saved, 2)
        os.close(saved)


class _StderrStandIn(io.TextIOBase):
    """`sys.stderr` during the import: writes to `target`, which can change.

    Hand-written, not a plain file, because handlers made during the import
    keep the object they found as `sys.stderr` for good (JAX's, for one,
    are attached later, when its logging is switched on): once the import is
    over, the stand-in forwards to the `sys.stderr` of before, so none of
    them ever writes to a closed file.

    Example:

    ```python
    stand_in = _StderrStandIn(sys.__stderr__)
    print("to the real standard error", file=stand_in)
    ```
    """

    def __init__(self, target):
        super().__init__()
        self._target = target

    def forward_to(self, target) -> None:
        self._target.flush()
        self._target = target

    def write(self, text: str) -> int:
        return self._target.write(text)

    def flush(self) -> None:
        self._target.flush()

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._target.fileno()

    def isatty(self) -> bool:
        return self._target.isatty()

    @property
    def encoding(self) -> str:
        return self._target.encoding

    @property
    def errors(self) -> str:
        return self._target.errors


def _rebind_log_handlers(stand_in, stream) -> None:
    """Points the log handlers that hold `stand_in` at `stream` itself.

    TensorFlow's and absl's handlers then hold the real `sys.stderr`, as
    they would without keras_vit (absl compares its stream with
    `sys.stderr` to decide where and how it prints).
    """
    loggers = [logging.getLogger()] + [
        logger
        for logger in list(logging.Logger.manager.loggerDict.values())
        if isinstance(logger, logging.Logger)  # Not a placeholder.
    ]
    handlers = [handler for logger in loggers for handler in logger.handlers]
    absl_logging = sys.modules.get("absl.logging")
    if absl_logging is not None:  # Not on any logger until an absl app starts.
        handlers.append(absl_logging.get_absl_handler().python_handler)
    for handler in handlers:
        if getattr(handler, "stream", None) is stand_in:
            handler.setStream(stream)


def _writes_to_fd_2(stream) -> bool:
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False


import_tensorflow()
