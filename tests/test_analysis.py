"""Tests of keras_vit.analysis and `python -m recipes.analyze`: known answers."""

from __future__ import annotations

import itertools
import os

import helpers
import keras
import numpy as np
import pytest
import reference

import keras_vit
from keras_vit import analysis

IMAGE_SIZE = (16, 24)  # non-square: a (4, 6) grid at patch 4 catches axis swaps
GRID = (4, 6)
PATCH = 4


@pytest.fixture(scope="module")
def params():
    return reference.make_vit_checkpoint(
        hidden_dim=32, depth=2, mlp_dim=64, num_heads=2, patch_size=PATCH,
        image_size=IMAGE_SIZE, num_classes=10, seed=3,
    )  # fmt: skip


@pytest.fixture(scope="module")
def model(params):
    model = keras_vit.ViT("test/4", image_size=IMAGE_SIZE, num_classes=10)
    helpers.assign_reference_params(model, params)
    return model


@pytest.fixture(scope="module")
def images():
    return helpers.images(batch=5, size=IMAGE_SIZE, seed=1)


@pytest.fixture(scope="module")
def expected(params, images):
    """Every intermediate of the independent float64 NumPy reference."""
    return reference.vit_intermediates(
        params, images, num_heads=2, patch_size=PATCH, gelu="exact"
    )


def _softmax(logits, axis=-1):
    logits = logits - logits.max(axis=axis, keepdims=True)
    weights = np.exp(logits)
    return weights / weights.sum(axis=axis, keepdims=True)


# --- attention weights -----------------------------------------------------


def test_attention_weights_match_reference_for_selected_blocks(model, images, expected):
    maps = analysis.attention_weights(model, images, blocks=[-1], batch_size=2)
    assert list(maps) == [1]  # only the selected block comes back
    np.testing.assert_allclose(maps[1], expected["attention"][1], atol=2e-5)
    both = analysis.attention_weights(model, images, blocks="all", batch_size=3)
    for index in (0, 1):
        np.testing.assert_allclose(both[index], expected["attention"][index], atol=2e-5)
    streamed = dict(analysis.iter_attention_weights(model, images, blocks=0))
    np.testing.assert_allclose(streamed[0], expected["attention"][0], atol=2e-5)


def test_attention_weights_reject_bad_input(model, images):
    with pytest.raises(ValueError, match="out of range"):
        analysis.attention_weights(model, images, blocks=2)
    with pytest.raises(ValueError, match=r"\(batch, 16, 24, 3\)"):
        analysis.attention_weights(model, images[:, :8])


# --- rollout --------------------------------------------------------------


def test_rollout_rows_sum_to_one_and_follow_the_definition():
    rng = np.random.default_rng(0)
    maps = [_softmax(rng.normal(0, 2, (3, 4, 7, 7))) for _ in range(3)]
    rollout = analysis.attention_rollout(maps)
    np.testing.assert_allclose(rollout.sum(axis=-1), 1.0, atol=1e-12)
    assert (rollout >= 0).all()
    fused = [0.5 * (m.mean(axis=1) + np.eye(7)) for m in maps]
    np.testing.assert_allclose(rollout, fused[2] @ fused[1] @ fused[0], atol=1e-12)
    # max fusion breaks row sums before renormalisation; rows still sum to 1.
    rollout_max = analysis.attention_rollout(maps, head_fusion="max")
    np.testing.assert_allclose(rollout_max.sum(axis=-1), 1.0, atol=1e-12)
    # Uniform attention in one block: 0.5 * (1/N + I).
    uniform = np.full((1, 2, 7, 7), 1 / 7)
    np.testing.assert_allclose(
        analysis.attention_rollout([uniform])[0],
        0.5 * (np.full((7, 7), 1 / 7) + np.eye(7)),
    )


def test_rollout_maps_of_a_model(model, images, expected):
    maps = analysis.attention_rollout_maps(model, images, batch_size=2)
    assert maps.shape == (5, *GRID)
    rollout = analysis.attention_rollout(expected["attention"])
    np.testing.assert_allclose(rollout.sum(-1), 1.0, atol=1e-9)
    np.testing.assert_allclose(maps, rollout[:, 0, 1:].reshape(5, *GRID), atol=2e-5)
    assert np.all(maps.sum(axis=(1, 2)) < 1.0)  # the class-token column is dropped
    heat = analysis.to_image_space(maps, IMAGE_SIZE)
    assert heat.shape == (5, *IMAGE_SIZE)
    # A constant map stays constant in image space.
    flat = analysis.to_image_space(np.full((1, *GRID), 0.25), IMAGE_SIZE)
    np.testing.assert_allclose(flat, 0.25, atol=1e-6)


def test_overlay():
    image = np.zeros((8, 8, 1), "float32")  # mid-grey in [-1, 1]
    heat = np.zeros((8, 8))
    heat[2, 3] = 5.0
    out = analysis.overlay(image, heat, mode="mask")
    assert out.dtype == np.uint8 and out.shape == (8, 8, 3)
    assert out[2, 3].tolist() == [128, 128, 128] and out.sum() == 3 * 128
    blended = analysis.overlay(image, heat, alpha=1.0)
    assert blended[2, 3].tolist() == [252, 255, 164]  # top of the ramp
    assert blended[0, 0].tolist() == [0, 0, 4]  # bottom of the ramp
    with pytest.raises(ValueError, match="match the image size"):
        analysis.overlay(image, heat[:4])


# --- mean attention distance ----------------------------------------------


def _brute_force_mean_pair_distance(grid, stride):
    cells = list(itertools.product(range(grid[0]), range(grid[1])))
    total = 0.0
    for (r1, c1), (r2, c2) in itertools.product(cells, cells):
        total += ((stride[0] * (r1 - r2)) ** 2 + (stride[1] * (c1 - c2)) ** 2) ** 0.5
    return total / len(cells) ** 2


def test_uniform_attention_gives_the_mean_pairwise_distance():
    grid, stride = (3, 4), (2, 5)
    tokens = 1 + 12
    uniform = np.full((2, 3, tokens, tokens), 1 / tokens)
    result = analysis.mean_attention_distance(
        uniform, grid, stride, num_prefix_tokens=1
    )
    np.testing.assert_allclose(result, _brute_force_mean_pair_distance(grid, stride))
    # Attention paid to the class token is excluded: moving mass to it changes nothing.
    skewed = uniform.copy()
    skewed[..., 0] = 0.9
    skewed[..., 1:] = 0.1 / 12
    np.testing.assert_allclose(
        analysis.mean_attention_distance(skewed, grid, stride),
        _brute_force_mean_pair_distance(grid, stride),
    )


def test_identity_and_fixed_key_attention_distance():
    grid, stride = (3, 4), (2, 5)
    identity = np.broadcast_to(np.eye(13), (1, 2, 13, 13))
    np.testing.assert_allclose(
        analysis.mean_attention_distance(identity, grid, stride), 0
    )
    # Every query attends only to patch (2, 3): mean of its distances to all.
    fixed = np.zeros((1, 1, 13, 13))
    fixed[..., 1 + 2 * 4 + 3] = 1.0
    want = np.mean(
        [np.hypot(2 * (2 - r), 5 * (3 - c)) for r in range(3) for c in range(4)]
    )
    np.testing.assert_allclose(
        analysis.mean_attention_distance(fixed, grid, stride), [want]
    )


def test_attention_distances_of_a_model(model, images, expected):
    distances = analysis.attention_distances(model, images, batch_size=2)
    assert distances.shape == (2, 2)
    for block in (0, 1):
        want = analysis.mean_attention_distance(
            expected["attention"][block], GRID, PATCH
        )
        np.testing.assert_allclose(distances[block], want, rtol=1e-5)
    assert np.all(distances > 0) and np.all(distances < np.hypot(12, 20))


# --- position-embedding similarity ----------------------------------------


def _sinusoid_embedding(grid, frequencies):
    rows, cols = np.meshgrid(np.arange(grid[0]), np.arange(grid[1]), indexing="ij")
    parts = []
    for w in frequencies:
        parts += [
            np.cos(w * rows),
            np.sin(w * rows),
            np.cos(w * cols),
            np.sin(w * cols),
        ]
    return np.stack(parts, -1).reshape(-1, 4 * len(frequencies))  # (h*w, D)


def test_sinusoid_position_embedding_similarity():
    grid, frequencies = (5, 6), np.array([0.1, 0.25, 0.4])
    table = np.concatenate([np.ones((1, 12)), _sinusoid_embedding(grid, frequencies)])
    sim = analysis.position_embedding_similarity(table[None], grid_size=grid)
    assert sim.shape == (5, 6, 5, 6)
    # Each dot product is sum_k cos(w_k di) + cos(w_k dj); the norms are sqrt(2K).
    f = lambda d: np.mean(np.cos(frequencies * d))  # noqa: E731
    for i, j, k, m in itertools.product(range(5), range(6), range(5), range(6)):
        assert sim[i, j, k, m] == pytest.approx(0.5 * (f(i - k) + f(j - m)), abs=1e-12)
    np.testing.assert_allclose(np.einsum("ijij->ij", sim), 1.0)
    # Neighbours are more similar than far positions, along rows and columns.
    row = sim[2, 0, 2, :]
    assert np.all(np.diff(row) < 0)
    assert np.all(np.diff(sim[0, 3, :, 3]) < 0)
    # The same row (or column) is more similar than the diagonal neighbour.
    assert sim[2, 2, 2, 3] > sim[2, 2, 3, 3] and sim[2, 2, 3, 2] > sim[2, 2, 3, 3]
    picture = analysis.similarity_grid(sim, pad=1)
    assert picture.shape == (5 * 5 + 4, 6 * 6 + 5)
    np.testing.assert_array_equal(
        picture[6 * 1 : 6 * 1 + 5, 7 * 2 : 7 * 2 + 6], sim[1, 2]
    )
    assert np.isnan(picture[5, 0])


def test_position_similarity_reads_the_model(model, params):
    sim = analysis.position_embedding_similarity(model)
    table = params["Transformer/posembed_input/pos_embedding"][0, 1:]
    unit = table / np.linalg.norm(table, axis=-1, keepdims=True)
    np.testing.assert_allclose(sim.reshape(24, 24), unit @ unit.T, atol=1e-6)
    with pytest.raises(ValueError, match="grid_size"):
        analysis.position_embedding_similarity(table)


# --- embedding filters ----------------------------------------------------


def test_pca_recovers_known_components():
    rng = np.random.default_rng(0)
    patch, channels, dim = 4, 3, 40
    size = patch * patch * channels
    components = np.linalg.qr(rng.normal(size=(size, 5)))[0].T  # (5, 48) orthonormal
    scores = rng.normal(size=(dim, 5))
    scores = np.linalg.qr(scores - scores.mean(0))[0]  # centred, orthonormal columns
    sigma = np.array([5.0, 4.0, 3.0, 2.0, 1.0])
    filters = (scores * sigma) @ components + rng.normal(size=size)  # + a mean filter
    kernel = filters.T.reshape(patch, patch, channels, dim)  # (P, P, C, D)
    result = analysis.embedding_filters(kernel, num_components=28)
    assert result.components.shape == (28, patch, patch, channels)
    found = result.components.reshape(28, size)[:5]
    np.testing.assert_allclose(
        np.abs(np.sum(found * components, axis=1)), 1.0, atol=1e-9
    )
    np.testing.assert_allclose(result.explained_variance[:5], sigma**2 / (dim - 1))
    np.testing.assert_allclose(result.explained_variance_ratio[:5].sum(), 1.0)
    largest = np.abs(found).argmax(axis=1)
    assert np.all(found[np.arange(5), largest] > 0)  # sign convention
    rgb = analysis.components_as_rgb(result.components)
    assert rgb.shape == (28, 4, 4, 3) and rgb.min() == 0.0 and rgb.max() == 1.0


def test_embedding_filters_of_a_model(model):
    result = analysis.embedding_filters(model)
    assert result.components.shape == (28, PATCH, PATCH, 3)
    assert np.all(np.diff(result.explained_variance) <= 1e-12)
    with pytest.raises(ValueError, match="1- or 3-channel"):
        analysis.components_as_rgb(np.zeros((2, 1, 1, 64)))


# --- Fourier analysis -----------------------------------------------------


def test_fourier_measure_extremes():
    # The previous definition ("nyquist"): the summary is at (π, π).
    eps, (h, w) = 1e-6, (8, 6)
    nyquist = {"frequency": "nyquist"}
    constant = np.full((2, h, w, 3), 0.7)
    checker = (-1.0) ** np.add.outer(np.arange(h), np.arange(w))
    checker = np.broadcast_to(checker[None, :, :, None], (2, h, w, 3)) * 0.7
    low = analysis.high_frequency_log_amplitude(constant, eps, **nyquist)
    high = analysis.high_frequency_log_amplitude(checker, eps, **nyquist)
    assert low == pytest.approx(np.log(eps) - np.log(0.7 * h * w + eps), abs=1e-6)
    assert high == pytest.approx(np.log(0.7 * h * w + eps) - np.log(eps), abs=1e-6)
    rng = np.random.default_rng(0)
    smooth = np.cos(np.pi * np.arange(h) / h)[None, :, None, None] * np.ones(
        (2, h, w, 3)
    )
    for other in (
        rng.normal(size=(4, h, w, 3)),
        smooth + 0.1 * rng.normal(size=(2, h, w, 3)),
    ):
        assert low < analysis.high_frequency_log_amplitude(other, eps, **nyquist) < high
        # The authors' definition ends at the highest positive frequency,
        # index ((h - 1) // 2, (w - 1) // 2) = (3, 2): the same bounds hold.
        assert low < analysis.high_frequency_log_amplitude(other, eps) < high
    noise = rng.normal(size=(64, h, w, 16))
    white = analysis.high_frequency_log_amplitude(noise, **nyquist)
    assert abs(white) < 0.1  # white noise has a flat spectrum
    # ... but the authors' last bin is complex, 0 and π are real: + log(2) / 2.
    white = analysis.high_frequency_log_amplitude(noise)
    assert white == pytest.approx(np.log(2) / 2, abs=0.1)
    profile = analysis.relative_log_amplitude(checker, **nyquist)
    assert (
        profile.shape == (4,) and profile[0] == 0 and profile[-1] == pytest.approx(high)
    )
    assert analysis.relative_log_amplitude(checker).shape == (3,)  # 0 .. (3, 2)


def test_fourier_of_a_model(model, images, expected):
    result = analysis.feature_map_frequencies(model, images, batch_size=2)
    assert result["labels"] == ["embedding", "msa_0", "mlp_0", "msa_1", "mlp_1"]
    # The authors' diagonal on a (4, 6) grid: (0, 0) to (1, 2), i.e. 0 to
    # (π/2, 2π/3); the previous one, (0, 0), (1, 2), (2, 3): up to (π, π).
    assert result["profiles"].shape == (5, 2)
    assert result["frequencies"].tolist() == [[0, 0], [0.5, 2 / 3]]
    nyquist = analysis.feature_map_frequencies(model, images, frequency="nyquist")
    assert nyquist["profiles"].shape == (5, 3)

    def measure(tokens):
        return analysis.high_frequency_log_amplitude(
            tokens[:, 1:].reshape(5, *GRID, 32)
        )

    want = [measure(expected["embeddings"])] + [
        measure(expected["blocks"][0]),
        measure(expected["blocks"][1]),
    ]
    np.testing.assert_allclose(result["delta"][[0, 2, 4]], want, atol=1e-3)
    blocks = analysis.feature_map_frequencies(model, images, sublayers=False)
    assert blocks["labels"] == ["embedding", "block_0", "block_1"]
    np.testing.assert_allclose(blocks["delta"], want, atol=1e-3)


# --- Hessian --------------------------------------------------------------


def _quadratic_problem(outputs):
    """A bias-free Dense layer with MSE loss: H = 2 / (N m) X^T X (x) I_m."""
    rng = np.random.default_rng(0)
    count, features = 32, 5
    left = np.linalg.qr(rng.normal(size=(count, features)))[0]
    right = np.linalg.qr(rng.normal(size=(features, features)))[0]
    eigenvalues = np.array([8.0, 4.0, 2.0, 1.0, 0.5])
    singular = np.sqrt(eigenvalues * count * outputs / 2)
    x = (left * singular) @ right.T  # 2/(N m) X^T X has exactly `eigenvalues`
    y = rng.normal(size=(count, outputs))
    model = keras.Sequential(
        [keras.Input((features,)), keras.layers.Dense(outputs, use_bias=False)]
    )
    hessian = 2 / (count * outputs) * np.kron(x.T @ x, np.eye(outputs))
    return model, x.astype("float32"), y.astype("float32"), hessian


def test_power_iteration_finds_the_top_eigenvalues_of_a_quadratic():
    model, x, y, hessian = _quadratic_problem(outputs=1)
    want = np.sort(np.linalg.eigvalsh(hessian))[::-1]
    np.testing.assert_allclose(want[:3], [8, 4, 2], atol=1e-9)
    found = analysis.hessian_eigenvalues(
        model, [(x, y)], loss=keras.losses.MeanSquaredError(), top_k=3,
        max_iterations=200, tolerance=1e-10, verbose=0,
    )  # fmt: skip
    assert found.shape == (1, 3)
    np.testing.assert_allclose(found[0], want[:3], atol=1e-3)
    # A negated loss has a negative top eigenvalue, found just as well.
    mse = keras.losses.MeanSquaredError()
    negative = analysis.hessian_eigenvalues(
        model, [(x, y)], loss=lambda t, p: -mse(t, p), top_k=1,
        max_iterations=200, tolerance=1e-10, verbose=0,
    )  # fmt: skip
    np.testing.assert_allclose(negative, [[-8.0]], atol=1e-3)


def test_power_iteration_with_repeated_eigenvalues_and_several_batches():
    model, x, y, hessian = _quadratic_problem(outputs=2)
    want = np.sort(np.linalg.eigvalsh(hessian))[::-1][:3]  # 8, 8, 4
    halves = [(x[:16], y[:16]), (x[16:], y[16:])]
    # The Hessian of the mean loss over both halves is the full-batch Hessian.
    found = analysis.hessian_eigenvalues(
        model, halves, loss=keras.losses.MeanSquaredError(), top_k=3,
        per_batch=False, max_iterations=200, tolerance=1e-10, verbose=0,
    )  # fmt: skip
    assert found.shape == (3,)
    np.testing.assert_allclose(found, want, atol=1e-3)


def test_hessian_vector_products_match_finite_differences():
    # A non-quadratic loss: a tanh layer under cross-entropy.
    model = keras.Sequential(
        [
            keras.Input((4,)),
            keras.layers.Dense(6, activation="tanh"),
            keras.layers.Dense(3),
        ]
    )
    rng = np.random.default_rng(0)
    x = rng.normal(size=(8, 4)).astype("float32")
    y = rng.integers(0, 3, 8)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    hvp = analysis.hessian._HessianVectorProduct(model, loss, model.trainable_variables)
    batch = (keras.ops.convert_to_tensor(x), keras.ops.convert_to_tensor(y))
    vector = rng.normal(size=hvp.size)

    import tensorflow as tf

    def gradient(flat):
        parts = np.split(flat, np.cumsum(hvp.sizes)[:-1])
        for variable, part in zip(model.trainable_variables, parts, strict=True):
            variable.assign(part.reshape(variable.shape).astype("float32"))
        with tf.GradientTape() as tape:
            value = loss(y, model(x))
        grads = tape.gradient(value, model.trainable_variables)
        return np.concatenate([np.asarray(g, "float64").reshape(-1) for g in grads])

    theta = np.concatenate(
        [np.asarray(v).reshape(-1) for v in model.trainable_variables]
    )
    product = hvp(batch, vector)
    step = 1e-2
    finite = (gradient(theta + step * vector) - gradient(theta - step * vector)) / (
        2 * step
    )
    gradient(theta)  # restore the weights
    np.testing.assert_allclose(product, finite, rtol=1e-2, atol=1e-3)


def test_hessian_of_a_vit_head_matches_the_analytic_hessian():
    # With respect to the head alone, the cross-entropy Hessian of a ViT is
    # known: mean_n [f_n; 1][f_n; 1]^T (x) (diag(p_n) - p_n p_n^T).
    model = keras_vit.ViT("test/4", image_size=IMAGE_SIZE, num_classes=10)
    helpers.randomize(model, seed=0, scale=0.3)
    x = helpers.images(batch=6, size=IMAGE_SIZE, seed=1)
    y = np.arange(6) % 10
    head = model.get_layer("head")
    features = keras_vit.feature_extractor(model, blocks=None, include_tokens=False)
    pooled = np.asarray(features(x)["pooled"], "float64")  # (6, 32)
    logits = pooled @ np.asarray(head.kernel) + np.asarray(head.bias)
    probs = _softmax(logits)
    hessian = 0
    for f, p in zip(pooled, probs, strict=True):
        g = np.append(f, 1.0)
        hessian = hessian + np.kron(np.outer(g, g), np.diag(p) - np.outer(p, p)) / 6
    want = np.sort(np.linalg.eigvalsh(hessian))[::-1][:3]
    found = analysis.hessian_eigenvalues(
        model,
        [(x, y)],
        top_k=3,
        variables=[head.kernel, head.bias],
        max_iterations=300,
        tolerance=1e-10,
        verbose=0,
    )
    np.testing.assert_allclose(found[0], want, atol=1e-4)
    with pytest.raises(ValueError, match="pair"):
        analysis.hessian_eigenvalues(model, [x], verbose=0)


# --- frequency-band noise -------------------------------------------------


def test_band_limited_noise_stays_in_its_band():
    noise = analysis.band_limited_noise(
        (3, 16, 12, 2), band=(0.3, 0.6), norm=2.5, seed=0
    )
    np.testing.assert_allclose(np.sqrt((noise**2).sum(axis=(1, 2, 3))), 2.5, rtol=1e-5)
    power = np.abs(np.fft.fft2(noise.astype("float64"), axes=(1, 2))) ** 2
    radius = analysis.noise.radial_frequency(16, 12)
    inside = (radius >= 0.3) & (radius < 0.6)
    assert power[:, ~inside].sum() < 1e-8 * power[:, inside].sum()
    top = analysis.band_limited_noise((1, 16, 12, 1), band=(0.9, 1.0), norm=1.0, seed=0)
    top_power = np.abs(np.fft.fft2(top[0, :, :, 0])) ** 2
    assert top_power[radius >= np.sqrt(2) * 0.9].sum() > 0  # corners belong to it
    with pytest.raises(ValueError, match="holds no frequency"):
        analysis.band_limited_noise((1, 4, 4, 1), band=(0.05, 0.1), norm=1.0)


def mean_sign_problem(size: int, count: int, offset: float):
    """A classifier of the sign of the image mean (only frequency 0 can change
    it), and `count` zero-mean textures shifted by `±offset`, with labels."""
    model = keras.Sequential(
        [
            keras.Input((size, size, 1)),
            keras.layers.GlobalAveragePooling2D(),
            keras.layers.Dense(2),
        ]
    )
    model.layers[-1].set_weights([np.array([[-1.0, 1.0]]), np.zeros(2)])
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, count)
    texture = rng.normal(0, 0.3, (count, size, size, 1))
    texture -= texture.mean(axis=(1, 2, 3), keepdims=True)  # zero-mean texture
    images = np.where(labels, offset, -offset)[:, None, None, None] + texture
    return model, images, labels


def test_noise_robustness_of_a_low_pass_classifier():
    model, images, labels = mean_sign_problem(size=16, count=64, offset=0.05)
    # RMS 0.5: a DC shift of +-0.5 flips about half the signs.
    result = analysis.noise_robustness(
        model, images, labels, bands=[(0.0, 0.1), (0.5, 1.0)], norm=0.5 * 16, verbose=0
    )
    assert result["clean_accuracy"] == 1.0
    assert result["accuracy_drop"][1] == 0.0  # zero-mean noise cannot move the mean
    assert result["accuracy_drop"][0] > 0.25
    with pytest.raises(ValueError, match="one label per image"):
        analysis.noise_robustness(model, images, labels[:3])


# --- the command ----------------------------------------------------------


CAPTIONS = {
    "filters": "RGB embedding filters",
    "position": "Position-embedding similarity",
    "attention": "Attention weights of block 1",
    "distance": "Mean attention distance",
    "rollout": "Attention rollout",
    "fourier": "Fourier analysis of feature maps",
    "hessian": "Hessian max-eigenvalue spectrum",
    "noise": "Robustness to frequency-band noise",
}


def test_analyze_command_writes_every_figure(tmp_path, model, params):
    from PIL import Image

    from keras_vit.recipes import analyze

    path = str(tmp_path / "model.keras")
    model.save(path)
    rng = np.random.default_rng(0)
    data = str(tmp_path / "images.npz")
    np.savez(
        data,
        images=rng.integers(0, 256, (12, 8, 12, 1), dtype=np.uint8),  # resized, 1 -> 3
        labels=rng.integers(0, 10, 12),
    )
    out, logdir = tmp_path / "figures", tmp_path / "tb"
    written = analyze.main(
        [
            "--model", path, "--images", data, "--out", str(out),
            "--logdir", str(logdir), "--hessian-batches", "1",
            "--hessian-batch-size", "4", "--hessian-top-k", "2",
            "--hessian-iterations", "3", "--noise-bands", "3", "--verbose", "0",
        ]
    )  # fmt: skip
    assert sorted(written) == sorted(analyze.ANALYSES)
    for name, png in written.items():
        assert os.path.getsize(png) > 1000, name
        with Image.open(png) as image:
            assert image.format == "PNG" and min(image.size) > 100
            assert image.text["Description"].startswith(CAPTIONS[name])
    import tensorflow as tf

    tags = []
    for event_file in os.listdir(logdir):
        for event in tf.compat.v1.train.summary_iterator(str(logdir / event_file)):
            tags += [value.tag for value in event.summary.value]
    assert sorted(tags) == sorted(f"analysis/{name}" for name in analyze.ANALYSES)


def test_analyze_command_checks_its_arguments(tmp_path, model):
    from keras_vit.recipes import analyze

    path = str(tmp_path / "model.keras")
    model.save(path)
    data = str(tmp_path / "unlabelled.npz")
    np.savez(data, images=np.zeros((2, 16, 24, 3), "float32"))
    with pytest.raises(SystemExit):
        analyze.main(
            [
                "--model",
                path,
                "--images",
                data,
                "--out",
                str(tmp_path),
                "--only",
                "noise",
            ]
        )
    with pytest.raises(SystemExit):
        analyze.main(
            [
                "--model",
                path,
                "--images",
                data,
                "--out",
                str(tmp_path),
                "--only",
                "bogus",
            ]
        )
    written = analyze.main(
        [
            "--model",
            path,
            "--images",
            data,
            "--out",
            str(tmp_path / "f"),
            "--only",
            "filters,position",
        ]
    )
    assert sorted(written) == ["filters", "position"]


def test_analyze_reads_the_embedded_digits():
    from keras_vit.recipes import analyze

    images, labels = analyze.load_images("digits", (16, 24), 3)
    assert images.shape == (360, 16, 24, 3) and labels.shape == (360,)
    assert images.min() >= -1.0 and images.max() <= 1.0 and images.min() < -0.9
    assert sorted(set(labels.tolist())) == list(range(10))


def test_analyze_builds_a_variant_with_weights(tmp_path):
    from keras_vit.recipes import analyze
    from keras_vit.recipes import cli

    square = reference.make_vit_checkpoint(
        hidden_dim=32, depth=2, mlp_dim=64, num_heads=2, patch_size=PATCH,
        image_size=(16, 16), num_classes=10, seed=5,
    )  # fmt: skip
    table = square["Transformer/posembed_input/pos_embedding"]  # (1, 17, 32)
    npz = reference.save_npz(square, str(tmp_path / "checkpoint.npz"))
    trained = keras_vit.ViT("test/4", image_size=16, num_classes=10)
    helpers.randomize(trained, seed=2)
    h5 = str(tmp_path / "model.weights.h5")
    trained.save_weights(h5)

    def load(weights, size):
        args = analyze.build_parser().parse_args(
            ["--variant", "test/4", "--image-size", str(size), "--num-classes", "10"]
            + ["--weights", weights, "--images", "digits", "--out", str(tmp_path)]
        )
        return cli.model_from_args(args).get_layer("posembed_input").embedding.numpy()

    np.testing.assert_allclose(load(npz, 16), table, atol=1e-6)
    resampled = load(npz, 24)  # a (6, 6) grid: resampled, class-token row kept
    assert resampled.shape == (1, 37, 32)
    np.testing.assert_allclose(resampled[0, 0], table[0, 0], atol=1e-6)
    np.testing.assert_allclose(
        load(h5, 16), trained.get_layer("posembed_input").embedding.numpy()
    )


# --- the same analyses on PreActResNet and AlterNet maps -------------------


from keras_vit.analysis import depth as depth_analysis  # noqa: E402
from keras_vit.parkkim import window_distance  # noqa: E402


def randomized_alternet() -> keras.Model:
    """A `test` AlterNet at 16 px with random weights and positive BN variances."""
    model = keras_vit.AlterNet("test", image_size=16, num_classes=3)
    helpers.randomize(model, seed=4)
    for weight in model.weights:  # BatchNorm needs positive variances
        if "moving_variance" in weight.path:
            weight.assign(np.abs(weight.numpy()) + 0.5)
    return model


@pytest.fixture(scope="module")
def alternet():
    return randomized_alternet()


def _pass_through_stem(model):
    """Makes the stem copy input channel 0 into every channel (centre tap)."""
    kernel = np.zeros(model.get_layer("stem_conv").kernel.shape, "float32")
    kernel[1, 1, 0, :] = 1.0
    model.get_layer("stem_conv").kernel.assign(kernel)


@pytest.mark.parametrize("family", ["PreActResNet", "AlterNet"])
def test_fourier_extremes_on_a_cnn_stem(family):
    model = getattr(keras_vit, family)("test", image_size=16, num_classes=3)
    _pass_through_stem(model)
    checker = (-1.0) ** np.add.outer(np.arange(16), np.arange(16))
    checker = np.broadcast_to(checker[None, :, :, None], (2, 16, 16, 3))
    constant = np.full((2, 16, 16, 3), 0.5)
    eps = 1e-6
    high = depth_analysis.depth_statistics(model, checker, epsilon=eps)
    low = depth_analysis.depth_statistics(model, constant, epsilon=eps)
    assert high["labels"][0] == low["labels"][0] == "stem"
    # A checkerboard is all (π, π); a constant map has nothing but frequency 0.
    at_pi = high["deltas"]["nyquist"][0]
    assert at_pi == pytest.approx(np.log(256 + eps) - np.log(eps), 1e-5)
    # The authors' summary bin (7, 7) holds nothing of it either: log(eps) - log(eps).
    assert high["delta"][0] == pytest.approx(0.0, abs=1e-9)
    for definition in ("authors", "nyquist"):
        want = np.log(eps) - np.log(128 + eps)
        assert low["deltas"][definition][0] == pytest.approx(want, 1e-5)
    # Values ±1: variance 1 over all values, 256/255 unbiased over positions.
    assert high["variances"]["all_values"][0] == pytest.approx(1.0)
    assert high["variance"][0] == pytest.approx(256 / 255)
    assert low["variance"][0] == 0 and low["variances"]["all_values"][0] == 0
    assert high["sizes"].tolist()[0] == [16, 16]


def test_depth_statistics_of_a_cnn_match_its_feature_extractor(alternet):
    images = helpers.images(batch=5, size=(16, 16), seed=2)
    stats = depth_analysis.depth_statistics(alternet, images, batch_size=2)
    assert stats["labels"] == ["stem", "stage1_block1", "stage2_block1", "stage2_msa2"]
    assert stats["kinds"] == ["input", "conv", "conv", "msa"]
    assert stats["sizes"].tolist() == [[16, 16], [16, 16], [8, 8], [8, 8]]
    assert [len(p) for p in stats["profiles"]] == [8, 8, 4, 4]  # authors': 0..(n/2-1)
    blocks = keras_vit.feature_extractor(alternet, include_pooled=False)(images)
    stem = keras.Model(alternet.input, alternet.get_layer("stem_conv").output)(images)
    maps = [stem] + [blocks[f"block_{i}"] for i in range(3)]
    want = [analysis.high_frequency_log_amplitude(m) for m in maps]
    np.testing.assert_allclose(stats["delta"], want, atol=1e-4)
    # Per channel over positions (unbiased), then over channels and images.
    spatial = [np.asarray(m).var(axis=(1, 2), ddof=1).mean() for m in maps]
    np.testing.assert_allclose(stats["variance"], spatial, rtol=1e-4)
    variances = [np.asarray(m).reshape(5, -1).var(axis=1).mean() for m in maps]
    np.testing.assert_allclose(stats["variances"]["all_values"], variances, rtol=1e-4)
    assert depth_analysis.map_variance(maps[-1]) == pytest.approx(spatial[-1], 1e-4)
    assert depth_analysis.map_variance(
        maps[-1], definition="all_values"
    ) == pytest.approx(variances[-1], 1e-4)


def test_depth_statistics_of_a_vit_match_the_vit_fourier_path(model, images):
    stats = depth_analysis.depth_statistics(model, images, batch_size=2)
    old = analysis.feature_map_frequencies(model, images, batch_size=2)
    assert stats["labels"] == old["labels"]
    assert stats["kinds"] == ["input", "msa", "mlp", "msa", "mlp"]
    np.testing.assert_allclose(stats["delta"], old["delta"], atol=1e-6)
    np.testing.assert_allclose(np.stack(stats["profiles"]), old["profiles"], atol=1e-6)


def test_depth_statistics_reject_other_models_and_sizes(alternet):
    plain = keras.Sequential([keras.Input((8, 8, 3)), keras.layers.Flatten()])
    with pytest.raises(ValueError, match="was not built by keras_vit"):
        depth_analysis.depth_statistics(plain, np.zeros((1, 8, 8, 3)))
    with pytest.raises(ValueError, match=r"\(batch, 16, 16, 3\).*\(1, 8, 8, 3\)"):
        depth_analysis.depth_statistics(alternet, np.zeros((1, 8, 8, 3)))


def test_uniform_window_attention_gives_the_mean_pairwise_distance():
    window, stride = (3, 4), (2, 5)
    uniform = np.full((2, 6, 3, 12, 12), 1 / 12)  # 6 windows, 3 heads
    result = window_distance.window_attention_distance(uniform, window, stride)
    np.testing.assert_allclose(
        result, [_brute_force_mean_pair_distance(window, stride)] * 3
    )
    identity = np.broadcast_to(np.eye(12), (1, 6, 3, 12, 12))
    np.testing.assert_allclose(
        window_distance.window_attention_distance(identity, window, stride), 0
    )
    with pytest.raises(ValueError, match=r"\(batch, windows, heads, 12, 12\)"):
        window_distance.window_attention_distance(uniform[0], window, stride)


def test_alternet_attention_distance_with_uniform_attention():
    model = keras_vit.AlterNet("test", image_size=16, num_classes=3)
    attention = model.get_layer("stage2_msa2").attention
    attention.query.kernel.assign(np.zeros(attention.query.kernel.shape))
    attention.relative_position_bias.assign(
        np.zeros(attention.relative_position_bias.shape)
    )
    images = helpers.images(batch=3, size=(16, 16), seed=1)
    result = window_distance.alternet_attention_distances(model, images, batch_size=2)
    # Stage 2 is 8x8 on a 16 px input: 2 px per cell, 4x4 windows, 2 heads.
    assert result["labels"] == ["stage2_msa2"] and result["windows"] == [(4, 4)]
    assert result["strides"] == [(2.0, 2.0)]
    want = _brute_force_mean_pair_distance((4, 4), (2, 2))
    np.testing.assert_allclose(result["distances"][0], [want, want], rtol=1e-5)
    both = window_distance.attention_distance_by_depth(model, images)
    np.testing.assert_allclose(both["distances"][0], [want, want], rtol=1e-5)


def test_alternet_attention_distance_matches_its_scores(alternet):
    images = helpers.images(batch=3, size=(16, 16), seed=3)
    block = alternet.get_layer("stage2_msa2")
    state = keras.Model(alternet.input, block.input)(images)
    _, scores = block(state, training=False, return_attention_scores=True)
    scores = np.asarray(scores, "float64")  # (3, 4 windows, 2 heads, 16, 16)
    cells = [(r, c) for r in range(4) for c in range(4)]
    distance = np.array([[np.hypot(2 * (a - c), 2 * (b - d)) for c, d in cells]
                         for a, b in cells])  # fmt: skip
    want = (scores * distance).sum(-1).mean(axis=(0, 1, 3))  # (heads,)
    got = window_distance.alternet_attention_distances(alternet, images)
    np.testing.assert_allclose(got["distances"][0], want, rtol=1e-5)


def test_attention_distance_by_depth_of_each_family(model, images):
    resnet = keras_vit.PreActResNet("test", image_size=16, num_classes=3)
    empty = window_distance.attention_distance_by_depth(
        resnet, np.zeros((1, 16, 16, 3))
    )
    assert empty == {"labels": [], "distances": []}
    with pytest.raises(ValueError, match="has no MSA block"):
        window_distance.alternet_attention_distances(resnet, np.zeros((1, 16, 16, 3)))
    vit = window_distance.attention_distance_by_depth(model, images)
    assert vit["labels"] == ["block_0", "block_1"]
    np.testing.assert_allclose(
        np.stack(vit["distances"]), analysis.attention_distances(model, images)
    )


def test_hessian_and_noise_run_on_cnns(alternet):
    images = helpers.images(batch=4, size=(16, 16), seed=5)
    labels = np.array([0, 1, 2, 0])
    values = analysis.hessian_eigenvalues(
        alternet, [(images, labels)], top_k=1, max_iterations=3, verbose=0
    )
    assert values.shape == (1, 1) and np.isfinite(values).all()
    result = analysis.noise_robustness(alternet, images, labels, bands=2, verbose=0)
    assert result["accuracy"].shape == (2,)
