"""Planning `keras-vit compare`: nested settings on the command line and in
`--help`, the plan it prints (`keras_vit.parkkim.plan`), and a loss landscape
that resumes after an interruption (`loss_landscape(rows_path=...)`)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from keras_vit.recipes.configs import base


# -- nested settings: any frozen dataclass field --------------------------------
@dataclasses.dataclass(frozen=True)
class _Knobs:
    """A wing's settings, set field by field.

    Attributes:
        depth: How deep. More words.
        width: How wide, or None.
    """

    depth: int = 2
    width: float | None = None


@dataclasses.dataclass(frozen=True)
class _KnobConfig(base.TrainConfig):
    knobs: _Knobs = _Knobs()  # The knobs.

    def _checks(self):
        yield from super()._checks()
        yield "knobs.depth", self.knobs.depth >= 1 or "must be positive"


def test_any_frozen_dataclass_field_is_set_field_by_field():
    assert base.nested_fields(_KnobConfig) == {
        "encoder": base.EncoderOptions,
        "knobs": _Knobs,
    }
    config = base.override(
        _KnobConfig(), ["knobs.depth=3", "knobs.width=0.5", "qk_norm=true"]
    )
    assert config.knobs == _Knobs(depth=3, width=0.5)
    assert config.encoder.qk_norm  # The encoder's bare names still work.
    assert base.override(config, ["knobs.width=None"]).knobs.width is None
    for item, message in (
        ("depth=3", "unknown config key 'depth'; did you mean knobs.depth?"),
        ("knobs.deep=3", "knobs.deep is no knobs option (did you mean knobs.depth?)"),
        ("knobs.depth=1.5", "knobs.depth=1.5 does not fit int"),
        ("knobs.depth=0", "knobs.depth=0: must be positive"),
        ("knobs=3", "knobs is set field by field (knobs.<name>=...)"),
    ):
        with pytest.raises(base.ConfigError) as raised:
            base.override(_KnobConfig(), [item])
        assert message in str(raised.value), (item, str(raised.value))


def test_help_lists_the_fields_of_nested_settings():
    from keras_vit.parkkim.config import CompareConfig
    from keras_vit.parkkim.panel import PanelSettings
    from keras_vit.recipes.config_help import describe_fields
    from keras_vit.recipes.config_help import fields

    listed = {field.name: field for field in fields(_KnobConfig)}
    assert listed["knobs.depth"].meaning == "How deep."
    assert (listed["knobs.width"].type, listed["knobs.width"].default) == (
        "float | None",
        "None",
    )
    assert "knobs" not in listed and "encoder" not in listed
    listed = {field.name: field for field in fields(CompareConfig)}
    names = [f"analysis.{f.name}" for f in dataclasses.fields(PanelSettings)]
    assert set(names) <= set(listed)
    assert all(listed[name].meaning for name in names)
    text = describe_fields(CompareConfig)
    assert "analysis.hessian_top_k: int = 5" in text
    assert "analysis.landscape_points: int = 11" in text
    assert "analysis.noise_epsilon: float | None = None" in text


# -- the plan -------------------------------------------------------------------
def _authors_settings():
    from keras_vit.parkkim.config import CompareConfig
    from keras_vit.recipes.configs.base import load_config

    return load_config("compare_authors", CompareConfig).analysis


def test_the_plan_multiplies_the_timed_steps_by_the_budget():
    from keras_vit.parkkim import plan

    settings = _authors_settings()
    timings = plan.Timings(
        forward=2.0, hessian_vector_product=5.0, move=0.1, batch_size=96,
        forward_tracing=3.0, hessian_tracing=20.0,
    )  # fmt: skip
    cost = plan.estimate(
        settings, timings, hessian_batches_available=520, landscape=True,
        test_images=960,
    )  # fmt: skip
    assert cost.hessian_batches == 4
    # Per batch: the top 5 and the smallest, then the clean column's top 5.
    assert cost.hessian_products == 4 * 20 * (5 + 1 + 5)
    assert cost.hessian == 880 * 5.0 + 2 * 20.0
    assert cost.landscape_forwards == 21 * 21 * 16
    assert cost.landscape == 7056 * 2.0 + 441 * 0.1 + 3.0
    # 3 passes of the maps over 1,024 images; the noise's clean pass, its
    # bands and the accuracy over 2,000.
    noise = (2 + settings.noise_frequencies) * 2000
    assert cost.other == pytest.approx((3 * 1024 + noise + 960) * 2.0 / 96 + 3 * 3.0)
    assert cost.total == cost.hessian + cost.landscape + cost.other
    # Every batch of the training set, as the authors.
    every = dataclasses.replace(settings, hessian_batches=None, clean_hessian=False)
    cost = plan.estimate(every, timings, hessian_batches_available=520, landscape=False)
    assert (cost.hessian_batches, cost.hessian_products) == (520, 520 * 20 * 6)
    assert (cost.landscape_forwards, cost.landscape) == (0, 0.0)


def test_the_plan_says_what_each_analysis_takes_and_how_to_change_it():
    from keras_vit.parkkim import plan
    from keras_vit.parkkim.panel import PanelSettings

    settings = _authors_settings()
    timings = plan.Timings(
        forward=2.16, hessian_vector_product=6.0, move=0.2, batch_size=96
    )
    cost = plan.estimate(settings, timings, hessian_batches_available=520,
                         landscape=True)  # fmt: skip
    lines = plan.describe(
        [("ViT-Ti (authors')", 1, timings, cost, 1)], settings, PanelSettings()
    )
    text = "\n".join(lines)
    assert lines[1] == (
        "  ViT-Ti (authors'), 1 run: forward pass 2.16 s, Hessian-vector "
        "product 6 s (batches of 96)"
    )
    assert lines[2] == (
        "    Hessian <= 88 min: 4 batches x 20 iterations x (5 top + the smallest "
        "+ 5 clean eigenvalues) = 880 products a run"
    )
    assert lines[3] == (
        "    landscape 4.3 h: 21 x 21 points x 16 batches = 7,056 forward passes "
        "a run, 1 run"
    )
    assert lines[5] == "  total: at most 5.9 h"
    budget = " ".join(line.strip() for line in lines[6:])
    for knob in ("analysis.landscape_points=21 (default 11)",
                 "analysis.landscape_batches=16 (default 2)",
                 "analysis.hessian_batches=4 (default 2)",
                 "analysis.hessian_top_k=5,", "analysis.hessian_iterations=20,",
                 "analysis.hessian_batch_size=32,"):  # fmt: skip
        assert knob in budget, (knob, budget)
    assert budget.startswith("budget (--set KEY=VALUE;")
    assert all(len(line) <= 88 for line in lines[6:]), text
    assert plan.duration(45) == "45 s" and plan.duration(600) == "10 min"


def _tiny():
    import keras

    keras.utils.set_random_seed(0)
    inputs = keras.Input((4, 4, 3))
    hidden = keras.layers.Dense(6, name="hidden")(keras.layers.Flatten()(inputs))
    model = keras.Model(inputs, keras.layers.Dense(3, name="head")(hidden))
    rng = np.random.default_rng(0)
    batches = [
        (
            rng.normal(size=(5, 4, 4, 3)).astype("float32"),
            np.eye(3, dtype="float32")[rng.integers(0, 3, 5)],
        )
        for _ in range(2)
    ]
    return model, batches


def test_the_plan_times_the_model_itself():
    import keras

    from keras_vit.parkkim import plan

    model, batches = _tiny()
    before = [np.array(w) for w in model.weights]
    timings = plan.measure(
        model,
        batches[0],
        loss=keras.losses.CategoricalCrossentropy(from_logits=True),
        weight_decay=0.05,
    )
    assert timings.batch_size == 5
    for value in (timings.forward, timings.hessian_vector_product, timings.move):
        assert 0 < value < 10
    assert timings.forward_tracing >= 0 and timings.hessian_tracing >= 0
    for weight, value in zip(model.weights, before, strict=True):
        np.testing.assert_array_equal(np.array(weight), value)  # unchanged


# -- a landscape resumes from its rows ------------------------------------------
GRID = {"x": (-1.0, 1.0, 3), "y": (-1.0, 1.0, 3)}  # 9 points


@pytest.fixture
def evaluations(monkeypatch):
    """Counts the grid points measured; `fail_after[0]` points, then raises."""
    from keras_vit.analysis import landscape

    evaluate = landscape._evaluate
    calls, fail_after = [], [None]

    def counted(*args, **kwargs):
        if fail_after[0] is not None and len(calls) == fail_after[0]:
            raise RuntimeError("killed")
        calls.append(None)
        return evaluate(*args, **kwargs)

    monkeypatch.setattr(landscape, "_evaluate", counted)
    return calls, fail_after


def test_an_interrupted_landscape_resumes_where_it_stopped(tmp_path, evaluations):
    from keras_vit.analysis.landscape import loss_landscape
    from keras_vit.analysis.landscape import write_landscape_csv

    calls, fail_after = evaluations
    model, batches = _tiny()
    original = [np.array(w) for w in model.weights]
    whole = tmp_path / "whole.csv"
    full = loss_landscape(model, batches, verbose=0, rows_path=str(whole), **GRID)
    assert len(calls) == 9
    # Killed after 4 points: their rows are on disk, the weights restored.
    rows = tmp_path / "rows.csv"
    calls.clear()
    fail_after[0] = 4
    with pytest.raises(RuntimeError, match="killed"):
        loss_landscape(model, batches, verbose=0, rows_path=str(rows), **GRID)
    assert rows.read_text().splitlines() == whole.read_text().splitlines()[:4]
    for weight, value in zip(model.weights, original, strict=True):
        np.testing.assert_array_equal(np.array(weight), value)
    # The same call again measures the other 5 points only.
    calls.clear()
    fail_after[0] = None
    resumed = loss_landscape(model, batches, verbose=0, rows_path=str(rows), **GRID)
    assert len(calls) == 5
    np.testing.assert_array_equal(resumed["rows"], full["rows"])
    np.testing.assert_array_equal(resumed["loss"], full["loss"])
    assert rows.read_bytes() == whole.read_bytes()
    # The rows file has the authors' layout: the final CSV, byte for byte.
    write_landscape_csv(resumed, str(tmp_path / "final.csv"))
    assert (tmp_path / "final.csv").read_bytes() == whole.read_bytes()
    # A finished file: nothing is measured again.
    calls.clear()
    again = loss_landscape(model, batches, verbose=0, rows_path=str(rows), **GRID)
    assert calls == [] and np.array_equal(again["rows"], full["rows"])


@pytest.mark.parametrize(
    "other",
    [
        {"seed": 1},  # other directions: the last row's weight norms differ
        {"x": (-1.0, 1.0, 4)},  # another grid
        {"x": (-0.5, 1.0, 3)},
    ],
)
def test_rows_of_another_sweep_are_measured_again(tmp_path, evaluations, other):
    from keras_vit.analysis.landscape import loss_landscape

    calls, fail_after = evaluations
    model, batches = _tiny()
    rows = tmp_path / "rows.csv"
    fail_after[0] = 4
    with pytest.raises(RuntimeError):
        loss_landscape(model, batches, verbose=0, rows_path=str(rows), **GRID)
    calls.clear()
    fail_after[0] = None
    settings = {**GRID, **other}
    result = loss_landscape(model, batches, verbose=0, rows_path=str(rows), **settings)
    points = settings["x"][2] * settings["y"][2]
    assert len(calls) == points  # Started over.
    fresh = loss_landscape(model, batches, verbose=0, **settings)
    np.testing.assert_array_equal(result["rows"], fresh["rows"])


def test_a_damaged_rows_file_is_measured_again(tmp_path, evaluations):
    from keras_vit.analysis.landscape import loss_landscape

    calls, _ = evaluations
    model, batches = _tiny()
    rows = tmp_path / "rows.csv"
    rows.write_text("-1.0,-1.0,not a number\n")
    loss_landscape(model, batches, verbose=0, rows_path=str(rows), **GRID)
    assert len(calls) == 9
    assert len(rows.read_text().splitlines()) == 9
