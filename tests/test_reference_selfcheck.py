"""Self-checks of the NumPy reference in ``tests/reference.py`` (no keras).

Each building block is compared with a naive loop or with scipy on tiny
inputs, and the checkpoint layout is checked against the key and parameter
counts of the original vision_transformer files.
"""

import math

import numpy as np
import pytest
from scipy import ndimage

try:  # tests/ on sys.path (pytest "prepend" mode, no tests/__init__.py)
    import reference as ref
except ImportError:  # tests/ is a package
    from tests import reference as ref

B16 = dict(hidden_dim=768, depth=12, mlp_dim=3072, num_heads=12)


def _rng(seed=0):
    return np.random.default_rng(seed)


# --------------------------------------------------------------------------
# Building blocks
# --------------------------------------------------------------------------


def test_patch_embed_matches_direct_conv_loop():
    rng = _rng(1)
    p, c, d = 4, 3, 5
    x = rng.uniform(-1, 1, size=(2, 8, 12, c))
    kernel = rng.normal(size=(p, p, c, d))
    bias = rng.normal(size=(d,))
    tokens, grid = ref.patch_embed(x, kernel, bias)
    assert grid == (2, 3)
    assert tokens.shape == (2, 6, d)
    for b in range(2):
        for i in range(2):
            for j in range(3):
                want = np.zeros(d)
                for di in range(p):
                    for dj in range(p):
                        want += x[b, i * p + di, j * p + dj] @ kernel[di, dj]
                # Row-major flattening over (h, w).
                np.testing.assert_allclose(
                    tokens[b, i * 3 + j], want + bias, rtol=1e-12
                )


def test_patch_embed_drops_remainder_like_valid_conv():
    rng = _rng(2)
    x = rng.normal(size=(1, 10, 9, 2))
    kernel = rng.normal(size=(4, 4, 2, 3))
    tokens, grid = ref.patch_embed(x, kernel, np.zeros(3))
    assert grid == (2, 2)
    cropped, _ = ref.patch_embed(x[:, :8, :8], kernel, np.zeros(3))
    np.testing.assert_array_equal(tokens, cropped)


@pytest.mark.parametrize(
    "size,k,s,want",
    [
        (224, 7, 2, (2, 3)),  # conv_root at 224 px
        (112, 3, 2, (0, 1)),  # max-pool 112 -> 56
        (7, 3, 2, (1, 1)),
        (8, 3, 2, (0, 1)),
        (5, 3, 1, (1, 1)),
        (4, 1, 2, (0, 0)),
        (3, 7, 2, (3, 3)),  # kernel larger than input: out 2, total 6
    ],
)
def test_same_padding_matches_tf_rule(size, k, s, want):
    assert ref.same_padding(size, k, s) == want


def _scipy_same_conv(x, kernel):
    """Stride-1 centred correlation, summed over input channels, per output
    channel: ``scipy.ndimage.correlate`` with zero padding."""
    kh, kw, cin, cout = kernel.shape
    out = np.zeros(x.shape[:3] + (cout,))
    for b in range(x.shape[0]):
        for o in range(cout):
            for i in range(cin):
                out[b, :, :, o] += ndimage.correlate(
                    x[b, :, :, i], kernel[:, :, i, o], mode="constant", cval=0
                )
    return out


@pytest.mark.parametrize("k", [1, 3, 7])
def test_conv2d_same_stride1_matches_scipy(k):
    rng = _rng(3)
    x = rng.normal(size=(2, 9, 10, 3))
    kernel = rng.normal(size=(k, k, 3, 4))
    got = ref.conv2d_same(x, kernel, stride=1)
    np.testing.assert_allclose(got, _scipy_same_conv(x, kernel), atol=1e-12)


@pytest.mark.parametrize("k", [3, 7])
def test_conv2d_same_stride2_even_input_matches_scipy(k):
    # For an even input and odd k, TF SAME puts the extra pad pixel after,
    # so output i is centred at input 2*i + 1 (not 2*i as a symmetric pad
    # would give).
    rng = _rng(4)
    x = rng.normal(size=(1, 12, 16, 2))
    kernel = rng.normal(size=(k, k, 2, 3))
    got = ref.conv2d_same(x, kernel, stride=2)
    full = _scipy_same_conv(x, kernel)
    assert got.shape == (1, 6, 8, 3)
    np.testing.assert_allclose(got, full[:, 1::2, 1::2], atol=1e-12)


def test_conv2d_same_stride2_odd_input_matches_scipy():
    # Odd input, odd k: symmetric padding, output i centred at input 2*i.
    rng = _rng(5)
    x = rng.normal(size=(1, 11, 9, 2))
    kernel = rng.normal(size=(3, 3, 2, 2))
    got = ref.conv2d_same(x, kernel, stride=2)
    full = _scipy_same_conv(x, kernel)
    assert got.shape == (1, 6, 5, 2)
    np.testing.assert_allclose(got, full[:, ::2, ::2], atol=1e-12)


def test_max_pool_same_matches_naive():
    rng = _rng(6)
    x = rng.normal(size=(2, 8, 7, 3))
    got = ref.max_pool_same(x, 3, 2)
    assert got.shape == (2, 4, 4, 3)
    for axis_size, stride_pad in ((8, (0, 1)), (7, (1, 1))):
        assert ref.same_padding(axis_size, 3, 2) == stride_pad
    # Naive: window of output (i, j) starts at 2*i - pad_before.
    want = np.empty_like(got)
    for i in range(4):
        for j in range(4):
            r0, c0 = 2 * i - 0, 2 * j - 1
            rs = slice(max(r0, 0), min(r0 + 3, 8))
            cs = slice(max(c0, 0), min(c0 + 3, 7))
            want[:, i, j] = x[:, rs, cs].max(axis=(1, 2))
    np.testing.assert_array_equal(got, want)
    # -inf padding: an all-negative input never yields 0.
    assert (ref.max_pool_same(-np.abs(x) - 1.0) < 0).all()


def test_group_norm_normalises_each_group():
    rng = _rng(7)
    x = rng.normal(3.0, 5.0, size=(2, 5, 6, 64))
    c = x.shape[-1]
    y = ref.group_norm(x, np.ones(c), np.zeros(c), groups=32)
    g = y.reshape(2, 5, 6, 32, 2)
    np.testing.assert_allclose(g.mean(axis=(1, 2, 4)), 0.0, atol=1e-10)
    np.testing.assert_allclose(g.var(axis=(1, 2, 4)), 1.0, atol=1e-5)
    # Affine part, and legacy (1, 1, 1, C) params give the same result.
    scale, bias = rng.normal(size=c), rng.normal(size=c)
    y2 = ref.group_norm(x, scale, bias)
    np.testing.assert_allclose(y2, y * scale + bias, atol=1e-12)
    y3 = ref.group_norm(x, scale.reshape(1, 1, 1, c), bias.reshape(1, 1, 1, c))
    np.testing.assert_array_equal(y2, y3)


def test_standardize_kernel_per_output_channel():
    rng = _rng(8)
    w = rng.normal(0.3, 2.0, size=(3, 3, 4, 5))
    ws = ref.standardize_kernel(w)
    np.testing.assert_allclose(ws.mean(axis=(0, 1, 2)), 0.0, atol=1e-12)
    std = w.std(axis=(0, 1, 2))
    # (w - mean) / (std + 1e-5): population std, eps added to the std.
    np.testing.assert_allclose(ws.std(axis=(0, 1, 2)), std / (std + 1e-5), rtol=1e-12)


def test_layer_norm_and_gelus():
    rng = _rng(9)
    x = rng.normal(2.0, 3.0, size=(2, 3, 16))
    y = ref.layer_norm(x, np.ones(16), np.zeros(16))
    np.testing.assert_allclose(y.mean(-1), 0.0, atol=1e-12)
    np.testing.assert_allclose(y.var(-1), 1.0, atol=1e-6)
    z = np.linspace(-5, 5, 101)
    exact, approx = ref.gelu_exact(z), ref.gelu_tanh(z)
    assert ref.gelu_exact(np.array([1.0]))[0] == pytest.approx(0.8413447460685)
    assert np.abs(exact - approx).max() < 1e-3
    assert np.abs(exact - approx).max() > 1e-5  # really different functions


def test_attention_matches_per_head_loop():
    rng = _rng(10)
    bsz, n, d, h = 2, 5, 12, 3
    dh = d // h
    pre = "mha"
    p = {
        f"{pre}/query/kernel": rng.normal(size=(d, h, dh)) * 0.3,
        f"{pre}/key/kernel": rng.normal(size=(d, h, dh)) * 0.3,
        f"{pre}/value/kernel": rng.normal(size=(d, h, dh)) * 0.3,
        f"{pre}/query/bias": rng.normal(size=(h, dh)),
        f"{pre}/key/bias": rng.normal(size=(h, dh)),
        f"{pre}/value/bias": rng.normal(size=(h, dh)),
        f"{pre}/out/kernel": rng.normal(size=(h, dh, d)) * 0.3,
        f"{pre}/out/bias": rng.normal(size=(d,)),
    }
    x = rng.normal(size=(bsz, n, d))
    got, weights = ref.attention(x, p, pre, num_heads=h, return_weights=True)
    want = np.zeros((bsz, n, d)) + p[f"{pre}/out/bias"]
    for b in range(bsz):
        for hd in range(h):
            q, k, v = (
                x[b] @ p[f"{pre}/{n}/kernel"][:, hd] + p[f"{pre}/{n}/bias"][hd]
                for n in ("query", "key", "value")
            )
            s = q @ k.T / math.sqrt(dh)
            a = np.exp(s) / np.exp(s).sum(-1, keepdims=True)
            np.testing.assert_allclose(weights[b, hd], a, rtol=1e-12)
            want[b] += (a @ v) @ p[f"{pre}/out/kernel"][hd]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


# --------------------------------------------------------------------------
# Checkpoint layout and counts
# --------------------------------------------------------------------------


def test_b16_layout_key_and_param_counts():
    params = ref.make_vit_checkpoint(
        **B16, patch_size=16, image_size=(224, 224), num_classes=1000,
        shapes_only=True,
    )  # fmt: skip
    assert len(params) == 200
    assert ref.count_params(params) == 86_567_656
    shapes = {k: v.shape for k, v in params.items()}
    assert shapes["embedding/kernel"] == (16, 16, 3, 768)
    assert shapes["cls"] == (1, 1, 768)
    assert shapes["Transformer/posembed_input/pos_embedding"] == (1, 197, 768)
    mha = "Transformer/encoderblock_11/MultiHeadDotProductAttention_1"
    assert shapes[f"{mha}/query/kernel"] == (768, 12, 64)
    assert shapes[f"{mha}/value/bias"] == (12, 64)
    assert shapes[f"{mha}/out/kernel"] == (12, 64, 768)
    assert shapes["head/kernel"] == (768, 1000)
    assert all(v.dtype == np.float32 for v in params.values())


@pytest.mark.parametrize(
    "kwargs,keys,count",
    [
        # Original i21k file: pre_logits + 21,843-class head (§3.7).
        (dict(representation_size=768, num_classes=21843), 202, 103_186_515),
        # gap-norep: no cls, no CLS pos-embedding row.
        (dict(class_token=False, num_classes=1000), 199, 86_566_120),
        (dict(image_size=(384, 384), num_classes=1000), 200, 86_859_496),
    ],
)
def test_b16_variant_counts(kwargs, keys, count):
    kwargs = {"image_size": (224, 224), **kwargs}
    params = ref.make_vit_checkpoint(**B16, patch_size=16, shapes_only=True, **kwargs)
    assert len(params) == keys
    assert ref.count_params(params) == count


def test_r50_b16_layout_key_and_param_counts():
    params = ref.make_vit_checkpoint(
        **B16, patch_size=1, image_size=(224, 224), num_classes=1000,
        resnet_layers=(3, 4, 9), shapes_only=True,
    )  # fmt: skip
    assert len(params) == 356
    assert ref.count_params(params) == 98_659_112
    resnet = {k: v for k, v in params.items() if k.split("/")[0] not in (
        "embedding", "cls", "Transformer", "head")}  # fmt: skip
    assert len(resnet) == 156
    assert ref.count_params(resnet) == 11_894_848
    shapes = {k: v.shape for k, v in params.items()}
    assert shapes["conv_root/kernel"] == (7, 7, 3, 64)
    assert shapes["block1/unit1/conv_proj/kernel"] == (1, 1, 64, 256)
    assert "block1/unit2/conv_proj/kernel" not in shapes
    assert shapes["block2/unit1/conv1/kernel"] == (1, 1, 256, 128)
    assert shapes["block2/unit2/conv1/kernel"] == (1, 1, 512, 128)
    assert shapes["block3/unit1/conv_proj/kernel"] == (1, 1, 512, 1024)
    assert shapes["block3/unit9/conv3/kernel"] == (1, 1, 256, 1024)
    assert shapes["embedding/kernel"] == (1, 1, 1024, 768)
    assert shapes["Transformer/posembed_input/pos_embedding"] == (1, 197, 768)
    assert ref.infer_resnet_layers(params) == (3, 4, 9)


def test_r26_and_stem_only_layouts():
    r26 = ref.make_vit_checkpoint(
        hidden_dim=384, depth=1, mlp_dim=8, num_heads=6, patch_size=1,
        image_size=(224, 224), resnet_layers=(2, 2, 2, 2), shapes_only=True,
    )  # fmt: skip
    assert r26["embedding/kernel"].shape == (1, 1, 2048, 384)
    assert r26["Transformer/posembed_input/pos_embedding"].shape[1] == 50
    stem = ref.make_vit_checkpoint(
        hidden_dim=192, depth=1, mlp_dim=8, num_heads=3, patch_size=8,
        image_size=(224, 224), resnet_layers=(), shapes_only=True,
    )  # fmt: skip
    assert stem["embedding/kernel"].shape == (8, 8, 64, 192)
    assert stem["Transformer/posembed_input/pos_embedding"].shape[1] == 50
    assert ref.infer_resnet_layers(stem) == ()


def test_save_npz_roundtrip_without_pickle(tmp_path):
    params = ref.make_vit_checkpoint(
        hidden_dim=8, depth=1, mlp_dim=16, num_heads=2, patch_size=4,
        image_size=(8, 8), seed=3,
    )  # fmt: skip
    path = ref.save_npz(params, tmp_path / "tiny")
    assert path.endswith(".npz")
    with np.load(path, allow_pickle=False) as f:
        assert sorted(f.files) == sorted(params)
        for k in params:
            np.testing.assert_array_equal(f[k], params[k])
            assert f[k].dtype == np.float32


def test_random_values_are_meaningful():
    params = ref.make_vit_checkpoint(
        hidden_dim=16, depth=2, mlp_dim=32, num_heads=4, patch_size=4,
        image_size=(8, 8), seed=0,
    )  # fmt: skip
    for k, v in params.items():
        assert np.isfinite(v).all(), k
        assert np.abs(v).max() > 0, k
        assert v.std() > 1e-3, k
    again = ref.make_vit_checkpoint(
        hidden_dim=16, depth=2, mlp_dim=32, num_heads=4, patch_size=4,
        image_size=(8, 8), seed=0,
    )  # fmt: skip
    for k in params:
        np.testing.assert_array_equal(params[k], again[k])


# --------------------------------------------------------------------------
# End-to-end forward
# --------------------------------------------------------------------------


def _images(b, h, w, c=3, seed=0):
    return _rng(seed).uniform(-1, 1, size=(b, h, w, c)).astype(np.float32)


def test_vit_forward_tiny_plain():
    cfg = dict(hidden_dim=32, depth=2, mlp_dim=64, num_heads=4, patch_size=4)
    params = ref.make_vit_checkpoint(**cfg, image_size=(16, 12), num_classes=7)
    x = _images(2, 16, 12)
    logits, tokens = ref.vit_forward(
        params, x, num_heads=4, patch_size=4, return_tokens=True
    )
    assert logits.shape == (2, 7) and logits.dtype == np.float64
    assert tokens.shape == (2, 1 + 4 * 3, 32)
    assert np.isfinite(logits).all()
    assert 0.1 < np.abs(logits).mean() < 100  # activations stay O(1)
    # Batch elements are independent.
    one = ref.vit_forward(params, x[1:], num_heads=4, patch_size=4)
    np.testing.assert_allclose(one[0], logits[1], rtol=1e-12)
    # GELU variants differ, but only slightly.
    exact = ref.vit_forward(params, x, num_heads=4, patch_size=4, gelu="exact")
    diff = np.abs(exact - logits).max()
    assert 0 < diff < 0.05
    # Token pooling = head applied to the normed CLS token.
    want = tokens[:, 0] @ params["head/kernel"] + params["head/bias"]
    np.testing.assert_allclose(logits, want, rtol=1e-6)


def test_vit_forward_gap_and_pre_logits():
    cfg = dict(hidden_dim=16, depth=1, mlp_dim=32, num_heads=2, patch_size=4)
    x = _images(2, 8, 8, seed=1)
    # gap without a class token: mean over all tokens.
    p = ref.make_vit_checkpoint(**cfg, image_size=(8, 8), class_token=False)
    out = ref.vit_intermediates(p, x, num_heads=2, patch_size=4, pooling="gap")
    np.testing.assert_allclose(out["pooled"], out["encoded"].mean(1))
    with pytest.raises(ValueError):
        ref.vit_forward(p, x, num_heads=2, patch_size=4, pooling="token")
    # gap with a class token excludes it; pre_logits applies tanh.
    p = ref.make_vit_checkpoint(**cfg, image_size=(8, 8), representation_size=6)
    out = ref.vit_intermediates(p, x, num_heads=2, patch_size=4, pooling="gap")
    np.testing.assert_allclose(out["pooled"], out["encoded"][:, 1:].mean(1))
    want = np.tanh(out["pooled"] @ p["pre_logits/kernel"] + p["pre_logits/bias"])
    np.testing.assert_allclose(out["pre_logits"], want)
    assert out["logits"].shape == (2, 10)
    assert len(out["attention"]) == 1
    np.testing.assert_allclose(out["attention"][0].sum(-1), 1.0)


def test_vit_forward_tiny_hybrid():
    cfg = dict(hidden_dim=32, depth=1, mlp_dim=64, num_heads=4, patch_size=1)
    kw = dict(image_size=(32, 32), resnet_layers=(1, 2), resnet_width=32)
    params = ref.make_vit_checkpoint(**cfg, **kw, num_classes=5, seed=4)
    # 32 -> 16 (root) -> 8 (pool) -> 8 (block1) -> 4 (block2): 16 tokens.
    assert params["embedding/kernel"].shape == (1, 1, 256, 32)
    assert "block1/unit1/conv_proj/kernel" in params  # 32 -> 128 channels
    assert "block2/unit2/conv_proj/kernel" not in params
    x = _images(2, 32, 32, seed=2)
    out = ref.vit_intermediates(
        params, x, num_heads=4, patch_size=1, resnet_layers=(1, 2)
    )
    assert out["backbone"].shape == (2, 4, 4, 256)
    assert (out["backbone"] >= 0).all()
    assert out["grid"] == (4, 4)
    assert out["logits"].shape == (2, 5)
    assert np.isfinite(out["logits"]).all()
    # Legacy (1, 1, 1, C) GroupNorm params give identical logits.
    legacy = ref.make_vit_checkpoint(
        **cfg, **kw, num_classes=5, seed=4, legacy_gn_shape=True
    )
    assert legacy["gn_root/scale"].shape == (1, 1, 1, 32)
    got = ref.vit_forward(legacy, x, num_heads=4, patch_size=1)
    np.testing.assert_array_equal(got, out["logits"])
    with pytest.raises(ValueError):
        ref.vit_forward(params, x, num_heads=4, patch_size=1, resnet_layers=(2, 2))


def test_hybrid_backbone_matches_unrolled_unit():
    # One stem + one unit written out by hand from the block equation.
    params = ref.make_vit_checkpoint(
        hidden_dim=8, depth=0, mlp_dim=8, num_heads=2, patch_size=1,
        image_size=(16, 16), resnet_layers=(1,), resnet_width=32, seed=5,
    )  # fmt: skip
    p = params
    x = _images(1, 16, 16, seed=3).astype(np.float64)

    def sc(z, k, s=1):
        w = p[k].astype(np.float64)
        mu = w.mean(axis=(0, 1, 2))
        sd = np.sqrt(((w - mu) ** 2).mean(axis=(0, 1, 2)))
        return ref.conv2d_same(z, (w - mu) / (sd + 1e-5), s)

    def gn(z, name):
        return ref.group_norm(z, p[f"{name}/scale"], p[f"{name}/bias"])

    relu = lambda z: np.maximum(z, 0)  # noqa: E731
    h = ref.max_pool_same(relu(gn(sc(x, "conv_root/kernel", 2), "gn_root")))
    u = "block1/unit1"
    y = relu(gn(sc(h, f"{u}/conv1/kernel"), f"{u}/gn1"))
    y = relu(gn(sc(y, f"{u}/conv2/kernel"), f"{u}/gn2"))
    y = gn(sc(y, f"{u}/conv3/kernel"), f"{u}/gn3")
    want = relu(gn(sc(h, f"{u}/conv_proj/kernel"), f"{u}/gn_proj") + y)
    got = ref.resnet_backbone(params, x)
    assert got.shape == (1, 4, 4, 128)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
