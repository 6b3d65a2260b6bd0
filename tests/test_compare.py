"""`keras-vit compare` and the claims it tests (`keras_vit.parkkim`)."""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
from helpers import keras_vit_script

from keras_vit.parkkim import claims
from keras_vit.parkkim import report

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIGURES = ("fourier", "variance", "hessian", "hessian_clean", "noise", "distance")
MODELS = ("vit", "resnet", "preact_resnet", "alternet")


# -- the claims, on panels whose numbers are chosen -----------------------------
def _panel(
    top=(10.0,), negative=0, msa=-0.2, conv=0.3, variance=(-0.1, 0.2, 0.3),
    low=0.2, high=0.05, accuracy=0.5, loss=1.0, l2=0.1, images=512, clean=True,
    converged=None, classes=10,
):  # fmt: skip
    """A panel with the numbers each claim reads (see `parkkim.claims`), of
    a trained model (`accuracy` well above chance, 1 / `classes`).

    Its depth points are an input, two MSA + MLP blocks and two conv blocks
    of one resolution: `msa` and `conv` are the changes of Δ log amplitude
    there (the MLPs' are 0), `variance` the changes of log variance at the
    MSA, MLP and conv blocks (the first step, from the input, is 1). The
    smallest Hessian eigenvalue is -3 with `negative`, else -0.5. The noise
    has 7 bands; the lowest two drop the accuracy by `low`, the highest two
    by `high`, on a clean accuracy of 0.5. Its training converged.
    """
    eigen = np.array([[t, -1.0 if i < negative else 1.0] for i, t in enumerate(top)])
    frequencies = np.linspace(0, np.pi, 7)
    drops = np.array([low, low, 0.1, 0.1, 0.1, high, high])
    hessian = {
        "eigenvalues": eigen,
        "smallest": [-3.0 if negative else -0.5] * len(top),
        "data_loss": [loss] * len(top),
        "batch_sizes": [32] * len(top),
        "l2_max_curvature": l2,
    }
    msa_var, mlp_var, conv_var = variance
    if converged is not None:
        hessian["converged"] = converged
    panel = {
        "accuracy": accuracy,
        "test_accuracy": accuracy,
        "classes": classes,
        "hessian": hessian,
        "hessian_clean": {"eigenvalues": eigen / 2} if clean else None,
        "depth": {
            "kinds": ["input", "msa", "mlp", "msa", "mlp", "conv", "conv"],
            "delta": np.cumsum([0.0, msa, 0.0, msa, 0.0, conv, conv]).tolist(),
            "variance": np.exp(
                np.cumsum([0.0, 1.0, mlp_var, msa_var, mlp_var, conv_var, conv_var])
            ).tolist(),
            "sizes": [[8, 8]] * 7,
        },
        "noise": {
            "frequencies": frequencies,
            "accuracy_drop": drops,
            "clean_accuracy": 0.5,
            "accuracy": 0.5 - drops,
            "noise_rms": np.array([0.03, 0.05, 0.1, 0.15, 0.2, 0.25, 0.35]),
        },
        "training": {
            "epoch_losses": [1.2, 1.0, 0.995],
            "warmup_steps": 10,
            "steps": 100,
        },  # fmt: skip
    }
    if images is not None:
        panel["images"] = images
    return panel


def _rows(runs, **kwargs):
    return {row["key"]: row for row in claims.claims(runs, **kwargs)}


def _verdicts(runs, **kwargs):
    """The verdicts without their statistic and regime
    (tests/test_parkkim_claims.py)."""
    return {
        key: row["verdict"].split("; statistic: ")[0].split("; regime: ")[0]
        for key, row in _rows(runs, **kwargs).items()
    }


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
    assert [row["key"] for row in rows.values()] == [c.key for c in claims.CLAIMS]
    assert {row["outcome"] for row in rows.values()} == {"reproduced"}
    # One run per model: every verdict says so.
    verdicts = _verdicts(_holding())
    assert verdicts["hessian_flatter"] == "reproduced; one seed per model"
    assert verdicts["conv_high_pass"] == "reproduced; one seed"


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
    assert flatter["verdict"].startswith(
        "mixed (3 of 6 pairs); 2 runs of ViT against 3 of ResNet: 6 pairs; statistic: "
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
    assert _verdicts(runs)["msa_low_pass"] == "mixed (1 of 2 runs); one seed per model"
    assert "at MSA blocks: ViT -0.2, AlterNet 0.2" in low_pass["evidence"]


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
    assert _verdicts(runs)["hessian_flatter"] == (
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
    assert _verdicts(runs)["hessian_flatter"] == "reproduced; one seed per model"
    runs["resnet"][0]["hessian"]["data_loss"] = [0.7]  # 43 % apart: the regime
    for key in ("hessian_flatter", "hessian_negative"):  # of tests/test_parkkim_claims
        assert _verdicts(runs)[key].startswith(
            "not testable here (unequal training loss: ViT 1, ResNet 0.7, more "
            "than 25% apart"
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
    assert _verdicts(runs)["noise_frequency"] == (
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
    from keras_vit.parkkim.config import CompareConfig
    from keras_vit.recipes.configs.base import load_config
    from keras_vit.recipes.configs.base import override

    return override(load_config("compare_quick", CompareConfig), list(changes))


def _keep(out, config, name="vit", key=None):
    """A finished training run's records and its kept panel, as `run` leaves
    them (keyed by `key`, by default `panel_key` now)."""
    from keras_vit.parkkim import compare

    if name not in compare.AUTHORS_MODELS:
        run = out / "runs" / f"{name}_seed0"
        run.mkdir(parents=True)
        (run / "results.json").write_text('{"status": "finished"}')
    if key is None:
        key = compare.panel_key(config, name, 0, str(out))
    path = out / "panels" / f"{name}_seed0.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "panel": PANEL}))
    return str(path)


def _kept(out, config, name="vit"):
    """What `run` finds kept for `name` under `config` (`None`: measure again)."""
    from keras_vit.parkkim import compare

    key = compare.panel_key(config, name, 0, str(out))
    return compare._cached(str(out / "panels" / f"{name}_seed0.json"), key)


ANALYSED = [
    # The recipe the analyses read (the training loss, the augmentation of
    # the Hessian and landscape batches, the images) ...
    "weight_decay=0.1",
    "label_smoothing=0.0",
    "mixup_alpha=0.0",
    "cutmix_factor=0.5",
    "crop_area_range=(0.5, 1.0)",
    "crop_aspect_range=(0.5, 2.0)",
    "random_flip=true",
    "randaugment_ops=2",
    "randaugment_magnitude=0.9",
    "image_size=24",
    "channels=1",
    "seed=1",
    "train_split=train[:50%]",
    # ... and every analysis setting, none of which is listed by hand.
    "analysis.hessian_batch_size=4",
    "analysis.hessian_top_k=3",
    "analysis.hessian_batches=None",
    "analysis.noise_epsilon=0.5",
    "analysis.images=16",
    "analysis.landscape_points=5",
    "analysis.batch_size=16",
    "analysis.landscape_seeds=0",  # seed 0 no longer draws its landscape
]


@pytest.mark.parametrize("change", ANALYSED)
def test_a_kept_panel_is_measured_again_when_an_analysed_setting_changes(
    tmp_path, change
):
    config = _quick_config()
    _keep(tmp_path, config)
    assert _kept(tmp_path, config) == PANEL  # unchanged: reused
    assert _kept(tmp_path, _quick_config(change)) is None


@pytest.mark.parametrize(
    "same",
    [
        "verbose=2",  # not analysed
        "workdir=elsewhere",
        "analysis.hessian_top_k=2",  # compare_quick's own value
        "analysis.noise_epsilon=0.31",  # what None means for a trained model
        "analysis.landscape_seeds=2",  # seed 0 still draws its landscape
        "seeds=3",  # another seed's panel is another file
    ],
)
def test_a_kept_panel_is_reused_while_its_settings_are_the_same(tmp_path, same):
    config = _quick_config()
    _keep(tmp_path, config)
    assert _kept(tmp_path, _quick_config(same)) == PANEL


def test_the_key_is_every_analysis_setting_and_the_runs_training_config(tmp_path):
    from keras_vit.parkkim import compare
    from keras_vit.recipes.configs.base import RUN_ONLY_FIELDS

    config = _quick_config()
    key = compare.panel_key(config, "resnet", 0, str(tmp_path))
    settings = dataclasses.asdict(config.analysis)
    del settings["landscape_seeds"]
    assert key["analysis"] == {**settings, "noise_epsilon": 0.31}
    assert key["landscape"] is True
    trained = compare.train_config(config, "resnet", 0, str(tmp_path))
    assert key["training"]["variant"] == trained.variant == "test"
    assert key["training"]["architecture"] == "resnet"
    assert not set(key["training"]) & RUN_ONLY_FIELDS
    assert key["run"] is None  # not trained yet


def test_the_cnn_fields_change_the_cnns_runs_and_not_the_vits(tmp_path):
    from keras_vit.parkkim import compare

    config = _quick_config("cnn_epochs=3", "cnn_learning_rate=2e-4")
    vit = compare.train_config(config, "vit", 1, str(tmp_path))
    assert (vit.epochs, vit.learning_rate) == (config.epochs, config.learning_rate)
    for name in ("resnet", "preact_resnet", "alternet"):
        cnn = compare.train_config(config, name, 1, str(tmp_path))
        assert (cnn.epochs, cnn.learning_rate) == (3, 2e-4)
        assert cnn.warmup_steps == config.warmup_steps  # The rest is shared.
    plain = compare.train_config(_quick_config(), "resnet", 1, str(tmp_path))
    assert (plain.epochs, plain.learning_rate) == (config.epochs, config.learning_rate)
    assert compare.panel_key(config, "resnet", 0, str(tmp_path)) != (
        compare.panel_key(_quick_config("cnn_epochs=3"), "resnet", 0, str(tmp_path))
    )  # A cached panel of another learning rate is not reused.


def test_the_authors_models_panels_depend_on_every_setting(tmp_path):
    config = _quick_config("models=('authors_vit_ti',)")
    _keep(tmp_path, config, "authors_vit_ti")
    assert _kept(tmp_path, config, "authors_vit_ti") == PANEL
    assert _kept(tmp_path, _quick_config("seeds=3"), "authors_vit_ti") == PANEL
    for change in ("epochs=3", "weight_decay=0.1", "authors_vit_ti=other.pth",
                   "analysis.noise_epsilon=0.31"):  # fmt: skip
        assert _kept(tmp_path, _quick_config(change), "authors_vit_ti") is None


def test_the_noise_epsilon_is_chosen_per_model_unless_set():
    from keras_vit.parkkim import compare

    config = _quick_config()
    assert config.analysis.noise_epsilon is None
    assert compare.panel_settings(config, "vit").noise_epsilon == 0.31
    assert compare.panel_settings(config, "authors_resnet_50").noise_epsilon == 0.7
    config = _quick_config("analysis.noise_epsilon=0.5")
    for name in ("vit", "authors_vit_ti"):
        assert compare.panel_settings(config, name).noise_epsilon == 0.5
    # Everything else is the config's, whole.
    assert compare.panel_settings(config, "vit") == config.analysis


def test_a_panel_of_an_older_key_is_measured_again(tmp_path):
    # Keys before `analysis` was a PanelSettings named its fields one by one.
    config = _quick_config()
    old = {"settings": {"hessian_top_k": 2}, "landscape": True,
           "data": ["glyphs", "test", 32], "run": None, "weights": None}  # fmt: skip
    _keep(tmp_path, config, key=old)
    assert _kept(tmp_path, config) is None


def test_the_claims_table_keeps_its_columns():
    text = report._claims_markdown(claims.claims(_holding()), _quick_config())
    lines = [line for line in text.splitlines() if line.startswith("|")]
    assert len(lines) == 2 + len(claims.CLAIMS)
    for line in lines:  # "median |top eigenvalue|" escaped: four cells
        assert len(re.findall(r"(?<!\\)\|", line)) == 5, line
    assert "median \\|top eigenvalue\\|" in text


# -- the command ----------------------------------------------------------------
# The stages each model's progress lines name, in order.
STAGES = ("trained", "Fourier/variance", "Hessian", "noise", "distances", "landscape")


def _run_quick(workdir, *extra):
    from keras_vit.parkkim import compare

    argv = ["--config", "compare_quick", "--set", f"workdir={workdir}"]
    for item in extra:
        argv += ["--set", item]
    return compare.main(argv)


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """One uninterrupted quick comparison (every model and analysis, tiny):
    `(workdir, summary, what it printed)`."""
    workdir = tmp_path_factory.mktemp("compare") / "quick"
    with contextlib.redirect_stdout(io.StringIO()) as printed:
        summary = _run_quick(workdir)
    return workdir, summary, printed.getvalue()


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_a_quick_comparison_writes_every_output(quick):
    workdir, summary, _ = quick
    assert [row["key"] for row in summary["claims"]] == [c.key for c in claims.CLAIMS]
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
        assert panel["images"] == 32  # analysis.images: the noise claim's n
        assert panel["noise"]["protocol"] == "authors"
    assert not [p for p in workdir.rglob("*") if p.name.startswith(".partial-")]
    # The landscape's rows, kept while it was computed, are gone.
    assert not list((workdir / "panels").glob("*.landscape.*"))


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_a_comparison_prints_its_plan_then_one_line_per_stage(quick):
    from keras_vit.parkkim.compare import TITLES

    _, _, printed = quick
    lines = printed.splitlines()
    # Always printed (compare_quick has verbose=0), each a "[compare]" line.
    assert lines and all(line.startswith("[compare] ") for line in lines), lines
    plan = lines.index(
        "[compare] plan, timed on each model (the Hessian at most: a power "
        "iteration stops once converged):"
    )
    for name in MODELS:
        title = re.escape(TITLES[name])
        pattern = rf"\[compare\] {title}: timed \d+\.\d s"
        timed = [i for i, line in enumerate(lines) if re.fullmatch(pattern, line)]
        assert len(timed) == 1 and timed[0] < plan
        found = []
        for stage in STAGES:
            pattern = rf"\[compare\] {title} seed 0: {re.escape(stage)} \d+\.\d s"
            found += [i for i, line in enumerate(lines) if re.fullmatch(pattern, line)]
        assert len(found) == len(STAGES) and found == sorted(found), (name, lines)
        assert found[0] > plan  # The plan comes before the long work.
        assert any(line.startswith(f"[compare]   {TITLES[name]}, 1 run: forward "
                                   "pass ") for line in lines)  # fmt: skip
    text = " ".join(line.removeprefix("[compare]").strip() for line in lines)
    assert "Hessian <= " in text and "1 batch x 3 iterations x (2 top + the " \
        "smallest + 2 clean eigenvalues) = 15 products a run" in text  # fmt: skip
    assert "3 x 3 points x 1 batch = 9 forward passes a run" in text
    assert "total: at most " in text and " plus training" in text
    assert "analysis.landscape_points=3 (default 11)" in text
    assert "analysis.landscape_seeds=1," in text  # the default: not repeated
    assert lines[-1].startswith("[compare] claims, tables and figures written to")


def test_a_rerun_reuses_every_run_and_panel(quick, capsys):
    workdir, summary, _ = quick
    started = time.perf_counter()
    again = _run_quick(workdir)
    assert again["claims"] == summary["claims"]
    assert again["rows"] == summary["rows"]
    assert time.perf_counter() - started < 60  # No training, no analysis.
    printed = capsys.readouterr().out
    assert printed.count(": panel kept (") == len(MODELS)
    assert "plan" not in printed  # Nothing left to plan.


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_analysis_settings_set_on_the_command_line_redo_the_panels_only(
    quick, tmp_path
):
    workdir, summary, _ = quick
    copy = tmp_path / "copy"
    shutil.copytree(workdir, copy)
    done = subprocess.run(
        [keras_vit_script(), "compare", "--config", "compare_quick",
         "--set", f"workdir={copy}", "--set", "models=('vit',)",
         "--set", "analysis.hessian_top_k=1", "--set", "analysis.hessian_batch_size=4",
         "--set", "analysis.landscape_points=0"],
        capture_output=True, text=True, timeout=900,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    # The training run is reused; the panel is measured again, as set.
    assert re.search(r"^\[compare\] ViT seed 0: finished training run loaded "
                     r"\d+\.\d s$", out, re.M), out  # fmt: skip
    assert "1 batch x 1 eigenvalue x 3 iterations" in out
    assert "analysis.hessian_top_k=1 (default 5)" in out
    assert re.search(r"^\[compare\] ViT seed 0: Hessian \d+\.\d s$", out, re.M)
    assert "ViT seed 0: landscape" not in out  # landscape_points=0
    with open(copy / "results.json", encoding="utf-8") as f:
        panel = json.load(f)["panels"]["vit"][0]
    assert len(panel["hessian"]["eigenvalues"][0]) == 1
    assert panel["hessian"]["batch_sizes"] == [4]
    assert panel["landscape"] is None
    assert panel["test_accuracy"] == summary["panels"]["vit"][0]["test_accuracy"]


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_an_interrupted_landscape_resumes_from_its_last_grid_point(
    quick, tmp_path, monkeypatch
):
    from keras_vit.analysis import landscape
    from keras_vit.parkkim import compare

    workdir, _, _ = quick
    copy = tmp_path / "copy"
    shutil.copytree(workdir, copy)
    (copy / "panels" / "vit_seed0.json").unlink()
    (copy / "landscape_vit_seed0.csv").unlink()
    evaluate, calls = landscape._evaluate, []

    def killed_after(points):
        def counted(*args, **kwargs):
            if len(calls) == points:
                raise RuntimeError("killed")
            calls.append(None)
            return evaluate(*args, **kwargs)

        return counted

    config = _quick_config(f"workdir={copy}", "models=('vit',)")
    monkeypatch.setattr(landscape, "_evaluate", killed_after(4))
    with pytest.raises(RuntimeError, match="killed"):
        compare.run(config)
    rows = copy / "panels" / "vit_seed0.landscape.csv"
    assert len(rows.read_text().splitlines()) == 4  # 4 of the 3 x 3 points
    assert not (copy / "panels" / "vit_seed0.json").exists()
    calls.clear()
    monkeypatch.setattr(landscape, "_evaluate", killed_after(100))
    compare.run(config)
    assert len(calls) == 9 - 4  # The rest of the grid only.
    # The same file as the uninterrupted run's, and the rows' file is gone.
    assert (copy / "landscape_vit_seed0.csv").read_bytes() == (
        workdir / "landscape_vit_seed0.csv"
    ).read_bytes()
    assert not list((copy / "panels").glob("*.landscape.*"))


@pytest.mark.large  # Over 17 s on 2 cores: not in the default run.
def test_a_killed_comparison_finishes_with_the_same_results(quick, tmp_path):
    workdir, summary, _ = quick
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
        ("cnn_epochs=0", "cnn_epochs=0: must be at least 1"),
        ("cnn_seeds=0", "cnn_seeds=0: must be at least 1"),
        ("analysis.noise_images=0", "analysis.noise_images=0: must be positive"),
        ("cnn_learning_rate=0.0", "cnn_learning_rate=0.0: must be positive"),
        ("cnn_variant=huge", "cnn_variant='huge': must be a row of alternet"),
        ("analysis.hessian_l2=cube", "analysis.hessian_l2='cube': must be one of"),
        ("analysis.hessian_top_k=0", "analysis.hessian_top_k=0: must be positive"),
        ("analysis.landscape_points=1", "analysis.landscape_points=1: must be 0"),
        (
            "analysis.hessian_topk=3",
            "analysis.hessian_topk is no analysis option (did you mean "
            "analysis.hessian_top_k?)",
        ),
        (
            "hessian_top_k=3",
            "unknown config key 'hessian_top_k'; did you mean analysis.hessian_top_k?",
        ),
        ("analysis=None", "analysis is set field by field (analysis.<name>=...)"),
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
        "from keras_vit.parkkim import compare\n"
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


# `keras-vit compare` in one process without network (the download probe
# answers "unreachable"), as a user without CIFAR-100 prepared runs it.
_COMPARE_OFFLINE = """
import sys
from keras_vit.data import datasets
from keras_vit.parkkim import compare

datasets.check_download = lambda *args, **kwargs: False
compare.main(sys.argv[1:])
"""


def test_compare_authors_without_cifar100_is_one_line_and_exit_2(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", _COMPARE_OFFLINE, "--config", "compare_authors",
         "--set", f"data_dir={tmp_path / 'tfds'}",
         "--set", f"workdir={tmp_path / 'run'}"],
        capture_output=True, text=True, timeout=300,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"),
    )  # fmt: skip
    assert done.returncode == 2, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "TFDS dataset 'cifar100'" in lines[0]
    assert "tfds build cifar100" in lines[0]  # what to do
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "tfds").exists() and not (tmp_path / "run").exists()
