"""SIGTERM as Ctrl-C: a command stops where it was and cleans up.

- `handle_termination`: within it, SIGTERM raises `Terminated` (a
  `KeyboardInterrupt`) in the main thread.
- `raise_if_terminated`: raises it again at a safe point when Python
  swallowed it (a signal that landed in a `__del__`).

Standard library only: `keras_vit.recipes.cli` and
`keras_vit.recipes.engine` both use it.

Example:

```python
from keras_vit.recipes.termination import handle_termination
from keras_vit.recipes.termination import raise_if_terminated

with handle_termination():
    for step in range(3):
        raise_if_terminated()
```
"""

from __future__ import annotations

import contextlib
import signal
import threading


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program was (see `handle_termination`).

    A `KeyboardInterrupt`, so that code which cleans up after Ctrl-C (a
    partial file removed, a lock released) does the same for SIGTERM.

    Example:

    ```python
    try:
        raise Terminated("SIGTERM")
    except KeyboardInterrupt as error:
        assert isinstance(error, Terminated)
    ```
    """


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
            interrupted(error)  # keras_vit.recipes.cli: one line, exit 130/143
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

    Example:

    ```python
    for batch in batches:
        raise_if_terminated()
        step(batch)
    ```
    """
    if _TERMINATING:
        raise Terminated("SIGTERM")
