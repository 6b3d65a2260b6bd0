"""Few-shot linear evaluation: solver, selection, sampling, accuracy, callback."""

from __future__ import annotations

import csv

import keras
import numpy as np
import pytest
from helpers import tiny_model

from keras_vit.analysis.fewshot import FewShotCallback
from keras_vit.analysis.fewshot import extract_features
from keras_vit.analysis.fewshot import few_shot_accuracy
from keras_vit.analysis.fewshot import few_shot_evaluate
from keras_vit.analysis.fewshot import loo_squared_error
from keras_vit.analysis.fewshot import ridge_regression
from keras_vit.analysis.fewshot import sample_shots


def _clusters(per_class, classes=10, dim=16, spread=8.0, seed=0):
    """Gaussian clusters with unit noise around far-apart random centres."""
    rng = np.random.default_rng(seed)
    centres = spread * rng.normal(size=(classes, dim))
    labels = np.repeat(np.arange(classes), per_class)
    features = centres[labels] + rng.normal(size=(len(labels), dim))
    return features, labels


# -- the closed-form solver -------------------------------------------------------


@pytest.mark.parametrize("l2", [0.0, 0.3, 25.0])
def test_ridge_matches_lstsq_with_unpenalised_bias(l2):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(12, 5)) + 3.0, rng.normal(size=(12, 3))
    weights, bias = ridge_regression(x, y, l2)
    # Augmented least squares: [x 1; sqrt(l2) I 0] [w; b] = [y; 0].
    design = np.block(
        [[x, np.ones((12, 1))], [np.sqrt(l2) * np.eye(5), np.zeros((5, 1))]]
    )
    solution = np.linalg.lstsq(design, np.vstack([y, np.zeros((5, 3))]), rcond=None)[0]
    np.testing.assert_allclose(weights, solution[:5], atol=1e-10)
    np.testing.assert_allclose(bias, solution[5], atol=1e-10)
    # And the normal equations, solved directly.
    normal = design.T @ design
    np.testing.assert_allclose(
        np.linalg.solve(normal, design[:12].T @ y), solution, atol=1e-10
    )


def test_ridge_minimum_norm_when_underdetermined():
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(4, 9)), rng.normal(size=(4, 2))
    weights, bias = ridge_regression(x, y, 0.0)
    np.testing.assert_allclose(x @ weights + bias, y, atol=1e-10)  # interpolates
    centred = x - x.mean(0)
    np.testing.assert_allclose(
        weights, np.linalg.pinv(centred) @ (y - y.mean(0)), atol=1e-10
    )


def test_leave_one_out_matches_refitting():
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(10, 4)), np.sign(rng.normal(size=(10, 3)))
    grid = [0.05, 1.0, 30.0]
    brute = []
    for l2 in grid:
        residuals = []
        for i in range(len(x)):
            keep = np.arange(len(x)) != i
            weights, bias = ridge_regression(x[keep], y[keep], l2)
            residuals.append(y[i] - (x[i] @ weights + bias))
        brute.append(np.mean(np.square(residuals)))
    np.testing.assert_allclose(loo_squared_error(x, y, grid), brute, rtol=1e-8)


def test_solver_rejects_bad_input():
    with pytest.raises(ValueError, match="l2"):
        ridge_regression(np.ones((3, 2)), np.ones((3, 1)), -1.0)
    with pytest.raises(ValueError, match="features"):
        ridge_regression(np.ones((3, 2)), np.ones((4, 1)), 1.0)


# -- sampling ---------------------------------------------------------------------


def test_sample_shots_nested_balanced_and_seeded():
    labels = np.repeat(np.arange(4), 30)[np.random.default_rng(0).permutation(120)]
    subsets = sample_shots(labels, (1, 5, 25), seed=3)
    for shots, indices in subsets.items():
        assert len(np.unique(indices)) == len(indices)
        np.testing.assert_array_equal(np.bincount(labels[indices]), [shots] * 4)
    assert set(subsets[1]) <= set(subsets[5]) <= set(subsets[25])
    again, other = (
        sample_shots(labels, (1, 5, 25), seed=3),
        sample_shots(labels, (1, 5, 25), 4),
    )
    np.testing.assert_array_equal(subsets[5], again[5])
    assert not np.array_equal(subsets[5], other[5])
    with pytest.raises(ValueError, match="Class 2 has 3"):
        sample_shots(np.array([0] * 9 + [1] * 9 + [2] * 3), (5,))


# -- accuracy -----------------------------------------------------------------------


def test_well_separated_features_are_classified_perfectly():
    train_x, train_y = _clusters(per_class=30)
    test_x, test_y = _clusters(per_class=100, seed=0)
    test_x = test_x + np.random.default_rng(9).normal(size=test_x.shape)  # new noise
    accuracies = few_shot_accuracy(train_x, train_y, test_x, test_y)
    assert list(accuracies) == ["1shot", "5shot", "10shot", "25shot"]
    assert accuracies["5shot"] >= 0.99
    assert min(accuracies.values()) >= 0.95


def test_pure_noise_features_give_chance():
    rng = np.random.default_rng(0)
    train_y, test_y = np.repeat(np.arange(10), 30), rng.integers(0, 10, 3000)
    train_x, test_x = rng.normal(size=(300, 32)), rng.normal(size=(3000, 32))
    accuracies = few_shot_accuracy(train_x, train_y, test_x, test_y, trials=2)
    for value in accuracies.values():
        assert abs(value - 0.1) < 0.03, accuracies


def test_accuracy_ignores_the_scale_of_the_features():
    train_x, train_y = _clusters(per_class=10, spread=1.0, seed=4)
    test_x, test_y = _clusters(per_class=20, spread=1.0, seed=4)
    kwargs = {"shots": (1, 5), "seed": 1}
    base = few_shot_accuracy(train_x, train_y, test_x, test_y, **kwargs)
    scaled = few_shot_accuracy(
        1e3 * train_x + 7, train_y, 1e3 * test_x + 7, test_y, **kwargs
    )
    assert base == scaled


def test_fixed_and_listed_regularisers():
    train_x, train_y = _clusters(per_class=10)
    test_x, test_y = _clusters(per_class=10)
    for l2 in (1.0, [0.5, 8.0]):
        accuracies = few_shot_accuracy(
            train_x, train_y, test_x, test_y, shots=(5,), l2=l2
        )
        assert accuracies["5shot"] >= 0.99
    with pytest.raises(ValueError, match="l2"):
        few_shot_accuracy(train_x, train_y, test_x, test_y, l2="best")


# -- with a model -------------------------------------------------------------------


def _colour_images(per_class, classes=3, size=16, seed=0):
    rng = np.random.default_rng(seed)
    colours = np.linspace(-0.8, 0.8, classes)
    labels = np.repeat(np.arange(classes), per_class)
    images = colours[labels][:, None, None, None] + 0.1 * rng.normal(
        size=(len(labels), size, size, 3)
    )
    return images.astype("float32"), labels


def test_evaluate_arrays_and_batches_agree():
    model = tiny_model(image_size=16, include_top=False)
    train, test = _colour_images(6), _colour_images(4, seed=1)
    kwargs = {"shots": (1, 5), "seed": 2, "batch_size": 8}
    from_arrays = few_shot_evaluate(model, train, test, **kwargs)
    # Batches with one-hot labels, as keras_vit.data's pipelines give them.
    one_hot = np.eye(3)[train[1]]
    batches = [(train[0][i : i + 5], one_hot[i : i + 5]) for i in range(0, 18, 5)]
    from_batches = few_shot_evaluate(model, batches, test, **kwargs)
    assert from_arrays == pytest.approx(from_batches)
    features, labels = extract_features(model, test)
    assert features.shape == (12, 32)
    np.testing.assert_array_equal(labels, test[1])
    expected = few_shot_accuracy(
        *extract_features(model, train), features, labels, shots=(1, 5), seed=2
    )
    assert from_arrays == pytest.approx(expected)


def test_callback_logs_during_fit(tmp_path):
    model = tiny_model(image_size=16, num_classes=3)
    model.compile(keras.optimizers.SGD(0.01), "sparse_categorical_crossentropy")
    train, test = _colour_images(6), _colour_images(4, seed=1)
    fewshot = FewShotCallback(train, test, shots=(1, 5), every_n_epochs=2)
    seen = []
    spy = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda e, logs: seen.append(dict(logs))
    )
    log = tmp_path / "log.csv"
    history = model.fit(
        *train,
        epochs=3,
        batch_size=9,
        verbose=0,
        callbacks=[fewshot, spy, keras.callbacks.CSVLogger(str(log))],
    )
    # Evaluated after epochs 1 and 3 (0-based 0 and 2), seen by later callbacks.
    assert len(history.history["fewshot_1shot"]) == 2
    assert [("fewshot_5shot" in logs) for logs in seen] == [True, False, True]
    for value in history.history["fewshot_5shot"]:
        assert 0.0 <= value <= 1.0
    rows = list(csv.DictReader(log.open()))
    assert [row["fewshot_1shot"] == "NA" for row in rows] == [False, True, False]


def test_callback_rejects_bad_arguments():
    with pytest.raises(ValueError, match="every_n_epochs"):
        FewShotCallback(None, None, every_n_epochs=0)
    with pytest.raises(ValueError, match="shots"):
        FewShotCallback(None, None, shots=(0, 5))
