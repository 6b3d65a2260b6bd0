"""`python -m recipes.compare` and the claims it tests (`analysis.parkkim`)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from keras_vit.analysis import parkkim

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURES = ("fourier", "variance", "hessian", "hessian_clean", "noise", "distance")
MODELS = ("vit", "resnet", "preact_resnet", "alternet")


# -- the claims, on panels whose numbers are chosen -----------------------------
def _panel(
    top=(10.0,), negative=0, msa=-0.2, conv=0.3, variance=(0.0, 0.1), low=0.2,
    high=0.05, accuracy=0.5,
):  # fmt: skip
    """A panel with the numbers each claim reads (see `parkkim.claims`)."""
    eigen = np.array([[t, -1.0 if i < negative else 1.0] for i, t in enumerate(top)])
    frequencies = np.linspace(0, np.pi, 7)
    drops = [0.0, low, low, 0.1, high, high, high]
    return {
        "accuracy": accuracy,
        "test_accuracy": accuracy,
        "hessian": {"eigenvalues": eigen},
        "hessian_clean": {"eigenvalues": eigen / 2},
        "depth": {
            # input, then a block of each kind; variance in log space is the
            # change given (first entry 1.0 = log 0).
            "kinds": ["input", "msa", "conv"],
            "delta": [0.0, msa, msa + conv],
            "variance": [1.0, float(np.exp(variance[0])), float(np.exp(sum(variance)))],
            "sizes": [[8, 8], [8, 8], [8, 8]],
        },
        "noise": {"frequencies": frequencies, "accuracy_drop": drops},
    }


def _verdicts(runs):
    return {row["key"]: row["verdict"] for row in parkkim.claims(runs)}


def test_claims_hold_when_the_numbers_say_so():
    runs = {
        "vit": [_panel(top=(5.0,), negative=1, low=0.3, high=0.01)],
        "resnet": [_panel(top=(50.0,), low=0.01, high=0.3)],
        "preact_resnet": [_panel(accuracy=0.5)],
        "alternet": [_panel(variance=(-0.1, 0.2), accuracy=0.6)],
    }
    assert set(_verdicts(runs).values()) == {"reproduced"}


def test_claims_fail_when_the_numbers_say_so():
    runs = {
        "vit": [_panel(top=(50.0,), msa=0.2, low=0.01, high=0.3)],
        "resnet": [_panel(top=(5.0,), negative=1, conv=-0.3, low=0.3, high=0.01)],
        "preact_resnet": [_panel(accuracy=0.6)],
        "alternet": [_panel(variance=(0.3, -0.1), msa=0.2, accuracy=0.5)],
    }
    assert set(_verdicts(runs).values()) == {"not reproduced"}


def test_claims_count_seeds_and_name_what_they_cannot_test():
    runs = {
        "vit": [_panel(top=(5.0,)), _panel(top=(50.0,))],
        "resnet": [_panel(top=(20.0,)), _panel(top=(20.0,))],
    }
    verdicts = _verdicts(runs)
    assert verdicts["hessian_flatter"] == "mixed (1 of 2 seeds)"
    assert verdicts["msa_variance"] == "not testable"
    assert verdicts["alternet_accuracy"] == "not testable"
    rows = {row["key"]: row for row in parkkim.claims(runs)}
    assert "needs alternet" in rows["msa_variance"]["evidence"]
    assert "ViT 27.5 ± 32, ResNet 20" in rows["hessian_flatter"]["evidence"]


# -- the command ----------------------------------------------------------------
def _run_quick(workdir, *extra):
    from keras_vit.recipes import compare

    argv = ["--config", "compare_quick", "--set", f"workdir={workdir}"]
    for item in extra:
        argv += ["--set", item]
    return compare.main(argv)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One uninterrupted quick comparison (every model and analysis, tiny)."""
    workdir = tmp_path_factory.mktemp("compare") / "quick"
    return workdir, _run_quick(workdir)


def test_a_quick_comparison_writes_every_output(quick):
    workdir, summary = quick
    assert [row["key"] for row in summary["claims"]] == [c.key for c in parkkim.CLAIMS]
    assert [row["model"] for row in summary["rows"]] == list(MODELS)
    for name in ("claims.md", "table.md", "results.json"):
        assert (workdir / name).stat().st_size > 0
    with open(workdir / "results.json", encoding="utf-8") as f:
        stored = json.load(f)
    assert [r["verdict"] for r in stored["claims"]] == [
        r["verdict"] for r in summary["claims"]
    ]
    for stem in FIGURES:
        assert (workdir / f"{stem}.png").stat().st_size > 1000, stem
    for name in MODELS:
        # A 3x3 landscape with the authors' 19 columns, and a figure of it.
        grid = np.loadtxt(workdir / f"landscape_{name}_seed0.csv", delimiter=",")
        assert grid.shape == (9, 19)
        assert (workdir / f"landscape_{name}.png").exists()
        assert (workdir / "runs" / f"{name}_seed0" / "final.keras").exists()
        panel = stored["panels"][name][0]
        assert len(panel["hessian"]["eigenvalues"][0]) == 2  # top_k
        assert panel["noise"]["protocol"] == "authors"
    assert not [p for p in workdir.rglob("*") if p.name.startswith(".partial-")]


def test_a_rerun_reuses_every_run_and_panel(quick, capsys):
    workdir, summary = quick
    started = time.perf_counter()
    again = _run_quick(workdir)
    assert again["claims"] == summary["claims"]
    assert again["rows"] == summary["rows"]
    assert time.perf_counter() - started < 60  # No training, no analysis.


def test_changed_analysis_settings_redo_the_panels_not_the_training(quick, tmp_path):
    workdir, summary = quick
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(workdir, copy)
    changed = _run_quick(copy, "hessian_top_k=1", "models=('vit',)")
    panel = changed["panels"]["vit"][0]
    assert len(panel["hessian"]["eigenvalues"][0]) == 1
    # The training run is reused: the same test accuracy, no second run.
    assert panel["test_accuracy"] == summary["panels"]["vit"][0]["test_accuracy"]


def test_a_killed_comparison_finishes_with_the_same_results(quick, tmp_path):
    workdir, summary = quick
    target = tmp_path / "killed"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=REPO)
    argv = [sys.executable, "-m", "recipes.compare", "--config", "compare_quick",
            "--set", f"workdir={target}"]  # fmt: skip
    process = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)  # fmt: skip
    first = target / "panels" / "vit_seed0.json"
    deadline = time.monotonic() + 300
    while not first.exists() and process.poll() is None:
        assert time.monotonic() < deadline, "no panel was written"
        time.sleep(0.2)
    process.send_signal(signal.SIGKILL)
    process.wait()
    resumed = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    with open(target / "results.json", encoding="utf-8") as f:
        stored = json.load(f)
    assert stored["claims"] == json.loads(json.dumps(summary["claims"]))

    def numbers(rows):  # Everything but the times, which differ by run.
        return [{k: v for k, v in r.items() if k != "train_seconds"} for r in rows]

    assert numbers(stored["rows"]) == numbers(json.loads(json.dumps(summary["rows"])))


@pytest.mark.parametrize(
    "item, message",
    [
        ("models=('vit', 'cat')", "models=('vit', 'cat'): must be distinct names"),
        ("seeds=0", "seeds=0: must be at least 1"),
        ("cnn_variant=huge", "cnn_variant='huge': must be a row of alternet"),
        ("hessian_l2=cube", "hessian_l2='cube': must be one of"),
    ],
)
def test_bad_settings_exit_2_with_one_line(item, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as raised:
        _run_quick(tmp_path, item)
    assert raised.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not (tmp_path / "panels").exists()


def test_help_is_fast_and_imports_no_framework():
    code = (
        "import sys, contextlib, io\n"
        "from keras_vit.recipes import compare\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        "        compare.main(['--help'])\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, e.code\n"
        "assert 'compare_authors' in out.getvalue()\n"
        "assert 'tensorflow' not in sys.modules and 'keras' not in sys.modules\n"
    )
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert time.perf_counter() - started < 10
