"""Imports TensorFlow, without the notes it prints before its log settings.

TensorFlow prints a few notes while it is imported (the CUDA stub looking
for drivers, "All log messages before absl::InitializeLog() ...") before it
reads `TF_CPP_MIN_LOG_LEVEL`, so that variable cannot hide them. `import
keras_vit` imports TensorFlow first, through this module, and queries the
devices (where a machine without a GPU driver logs "failed call to cuInit"),
with the process's standard error (file descriptor 2) pointed at `/dev/null`
for the length of both: what C++ code writes there is dropped, while Python's own
output (`sys.stderr`: warnings, tracebacks) still reaches the real standard
error. The commands of `keras-vit` then answer `--help` or a bad argument
in one line.

Nothing is hidden when TensorFlow was imported before keras_vit, when
`KERAS_VIT_VERBOSE` is set (other than `0`), or when `TF_CPP_MIN_LOG_LEVEL`
is `0`. TensorFlow's later logs follow `TF_CPP_MIN_LOG_LEVEL` as usual.

Example:

```bash
KERAS_VIT_VERBOSE=1 python -c "import keras_vit"  # TensorFlow's notes too
```
"""

from __future__ import annotations

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
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
            if _writes_to_fd_2(python_stderr):  # Python's own output stays.
                sys.stderr = open(saved, "w", buffering=1, closefd=False)
            import tensorflow as tf

            # The first device query is where a machine without a GPU driver
            # logs "failed call to cuInit"; it takes well under a millisecond.
            tf.config.list_physical_devices()
    finally:
        if sys.stderr is not python_stderr:
            sys.stderr.close()
            sys.stderr = python_stderr
        os.dup2(saved, 2)
        os.close(saved)


def _writes_to_fd_2(stream) -> bool:
    try:
        return stream.fileno() == 2
    except (AttributeError, OSError, ValueError):
        return False


import_tensorflow()
