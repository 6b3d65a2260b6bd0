"""The verdicts of `keras_vit.parkkim.claims` and the regime they state.

Every panel here is synthetic: a dict shaped like `model_panel`'s, with the
numbers each claim reads chosen so that a claim clearly holds or clearly
fails. The tests read the verdicts as a user reads `claims.md`.
"""

from __future__ import annotations

import numpy as np
import pytest

from keras_vit.parkkim import claims
from keras_vit.parkkim.claims import CLAIMS
from keras_vit.parkkim.claims import accuracy_threshold

ROLES = ("vit", "resnet", "preact_resnet", "alternet")
TITLES = {"vit": "ViT", "resnet": "ResNet", "preact_resnet": "PreActResNet",
          "alternet": "AlterNet"}  # fmt: skip
# The claims that compare a ViT with a CNN: the matched-loss rule's.
VIT_AGAINST_CNN = ("hessian_flatter", "hessian_negative", "noise_frequency")


def _panel(
    accuracy=0.9, loss=0.6, classes=10, images=512, top=10.0, negative=False,
    msa=-0.2, conv=0.3, variance=(-0.1, 0.2, 0.3), low=0.1, high=0.1,
):  # fmt: skip
    """A panel as `model_panel` returns it (and `compare` completes it).

    Depth points: an input, then an MSA, an MLP and a conv block; `msa` and
    `conv` are the changes of Δ log amplitude there, `variance` the changes
    of log variance at the three blocks. The noise has 6 bands: the lowest
    two drop the accuracy by `low`, the highest two by `high`.
    """
    eigenvalues = [[top, -1.0 if negative else 1.0], [top, 1.0]]  # (batches, top_k)
    drops = np.array([low, low, 0.05, 0.05, high, high])
    return {
        "accuracy": accuracy,
        "test_accuracy": accuracy,
        "images": images,
        "classes": classes,
        "hessian": {
            "eigenvalues": eigenvalues,
            "data_loss": [loss, loss],
            "batch_sizes": [32, 32],
            "l2_max_curvature": 0.1,
            "converged": [[True, True], [True, True]],
        },
        "hessian_clean": None,
        "depth": {
            "kinds": ["input", "msa", "mlp", "conv"],
            "delta": [0.0, msa, msa, msa + conv],
            "variance": np.exp(np.cumsum([0.0, *variance])).tolist(),
            "sizes": [[8, 8]] * 4,
        },
        "noise": {
            "frequencies": np.linspace(0, np.pi, 6).tolist(),
            "accuracy_drop": drops.tolist(),
            "accuracy": np.clip(accuracy - drops, 0.0, 1.0).tolist(),
            "noise_rms": [0.03, 0.05, 0.1, 0.15, 0.2, 0.25],
        },
    }


def _holding(**changes):
    """One trained run per model whose numbers support every claim; keyword
    `<role>=dict(...)` changes that model's panel."""
    numbers = {
        "vit": dict(top=5.0, negative=True, variance=(-0.1, 0.2, 0.0),
                    low=0.0, high=0.02),
        "resnet": dict(top=50.0, variance=(0.0, 0.0, 0.2), low=0.0, high=0.3),
        "preact_resnet": dict(accuracy=0.85),
        "alternet": dict(variance=(-0.1, 0.0, 0.2), accuracy=0.9),
    }  # fmt: skip
    return {
        role: [_panel(**{**numbers[role], **changes.get(role, {})})] for role in ROLES
    }


def _failing():
    """One trained run per model whose numbers contradict every claim."""
    return _holding(
        vit=dict(top=50.0, negative=False, msa=0.2, variance=(0.1, -0.2, 0.0),
                 low=0.0, high=0.3),
        resnet=dict(top=5.0, negative=True, conv=-0.3, variance=(0.0, 0.0, -0.2),
                    low=0.0, high=0.02),
        alternet=dict(msa=0.2, variance=(0.3, 0.0, -0.1), accuracy=0.8),
    )  # fmt: skip


def _rows(runs, **kwargs):
    return {row["key"]: row for row in claims.claims(runs, **kwargs)}


# -- each row of the table -------------------------------------------------------
@pytest.mark.parametrize("key", [claim.key for claim in CLAIMS])
def test_each_claim_is_reproduced_or_not_on_clearly_separated_numbers(key):
    held = _rows(_holding())[key]
    assert held["outcome"] == "reproduced"
    assert held["verdict"].startswith("reproduced; one seed")
    failed = _rows(_failing())[key]
    assert failed["outcome"] == "not reproduced"
    assert failed["verdict"].startswith("not reproduced; one seed")
    # Either way the verdict states the regime it was tested in.
    for row in (held, failed):
        assert "; regime: trained (test accuracy " in row["verdict"]
        assert "chance 10% with 10 classes)" in row["verdict"]


def test_a_verdict_states_its_regime_with_the_numbers():
    verdicts = {key: row["verdict"] for key, row in _rows(_holding()).items()}
    assert verdicts["hessian_flatter"] == (
        "reproduced; one seed per model; regime: trained (test accuracy ViT 90%, "
        "ResNet 90%; chance 10% with 10 classes), at matched training loss "
        "(ViT 0.6, ResNet 0.6)"
    )
    # A claim about one model names that model's accuracy, and no loss.
    assert verdicts["conv_variance"] == (
        "reproduced; one seed; regime: trained (test accuracy ResNet 90%; "
        "chance 10% with 10 classes)"
    )
    assert verdicts["alternet_accuracy"] == (
        "reproduced; one seed per model; regime: trained (test accuracy "
        "AlterNet 90%, PreActResNet 85%; chance 10% with 10 classes)"
    )


def test_the_evidence_names_the_numbers_each_claim_rests_on():
    rows = _rows(_holding())
    assert rows["hessian_flatter"]["evidence"].startswith(
        "median |top eigenvalue|: ViT 5, ResNet 50"
    )
    assert (
        "share of negative eigenvalues: ViT 0.25, ResNet 0"
        in (rows["hessian_negative"]["evidence"])
    )
    assert rows["msa_variance"]["evidence"] == (
        "mean change of log variance at MSA blocks: ViT -0.1; mean change of "
        "log variance at MLP blocks: ViT 0.2; MSA blocks that lower it: ViT 1 "
        "of 1; MLP blocks that raise it: ViT 1 of 1"
    )
    noise = rows["noise_frequency"]["evidence"]
    assert "high − low accuracy drop: ViT 0.02, ResNet 0.3" in noise
    assert "ViT − ResNet -0.28, binomial SE" in noise
    assert "(n = 512 test images)" in noise
    # The ViT-vs-CNN claims show the losses of the matched-loss rule.
    for key in VIT_AGAINST_CNN:
        assert (
            "training loss on the Hessian's batches (data term, no L2): ViT 0.6, "
            "ResNet 0.6" in rows[key]["evidence"]
        )


# -- the regime: trained models --------------------------------------------------
@pytest.mark.parametrize("role", ROLES)
def test_an_untrained_model_makes_every_claim_involving_it_not_testable(role):
    runs = _holding(**{role: dict(accuracy=0.1, loss=2.3)})
    rows = _rows(runs)
    involving = [c.key for c in CLAIMS if role in c.roles]
    assert involving
    for key, row in rows.items():
        if key in involving:
            assert row["outcome"] == "not testable"
            assert row["verdict"].startswith(
                f"not testable here (the {TITLES[role]} is not trained: test "
                "accuracy 10%, not above 20% (chance 10% with 10 classes)"
            ), row["verdict"]
            assert row["holds"] == []
            assert "reproduced" not in row["verdict"]
        elif role != "alternet" or key != "msa_low_pass":
            assert row["outcome"] == "reproduced", (key, row["verdict"])


def test_an_untrained_optional_model_is_left_out_with_the_reason():
    # AlterNet joins the ViT in the low-pass claim only when it is trained.
    runs = _holding(alternet=dict(accuracy=0.12, msa=0.5))
    row = _rows(runs)["msa_low_pass"]
    assert row["outcome"] == "reproduced"  # AlterNet's 0.5 would contradict it
    assert row["verdict"].startswith(
        "reproduced; one seed; AlterNet left out: the AlterNet is not trained: "
        "test accuracy 12%, not above 20%"
    )
    assert "AlterNet" not in row["evidence"]


def test_the_quick_comparison_at_chance_is_not_testable_anywhere():
    # `keras-vit compare --config compare_quick`: two training steps, every
    # model near chance accuracy and at the uniform loss ln 10, 32 images.
    accuracies = dict(zip(ROLES, (0.094, 0.125, 0.0625, 0.156), strict=True))
    runs = {
        role: [_panel(accuracy=accuracy, loss=2.30, images=32)]
        for role, accuracy in accuracies.items()
    }
    rows = _rows(runs)
    for row in rows.values():
        assert row["outcome"] == "not testable"
        assert row["verdict"].startswith("not testable here (the "), row["verdict"]
        assert "reproduced" not in row["verdict"]
    # 32 images: luck must not pass for learning (25.9 %, not 2 x chance).
    assert (
        "the AlterNet is not trained: test accuracy 15.6%, not above 25.9%"
        in (rows["alternet_variance"]["verdict"])
    )
    # Both models of a comparison are named.
    assert (
        "the ViT is not trained: test accuracy 9.4%"
        in (rows["hessian_flatter"]["verdict"])
    )
    assert (
        "the ResNet is not trained: test accuracy 12.5%"
        in (rows["hessian_flatter"]["verdict"])
    )


def test_one_untrained_seed_among_trained_ones_is_counted():
    runs = _holding()
    runs["vit"] = [_panel(accuracy=a) for a in (0.3, 0.15, 0.35)]
    verdict = _rows(runs)["msa_variance"]["verdict"]
    assert verdict == (
        "not testable here (the ViT is not trained: test accuracy 26.7 ± 10%, "
        "1 of 3 runs not above 20% (chance 10% with 10 classes))"
    )


@pytest.mark.parametrize(
    "classes, images, threshold",
    [
        (10, None, 0.2),  # twice chance
        (10, 10_000, 0.2),  # chance + 3 SE = 10.9 %: twice chance is larger
        (10, 32, 0.259),  # chance + 3 SE on a small test set
        (100, None, 0.02),
        (2, None, 0.75),  # twice chance is 1: halfway from chance instead
    ],
)
def test_the_chance_threshold(classes, images, threshold):
    assert accuracy_threshold(classes, images) == pytest.approx(threshold, abs=5e-4)


def test_the_authors_models_are_judged_by_their_measured_accuracy():
    # `compare_authors`: no training run; the test accuracy is measured on
    # the whole test split, the loss at the Hessian batches by the panel.
    runs = {
        "vit": [_panel(accuracy=0.78, classes=100, loss=1.1, top=5.0, negative=True)],
        "resnet": [_panel(accuracy=0.81, classes=100, loss=1.0, top=50.0)],
    }
    row = _rows(runs)["hessian_flatter"]
    assert row["outcome"] == "reproduced"
    assert row["regime"] == (
        "trained (test accuracy ViT 78%, ResNet 81%; chance 1% with 100 "
        "classes), at matched training loss (ViT 1.1, ResNet 1)"
    )
    runs["vit"][0]["test_accuracy"] = 0.015  # 1.5 % of 100 classes
    assert _rows(runs)["hessian_flatter"]["verdict"].startswith(
        "not testable here (the ViT is not trained: test accuracy 1.5%, not "
        "above 2.32% (chance 1% with 100 classes)"
    )


def test_a_panel_without_its_number_of_classes_needs_it_given():
    runs = _holding()
    for panels in runs.values():
        del panels[0]["classes"]
    row = _rows(runs)["conv_variance"]
    assert row["verdict"] == (
        "not testable here (the ResNet's number of classes is not recorded, "
        "so its chance accuracy is unknown)"
    )
    assert _rows(runs, classes=10)["conv_variance"]["outcome"] == "reproduced"


# -- the regime: matched loss ------------------------------------------------------
def test_unequal_losses_make_every_vit_against_cnn_claim_not_testable():
    # The default comparison's losses: ViT 1.98, ResNet 0.59.
    runs = _holding(vit=dict(loss=1.98, accuracy=0.3), resnet=dict(loss=0.59))
    rows = _rows(runs)
    for key in VIT_AGAINST_CNN:
        assert rows[key]["outcome"] == "not testable"
        assert rows[key]["verdict"] == (
            "not testable here (unequal training loss: ViT 1.98, ResNet 0.59, "
            "more than 25% apart (the paper compares models at matched loss))"
        )
    # The claims about one model, or AlterNet against its CNN, are tested.
    for key in set(rows) - set(VIT_AGAINST_CNN):
        assert rows[key]["outcome"] == "reproduced", key


@pytest.mark.parametrize("vit, resnet", [(0.62, 0.59), (0.5, 0.6), (0.74, 0.6)])
def test_losses_within_a_quarter_of_each_other_are_matched(vit, resnet):
    rows = _rows(_holding(vit=dict(loss=vit), resnet=dict(loss=resnet)))
    for key in VIT_AGAINST_CNN:
        assert rows[key]["outcome"] == "reproduced"
        assert rows[key]["verdict"].endswith(
            f"at matched training loss (ViT {vit:.3g}, ResNet {resnet:.3g})"
        )


@pytest.mark.parametrize("vit, resnet", [(0.76, 0.6), (0.6, 0.76)])
def test_the_loss_rule_holds_both_ways(vit, resnet):
    # A ViT at a much lower loss than the CNN is no matched comparison either.
    rows = _rows(_holding(vit=dict(loss=vit), resnet=dict(loss=resnet)))
    for key in VIT_AGAINST_CNN:
        assert rows[key]["verdict"].startswith(
            "not testable here (unequal training loss:"
        )


def test_a_missing_training_loss_cannot_be_matched():
    runs = _holding()
    runs["vit"][0]["hessian"]["data_loss"] = [None, None]  # read back from JSON
    verdict = _rows(runs)["noise_frequency"]["verdict"]
    assert verdict == (
        "not testable here (the ViT's training loss is not recorded, so "
        "matched loss cannot be checked)"
    )


def test_untrained_and_unequal_are_both_named():
    runs = _holding(vit=dict(accuracy=0.1, loss=2.3), resnet=dict(loss=0.59))
    verdict = _rows(runs)["hessian_negative"]["verdict"]
    assert verdict == (
        "not testable here (the ViT is not trained: test accuracy 10%, not "
        "above 20% (chance 10% with 10 classes); unequal training loss: ViT "
        "2.3, ResNet 0.59, more than 25% apart (the paper compares models at "
        "matched loss))"
    )
