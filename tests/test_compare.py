"""`python -m recipes.compare` and the claims it tests (`analysis.parkkim`)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
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
    top=(10.0,), negative=0, msa=-0.2, conv=0.3, variance=(-0.1, 0.2, 0.3),
    low=0.2, high=0.05, accuracy=0.5, loss=1.0, l2=0.1, images=512, clean=True,
    converged=None,
):  # fmt: skip
    """A panel with the numbers each claim reads (see `parkkim.claims`).

    Its depth points are an input, then an MSA, an MLP and a conv block:
    `msa` and `conv` are the changes of Δ log amplitude there (the MLP's is
    0), `variance` the changes of log variance at the three blocks. The
    noise has 7 bands; the lowest two drop the accuracy by `low`, the
    highest two by `high`, on a clean accuracy of 0.5.
    """
    eigen = np.array([[t, -1.0 if i < negative else 1.0] for i, t in enumerate(top)])
    frequencies = np.linspace(0, np.pi, 7)
    drops = np.array([low, low, 0.1, 0.1, 0.1, high, high])
    hessian = {
        "eigenvalues": eigen,
        "data_loss": [loss] * len(top),
        "batch_sizes": [32] * len(top),
        "l2_max_curvature": l2,
    }
    if converged is not None:
        hessian["converged"] = converged
    panel = {
        "accuracy": accuracy,
        "test_accuracy": accuracy,
        "hessian": hessian,
        "hessian_clean": {"eigenvalues": eigen / 2} if clean else None,
        "depth": {
            "kinds": ["input", "msa", "mlp", "conv"],
            "delta": [0.0, msa, msa, msa + conv],
            "variance": np.exp(np.cumsum([0.0, *variance])).tolist(),
            "sizes": [[8, 8]] * 4,
        },
        "noise": {
            "frequencies": frequencies,
            "accuracy_drop": drops,
            "clean_accuracy": 0.5,
            "accuracy": 0.5 - drops,
            "noise_rms": np.array([0.03, 0.05, 0.1, 0.15, 0.2, 0.25, 0.35]),
        },
    }
    if images is not None:
        panel["images"] = images
    return panel


def _rows(runs, **kwargs):
    return {row["key"]: row for row in parkkim.claims(runs, **kwargs)}


def _verdicts(runs, **kwargs):
    return {key: row["verdict"] for key, row in _rows(runs, **kwargs).items()}


def _holding():
    """One run per model whose numbers support every claim."""
    return {
        "vit": [_panel(top=(5.0,), negative=1, variance=(-0.1, 0.2, 0.0),
                       low=0.3, high=0.01)],
        "resnet": [_panel(top=(50.0,), variance=(0.0, 0.0, 0.2), low=0.01,
                          high=0.3)],
        "preact_resnet": [_panel(accuracy=0.5)],
        "alternet": [_panel(variance=(-0.1, 0.0, 0.2), accuracy=0.6)],
    }  # fmt: skip


def test_claims_hold_when_the_numbers_say_so():
    rows = _rows(_holding())
    assert [row["key"] for row in rows.values()] == [c.key for c in parkkim.CLAIMS]
    assert {row["outcome"] for row in rows.values()} == {"reproduced"}
    # One run per model: every verdict says so.
    assert rows["hessian_flatter"]["verdict"] == "reproduced; one seed per model"
    assert rows["conv_high_pass"]["verdict"] == "reproduced; one seed"


def test_claims_fail_when_the_numbers_say_so():
    runs = {
        "vit": [_panel(top=(50.0,), msa=0.2, variance=(0.1, -0.2, 0.0),
                       low=0.01, high=0.3)],
        "resnet": [_panel(top=(5.0,), negative=1, conv=-0.3,
                          variance=(0.0, 0.0, -0.2), low=0.3, high=0.01)],
        "preact_resnet": [_panel(accuracy=0.6)],
        "alternet": [_panel(variance=(0.3, 0.0, -0.1), msa=0.2, accuracy=0.5)],
    }  # fmt: skip
    rows = _rows(runs)
    assert {row["outcome"] for row in rows.values()} == {"not reproduced"}


def test_two_models_are_compared_on_every_pair_of_their_runs():
    runs = {
        "vit": [_panel(top=(5.0,)), _panel(top=(50.0,))],
        "resnet": [_panel(top=(20.0,)), _panel(top=(20.0,)), _panel(top=(20.0,))],
    }
    rows = _rows(runs)
    flatter = rows["hessian_flatter"]
    # 2 x 3 pairs, not the 2 seeds a pairing by index would keep.
    assert flatter["holds"] == [True, True, True, False, False, False]
    assert flatter["unit"] == "pairs"
    assert flatter["verdict"] == (
        "mixed (3 of 6 pairs); 2 runs of ViT against 3 of ResNet: 6 pairs"
    )
    assert "ViT 27.5 ± 32, ResNet 20" in flatter["evidence"]
    # One run (an authors' model) against five seeds: five pairs.
    runs = {
        "vit": [_panel(top=(5.0,))],
        "resnet": [_panel(top=(20.0,))] * 4 + [_panel(top=(3.0,))],
    }
    assert _verdicts(runs)["hessian_flatter"] == (
        "mixed (4 of 5 pairs); 1 run of ViT against 5 of ResNet: 5 pairs"
    )
    # Equal seed counts, every pair holds: no qualifier.
    runs = {"vit": [_panel(top=(5.0,))] * 2, "resnet": [_panel(top=(20.0,))] * 2}
    assert _verdicts(runs)["hessian_flatter"] == "reproduced"
    # A claim about one model counts its seeds.
    runs = {"vit": [_panel(msa=-0.2), _panel(msa=0.2)], "resnet": [_panel()]}
    assert _verdicts(runs)["msa_low_pass"] == "mixed (1 of 2 seeds)"


def test_claims_name_the_models_they_need():
    runs = {"vit": [_panel(top=(5.0,))], "resnet": [_panel(top=(20.0,))]}
    rows = _rows(runs)
    for key, needs in (
        ("alternet_variance", "needs alternet"),
        ("alternet_accuracy", "needs alternet, preact_resnet"),
    ):
        assert rows[key]["verdict"] == "not testable"
        assert rows[key]["evidence"] == needs  # fmt: skip
    # AlterNet's MSA blocks join the low-pass claim when it was run.
    runs["alternet"] = [_panel(msa=0.2)]
    low_pass = _rows(runs)["msa_low_pass"]
    assert low_pass["verdict"] == "mixed (1 of 2 runs); one seed per model"
    assert "AlterNet MSA 0.2" in low_pass["evidence"]


def test_the_hessian_claim_needs_only_the_authors_column():
    # Without the clean-data column (clean_hessian=False) the claim is still
    # tested, and its evidence does not mention the column.
    runs = {
        "vit": [_panel(top=(5.0,), clean=False)],
        "resnet": [_panel(top=(50.0,), clean=False)],
    }
    row = _rows(runs)["hessian_flatter"]
    assert row["outcome"] == "reproduced"
    assert "clean" not in row["evidence"] and "nan" not in row["evidence"]
    # With it, its numbers are shown; a NaN there does not change the verdict.
    runs["vit"][0]["hessian_clean"] = {"eigenvalues": [[None, 1.0]]}
    runs["resnet"][0]["hessian_clean"] = {"eigenvalues": [[25.0, 1.0]]}
    row = _rows(runs)["hessian_flatter"]
    assert row["outcome"] == "reproduced"
    assert "clean data, hard labels, no L2: ViT nan, ResNet 25" in row["evidence"]
    # A NaN in the authors' column (None once read back from JSON) does.
    runs["vit"][0]["hessian"]["eigenvalues"] = [[None, 1.0]]
    row = _rows(runs)["hessian_flatter"]
    assert row["verdict"] == (
        "not testable (the ViT's median top eigenvalue is undefined)"
    )


def test_the_hessian_evidence_shows_the_l2_term_the_losses_and_convergence():
    runs = {
        "vit": [_panel(top=(5.0,), l2=3.0, loss=1.0)],
        "resnet": [_panel(top=(50.0,), l2=3.0, loss=0.9)],
    }
    row = _rows(runs)["hessian_flatter"]
    assert "the L2 term's largest curvature: ViT 3, ResNet 3" in row["evidence"]
    # 5 <= 2 x 3: the ViT's top eigenvalues are the L2 term's size.
    assert "the L2 term dominates the ViT's top eigenvalues" in row["evidence"]
    assert "dominates the ResNet's" not in row["evidence"]
    assert "(data term, no L2): ViT 1, ResNet 0.9" in row["evidence"]
    assert row["verdict"] == "reproduced; one seed per model"  # 11 % apart
    runs["resnet"][0]["hessian"]["data_loss"] = [0.7]  # 43 % apart
    for key in ("hessian_flatter", "hessian_negative"):
        assert _verdicts(runs)[key].endswith(
            "at unequal training loss (ViT 1, ResNet 0.7; more than 25% apart)"
        )
    assert "not converged" not in row["evidence"]
    runs["vit"][0]["hessian"]["converged"] = [[True, False]]
    assert (
        "not converged at the iteration cap: ViT 1 of 2 eigenvalues"
        in (_rows(runs)["hessian_flatter"]["evidence"])
    )


@pytest.mark.parametrize(
    "vit, resnet, images, outcome",
    [
        # (low, high) drops. The binomial SE of the four noisy accuracies
        # (about 0.5 each) on 400 images is about sqrt(4 * 0.25 / 400) = 0.05.
        ((0.0, 0.0), (0.0, 0.1), 400, "reproduced"),
        ((0.0, 0.0), (0.0, 0.03), 400, "not distinguishable"),
        ((0.0, 0.0), (0.0, 0.03), 40_000, "reproduced"),  # SE 0.005
        ((0.0, 0.1), (0.0, 0.0), 400, "not reproduced"),
        # High-frequency noise hurts both more (its energy is higher), the
        # ViT less than the ResNet: the paper's claim holds.
        ((0.0, 0.1), (0.0, 0.25), 400, "reproduced"),
        ((0.0, 0.1), (0.0, 0.12), 400, "not distinguishable"),
    ],
)
def test_the_noise_claim_compares_the_models_against_the_binomial_error(
    vit, resnet, images, outcome
):
    runs = {
        "vit": [_panel(low=vit[0], high=vit[1], images=images)],
        "resnet": [_panel(low=resnet[0], high=resnet[1], images=images)],
    }
    row = _rows(runs)["noise_frequency"]
    assert row["outcome"] == outcome
    assert f"n = {images} test images" in row["evidence"]
    assert "noise RMS low / high: ViT 0.04 / 0.3, ResNet 0.04 / 0.3" in row["evidence"]


def test_the_noise_claim_needs_the_number_of_test_images():
    runs = {
        "vit": [_panel(low=0.0, high=0.0, images=None)],
        "resnet": [_panel(low=0.0, high=0.1, images=None)],
    }
    row = _rows(runs)["noise_frequency"]
    assert row["verdict"] == (
        "not testable (the number of test images is not recorded)"
    )
    assert _rows(runs, images=400)["noise_frequency"]["outcome"] == "reproduced"
    # Bands that carried no noise (an empty annulus) are left out.
    for panel in runs["vit"] + runs["resnet"]:
        panel["noise"]["noise_rms"][:2] = 0.0
        panel["noise"]["accuracy_drop"][:2] = 0.5  # would be the "low" bands
    assert _rows(runs, images=400)["noise_frequency"]["outcome"] == "reproduced"


@pytest.mark.parametrize(
    "key, role, variance, holds",
    [
        ("msa_variance", "vit", (-0.1, 0.2, 0.0), True),
        ("msa_variance", "vit", (0.1, 0.2, 0.0), False),  # MSA raises it
        ("msa_variance", "vit", (-0.1, -0.2, 0.0), False),  # MLP lowers it
        ("conv_variance", "resnet", (0.0, 0.0, 0.2), True),
        ("conv_variance", "resnet", (0.0, 0.0, -0.2), False),
        ("alternet_variance", "alternet", (-0.1, 0.0, 0.2), True),
        ("alternet_variance", "alternet", (0.1, 0.0, 0.2), False),  # less than conv
        ("alternet_variance", "alternet", (-0.1, 0.0, -0.2), False),
    ],
)
def test_the_variance_claims_follow_the_authors_models(key, role, variance, holds):
    runs = {"vit": [_panel()], "resnet": [_panel()], "alternet": [_panel()]}
    runs[role] = [_panel(variance=variance)]
    assert _rows(runs)[key]["holds"] == [holds]


# -- what a kept panel must match -------------------------------------------------
PANEL = {"accuracy": 0.5, "hessian": {"batch_sizes": [8]}}


def _quick_config(*changes):
    from keras_vit.recipes.configs.base import CompareConfig
    from keras_vit.recipes.configs.base import load_config
    from keras_vit.recipes.configs.base import override

    return override(load_config("compare_quick", CompareConfig), list(changes))


def _keep(out, config, name="vit", legacy=False):
    """A finished training run's records and its kept panel, as `run` leaves
    them (with a key of the old form, without "analysis", if `legacy`)."""
    from keras_vit.recipes import compare

    if name not in compare.AUTHORS_MODELS:
        run = out / "runs" / f"{name}_seed0"
        run.mkdir(parents=True)
        (run / "results.json").write_text('{"status": "finished"}')
        recorded = compare.train_config(config, name, 0, str(out))
        (run / "config.json").write_text(
            json.dumps(compare._to_json(dataclasses.asdict(recorded)))
        )
    key = compare._panel_key(config, name, 0, str(out))
    if legacy:
        del key["analysis"]
    path = out / "panels" / f"{name}_seed0.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "panel": PANEL}))
    return str(path)


def _kept(out, config, name="vit"):
    """What `run` finds kept for `name` under `config` (`None`: measure again)."""
    from keras_vit.recipes import compare

    key = compare._panel_key(config, name, 0, str(out))

    def legacy(stored, panel):
        return compare._legacy_key_holds(config, name, 0, str(out), key, stored, panel)

    return compare._cached(str(out / "panels" / f"{name}_seed0.json"), key, legacy)


ANALYSED = [
    "weight_decay=0.1",
    "label_smoothing=0.0",
    "mixup_alpha=0.0",
    "cutmix_factor=0.5",
    "crop_area_range=(0.5, 1.0)",
    "crop_aspect_range=(0.5, 2.0)",
    "random_flip=true",
    "randaugment_ops=2",
    "randaugment_magnitude=0.9",
    "hessian_batch_size=4",
    "image_size=24",
    "channels=1",
    "seed=1",
    "train_split=train[:50%]",
]


@pytest.mark.parametrize("change", ANALYSED)
def test_a_kept_panel_is_measured_again_when_an_analysed_setting_changes(
    tmp_path, change
):
    config = _quick_config()
    _keep(tmp_path, config)
    assert _kept(tmp_path, config) == PANEL  # unchanged: reused
    assert _kept(tmp_path, _quick_config("verbose=2")) == PANEL  # not analysed
    assert _kept(tmp_path, _quick_config(change)) is None


def test_the_authors_models_panels_depend_on_every_setting(tmp_path):
    config = _quick_config("models=('authors_vit_ti',)")
    _keep(tmp_path, config, "authors_vit_ti")
    assert _kept(tmp_path, config, "authors_vit_ti") == PANEL
    assert _kept(tmp_path, _quick_config("seeds=3"), "authors_vit_ti") == PANEL
    for change in ("epochs=3", "weight_decay=0.1", "authors_vit_ti=other.pth"):
        assert _kept(tmp_path, _quick_config(change), "authors_vit_ti") is None


@pytest.mark.parametrize("change", ANALYSED)
def test_a_panel_kept_before_keys_named_its_settings_is_checked_by_its_run(
    tmp_path, change
):
    # A key without "analysis": reused only when the training run's recorded
    # config and the panel's batch sizes say that nothing analysed changed.
    config = _quick_config()
    _keep(tmp_path, config, legacy=True)
    assert _kept(tmp_path, config) == PANEL
    changed = _kept(tmp_path, _quick_config(change))
    # The data-order seed was recorded nowhere: the one change it misses.
    assert changed == (PANEL if change == "seed=1" else None)
    # The authors' models have no training run to vouch for the panel.
    config = _quick_config("models=('authors_vit_ti',)")
    _keep(tmp_path, config, "authors_vit_ti", legacy=True)
    assert _kept(tmp_path, config, "authors_vit_ti") is None


def test_the_claims_table_keeps_its_columns():
    from keras_vit.recipes import compare

    text = compare._claims_markdown(parkkim.claims(_holding()), _quick_config())
    lines = [line for line in text.splitlines() if line.startswith("|")]
    assert len(lines) == 2 + len(parkkim.CLAIMS)
    for line in lines:  # "median |top eigenvalue|" escaped: four cells
        assert len(re.findall(r"(?<!\\)\|", line)) == 5, line
    assert "median \\|top eigenvalue\\|" in text


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
        assert len(panel["hessian"]["converged"][0]) == 2
        assert panel["images"] == 32  # analysis_images: the noise claim's n
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
    changed = _run_quick(
        copy, "hessian_top_k=1", "hessian_batch_size=4", "models=('vit',)"
    )
    panel = changed["panels"]["vit"][0]
    assert len(panel["hessian"]["eigenvalues"][0]) == 1
    assert panel["hessian"]["batch_sizes"] == [4]  # a field of the key, not a setting
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
        (
            "models=('vit', 'authors_vit_ti')",
            "'vit' and 'authors_vit_ti' would both be the claims' ViT",
        ),
    ],
)
def test_bad_settings_exit_2_with_one_line(item, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as raised:
        _run_quick(tmp_path, item)
    assert raised.value.code == 2
    err = capsys.readouterr().err.strip()
    assert message in err and "\n" not in err
    assert not (tmp_path / "panels").exists()


def test_help_lists_the_shipped_configs():
    code = (
        "import sys, contextlib, io\n"
        "from keras_vit.recipes import compare\n"
        "with contextlib.redirect_stdout(io.StringIO()) as out:\n"
        "    try:\n"
        "        compare.main(['--help'])\n"
        "    except SystemExit as e:\n"
        "        assert e.code == 0, e.code\n"
        "assert 'compare_authors' in out.getvalue()\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
