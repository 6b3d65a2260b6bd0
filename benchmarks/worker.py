"""Runs one benchmark case in this (fresh) process and prints its result.

Usage: `python benchmarks/worker.py '<case as JSON>'`. The last stdout line is
`RESULT <json>`; `benchmark.py` starts one worker per case so that peak
memory and compiled state are per case.
"""

from __future__ import annotations

import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from cases import Case  # noqa: E402
from hardware import load_average  # noqa: E402
from timing import peak_rss_mb  # noqa: E402


def run_case(case: Case) -> dict:
    if case.impl == "timm":
        import torch_runner as runner
    elif case.impl == "data":
        import data_runner as runner
    else:
        import keras_runner as runner
    load_start = load_average()
    result = runner.run(case)
    result.update(
        load_start=load_start, load_end=load_average(), self_peak_rss_mb=peak_rss_mb()
    )
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    case = Case.from_json(argv[1])
    try:
        result = run_case(case)
    except Exception as error:  # reported in the table, not fatal to the run
        traceback.print_exc()
        result = {"error": f"{type(error).__name__}: {error}"}
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
