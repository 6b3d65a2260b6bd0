"""Park & Kim's analyses against NumPy ports of the authors' own formulas.

The authors' code is xxxnell/how-do-vits-work, branch `transformer`, commit
9571ff1. Each `authors_*` function below is a small NumPy port written from
that code's semantics (PyTorch's unbiased `var`, `torch.roll`, `diag()`,
`F.pad`, `int()` truncation, the metric loops of `ops/tests.py`), evaluated
on the same arrays as keras_vit, including arrays on which the authors' and
the previous definitions differ, so each test shows which one is followed.
"""

from __future__ import annotations

import math
import os
import re

import helpers
import keras
import numpy as np
import pytest
import tensorflow as tf
from test_analysis import mean_sign_problem
from test_analysis import randomized_alternet

import keras_vit
from keras_vit import analysis
from keras_vit.analysis import landscape
from keras_vit.analysis import plotting

# --- ports of the authors' formulas ----------------------------------------


def authors_fourier_profile(maps):
    """`fourier_analysis.ipynb` l.221-230, 268-270 on `(B, h, w, C)` maps."""
    latent = np.transpose(np.asarray(maps, "float64"), (0, 3, 1, 2))  # b c h w
    _, _, h, w = latent.shape
    spectrum = np.log(np.abs(np.fft.fft2(latent)) + 1e-6)  # last two axes
    spectrum = np.roll(spectrum, shift=(int(h / 2), int(w / 2)), axis=(2, 3))
    spectrum = spectrum.mean(axis=(0, 1))
    profile = np.diagonal(spectrum)[int(h / 2) :]
    return profile - profile[0]


def authors_variance(maps):
    """`featuremap_variance.ipynb` l.294.

    `latent.var(dim=[-1, -2]).mean(dim=[0, 1])` on `(B, C, h, w)`.
    """
    latent = np.transpose(np.asarray(maps, "float64"), (0, 3, 1, 2))
    return latent.var(axis=(-1, -2), ddof=1).mean(axis=(0, 1))  # torch: unbiased


def previous_variance(maps):
    maps = np.asarray(maps, "float64")
    return maps.reshape(len(maps), -1).var(axis=1).mean()


def authors_frequency_noise(delta, f, s=0.2):
    """`ops/adversarial.py` l.138-175 (`FreqAttack._fourier_mask`), `.real`.

    `delta` is `(B, C, h, w)`, square, as the authors' code requires.
    """
    _, _, h, w = delta.shape
    spectrum = np.roll(np.fft.fft2(delta), (int(h / 2), int(w / 2)), axis=(2, 3))
    amplitude, angle = np.abs(spectrum), np.angle(spectrum)

    def centre_mask(w1, w2):
        w1 = w2 if w1 > w2 else w1
        w1 = 0 if w1 < 0 else w1
        return np.pad(np.ones((w1, w1)), int((w2 - w1) / 2))

    mask = centre_mask(int(((f + s) * h) / (2 * math.pi)) * 2, h) - centre_mask(
        int(((f - s) * h) / (2 * math.pi)) * 2, h
    )
    spectrum = mask * amplitude * np.exp(1j * angle)
    spectrum = np.roll(spectrum, (int(h / 2), int(w / 2)), axis=(2, 3))
    return np.fft.ifft2(spectrum).real, mask


def authors_metrics(batch_losses, labels, probabilities, cutoffs=(0.0, 0.9)):
    """`ops/tests.py` `test()` from its definitions, sample by sample."""
    y = np.concatenate(labels)
    p = np.concatenate(probabilities).astype("float64")
    classes = p.shape[1]
    confidence, predicted = p.max(axis=1), p.argmax(axis=1)
    correct = predicted == y
    row = [float(np.mean(batch_losses)), *cutoffs]  # AverageMeter of batch means
    accs, uncs, ious, freqs = [], [], [], []
    for cutoff in cutoffs:
        certain = (confidence > cutoff) & (confidence <= 1.0)
        uncertain = (confidence > 0.0) & (confidence <= cutoff)
        accs.append(correct[certain].mean() if certain.any() else 0.0)
        wrong_c, wrong_u = (~correct & certain).sum(), (~correct & uncertain).sum()
        uncs.append(wrong_u / (wrong_c + wrong_u + 1e-7))
        per_class = []
        for k in range(classes):
            if not (certain & (y == k)).any():
                continue  # weight 0: no certain ground truth of class k
            tp = (certain & (y == k) & (predicted == k)).sum()
            fn = (certain & (y == k) & (predicted != k)).sum()
            fp = (certain & (y != k) & (predicted == k)).sum()
            per_class.append(tp / (tp + fn + fp) if tp + fn + fp else 0.0)
        ious.append(np.mean(per_class) if per_class else 0.0)
        freqs.append(certain.sum() / (certain.sum() + uncertain.sum() + 1e-7))
    top5 = np.mean([y[i] in np.argsort(p[i])[-5:] for i in range(len(y))])
    brier = np.mean(((np.eye(classes)[y] - p) ** 2).sum(axis=1))
    edges = np.linspace(0.0, 1.0, 11)
    counts, accuracy, conf = [], [], []
    for low, high in zip(edges[:-1], edges[1:], strict=True):
        member = (confidence > low) & (confidence <= high)
        counts.append(member.sum())
        accuracy.append(correct[member].mean() if member.any() else 0.0)
        in_bin = (confidence >= low) & (confidence < high)  # its [low, high)
        conf.append(confidence[in_bin].sum() / (member.sum() + 1e-7))
    counts, accuracy, conf = map(np.asarray, (counts, accuracy, conf))
    share = counts / (counts.sum() + 1e-7)
    ece = np.sum(np.abs(accuracy - conf) * share)
    ecse = np.sum((conf - accuracy) * share)
    return row + accs + uncs + ious + freqs + [top5, brier, ece, ecse]


def torch_layout(variable, value):
    """A keras_vit weight as PyTorch (timm / the authors' models) stores it."""
    name = variable.name
    if name == "kernel" and value.ndim == 2:  # Linear (out, in)
        return value.T
    if name == "kernel" and value.ndim == 4:  # Conv2d (out, in, kh, kw)
        return value.transpose(3, 2, 0, 1)
    if name == "qkv_kernel":  # timm's fused qkv Linear (3 D, D)
        return value.reshape(value.shape[0], -1).T
    if name == "out_kernel":  # proj Linear (D, D)
        return value.reshape(-1, value.shape[-1]).T
    if name.endswith("bias") and "relative_position" not in name:
        return value.reshape(-1)  # 1-D in PyTorch
    return value  # tokens, position tables, norm parameters


def from_torch_layout(variable, value):
    shape = tuple(variable.shape)
    name = variable.name
    if name == "kernel" and len(shape) == 2:
        return value.T
    if name == "kernel" and len(shape) == 4:
        return value.transpose(2, 3, 1, 0)
    if name in ("qkv_kernel", "out_kernel"):
        return value.T.reshape(shape)
    return value.reshape(shape)


def torch_key(variable):
    """The state-dict key the authors' `kws` are matched against."""
    return variable.path.replace("posembed_input/embedding", "pos_embed")


def authors_direction(raw, weight, key, kws=("pos_embed", "relative_position")):
    """`ops/loss_landscapes.py` l.11-62 for one tensor, PyTorch layout."""
    weight_norm = np.sqrt((weight**2).sum(axis=0, keepdims=True))  # dim=0
    raw_norm = np.sqrt((raw**2).sum(axis=0, keepdims=True))
    direction = weight_norm / (raw_norm + 1e-7) * raw  # normalize_filter
    if raw.ndim < 2:  # ignore_bn
        return np.zeros_like(raw)
    if any(re.search(kw, key) for kw in kws):  # ignore_kw
        return np.zeros_like(raw)
    return direction


# --- arrays on which the definitions differ ---------------------------------


def _arrays(size, seed=0):
    rng = np.random.default_rng(seed)
    white = rng.normal(size=(16, size, size, 4))
    frequency = np.fft.fftfreq(size)
    low_pass = np.exp(-((frequency[:, None] ** 2 + frequency[None, :] ** 2) / 0.02))
    smooth = np.real(
        np.fft.ifft2(np.fft.fft2(white, axes=(1, 2)) * low_pass[None, :, :, None])
    )
    offsets = white + 3.0 * rng.normal(size=(1, 1, 1, 4))  # channel offsets
    return {"white": white, "smooth": smooth, "offsets": offsets}


# --- Fourier ----------------------------------------------------------------


@pytest.mark.parametrize("size", [8, 7, 14])
def test_fourier_default_is_the_authors_profile(size):
    for name, maps in _arrays(size).items():
        maps = maps.astype("float32")
        ours = analysis.relative_log_amplitude(maps)
        want = authors_fourier_profile(maps)
        np.testing.assert_allclose(ours, want, atol=1e-9, err_msg=name)
        delta = analysis.high_frequency_log_amplitude(maps)
        assert delta == pytest.approx(want[-1], abs=1e-9)
        nyquist = analysis.relative_log_amplitude(maps, frequency="nyquist")
        np.testing.assert_allclose(nyquist[: len(want)], want, atol=1e-9)
        if size % 2:  # odd: both end at the same bin
            assert len(nyquist) == len(want)
        else:  # even: the previous definition adds the Nyquist bin
            assert len(nyquist) == len(want) + 1
    # On even white noise the two summaries differ by about log(2) / 2.
    white = _arrays(8)["white"]
    authors = analysis.high_frequency_log_amplitude(white)
    nyquist = analysis.high_frequency_log_amplitude(white, frequency="nyquist")
    assert authors - nyquist == pytest.approx(np.log(2) / 2, abs=0.15)
    assert analysis.diagonal_frequencies(8, 8)[-1].tolist() == [0.75, 0.75]
    assert analysis.diagonal_frequencies(14, 14)[-1] == pytest.approx(12 / 14)
    assert analysis.diagonal_frequencies(8, 8, "nyquist")[-1].tolist() == [1, 1]


def test_fourier_extremes_at_the_authors_frequency():
    eps, h = 1e-6, 8
    i, j = np.meshgrid(np.arange(h), np.arange(h), indexing="ij")
    k = h // 2 - 1  # the authors' last diagonal bin
    cosine = 0.7 * np.cos(2 * np.pi * k * (i + j) / h)[None, :, :, None]
    cosine = np.broadcast_to(cosine, (2, h, h, 3))
    high = analysis.high_frequency_log_amplitude(cosine, eps)
    assert high == pytest.approx(np.log(0.7 * h * h / 2 + eps) - np.log(eps), 1e-6)
    assert high == pytest.approx(authors_fourier_profile(cosine)[-1], 1e-9)
    checker = np.broadcast_to(((-1.0) ** (i + j))[None, :, :, None], (2, h, h, 3))
    # All of a checkerboard is at (π, π): nothing at the authors' bin nor at 0.
    assert analysis.high_frequency_log_amplitude(checker, eps) == pytest.approx(0.0)
    assert analysis.high_frequency_log_amplitude(
        checker, eps, frequency="nyquist"
    ) == pytest.approx(np.log(h * h + eps) - np.log(eps), 1e-6)
    with pytest.raises(ValueError, match="`frequency` must be one of"):
        analysis.relative_log_amplitude(checker, frequency="pi")


@pytest.fixture(scope="module")
def vit():
    model = keras_vit.ViT("test/4", image_size=32, num_classes=4)  # 8 x 8 grid
    helpers.randomize(model, seed=7)
    return model


@pytest.fixture(scope="module")
def alternet():
    return randomized_alternet()


@pytest.mark.parametrize("family", ["vit", "alternet"])
def test_depth_statistics_follow_the_authors_on_every_map(family, vit, alternet):
    model = vit if family == "vit" else alternet
    size = model.inputs[0].shape[1]
    images = helpers.images(batch=5, size=(size, size), seed=3)
    stats = analysis.depth_statistics(model, images, batch_size=2)
    # (the maps below come from one forward pass, the statistics from batches
    # of 2: float32 rounding differs by about 1e-9)
    maps = analysis.FeatureMaps.of(model)
    values = [np.asarray(m, "float64") for _, m in maps.iter_maps(images)]
    want_delta = [authors_fourier_profile(m)[-1] for m in values]
    np.testing.assert_allclose(stats["delta"], want_delta, atol=1e-6)
    np.testing.assert_allclose(stats["deltas"]["authors"], want_delta, atol=1e-6)
    for profile, value in zip(stats["profiles"], values, strict=True):
        np.testing.assert_allclose(profile, authors_fourier_profile(value), atol=1e-6)
    nyquist = [
        analysis.high_frequency_log_amplitude(m, frequency="nyquist") for m in values
    ]
    np.testing.assert_allclose(stats["deltas"]["nyquist"], nyquist, atol=1e-6)
    want_variance = [authors_variance(m) for m in values]
    np.testing.assert_allclose(stats["variance"], want_variance, rtol=1e-6)
    np.testing.assert_allclose(stats["variances"]["spatial"], want_variance, rtol=1e-6)
    previous = [previous_variance(m) for m in values]
    np.testing.assert_allclose(stats["variances"]["all_values"], previous, rtol=1e-6)
    assert not np.allclose(want_variance, previous, rtol=1e-3)  # they do differ
    old = analysis.depth_statistics(
        model, images, frequency="nyquist", variance="all_values"
    )
    np.testing.assert_allclose(old["delta"], nyquist, atol=1e-6)
    np.testing.assert_allclose(old["variance"], previous, rtol=1e-6)
    assert stats["frequencies"][0][-1, 0] == pytest.approx(
        2 * ((values[0].shape[1] - 1) // 2) / values[0].shape[1]
    )
    with pytest.raises(ValueError, match="variance definition"):
        analysis.depth_statistics(model, images, variance="pooled")


def test_feature_map_frequencies_follow_the_authors(vit):
    images = helpers.images(batch=4, size=(32, 32), seed=5)
    result = analysis.feature_map_frequencies(vit, images, batch_size=3)
    stats = analysis.depth_statistics(vit, images)
    np.testing.assert_allclose(result["delta"], stats["delta"], atol=1e-6)
    assert result["profiles"].shape == (5, 4)  # 0 .. 0.75π on the 8 x 8 grid
    assert result["frequencies"][-1].tolist() == [0.75, 0.75]
    old = analysis.feature_map_frequencies(vit, images, frequency="nyquist")
    np.testing.assert_allclose(old["delta"], stats["deltas"]["nyquist"], atol=1e-6)


# --- variance ---------------------------------------------------------------


def test_map_variance_default_is_the_authors():
    for size in (8, 7):
        for name, maps in _arrays(size, seed=1).items():
            got = analysis.map_variance(maps)
            assert got == pytest.approx(authors_variance(maps), rel=1e-12), name
            previous = analysis.map_variance(maps, definition="all_values")
            assert previous == pytest.approx(previous_variance(maps), rel=1e-12)
    # Channel offsets are not spatial variation: only the previous definition
    # counts them (law of total variance).
    offsets = _arrays(8)["offsets"]
    assert analysis.map_variance(offsets) == pytest.approx(1.0, abs=0.1)
    assert analysis.map_variance(offsets, definition="all_values") > 3.0
    with pytest.raises(ValueError, match="variance definition"):
        analysis.map_variance(offsets, definition="spatial_population")


# --- frequency noise --------------------------------------------------------


@pytest.mark.parametrize("size", [16, 32])
def test_square_annulus_is_the_authors_mask(size):
    for f in np.linspace(0.0, np.pi, 11):
        ours = analysis.square_annulus_mask(size, size, f, 0.2)
        _, theirs = authors_frequency_noise(np.zeros((1, 1, size, size)), f)
        np.testing.assert_array_equal(ours, np.fft.ifftshift(theirs))
    # An L∞ ring: at 32 px and f = π/2, trunc((π/2 ± 0.2) 32 / 2π) = 9 and 6,
    # so k in [-9, 8]² minus [-6, 5]²: square, one longer on the negative side.
    mask = analysis.square_annulus_mask(32, 32, np.pi / 2)
    k = np.rint(np.fft.fftfreq(32) * 32).astype(int)
    ky, kx = np.meshgrid(k, k, indexing="ij")
    inside = lambda m: (ky >= -m) & (ky <= m - 1) & (kx >= -m) & (kx <= m - 1)  # noqa: E731
    np.testing.assert_array_equal(mask.astype(bool), inside(9) & ~inside(6))
    with pytest.raises(ValueError, match="0 <= frequency <= π"):
        analysis.square_annulus_mask(32, 32, 4.0)


def test_sign_band_noise_is_the_authors_noise():
    shape = (2, 32, 32, 3)
    for f in (0.0, 0.3, np.pi / 2, np.pi):
        ours = analysis.sign_band_noise(shape, f, epsilon=0.7, seed=11)
        signs = 0.7 * np.sign(np.random.default_rng(11).standard_normal(shape))
        want, _ = authors_frequency_noise(np.transpose(signs, (0, 3, 1, 2)), f)
        np.testing.assert_allclose(ours, np.transpose(want, (0, 2, 3, 1)), atol=1e-6)
    # Not renormalised: the RMS follows the annulus's area (x10 from 0 to π).
    rms = [
        np.sqrt(np.mean(analysis.sign_band_noise((64, 32, 32, 3), f, seed=0) ** 2))
        for f in (0.0, np.pi)
    ]
    assert rms[0] == pytest.approx(0.033, abs=0.003)
    assert rms[1] == pytest.approx(0.32, abs=0.01)


def test_noise_robustness_reports_the_rms_of_each_band():
    # A classifier of the image mean: only frequency 0 can change it.
    model, images, labels = mean_sign_problem(size=32, count=48, offset=0.01)
    frequencies = [0.0, np.pi / 2, np.pi]
    result = analysis.noise_robustness(
        model, images, labels, frequencies=frequencies, epsilon=0.7, repeats=2,
        seed=4, verbose=0,
    )  # fmt: skip
    assert result["protocol"] == "authors" and result["clean_accuracy"] == 1.0
    assert result["accuracy_drop"][0] > 0.1  # the f = 0 annulus holds DC
    assert result["accuracy_drop"][1:].tolist() == [0.0, 0.0]
    # The same draws through the port give the same RMS per band.
    draws = np.random.default_rng(4)
    want, expected = [], []
    for f in frequencies:
        squares = 0.0
        for _ in range(2):
            signs = 0.7 * np.sign(draws.standard_normal(images.shape))
            noise, mask = authors_frequency_noise(np.transpose(signs, (0, 3, 1, 2)), f)
            squares += np.mean(noise**2) / 2
        want.append(np.sqrt(squares))
        # Real part of a one-sided mask: the filter is (M(k) + M(-k)) / 2.
        unshifted = np.fft.ifftshift(mask)
        mirror = unshifted[(-np.arange(32)) % 32][:, (-np.arange(32)) % 32]
        expected.append(0.7 * np.sqrt(np.mean(((unshifted + mirror) / 2) ** 2)))
    np.testing.assert_allclose(result["noise_rms"], want, rtol=1e-5)
    np.testing.assert_allclose(result["expected_noise_rms"], expected, rtol=1e-12)
    np.testing.assert_allclose(result["noise_rms"], expected, rtol=0.05)
    assert result["bands"][-1].tolist() == pytest.approx([1 - 0.2 / np.pi, 1.0])


def test_noise_protocols_are_chosen_by_name():
    model = keras.Sequential(
        [keras.Input((16, 16, 1)), keras.layers.Flatten(), keras.layers.Dense(2)]
    )
    images, labels = np.zeros((4, 16, 16, 1), "float32"), np.array([0, 1, 0, 1])
    old = analysis.noise_robustness(model, images, labels, bands=2, norm=1.0, verbose=0)
    assert old["protocol"] == "equal_energy"
    np.testing.assert_allclose(old["noise_rms"], 1.0 / 16, rtol=1e-5)  # norm/sqrt(HWC)
    equal = analysis.noise_robustness(
        model, images, labels, protocol="equal_energy", verbose=0
    )
    assert len(equal["accuracy"]) == 10 and equal["norm"] == pytest.approx(1.6)
    authors = analysis.noise_robustness(model, images, labels, verbose=0)
    assert authors["protocol"] == "authors" and len(authors["accuracy"]) == 11
    np.testing.assert_allclose(authors["frequencies"], np.linspace(0, np.pi, 11))
    with pytest.raises(
        ValueError, match="`norm` cannot be used with protocol='authors'"
    ):
        analysis.noise_robustness(model, images, labels, norm=1.0, protocol="authors")
    with pytest.raises(ValueError, match="`frequencies` cannot be used"):
        analysis.noise_robustness(
            model, images, labels, bands=2, frequencies=[0.0], verbose=0
        )
    with pytest.raises(ValueError, match="0 <= frequency <= π"):
        analysis.noise_robustness(model, images, labels, frequencies=[4.0])
    with pytest.raises(ValueError, match="holds no frequency"):
        analysis.noise_robustness(model, images, labels, bands=[(0.01, 0.02)])
    with pytest.raises(ValueError, match="`protocol` must be one of"):
        analysis.noise_robustness(model, images, labels, protocol="gaussian")


# --- Hessian ----------------------------------------------------------------


def _tiny_classifier(seed=0):
    model = keras.Sequential(
        [
            keras.Input((3,)),
            keras.layers.Dense(4, activation="tanh", name="hidden"),
            keras.layers.Dense(3, name="out"),
        ]
    )
    rng = np.random.default_rng(seed)
    for weight in model.weights:  # no zero-norm tensor: ||W|| is smooth there
        weight.assign(rng.normal(0, 0.8, weight.shape).astype("float32"))
    return model


def _mix(inputs, targets):
    """A fixed MixUp with the reversed batch (weight 0.7)."""
    inputs, targets = np.asarray(inputs), np.asarray(targets)
    return 0.7 * inputs + 0.3 * inputs[::-1], 0.7 * targets + 0.3 * targets[::-1]


def exact_hessian(model, loss, inputs, targets, weight_decay=0.0, l2="norm"):
    """The full Hessian: nested tapes for the data term, analytic L2 term."""
    variables = model.trainable_variables
    with tf.GradientTape() as outer:
        with tf.GradientTape() as inner:
            value = loss(tf.constant(targets), model(tf.constant(inputs)))
        grads = inner.gradient(value, variables)
        flat = tf.concat([tf.reshape(g, [-1]) for g in grads], axis=0)
    blocks = outer.jacobian(flat, variables)
    hessian = np.concatenate(
        [np.asarray(b, "float64").reshape(len(flat), -1) for b in blocks], axis=1
    )
    start = 0
    for variable in variables:  # ops/norm.py's sum_k ||W_k||, or its square
        w = np.asarray(variable, "float64").reshape(-1)
        end = start + len(w)
        if l2 == "norm":
            n = np.linalg.norm(w)
            block = (np.eye(len(w)) - np.outer(w, w) / n**2) / n
        else:
            block = np.eye(len(w))
        hessian[start:end, start:end] += weight_decay * block
        start = end
    return (hessian + hessian.T) / 2


def _top_by_magnitude(hessian, k):
    values = np.linalg.eigvalsh(hessian)
    return values[np.argsort(-np.abs(values))][:k]


@pytest.mark.parametrize(
    "weight_decay, l2, augment",
    [
        (0.0, "norm", False),
        (0.3, "norm", False),
        (0.3, "norm", True),
        (0.3, "squared", True),
    ],
)
def test_hessian_spectrum_matches_the_exact_hessian(weight_decay, l2, augment):
    model = _tiny_classifier(seed=5)  # seeds with well-separated eigenvalues
    rng = np.random.default_rng(2)
    x = rng.normal(size=(8, 3)).astype("float32")
    y = keras.utils.to_categorical(rng.integers(0, 3, 8), 3).astype("float32")
    loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    seen = []

    def transform(inputs, targets):
        out = _mix(inputs, targets)
        seen.append(out)
        return out

    result = analysis.hessian_spectrum(
        model, [(x, y)], loss=loss, transform=transform if augment else None,
        weight_decay=weight_decay, l2=l2, top_k=3, max_iterations=1000,
        tolerance=1e-7, verbose=0,
    )  # fmt: skip
    assert len(seen) == (1 if augment else 0)  # once per batch, not per product
    inputs, targets = seen[0] if augment else (x, y)
    hessian = exact_hessian(model, loss, inputs, targets, weight_decay, l2)
    want = _top_by_magnitude(hessian, 4)
    assert np.all(np.diff(np.abs(want)) < -0.02 * np.abs(want[0]))  # separated
    np.testing.assert_allclose(result["eigenvalues"][0], want[:3], rtol=1e-4, atol=1e-5)
    if weight_decay:  # the L2 term moves the spectrum
        plain = _top_by_magnitude(exact_hessian(model, loss, inputs, targets), 3)
        assert np.abs(plain - want[:3]).max() > 1e-2
    data = float(loss(targets, model(inputs)))
    weights = [np.asarray(v, "float64") for v in model.trainable_variables]
    if l2 == "norm":  # ops/norm.py l2(): sum of unsquared norms
        penalty = weight_decay * sum(np.sqrt((w**2).sum()) for w in weights)
    else:
        penalty = weight_decay / 2 * sum((w**2).sum() for w in weights)
    assert result["data_loss"][0] == pytest.approx(data, rel=1e-5)
    assert result["l2"] == pytest.approx(penalty, rel=1e-5)
    assert result["loss"][0] == pytest.approx(data + penalty, rel=1e-5)


def test_hessian_spectrum_covers_every_batch_and_reports_their_loss():
    model = _tiny_classifier(seed=3)  # seeds with well-separated eigenvalues
    rng = np.random.default_rng(1)
    x = rng.normal(size=(10, 3)).astype("float32")
    y = rng.integers(0, 3, 10)
    data = tf.data.Dataset.from_tensor_slices((x, y)).batch(4)  # 4, 4, 2
    result = analysis.hessian_spectrum(
        model, data, weight_decay=0.05, top_k=2, max_iterations=500,
        tolerance=1e-7, verbose=0,
    )  # fmt: skip
    assert result["eigenvalues"].shape == (3, 2)
    assert result["batch_sizes"].tolist() == [4, 4, 2]
    loss = analysis.hessian.default_loss
    for i, (start, end) in enumerate([(0, 4), (4, 8), (8, 10)]):
        want = _top_by_magnitude(
            exact_hessian(model, loss, x[start:end], y[start:end], 0.05), 2
        )
        np.testing.assert_allclose(result["eigenvalues"][i], want, rtol=1e-3)
        data_loss = float(loss(tf.constant(y[start:end]), model(x[start:end])))
        assert result["data_loss"][i] == pytest.approx(data_loss, rel=1e-5)
    sizes = np.array([4, 4, 2])
    assert result["mean_loss"] == pytest.approx(
        float((result["loss"] * sizes).sum() / 10), rel=1e-9
    )
    # The L2 term's own curvature: weight_decay / the smallest norm.
    norms = [np.linalg.norm(np.asarray(v)) for v in model.trainable_variables]
    assert result["l2_max_curvature"] == pytest.approx(0.05 / min(norms), rel=1e-5)
    # hessian_eigenvalues is the same numbers; the settings are checked.
    values = analysis.hessian_eigenvalues(
        model, data, weight_decay=0.05, top_k=2, max_iterations=500,
        tolerance=1e-7, verbose=0,
    )  # fmt: skip
    np.testing.assert_allclose(values, result["eigenvalues"], rtol=1e-6)
    with pytest.raises(ValueError, match="`l2` must be one of"):
        analysis.hessian_spectrum(model, data, weight_decay=0.05, l2="l1")
    with pytest.raises(ValueError, match="`weight_decay` must be >= 0"):
        analysis.hessian_spectrum(model, data, weight_decay=-1)
    with pytest.raises(ValueError, match="yielded no batch"):
        analysis.hessian_spectrum(model, [], verbose=0)


def test_hessian_spectrum_records_which_eigenvalues_converged():
    model = _tiny_classifier(seed=3)
    rng = np.random.default_rng(1)
    batch = (rng.normal(size=(8, 3)).astype("float32"), rng.integers(0, 3, 8))
    done = analysis.hessian_spectrum(
        model, [batch], top_k=2, max_iterations=500, tolerance=1e-7, verbose=0
    )
    assert done["converged"].dtype == bool
    assert done["converged"].tolist() == [[True, True]]
    # Stopped by the cap before the tolerance (0: never met) is reached.
    capped = analysis.hessian_spectrum(
        model, [batch, batch], top_k=2, max_iterations=3, tolerance=0.0, verbose=0
    )
    assert capped["converged"].tolist() == [[False, False], [False, False]]
    # The flags are sorted with their eigenvalues, by decreasing magnitude.
    values, flags = analysis.hessian._by_magnitude(
        [1.0, -5.0, 3.0], [True, False, True]
    )
    assert values == [-5.0, 3.0, 1.0] and flags == [False, True, True]


def test_the_smallest_eigenvalue_is_measured_directly_by_lanczos():
    model = _tiny_classifier(seed=5)
    rng = np.random.default_rng(4)
    x = rng.normal(size=(8, 3)).astype("float32")
    y = keras.utils.to_categorical(rng.integers(0, 3, 8), 3).astype("float32")
    loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    size = sum(int(np.prod(v.shape)) for v in model.trainable_variables)
    exact = np.linalg.eigvalsh(exact_hessian(model, loss, x, y, 0.05, "squared"))
    assert exact[0] < 0 < exact[-1]  # an indefinite Hessian, as a trained net's
    # As many Lanczos steps as parameters: exact to round-off.
    full = analysis.hessian_spectrum(
        model, [(x, y)], loss=loss, weight_decay=0.05, l2="squared", top_k=1,
        max_iterations=size, tolerance=1e-6, smallest=True, verbose=0,
    )  # fmt: skip
    assert full["smallest"][0] == pytest.approx(exact[0], rel=1e-5, abs=1e-7)
    assert full["smallest_converged"].tolist() == [True]
    # Fewer steps: an upper bound of it, within the residual bound it reports.
    few = analysis.hessian_spectrum(
        model, [(x, y)], loss=loss, weight_decay=0.05, l2="squared", top_k=1,
        max_iterations=4, smallest=True, verbose=0,
    )  # fmt: skip
    estimate, bound = few["smallest"][0], few["smallest_residual"][0]
    assert estimate >= exact[0] - 1e-6
    assert np.abs(exact - estimate).min() <= bound + 1e-6
    # Off by default: the top-k spectrum alone costs what it did.
    plain = analysis.hessian_spectrum(model, [(x, y)], top_k=1, verbose=0)
    assert "smallest" not in plain


@pytest.mark.large  # Over 15 s on 2 Zen 3 cores: not in the default run.
def test_no_top_eigenvalue_is_one_tensors_l2_curvature_under_qk_norm():
    # QK-norm's key LayerNorm bias adds q . beta to every logit of a row of
    # the attention: softmax ignores it, so the loss does not depend on it.
    # Trained with weight decay its norm shrinks to round-off, and the
    # authors' unsquared L2 (wd ||beta||) then has curvature wd / ||beta||.
    from keras_vit.parkkim.settings import PanelSettings

    model = keras_vit.ViT("test/4", image_size=16, num_classes=3, qk_norm=True)
    helpers.randomize(model, seed=3)
    (beta,) = [v for v in model.trainable_variables if "key_norm/beta" in v.path][:1]
    beta.assign(np.full(beta.shape, 1e-4 / np.sqrt(np.prod(beta.shape)), "float32"))
    rng = np.random.default_rng(0)
    x = rng.uniform(-1, 1, (8, 16, 16, 3)).astype("float32")
    y = keras.utils.to_categorical(rng.integers(0, 3, 8), 3).astype("float32")
    loss = keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)
    with tf.GradientTape() as tape:
        value = loss(y, model(x, training=False))
    assert float(tf.norm(tape.gradient(value, beta))) < 1e-6  # no loss gradient
    curvatures = np.array(
        [0.05 / np.linalg.norm(np.asarray(v)) for v in model.trainable_variables]
    )

    def top(l2):
        return analysis.hessian_spectrum(
            model, [(x, y)], loss=loss, weight_decay=0.05, l2=l2, top_k=2,
            max_iterations=30, verbose=0,
        )["eigenvalues"][0]  # fmt: skip

    # The authors' norm: that one tensor's curvature is the top eigenvalue.
    assert top("norm")[0] == pytest.approx(0.05 / 1e-4, rel=1e-3)
    # The panel's L2 (squared, the coupled weight decay): no eigenvalue is
    # any single tensor's wd / ||W||.
    assert PanelSettings().hessian_l2 == "squared"
    found = np.abs(top(PanelSettings().hessian_l2))
    near = np.abs(found[:, None] - curvatures[None, :]) <= 0.01 * curvatures
    assert not near.any(), (found, curvatures[near.any(axis=0)])


def test_a_zero_norm_weight_adds_no_l2_curvature():
    # PyTorch's norm has gradient 0 at 0; so does the L2 term here (no NaN).
    model = _tiny_classifier(seed=5)
    model.get_layer("out").bias.assign(np.zeros(3, "float32"))
    x = np.random.default_rng(0).normal(size=(6, 3)).astype("float32")
    y = np.array([0, 1, 2, 0, 1, 2])
    result = analysis.hessian_spectrum(
        model, [(x, y)], weight_decay=0.3, top_k=1, max_iterations=50, verbose=0
    )
    assert (
        np.isfinite(result["eigenvalues"]).all() and np.isfinite(result["loss"]).all()
    )


# --- loss landscape ---------------------------------------------------------


@pytest.mark.parametrize("family", ["vit", "alternet"])
def test_directions_are_the_authors_filter_normalisation(family, vit, alternet):
    model = vit if family == "vit" else alternet
    directions = landscape.filter_normalized_directions(model, seed=9)
    rng = np.random.default_rng(9)
    moved = 0
    for direction in directions:
        for variable, ours in zip(model.weights, direction, strict=True):
            raw = rng.standard_normal(tuple(variable.shape))
            weight = np.asarray(variable, "float64")
            want = authors_direction(
                torch_layout(variable, raw),
                torch_layout(variable, weight),
                torch_key(variable),
            )
            np.testing.assert_allclose(
                ours,
                from_torch_layout(variable, want),
                rtol=1e-12,
                err_msg=variable.path,
            )
            moved += bool(np.any(ours))
    assert moved > 4  # kernels move; biases, norms, positions do not
    filters = landscape.filter_normalized_directions(
        model, seed=9, normalization="filter"
    )
    kernel = next(i for i, v in enumerate(model.weights) if v.name == "kernel")
    weight = np.asarray(model.weights[kernel], "float64")
    direction = filters[0][kernel]  # Li et al.: one norm per output unit
    axes = tuple(range(weight.ndim - 1))
    np.testing.assert_allclose(
        np.sqrt((direction**2).sum(axis=axes)),
        np.sqrt((weight**2).sum(axis=axes)),
        rtol=1e-6,
    )


def test_landscape_metrics_are_the_authors():
    rng = np.random.default_rng(0)
    classes, labels, probabilities, losses = 7, [], [], []
    for size in (9, 12, 5):
        logits = rng.normal(0, 3, (size, classes))
        p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
        p[0] = np.eye(classes)[rng.integers(classes)]  # confidence exactly 1
        p[1] = np.full(classes, 0.1 / (classes - 1))
        p[1, 2] = 0.9  # exactly at the 0.9 cut-off
        labels.append(rng.integers(0, classes, size))
        probabilities.append(p.astype("float32"))
        losses.append(rng.uniform(0.5, 2.0))
    ours = landscape.landscape_metrics(losses, labels, probabilities)
    want = authors_metrics(losses, labels, probabilities)
    assert len(ours) == len(landscape.COLUMNS) - 4  # all but x, y, l1, l2
    np.testing.assert_allclose(ours, want, rtol=1e-10, atol=1e-12)


def _dense_model(seed=0):
    model = keras.Sequential(
        [
            keras.Input((6,)),
            keras.layers.Dense(5, activation="relu"),
            keras.layers.Dense(3),
        ]
    )
    helpers.randomize(model, seed=seed, scale=0.5)
    return model


def test_loss_landscape_rows_are_the_loss_at_moved_weights():
    model = _dense_model()
    rng = np.random.default_rng(1)
    x = rng.normal(size=(20, 6)).astype("float32")
    y = rng.integers(0, 3, 20)
    batches = [(x[:8], y[:8]), (x[8:], y[8:])]
    before = [np.array(w) for w in model.weights]
    result = landscape.loss_landscape(
        model, batches, weight_decay=0.05, x=(-0.5, 0.5, 3), y=(-1, 1, 2), seed=2,
        verbose=0,
    )  # fmt: skip
    for w, value in zip(model.weights, before, strict=True):  # restored exactly
        np.testing.assert_array_equal(np.array(w), value)
    assert result["rows"].shape == (6, 19)
    assert result["rows"][:, 0].tolist() == [-0.5, 0.0, 0.5] * 2  # x fastest
    assert result["rows"][:, 1].tolist() == [-1.0] * 3 + [1.0] * 3
    d1, d2 = landscape.filter_normalized_directions(model, seed=2)
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    probe = keras.models.clone_model(model)
    for row in result["rows"]:
        for w, v, a, b in zip(probe.weights, before, d1, d2, strict=True):
            w.assign((v + row[0] * a + row[1] * b).astype("float32"))
        weights = [np.asarray(w, "float64") for w in probe.weights]
        assert row[2] == pytest.approx(sum(np.abs(w).sum() for w in weights), rel=1e-6)
        assert row[3] == pytest.approx(
            sum(np.sqrt((w**2).sum()) for w in weights), rel=1e-6
        )
        nll = np.mean([float(loss(t, probe(i))) for i, t in batches])
        assert row[4] == pytest.approx(nll, rel=1e-5)
        accuracy = (np.asarray(probe(x)).argmax(-1) == y).mean()
        assert row[7] == pytest.approx(accuracy)  # Acc at cut-off 0
    np.testing.assert_allclose(
        result["loss"].reshape(-1), result["rows"][:, 4] + 0.05 * result["rows"][:, 3]
    )


def test_loss_landscape_restores_the_weights_after_a_failure():
    model = _dense_model(seed=3)
    x = np.random.default_rng(0).normal(size=(4, 6)).astype("float32")
    before = [np.array(w) for w in model.weights]
    calls = []

    def failing_loss(targets, outputs):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected")
        return keras.ops.mean(outputs)

    with pytest.raises(RuntimeError, match="injected"):
        landscape.loss_landscape(
            model, [(x, np.zeros(4, "int64"))], loss=failing_loss,
            x=(-1, 1, 3), y=(-1, 1, 3), verbose=0,
        )  # fmt: skip
    for w, value in zip(model.weights, before, strict=True):
        np.testing.assert_array_equal(np.array(w), value)


def test_loss_landscape_augmentation_is_drawn_once_or_at_every_point():
    model = _dense_model(seed=4)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 6)).astype("float32")
    y = keras.utils.to_categorical(rng.integers(0, 3, 6), 3)
    calls = []

    def transform(inputs, targets):
        calls.append(1)
        return _mix(inputs, targets)

    grid = {"x": (-1, 1, 2), "y": (-1, 1, 2), "verbose": 0}
    fixed = landscape.loss_landscape(model, [(x, y)], transform=transform, **grid)
    assert len(calls) == 1
    fresh = landscape.loss_landscape(
        model, [(x, y)], transform=transform, fixed_augmentation=False, **grid
    )
    assert len(calls) == 1 + 4
    np.testing.assert_allclose(fresh["rows"], fixed["rows"])  # a fixed transform
    with pytest.raises(ValueError, match="re-iterable"):
        landscape.loss_landscape(
            model, iter([(x, y)]), fixed_augmentation=False, **grid
        )
    with pytest.raises(ValueError, match=r"\(low, high, points\)"):
        landscape.loss_landscape(model, [(x, y)], x=(1, -1, 3), verbose=0)
    with pytest.raises(ValueError, match="two lists"):
        landscape.loss_landscape(model, [(x, y)], directions=[[]], verbose=0)


# The first two rows of the authors' published
# resources/results/cifar100_vit_ti_losslandscape.csv (9571ff1): no header.
AUTHORS_ROWS = """\
-1.0,-1.0,224135.078125,1115.6778564453125,5.262048481945519,0.0,0.9,0.015224358974358974,0.0,0.0,0.9999999999796583,0.0020823017290787166,0.0,0.999999999979968,0.0,0.0618990384602985,1.0128491819317826,0.09081884568265675,0.09081884568265675
-0.9,-1.0,217079.53125,1089.306640625,5.230578183238949,0.0,0.9,0.013421474358974358,0.0,0.0,0.9999999999796955,0.001496742180834109,0.0,0.999999999979968,0.0,0.0635016025628305,1.0135400655868612,0.09796057287842028,0.09796057287842028
"""


def test_landscape_csv_has_the_authors_columns_and_png(tmp_path, vit):
    authors = tmp_path / "authors.csv"
    authors.write_text(AUTHORS_ROWS)
    theirs = landscape.read_landscape_csv(str(authors))
    assert list(theirs) == list(landscape.COLUMNS)
    assert theirs["l2"][0] == pytest.approx(1115.6778564453125)
    images = helpers.images(batch=6, size=(32, 32), seed=8)
    labels = np.arange(6) % 4
    result = analysis.loss_landscape(
        vit, [(images, labels)], weight_decay=0.05, x=(-1, 1, 3), y=(-1, 1, 3),
        verbose=0,
    )  # fmt: skip
    path = analysis.write_landscape_csv(result, str(tmp_path / "ours.csv"))
    lines = open(path).read().splitlines()
    assert len(lines) == 9 and all(len(line.split(",")) == 19 for line in lines)
    ours = landscape.read_landscape_csv(path)
    np.testing.assert_array_equal(np.stack(list(ours.values()), 1), result["rows"])
    assert (
        ours["Cutoff1"].tolist() == [0.0] * 9 and ours["Cutoff2"].tolist() == [0.9] * 9
    )
    header = analysis.write_landscape_csv(result, str(tmp_path / "h.csv"), header=True)
    assert open(header).readline().strip() == ",".join(landscape.COLUMNS)
    figure = plotting.plot_loss_landscape(result)
    png = plotting.save_figure(figure, str(tmp_path / "landscape.png"))
    from PIL import Image

    with Image.open(png) as image:
        assert image.format == "PNG" and "Fig. 1a" in image.info["Description"]


def test_landscape_files_are_whole_or_absent(tmp_path, monkeypatch):
    from keras_vit import atomic

    model = _dense_model(seed=6)
    x = np.random.default_rng(0).normal(size=(4, 6)).astype("float32")
    result = landscape.loss_landscape(
        model, [(x, np.array([0, 1, 2, 0]))], x=(-1, 1, 2), y=(-1, 1, 2), verbose=0
    )
    csv, png = tmp_path / "l.csv", tmp_path / "l.png"
    csv.write_text("old\n")
    png.write_bytes(b"old png")

    def broken_replace(*args):
        raise OSError("disk full")

    monkeypatch.setattr(atomic.os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        landscape.write_landscape_csv(result, str(csv))
    monkeypatch.undo()
    figure = plotting.plot_loss_landscape(result)
    real = figure.figure.savefig

    def torn_savefig(path, **kwargs):  # writes half a file, then fails
        with open(path, "wb") as f:
            f.write(b"\x89PNG half")
        raise OSError("killed")

    figure.figure.savefig = torn_savefig
    with pytest.raises(OSError, match="killed"):
        plotting.save_figure(figure, str(png))
    assert csv.read_text() == "old\n" and png.read_bytes() == b"old png"
    assert sorted(os.listdir(tmp_path)) == ["l.csv", "l.png"]  # no partial file
    figure.figure.savefig = real
    plotting.save_figure(figure, str(png))
    assert png.read_bytes().startswith(b"\x89PNG")
