"""Timing loop and memory readings shared by every implementation's runner."""

from __future__ import annotations

import resource
import statistics
import time
from collections.abc import Callable


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, in MiB (Linux KiB units)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_calls(step: Callable[[], object], warmup: int, iters: int) -> dict:
    """Calls `step` once (timed apart: tracing and compiling), `warmup` more
    times, then `iters` timed times.

    `step` must block until its result is computed (e.g. by converting it to
    NumPy).

    Returns:
        A dict with `first_call_s` (and its process CPU seconds
        `first_call_cpu_s`), the timed calls' wall seconds `step_s`,
        their median `median_s`, and the median process CPU seconds per call
        `cpu_s` (all threads; it grows with spinning thread pools, but unlike
        wall time it barely moves when other processes load the machine).
    """
    start, start_cpu = time.perf_counter(), time.process_time()
    step()
    first = time.perf_counter() - start
    first_cpu = time.process_time() - start_cpu
    for _ in range(warmup):
        step()
    walls, cpus = [], []
    for _ in range(iters):
        cpu, wall = time.process_time(), time.perf_counter()
        step()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {
        "first_call_s": first,
        "first_call_cpu_s": first_cpu,
        "step_s": walls,
        "median_s": statistics.median(walls),
        "cpu_s": statistics.median(cpus),
    }
