"""keras_vit against timm and keras-hub, side by side, in one run.

Every case runs in a fresh subprocess (`worker.py`), so its peak RSS (read
with `os.wait4` when it exits) covers only that framework, model and
activations. Cases of one scenario alternate between implementations, and with
`--rounds 2` the second round runs in reverse order (A/B/A/B, then B/A/B/A),
so the load of a shared machine weighs on all of them alike.

Usage:

    python benchmarks/benchmark.py --quick          # ~5 minutes
    python benchmarks/benchmark.py                  # all cases, ~25 minutes
    python benchmarks/benchmark.py --only 'infer B/16@224 b8'
    python benchmarks/benchmark.py --side-by-side --rounds 2   # vs timm, ~30 min
    python benchmarks/benchmark.py --finetune      # int8/int4, remat, LoRA
    python benchmarks/benchmark.py --quick --max-isa AVX2   # an AVX2 machine
    python benchmarks/benchmark.py --report benchmarks/results/results.json

Writes `results.json` (every raw measurement), `results.md` (the table, the
targets and the image-size scaling) and `results.png` (a bar chart) to `--out`.
See `benchmarks/README.md`.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import report  # noqa: E402
from cases import Case  # noqa: E402
from cases import finetune_cases  # noqa: E402
from cases import full_cases  # noqa: E402
from cases import quick_cases  # noqa: E402
from cases import side_by_side_cases  # noqa: E402
from hardware import detect_machine  # noqa: E402
from hardware import load_average  # noqa: E402
from hardware import sgemm_probe  # noqa: E402

WORKER = os.path.join(HERE, "worker.py")

# --max-isa: the variables that cap each framework's CPU kernels, so that an
# AVX-512 machine measures like a smaller one. oneDNN (TensorFlow's kernels,
# and PyTorch's convolutions) reads ONEDNN_MAX_CPU_ISA, PyTorch's own
# vectorised kernels ATEN_CPU_CAPABILITY, MKL (PyTorch's matmuls)
# MKL_ENABLE_INSTRUCTIONS. XLA's CPU kernels (`+xla`, the JAX backend) have
# no such variable: their rows are marked "not capped".
ISA_CAPS = {
    "AVX2": {
        "ONEDNN_MAX_CPU_ISA": "AVX2",
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_ENABLE_INSTRUCTIONS": "AVX2",
    },
    "AVX512_CORE": {
        "ONEDNN_MAX_CPU_ISA": "AVX512_CORE",
        "ATEN_CPU_CAPABILITY": "avx512",
        "MKL_ENABLE_INSTRUCTIONS": "AVX512",
    },
}


def backend_of(case: Case) -> str:
    """The Keras backend a case runs on (`+jax` modes: JAX)."""
    return "jax" if "+jax" in case.mode else "tensorflow"


def uses_xla(case: Case) -> bool:
    return "+xla" in case.mode or backend_of(case) == "jax"


def emulation_limit(case: Case, env: dict) -> str | None:
    """Why a case cannot be measured under an ISA cap, or None.

    TensorFlow routes bfloat16 matmuls to oneDNN when the CPU's own flags
    have AVX-512 (it does not read ONEDNN_MAX_CPU_ISA); oneDNN, capped at
    AVX2, then has no bfloat16 kernel and the step aborts. A real AVX2 CPU
    takes TensorFlow's Eigen kernels instead, which the cap cannot emulate.
    """
    keras_tf = (
        case.impl in ("keras_vit", "keras_hub") and backend_of(case) == "tensorflow"
    )
    capped_to_avx2 = env.get("ONEDNN_MAX_CPU_ISA") == "AVX2"
    if capped_to_avx2 and keras_tf and case.precision == "bfloat16":
        return (
            "not emulable: TF sends bfloat16 to oneDNN, which has no AVX2 bf16 kernel"
        )
    return None


_DISPATCH_PROBES = {
    "TensorFlow's oneDNN": (
        "import os; os.environ['ONEDNN_VERBOSE'] = '1'; "
        "import tensorflow as tf; x = tf.ones((64, 64)); tf.linalg.matmul(x, x)"
    ),
    "PyTorch": (
        "import torch; print('pytorch-isa:' + torch.backends.cpu.get_cpu_capability())"
    ),
}


def dispatch_probe(python: str, env: dict) -> dict:
    """What each framework's CPU kernels actually dispatch to under `env`.

    Proves that `--max-isa` took effect: oneDNN prints its ISA when verbose
    (e.g. `Intel AVX2`), PyTorch reports its CPU capability (e.g. `AVX2`).
    A framework that is not installed is reported as such.
    """
    found = {}
    for name, code in _DISPATCH_PROBES.items():
        try:
            proc = subprocess.run(
                [python, "-c", code],
                env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **env),
                capture_output=True,
                text=True,
                timeout=120,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            found[name] = f"probe failed ({type(error).__name__})"
            continue
        match = re.search(r"(?:cpu,isa:|pytorch-isa:)([^\n]+)", proc.stdout)
        found[name] = match.group(1).strip() if match else "not available"
    return found


def run_worker(
    case: Case, python: str, timeout: float, env: dict | None = None
) -> dict:
    """Runs one case in a subprocess; returns its result with `peak_rss_mb`."""
    env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="3",
        PYTHONUNBUFFERED="1",
        KERAS_BACKEND=backend_of(case),
        **(env or {}),
    )
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            [python, WORKER, case.to_json()], stdout=out, stderr=err, env=env, cwd=HERE
        )
        usage = None
        while usage is None:
            pid, status, rusage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                usage = rusage
                proc.returncode = os.waitstatus_to_exitcode(status)
            elif time.perf_counter() - start > timeout:
                proc.kill()
                proc.wait()
                return {"error": f"timed out after {timeout:.0f} s"}
            else:
                time.sleep(0.2)
        out.seek(0)
        err.seek(0)
        lines = [line for line in out.read().splitlines() if line.startswith("RESULT ")]
        if not lines:
            tail = err.read().strip().splitlines()[-3:]
            return {"error": f"exit {proc.returncode}: " + " | ".join(tail)}
        result = json.loads(lines[-1][len("RESULT ") :])
        if "error" not in result:
            # ru_maxrss of the exited child (KiB on Linux): its own peak RSS.
            result["peak_rss_mb"] = usage.ru_maxrss / 1024
        result["process_s"] = time.perf_counter() - start
        return result


def measure(
    cases: list[Case], rounds: int, python: str, timeout: float, env: dict
) -> list[dict]:
    all_rounds = []
    for index in range(rounds):
        order = cases if index % 2 == 0 else cases[::-1]
        results = {}
        for number, case in enumerate(order, 1):
            limit = emulation_limit(case, env)
            result = (
                {"error": limit} if limit else run_worker(case, python, timeout, env)
            )
            results[case] = {**case.__dict__, **result}
            # XLA's kernels ignore the ISA cap: such a row is not comparable.
            results[case]["uncapped"] = bool(env) and uses_xla(case)
            status = (
                result["error"]
                if "error" in result
                else f"{case.batch / result['median_s']:.2f} img/s, "
                f"{result['peak_rss_mb']:.0f} MB, load {result['load_start']:.1f}"
            )
            progress = f"[round {index + 1}/{rounds} {number:2}/{len(order)}]"
            print(f"{progress} {case.name}: {status}", flush=True)
        all_rounds.append([results[case] for case in cases])
    return report.merge_rounds(all_rounds)


def header(machine, meta: dict) -> str:
    probes = meta.get("dispatch", {})
    dispatched = "; ".join(f"{k}: {v}" for k, v in probes.items()) or "not probed"
    return (
        f"Machine: {machine.describe()}.\n"
        f"Run: {meta['date']}, {meta['mode']} mode, {meta['rounds']} round(s), "
        f"load average (1 min) {meta['load_start']:.2f} at start, "
        f"{meta['load_end']:.2f} at end (mean over cases {meta['load_mean']:.2f}); "
        f"NumPy SGEMM probe {meta['sgemm_gflops']:.0f} GFLOP/s "
        f"({100 * meta['sgemm_gflops'] / machine.peak_gflops('float32'):.0f}% of the "
        f"fp32 peak{'; NumPy is not capped' if meta.get('max_isa') else ''}). "
        f"Python {meta['python']}.\n"
        f"Kernels dispatched: {dispatched}.\n"
        f"Versions: {'; '.join(meta['versions'])}."
    )


def write_outputs(rows: list[dict], machine, meta: dict, out_dir: str) -> str:
    os.makedirs(out_dir, exist_ok=True)
    rows = report.derive(rows, machine)
    for row in rows:
        row["isa"] = machine.isa
    text = "\n".join(
        [
            header(machine, meta),
            report.text_table(rows),
            "",
            "Targets:",
            report.targets_text(rows),
        ]
    )
    markdown = "\n\n".join(
        filter(
            None,
            [
                header(machine, meta).replace("\n", "\n\n"),
                report.markdown_table(rows),
                "Targets:\n\n" + report.targets_text(rows, markdown=True),
                "Cost growth with the image size (ViT-B/16, batch 8, float32):\n\n"
                + report.scaling_markdown(rows)
                if report.scaling_markdown(rows)
                else "",
            ],
        )
    )
    with open(os.path.join(out_dir, "results.json"), "w") as f:
        json.dump(
            {"meta": meta, "machine": machine.describe(), "rows": rows}, f, indent=1
        )
    with open(os.path.join(out_dir, "results.md"), "w") as f:
        f.write(markdown + "\n")
    with open(os.path.join(out_dir, "results.txt"), "w") as f:
        f.write(text + "\n")
    report.chart(
        rows,
        os.path.join(out_dir, "results.png"),
        f"{machine.model_name}, {machine.cores} cores; load {meta['load_mean']:.1f}; "
        f"{meta['date']}",
    )
    return text


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the short case list")
    parser.add_argument(
        "--finetune", action="store_true", help="quantization, remat and LoRA cases"
    )
    parser.add_argument(
        "--side-by-side",
        action="store_true",
        help="ours vs timm's best modes: float32, bfloat16, int8 inference, "
        "first and steady training steps, peak RSS",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="repeat all cases, alternating order"
    )
    parser.add_argument("--only", help="regular expression on the case names")
    parser.add_argument(
        "--out", default=os.path.join(HERE, "results"), help="output folder"
    )
    parser.add_argument(
        "--python", default=sys.executable, help="interpreter of the workers"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds per case")
    parser.add_argument("--cpu-ghz", type=float, help="clock for the peak FLOP/s")
    parser.add_argument(
        "--max-isa",
        choices=sorted(ISA_CAPS),
        help="cap oneDNN's and PyTorch's CPU kernels at this ISA (emulates a "
        "smaller CPU; XLA rows are not capped)",
    )
    parser.add_argument("--list", action="store_true", help="print the cases and exit")
    parser.add_argument("--report", help="re-render the outputs from a results.json")
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    env = ISA_CAPS.get(args.max_isa, {})
    machine = detect_machine(args.cpu_ghz, env.get("ONEDNN_MAX_CPU_ISA"))
    if args.report:
        with open(args.report) as f:
            saved = json.load(f)
        cap = ISA_CAPS.get(saved["meta"].get("max_isa"), {})
        machine = detect_machine(args.cpu_ghz, cap.get("ONEDNN_MAX_CPU_ISA"))
        print(write_outputs(saved["rows"], machine, saved["meta"], args.out))
        return 0
    if args.finetune:
        cases = finetune_cases()
    elif args.side_by_side:
        cases = side_by_side_cases()
    else:
        cases = quick_cases() if args.quick else full_cases()
    if args.only:
        cases = [case for case in cases if re.search(args.only, case.name)]
    if args.list or not cases:
        for case in cases:
            print(case.name)
        return 0 if cases else 1
    meta = {
        "date": datetime.datetime.now().strftime("%Y-%m-%d %H:%M"),
        "mode": (
            "finetune"
            if args.finetune
            else "side-by-side"
            if args.side_by_side
            else "quick"
            if args.quick
            else "full"
        ),
        "rounds": args.rounds,
        "python": platform.python_version(),
        "load_start": load_average(),
        "sgemm_gflops": sgemm_probe(),
        "max_isa": args.max_isa,
        "dispatch": dispatch_probe(args.python, env),
    }
    print(
        f"{len(cases)} cases x {args.rounds} round(s); {machine.describe()}", flush=True
    )
    rows = measure(cases, args.rounds, args.python, args.timeout, env)
    meta["load_end"] = load_average()
    loads = [r["load_start"] for r in rows if "load_start" in r]
    meta["load_mean"] = sum(loads) / len(loads) if loads else meta["load_end"]
    meta["versions"] = sorted({r["versions"] for r in rows if "versions" in r})
    print(write_outputs(rows, machine, meta, args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
