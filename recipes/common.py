"""Small helpers shared by the recipe scripts."""

from __future__ import annotations

import os
import shutil


def start_fresh(workdir: str) -> None:
    """Clears what a previous, finished run left (no backup: not a resume)."""
    for name in ("metrics.csv", "tensorboard", "results.json"):
        path = os.path.join(workdir, name)
        if os.path.isdir(path):
            shutil.rmtree(path)
        elif os.path.exists(path):
            os.remove(path)


def printer(prefix: str, enabled: bool):
    """Returns `say(message)`, printing `[prefix] message` when `enabled`."""

    def say(message: str) -> None:
        if enabled:
            print(f"[{prefix}] {message}", flush=True)  # noqa: T201

    return say
