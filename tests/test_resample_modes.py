"""Every resampling mode against a NumPy reference and the library it copies.

The references below are written from each library's definition, one output
sample at a time, independently of `keras_vit.resample` (which builds weight
matrices); `tests/fixtures/resample.npz` holds the real libraries' outputs
(`scripts/make_resample_fixture.py`: PyTorch's `F.interpolate`, what timm and
Hugging Face call, and `jax.image.resize`).
"""

from __future__ import annotations

import math
import pathlib

import keras
import numpy as np
import pytest
import scipy.ndimage

from keras_vit import resample

FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "resample.npz"
CASES = [((7, 7), (12, 12)), ((14, 14), (9, 9)), ((6, 4), (11, 3)), ((5, 9), (2, 16))]


# -- references, one sample at a time ----------------------------------------


def _keys(t, a):
    t = abs(t)
    if t <= 1:
        return (a + 2) * t**3 - (a + 3) * t**2 + 1
    if t < 2:
        return a * t**3 - 5 * a * t**2 + 8 * a * t - 4 * a
    return 0.0


def torch_cubic_1d(x, new, align_corners):
    """PyTorch `upsample_bicubic2d` along axis 0: 4 taps, border clamped."""
    old = len(x)
    out = []
    for i in range(new):
        if align_corners:
            src = i * (old - 1) / (new - 1) if new > 1 else 0.0
        else:
            src = (i + 0.5) * old / new - 0.5
        base = math.floor(src)
        value = 0.0
        for k in (-1, 0, 1, 2):
            value = (
                value
                + _keys(src - (base + k), -0.75) * x[min(max(base + k, 0), old - 1)]
            )
        out.append(value)
    return np.stack(out)


def torch_linear_1d(x, new, align_corners):
    old = len(x)
    out = []
    for i in range(new):
        if align_corners:
            src = i * (old - 1) / (new - 1) if new > 1 else 0.0
        else:
            src = max((i + 0.5) * old / new - 0.5, 0.0)
        left = min(int(math.floor(src)), old - 1)
        right = min(left + 1, old - 1)
        frac = src - left
        out.append((1 - frac) * x[left] + frac * x[right])
    return np.stack(out)


def pil_antialias_1d(x, new, kernel, support):
    """PIL's `ImagingResample` (PyTorch's `antialias=True`) along axis 0."""
    old = len(x)
    scale = old / new
    filterscale = max(scale, 1.0)
    window = support * filterscale
    out = []
    for i in range(new):
        center = (i + 0.5) * scale
        xmin = max(int(center - window + 0.5), 0)
        xmax = min(int(center + window + 0.5), old)
        weights = [kernel((j - center + 0.5) / filterscale) for j in range(xmin, xmax)]
        total = sum(weights)
        taps = zip(weights, range(xmin, xmax), strict=True)
        out.append(sum(w * x[j] for w, j in taps) / total)
    return np.stack(out)


def separable(grid, new, resize_1d):
    rows = resize_1d(grid, new[0])  # along height
    return np.swapaxes(resize_1d(np.swapaxes(rows, 0, 1), new[1]), 0, 1)


REFERENCES = {
    "bicubic_antialias": lambda g, n: separable(
        g, n, lambda x, m: pil_antialias_1d(x, m, lambda t: _keys(t, -0.5), 2.0)
    ),
    "bicubic": lambda g, n: separable(g, n, lambda x, m: torch_cubic_1d(x, m, False)),
    "bicubic_corners": lambda g, n: separable(
        g, n, lambda x, m: torch_cubic_1d(x, m, True)
    ),
    "bilinear_half_pixel": lambda g, n: separable(
        g, n, lambda x, m: torch_linear_1d(x, m, False)
    ),
    "bilinear": lambda g, n: separable(g, n, lambda x, m: torch_linear_1d(x, m, True)),
    "bilinear_antialias": lambda g, n: separable(
        g, n, lambda x, m: pil_antialias_1d(x, m, lambda t: max(0.0, 1 - abs(t)), 1.0)
    ),
}
OURS = {
    "bicubic_antialias": dict(method="timm"),
    "bicubic": dict(method="huggingface"),
    "bicubic_corners": dict(method="bicubic", align_corners=True),
    "bilinear_half_pixel": dict(method="bilinear", align_corners=False),
    "bilinear": dict(method="reference"),
    "bilinear_antialias": dict(method="bilinear_antialias"),
}


@pytest.mark.parametrize("mode", sorted(OURS))
@pytest.mark.parametrize("case", range(len(CASES)))
def test_each_mode_matches_its_reference_and_its_library(mode, case):
    fixture = np.load(FIXTURE)
    grid = fixture[f"{case}/input"]
    new = CASES[case][1]
    ours = resample.resample_grid(grid, new, **OURS[mode])
    np.testing.assert_allclose(ours, REFERENCES[mode](grid, new), atol=1e-12)
    library = fixture[f"{case}/{mode}"]
    tolerance = 1e-6 if mode == "bilinear_antialias" else 1e-12  # jax: float32
    np.testing.assert_allclose(ours, library, atol=tolerance)


def test_the_reference_mode_is_scipy_zoom():
    grid = np.random.default_rng(1).normal(size=(6, 9, 4))
    for new in [(10, 4), (6, 9), (3, 17)]:
        zoom = (new[0] / 6, new[1] / 9, 1)
        expected = scipy.ndimage.zoom(
            grid, zoom, order=1, mode="nearest", grid_mode=False
        )
        np.testing.assert_allclose(
            resample.resample_grid(grid, new), expected, atol=1e-12
        )


@pytest.mark.parametrize("method", resample.METHODS)
def test_in_graph_matrices_equal_the_numpy_ones(method):
    corners = method == "bilinear"
    for old, new in [(7, 12), (14, 9), (5, 5), (3, 1)]:
        expected = resample.weight_matrix(old, new, method, corners)
        traced = resample.weight_matrix(
            old, keras.ops.convert_to_tensor(new), method, corners, xp=keras.ops
        )
        np.testing.assert_allclose(
            keras.ops.convert_to_numpy(traced), expected, atol=1e-6
        )


def test_modes_are_validated():
    with pytest.raises(ValueError, match="`method` must be one of"):
        resample.resample_grid(np.zeros((2, 2, 1)), 3, method="nearest")
    with pytest.raises(ValueError, match="fixes align_corners=False"):
        resample.resample_grid(
            np.zeros((2, 2, 1)), 3, method="timm", align_corners=True
        )


# -- FlexiViT patch resizing ---------------------------------------------------

PATCH_FIXTURE = pathlib.Path(__file__).parent / "fixtures" / "patch_resample.npz"
PATCH_CASES = [
    ((8, 8), (4, 4)),
    ((8, 8), (12, 12)),
    ((16, 16), (8, 8)),
    ((6, 6), (4, 10)),
]


def big_vision_resize_matrix(old, new):
    """big_vision's FlexiViT `get_resize_mat`: each basis patch through
    `tf.image.resize(method="bilinear")`, one column per input pixel."""
    import tensorflow as tf

    columns = []
    for index in range(old[0] * old[1]):
        basis = np.zeros(old)
        basis[np.unravel_index(index, old)] = 1.0
        resized = tf.image.resize(basis[None, ..., None], new, method="bilinear")
        columns.append(resized.numpy()[0, ..., 0].reshape(-1))
    return np.stack(columns).T  # (q_h * q_w, p_h * p_w)


def big_vision_resample(kernel, new):
    """big_vision's `resample_patchemb`: pinv(B^T) applied to each (C, D).

    TensorFlow's matrix is float32: where one axis shrinks, its rounding
    leaves spurious singular values near 1e-8 that a float64 `pinv` would
    invert, so they are cut at a float32 tolerance.
    """
    old = kernel.shape[:2]
    inverse = np.linalg.pinv(big_vision_resize_matrix(old, new).T, rtol=1e-6)
    flat = kernel.reshape(old[0] * old[1], -1)  # (p*p, C*D)
    return (inverse @ flat).reshape(*new, *kernel.shape[2:])


def test_bilinear_antialias_is_jax_image_resize():
    fixture = np.load(FIXTURE)
    grid = fixture["0/input"]
    np.testing.assert_allclose(
        resample.resample_grid(grid, CASES[0][1], "bilinear_antialias"),
        fixture["0/bilinear_antialias"],
        atol=1e-6,
    )


@pytest.mark.parametrize("old, new", PATCH_CASES)
def test_flexivit_patch_resize_is_big_visions(old, new):
    """The default inverts `tf.image.resize(method="bilinear")`, as FlexiViT."""
    np.testing.assert_allclose(
        resample.resize_patch_matrix(old, new),
        big_vision_resize_matrix(old, new),
        atol=1e-6,  # TensorFlow resizes in float32
    )
    kernel = np.load(PATCH_FIXTURE)[f"{PATCH_CASES.index((old, new))}/input"]
    ours = resample.resample_patch_embedding(kernel, new)
    np.testing.assert_allclose(ours, big_vision_resample(kernel, new), atol=2e-5)
    assert np.array_equal(
        ours, resample.resample_patch_embedding(kernel, new, method="bilinear")
    )


@pytest.mark.parametrize("index", range(len(PATCH_CASES)))
def test_patch_resize_modes_match_timms_resample_patch_embed(index):
    """`"timm"` is timm's defaults (bicubic, antialiased); `"flexivit"` its
    `interpolation="bilinear", antialias=False` (timm computes in float32)."""
    fixture = np.load(PATCH_FIXTURE)
    kernel, (_, new) = fixture[f"{index}/input"], PATCH_CASES[index]
    timm = resample.resample_patch_embedding(kernel, new, method="timm")
    np.testing.assert_allclose(timm, fixture[f"{index}/timm"], atol=2e-5)
    flexivit = resample.resample_patch_embedding(kernel, new)
    np.testing.assert_allclose(flexivit, fixture[f"{index}/bilinear"], atol=2e-5)
    # The two conventions are not interchangeable.
    assert np.abs(timm - flexivit).max() > 0.1 * np.abs(timm).max()


def test_patch_resize_methods_are_validated():
    kernel = np.zeros((4, 4, 1, 1))
    for method in ("reference", "huggingface", "nearest", None):
        with pytest.raises(ValueError, match="patch resize `method` must be one of"):
            resample.resample_patch_embedding(kernel, 2, method=method)


@pytest.mark.parametrize("method", ["flexivit", "timm"])
@pytest.mark.parametrize("old, new", [(8, 12), (4, 16), (6, 6)])
def test_resized_kernel_keeps_tokens_of_resized_patches(old, new, method):
    """FlexiViT's property: <B x, pinv(B^T) w> = <x, w> when enlarging."""
    rng = np.random.default_rng(0)
    kernel = rng.normal(size=(old, old, 3, 5))  # (p, p, C, D)
    patches = rng.normal(size=(7, old, old, 3))  # (n, p, p, C)
    resize = resample.resize_patch_matrix((old, old), (new, new), method)
    resized_patches = np.einsum("qp,npc->nqc", resize, patches.reshape(7, old * old, 3))
    new_kernel = resample.resample_patch_embedding(kernel, new, method)
    tokens = np.einsum(
        "npc,pcd->nd", patches.reshape(7, -1, 3), kernel.reshape(-1, 3, 5)
    )
    resized_tokens = np.einsum(
        "nqc,qcd->nd", resized_patches, new_kernel.reshape(-1, 3, 5)
    )
    np.testing.assert_allclose(resized_tokens, tokens, atol=1e-9)


@pytest.mark.parametrize("method", ["flexivit", "timm"])
def test_shrinking_a_kernel_is_least_squares(method):
    rng = np.random.default_rng(1)
    kernel = rng.normal(size=(16, 16, 1, 2))
    small = resample.resample_patch_embedding(kernel, 8, method)
    resize = resample.resize_patch_matrix((16, 16), (8, 8), method)  # (64, 256)
    w = kernel.reshape(256, 2)
    best, *_ = np.linalg.lstsq(resize.T, w, rcond=None)  # min ||B^T v - w||
    np.testing.assert_allclose(small.reshape(64, 2), best, atol=1e-8)
