"""Independent NumPy reference for the original (Flax) Vision Transformer.

This module is test support only.  It depends on NumPy and
``scipy.special.erf``; it never imports keras, tensorflow or torch, so it can
serve as an independent oracle for ``keras_vit``.

It provides

* :func:`make_vit_checkpoint` -- a random parameter dict laid out exactly like
  the original google-research/vision_transformer ``.npz`` files (pre-Linen
  names, HWIO conv kernels, ``(D, H, dh)`` attention kernels, optional BiT
  ResNet hybrid stem), and :func:`save_npz` to write it as a plain
  ``np.savez`` archive;
* :func:`vit_forward` / :func:`vit_intermediates` -- a float64 forward pass
  with Flax/JAX semantics (TF ``SAME`` padding, weight-standardised convs,
  GroupNorm(32, eps 1e-6), LayerNorm eps 1e-6, ``dh ** -0.5`` attention
  scaling, exact or tanh GELU);
* the building blocks (:func:`conv2d_same`, :func:`group_norm`, ...) so the
  self-check tests can verify each piece on tiny inputs.

Everything is written from the equations in the ViT paper (Dosovitskiy et
al., 2021, Eq. 1-4) and the checkpoint description in
``shared/research/anchors_mission.md`` sections 2.4 and 3.
"""

from __future__ import annotations

import math
import os

import numpy as np
from scipy.special import erf

__all__ = [
    "LN_EPS",
    "GN_EPS",
    "GN_GROUPS",
    "WS_EPS",
    "make_vit_checkpoint",
    "save_npz",
    "count_params",
    "resnet_out_channels",
    "resnet_reduction",
    "infer_resnet_layers",
    "same_padding",
    "conv2d_same",
    "standardize_kernel",
    "std_conv",
    "group_norm",
    "max_pool_same",
    "layer_norm",
    "gelu_exact",
    "gelu_tanh",
    "patch_embed",
    "resnet_backbone",
    "attention",
    "encoder_block",
    "vit_intermediates",
    "vit_forward",
]

# Numerical conventions of the Flax reference (anchors_mission.md §3.6).
LN_EPS = 1e-6  # flax.linen.LayerNorm default
GN_EPS = 1e-6  # flax.linen.GroupNorm default
GN_GROUPS = 32  # flax.linen.GroupNorm default
WS_EPS = 1e-5  # StdConv: (w - mean) / (std + 1e-5)


# ---------------------------------------------------------------------------
# Checkpoint construction
# ---------------------------------------------------------------------------


def resnet_reduction(resnet_layers) -> int:
    """Spatial reduction factor of the BiT stem + stages.

    Root conv (/2) and max-pool (/2) give 4; every stage after the first
    halves again.  ``resnet_layers=()`` means "stem only" (factor 4), as in
    the original ``R+ViT-Ti_16`` config.
    """
    n = len(resnet_layers)
    return 4 * 2 ** max(n - 1, 0)


def resnet_out_channels(resnet_layers, width: int = 64) -> int:
    """Channels of the BiT backbone output (the embedding conv's input).

    Stage ``s`` (1-based) has ``features = width * 2**(s-1)`` and outputs
    ``4 * features`` channels; a stem-only backbone outputs ``width``.
    """
    n = len(resnet_layers)
    if n == 0:
        return width
    return 4 * width * 2 ** (n - 1)


def _resnet_shapes(resnet_layers, width: int, channels: int):
    """Yield ``(key, shape, kind)`` for the BiT ResNet keys (§3.3 layout).

    ``kind`` is one of "conv", "gn_scale", "gn_bias".
    """
    yield "conv_root/kernel", (7, 7, channels, width), "conv"
    yield "gn_root/scale", (width,), "gn_scale"
    yield "gn_root/bias", (width,), "gn_bias"
    cin = width
    for s, units in enumerate(resnet_layers, start=1):
        feat = width * 2 ** (s - 1)
        cout = 4 * feat
        for u in range(1, units + 1):
            stride = 2 if (u == 1 and s > 1) else 1
            pre = f"block{s}/unit{u}"
            # Flax order inside ResidualUnit: conv_proj/gn_proj first.
            if cin != cout or stride != 1:
                yield f"{pre}/conv_proj/kernel", (1, 1, cin, cout), "conv"
                yield f"{pre}/gn_proj/scale", (cout,), "gn_scale"
                yield f"{pre}/gn_proj/bias", (cout,), "gn_bias"
            yield f"{pre}/conv1/kernel", (1, 1, cin, feat), "conv"
            yield f"{pre}/gn1/scale", (feat,), "gn_scale"
            yield f"{pre}/gn1/bias", (feat,), "gn_bias"
            yield f"{pre}/conv2/kernel", (3, 3, feat, feat), "conv"
            yield f"{pre}/gn2/scale", (feat,), "gn_scale"
            yield f"{pre}/gn2/bias", (feat,), "gn_bias"
            yield f"{pre}/conv3/kernel", (1, 1, feat, cout), "conv"
            yield f"{pre}/gn3/scale", (cout,), "gn_scale"
            yield f"{pre}/gn3/bias", (cout,), "gn_bias"
            cin = cout


def _vit_shapes(
    *,
    hidden_dim,
    depth,
    mlp_dim,
    num_heads,
    patch_size,
    in_channels,
    num_tokens,
    num_classes,
    representation_size,
    class_token,
    qkv_bias=True,
):
    """Yield ``(key, shape, kind)`` for the transformer part (§3.2 layout)."""
    d, p = hidden_dim, patch_size
    if d % num_heads:
        raise ValueError(f"hidden_dim={d} not divisible by heads={num_heads}")
    dh = d // num_heads
    yield "embedding/kernel", (p, p, in_channels, d), "kernel"
    yield "embedding/bias", (d,), "bias"
    if class_token:
        yield "cls", (1, 1, d), "token"
    n = num_tokens + (1 if class_token else 0)
    yield "Transformer/posembed_input/pos_embedding", (1, n, d), "posemb"
    for i in range(depth):
        pre = f"Transformer/encoderblock_{i}"
        mha = f"{pre}/MultiHeadDotProductAttention_1"
        mlp = f"{pre}/MlpBlock_3"
        yield f"{pre}/LayerNorm_0/scale", (d,), "ln_scale"
        yield f"{pre}/LayerNorm_0/bias", (d,), "ln_bias"
        for name in ("query", "key", "value"):
            yield f"{mha}/{name}/kernel", (d, num_heads, dh), "kernel"
            if qkv_bias:
                yield f"{mha}/{name}/bias", (num_heads, dh), "bias"
        yield f"{mha}/out/kernel", (num_heads, dh, d), "kernel"
        yield f"{mha}/out/bias", (d,), "bias"
        yield f"{pre}/LayerNorm_2/scale", (d,), "ln_scale"
        yield f"{pre}/LayerNorm_2/bias", (d,), "ln_bias"
        yield f"{mlp}/Dense_0/kernel", (d, mlp_dim), "kernel"
        yield f"{mlp}/Dense_0/bias", (mlp_dim,), "bias"
        yield f"{mlp}/Dense_1/kernel", (mlp_dim, d), "kernel"
        yield f"{mlp}/Dense_1/bias", (d,), "bias"
    yield "Transformer/encoder_norm/scale", (d,), "ln_scale"
    yield "Transformer/encoder_norm/bias", (d,), "ln_bias"
    feat = d
    if representation_size:
        yield "pre_logits/kernel", (d, representation_size), "kernel"
        yield "pre_logits/bias", (representation_size,), "bias"
        feat = representation_size
    if num_classes:
        yield "head/kernel", (feat, num_classes), "kernel"
        yield "head/bias", (num_classes,), "bias"


def _random_value(rng, key, shape, kind):
    """Random float32 values whose scale keeps activations O(1)."""
    if kind in ("kernel", "conv"):
        # fan_in = product of all axes but the output axes.  For HWIO convs
        # and (in, out) Dense kernels that is all but the last axis; for the
        # (D, H, dh) q/k/v kernels it is the first axis only.
        if key.endswith(("query/kernel", "key/kernel", "value/kernel")):
            fan_in = shape[0]
        else:
            fan_in = int(np.prod(shape[:-1]))
        std = 1.0 / math.sqrt(fan_in)
        mean = 0.0
        if kind == "conv":
            # A non-zero per-channel offset, so that the mean subtraction of
            # the weight standardisation visibly matters.
            mean = rng.normal(0.0, 0.5 * std, size=shape[-1])
        out = rng.normal(mean, std, size=shape)
    elif kind in ("ln_scale", "gn_scale"):
        out = 1.0 + 0.1 * rng.standard_normal(shape)
    elif kind in ("ln_bias", "gn_bias", "bias"):
        out = 0.1 * rng.standard_normal(shape)
    elif kind in ("token", "posemb"):
        out = 0.2 * rng.standard_normal(shape)
    else:  # pragma: no cover - internal
        raise ValueError(kind)
    return out.astype(np.float32)


def make_vit_checkpoint(
    *,
    hidden_dim: int,
    depth: int,
    mlp_dim: int,
    num_heads: int,
    patch_size: int,
    image_size=(224, 224),
    channels: int = 3,
    num_classes: int | None = 10,
    representation_size: int | None = None,
    class_token: bool = True,
    resnet_layers=None,
    resnet_width: int = 64,
    seed: int = 0,
    shapes_only: bool = False,
    legacy_gn_shape: bool = False,
    qkv_bias: bool = True,
) -> dict[str, np.ndarray]:
    """Random parameters in the original vision_transformer ``.npz`` layout.

    Args:
      hidden_dim, depth, mlp_dim, num_heads, patch_size: transformer config.
        For hybrids ``patch_size`` is measured on the ResNet feature map
        (1 for R50+ViT-B/16).
      image_size: ``(H, W)`` (or an int) of the input image; determines the
        token grid and so the position-embedding length.
      channels: input image channels.
      num_classes: head width; ``None``/``0`` omits ``head/*``.
      representation_size: if set, adds ``pre_logits/{kernel,bias}``.
      class_token: if False, no ``cls`` key and no CLS pos-embedding row.
      resnet_layers: ``None`` for a plain ViT; a tuple of units per stage
        (e.g. ``(3, 4, 9)``) for a BiT ResNet hybrid; ``()`` for stem only.
      resnet_width: base width of the BiT backbone (64 in every config).
        Must be a multiple of 32 (GroupNorm with 32 groups).
      seed: seed of the random generator.
      shapes_only: return uninitialised ``np.empty`` arrays (instant, for
        key/shape/parameter-count checks).
      legacy_gn_shape: store GroupNorm params as ``(1, 1, 1, C)`` like
        checkpoints written before flax 0.3.6.
      qkv_bias: if False, no query/key/value ``bias`` keys (timm's
        ``Attention(qkv_bias=False)``; the ``out`` bias stays).

    Returns:
      ``{key: float32 array}`` with ``/``-joined Flax names.  The dict is
      ordered: ResNet keys first (stem, then block/unit), then the ViT keys.
    """
    if isinstance(image_size, int):
        image_size = (image_size, image_size)
    h, w = image_size
    shapes = []
    if resnet_layers is not None:
        resnet_layers = tuple(resnet_layers)
        if resnet_width % GN_GROUPS:
            raise ValueError("resnet_width must be a multiple of 32")
        shapes += list(_resnet_shapes(resnet_layers, resnet_width, channels))
        in_ch = resnet_out_channels(resnet_layers, resnet_width)
        red = resnet_reduction(resnet_layers)
        # Spatial size after the stem/stages, with SAME padding: ceil(x / 2)
        # at every stride-2 op.
        fh, fw = h, w
        for _ in range(int(round(math.log2(red)))):
            fh, fw = -(-fh // 2), -(-fw // 2)
    else:
        in_ch, fh, fw = channels, h, w
    grid = (fh // patch_size, fw // patch_size)
    shapes += list(
        _vit_shapes(
            hidden_dim=hidden_dim,
            depth=depth,
            mlp_dim=mlp_dim,
            num_heads=num_heads,
            patch_size=patch_size,
            in_channels=in_ch,
            num_tokens=grid[0] * grid[1],
            num_classes=num_classes,
            representation_size=representation_size,
            class_token=class_token,
            qkv_bias=qkv_bias,
        )
    )

    rng = np.random.default_rng(seed)
    params = {}
    for key, shape, kind in shapes:
        if shapes_only:
            arr = np.empty(shape, np.float32)
        else:
            arr = _random_value(rng, key, shape, kind)
        if legacy_gn_shape and kind in ("gn_scale", "gn_bias"):
            arr = arr.reshape(1, 1, 1, -1)
        params[key] = arr
    return params


def save_npz(params: dict[str, np.ndarray], path) -> str:
    """Write ``params`` as a plain (pickle-free) ``np.savez`` archive.

    Returns the path actually written (``np.savez`` appends ``.npz`` if
    missing).  The file loads with ``np.load(path, allow_pickle=False)``.
    """
    path = os.fspath(path)
    if not path.endswith(".npz"):
        path += ".npz"
    arrays = {k: np.asarray(v) for k, v in params.items()}
    for k, v in arrays.items():
        if v.dtype == object:
            raise TypeError(f"{k}: object arrays would need pickle")
    np.savez(path, **arrays)
    return path


def count_params(params: dict[str, np.ndarray]) -> int:
    """Total number of scalars in a checkpoint dict."""
    return int(sum(int(np.prod(v.shape)) for v in params.values()))


def infer_resnet_layers(params) -> tuple[int, ...] | None:
    """Units per stage read off the ``block{s}/unit{u}`` keys.

    ``None`` if the checkpoint has no ``conv_root`` (plain ViT); ``()`` for a
    stem-only hybrid.
    """
    if "conv_root/kernel" not in params:
        return None
    units = {}
    for key in params:
        if key.startswith("block") and "/unit" in key:
            b, u = key.split("/")[:2]
            s, n = int(b[len("block") :]), int(u[len("unit") :])
            units[s] = max(units.get(s, 0), n)
    return tuple(units[s] for s in range(1, len(units) + 1))


# ---------------------------------------------------------------------------
# Convolutional building blocks (NHWC, HWIO, float64)
# ---------------------------------------------------------------------------


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """TF/Flax ``SAME`` padding ``(before, after)`` for one spatial axis.

    ``out = ceil(size / stride)``; ``total = max((out-1)*stride + kernel -
    size, 0)``; the extra pixel (odd total) goes *after*.
    """
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


def _windows(x, kh, kw, stride):
    """Strided ``(B, Ho, Wo, C, kh, kw)`` window view of a padded NHWC x."""
    v = np.lib.stride_tricks.sliding_window_view(x, (kh, kw), axis=(1, 2))
    return v[:, ::stride, ::stride]


def conv2d_same(x, kernel, stride: int = 1):
    """Bias-free 2-D cross-correlation with TF ``SAME`` padding.

    Args:
      x: ``(B, H, W, Cin)``.
      kernel: ``(kh, kw, Cin, Cout)`` (HWIO).
      stride: same stride on both axes.

    Returns:
      ``(B, ceil(H/s), ceil(W/s), Cout)``; im2col + one matmul.
    """
    x = np.asarray(x, np.float64)
    kernel = np.asarray(kernel, np.float64)
    kh, kw, cin, cout = kernel.shape
    b, h, w, c = x.shape
    if c != cin:
        raise ValueError(f"input has {c} channels, kernel expects {cin}")
    ph, pw = same_padding(h, kh, stride), same_padding(w, kw, stride)
    xp = np.pad(x, ((0, 0), ph, pw, (0, 0)))
    cols = _windows(xp, kh, kw, stride)  # (B, Ho, Wo, Cin, kh, kw)
    ho, wo = cols.shape[1:3]
    cols = cols.transpose(0, 1, 2, 4, 5, 3).reshape(b * ho * wo, -1)
    out = cols @ kernel.reshape(-1, cout)  # (B*Ho*Wo, Cout)
    return out.reshape(b, ho, wo, cout)


def standardize_kernel(kernel, eps: float = WS_EPS):
    """BiT weight standardisation: ``(w - mean) / (std + eps)``.

    Mean and population std are taken over (H, W, I) per output channel.
    """
    w = np.asarray(kernel, np.float64)
    w = w - w.mean(axis=(0, 1, 2), keepdims=True)
    return w / (w.std(axis=(0, 1, 2), keepdims=True) + eps)


def std_conv(x, kernel, stride: int = 1):
    """``StdConv``: weight-standardised, bias-free, SAME-padded conv."""
    return conv2d_same(x, standardize_kernel(kernel), stride)


def group_norm(x, scale, bias, groups: int = GN_GROUPS, eps: float = GN_EPS):
    """GroupNorm over (H, W, C/groups) per sample and group.

    ``scale``/``bias`` may be ``(C,)`` or legacy ``(1, 1, 1, C)``.
    """
    x = np.asarray(x, np.float64)
    b, h, w, c = x.shape
    if c % groups:
        raise ValueError(f"{c} channels not divisible into {groups} groups")
    g = x.reshape(b, h, w, groups, c // groups)
    mean = g.mean(axis=(1, 2, 4), keepdims=True)
    var = g.var(axis=(1, 2, 4), keepdims=True)  # population variance
    g = (g - mean) / np.sqrt(var + eps)
    y = g.reshape(b, h, w, c)
    scale = np.asarray(scale, np.float64).reshape(-1)
    bias = np.asarray(bias, np.float64).reshape(-1)
    return y * scale + bias


def max_pool_same(x, window: int = 3, stride: int = 2):
    """Max-pool with TF ``SAME`` padding (padding is ``-inf``)."""
    x = np.asarray(x, np.float64)
    _, h, w, _ = x.shape
    ph = same_padding(h, window, stride)
    pw = same_padding(w, window, stride)
    xp = np.pad(x, ((0, 0), ph, pw, (0, 0)), constant_values=-np.inf)
    return _windows(xp, window, window, stride).max(axis=(-2, -1))


def resnet_backbone(params, x, resnet_layers=None):
    """BiT ResNet (v1 bottleneck, StdConv + GroupNorm) feature extractor.

    Args:
      params: checkpoint dict with the §3.3 keys.
      x: ``(B, H, W, C)`` images.
      resnet_layers: units per stage; inferred from the keys when None.

    Returns:
      ``(B, H/r, W/r, C_out)`` features (SAME padding rounds up).
    """
    if resnet_layers is None:
        resnet_layers = infer_resnet_layers(params)
    p = params
    x = std_conv(x, p["conv_root/kernel"], stride=2)  # (B, H/2, W/2, width)
    x = group_norm(x, p["gn_root/scale"], p["gn_root/bias"])
    x = np.maximum(x, 0.0)
    x = max_pool_same(x, 3, 2)  # (B, H/4, W/4, width)
    for s, units in enumerate(resnet_layers, start=1):
        for u in range(1, units + 1):
            stride = 2 if (u == 1 and s > 1) else 1
            pre = f"block{s}/unit{u}"

            def gn(y, name, pre=pre):
                return group_norm(y, p[f"{pre}/{name}/scale"], p[f"{pre}/{name}/bias"])

            if f"{pre}/conv_proj/kernel" in p:
                res = std_conv(x, p[f"{pre}/conv_proj/kernel"], stride)
                res = gn(res, "gn_proj")
            else:
                res = x
            y = np.maximum(gn(std_conv(x, p[f"{pre}/conv1/kernel"]), "gn1"), 0)
            y = std_conv(y, p[f"{pre}/conv2/kernel"], stride)  # stride here
            y = np.maximum(gn(y, "gn2"), 0.0)
            y = gn(std_conv(y, p[f"{pre}/conv3/kernel"]), "gn3")
            x = np.maximum(res + y, 0.0)  # (B, h, w, 4 * features)
    return x


# ---------------------------------------------------------------------------
# Transformer building blocks
# ---------------------------------------------------------------------------


def layer_norm(x, scale, bias, eps: float = LN_EPS):
    """LayerNorm over the last axis, population variance, eps 1e-6."""
    x = np.asarray(x, np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * scale + bias


def gelu_exact(x):
    """``x * Phi(x) = x / 2 * (1 + erf(x / sqrt(2)))``."""
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def gelu_tanh(x):
    """Tanh approximation (``jax.nn.gelu(approximate=True)``, Flax default).

    ``0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))``.
    """
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x**3)))


_GELUS = {"exact": gelu_exact, "tanh": gelu_tanh}


def patch_embed(x, kernel, bias):
    """Conv with kernel = stride = P, VALID padding, plus bias.

    Args:
      x: ``(B, H, W, C)``; rows/columns beyond a multiple of P are dropped
        (VALID semantics).
      kernel: ``(P, P, C, D)`` HWIO.
      bias: ``(D,)``.

    Returns:
      ``(tokens, grid)``: tokens ``(B, gh*gw, D)`` flattened row-major over
      ``(h, w)``, and ``grid = (gh, gw)``.
    """
    x = np.asarray(x, np.float64)
    kernel = np.asarray(kernel, np.float64)
    p, q, c, d = kernel.shape
    b, h, w, _ = x.shape
    gh, gw = h // p, w // q
    x = x[:, : gh * p, : gw * q].reshape(b, gh, p, gw, q, c)
    y = np.einsum("bhpwqc,pqcd->bhwd", x, kernel) + bias  # (B, gh, gw, D)
    return y.reshape(b, gh * gw, d), (gh, gw)


def attention(x, params, prefix, num_heads=None, return_weights=False):
    """Flax ``MultiHeadDotProductAttention`` (self-attention, no mask).

    Args:
      x: ``(B, N, D)`` (already layer-normed).
      params: checkpoint dict; ``prefix`` points at the MHA scope. Without
        the query/key/value ``bias`` keys, those projections have no bias
        (timm's ``qkv_bias=False``).
      num_heads: checked against the kernel shape if given.

    Returns:
      ``(B, N, D)``, and the ``(B, H, N, N)`` softmax weights if requested.
    """
    required = ("query/kernel", "key/kernel", "value/kernel", "out/kernel", "out/bias")
    optional = ("query/bias", "key/bias", "value/bias")  # absent: no bias
    p = {
        k: np.asarray(params[f"{prefix}/{k}"], np.float64)
        for k in required + optional
        if k in required or f"{prefix}/{k}" in params
    }
    _, heads, dh = p["query/kernel"].shape
    if num_heads is not None and num_heads != heads:
        raise ValueError(f"num_heads={num_heads}, checkpoint has {heads}")
    q = np.einsum("bnd,dhk->bnhk", x, p["query/kernel"]) + p.get("query/bias", 0)
    k = np.einsum("bnd,dhk->bnhk", x, p["key/kernel"]) + p.get("key/bias", 0)
    v = np.einsum("bnd,dhk->bnhk", x, p["value/kernel"]) + p.get("value/bias", 0)
    q = q * dh**-0.5  # (B, N, H, dh)
    logits = np.einsum("bqhk,bshk->bhqs", q, k)  # (B, H, N, N)
    logits = logits - logits.max(axis=-1, keepdims=True)
    weights = np.exp(logits)
    weights /= weights.sum(axis=-1, keepdims=True)
    ctx = np.einsum("bhqs,bshk->bqhk", weights, v)  # (B, N, H, dh)
    out = np.einsum("bqhk,hkd->bqd", ctx, p["out/kernel"]) + p["out/bias"]
    return (out, weights) if return_weights else out


def encoder_block(x, params, i, *, num_heads=None, gelu="tanh"):
    """One pre-LN encoder block ``encoderblock_{i}`` (Eq. 2-3).

    Returns ``(y, attention_weights)``; ``y`` is ``(B, N, D)``.
    """
    act = _GELUS[gelu]
    pre = f"Transformer/encoderblock_{i}"
    p = params

    def ln(z, name):
        return layer_norm(z, p[f"{pre}/{name}/scale"], p[f"{pre}/{name}/bias"])

    def dense(z, name):
        kernel = np.asarray(p[f"{pre}/MlpBlock_3/{name}/kernel"], np.float64)
        return z @ kernel + p[f"{pre}/MlpBlock_3/{name}/bias"]

    y, weights = attention(
        ln(x, "LayerNorm_0"),
        p,
        f"{pre}/MultiHeadDotProductAttention_1",
        num_heads=num_heads,
        return_weights=True,
    )
    x = x + y  # z'_l = MSA(LN(z_{l-1})) + z_{l-1}
    y = dense(act(dense(ln(x, "LayerNorm_2"), "Dense_0")), "Dense_1")
    return x + y, weights  # z_l = MLP(LN(z'_l)) + z'_l


# ---------------------------------------------------------------------------
# Full model
# ---------------------------------------------------------------------------


def vit_intermediates(
    params,
    images,
    *,
    num_heads: int,
    patch_size: int,
    gelu: str = "tanh",
    pooling: str = "token",
    resnet_layers=None,
) -> dict:
    """Full forward pass returning every intermediate (float64).

    See :func:`vit_forward` for the arguments.  Returns a dict:

    * ``backbone``: ResNet features ``(B, h, w, C)`` (hybrids only, else
      None);
    * ``grid``: ``(gh, gw)`` token grid;
    * ``embeddings``: ``z_0``, ``(B, N(+1), D)`` after CLS + pos-embedding;
    * ``blocks``: list of each block's output ``(B, N(+1), D)``;
    * ``attention``: list of ``(B, H, N(+1), N(+1))`` softmax weights;
    * ``encoded``: sequence after ``encoder_norm``, ``(B, N(+1), D)``;
    * ``pooled``: ``(B, D)``;
    * ``pre_logits``: ``(B, R)`` (equals ``pooled`` without ``pre_logits``);
    * ``logits``: ``(B, K)`` (equals ``pre_logits`` without ``head``).
    """
    if gelu not in _GELUS:
        raise ValueError(f"gelu must be 'exact' or 'tanh', got {gelu!r}")
    if pooling not in ("token", "gap"):
        raise ValueError(f"pooling must be 'token' or 'gap', got {pooling!r}")
    p = params
    x = np.asarray(images, np.float64)  # (B, H, W, C)
    if x.ndim != 4:
        raise ValueError(f"images must be NHWC, got shape {x.shape}")

    inferred = infer_resnet_layers(p)
    if resnet_layers is not None and tuple(resnet_layers) != inferred:
        raise ValueError(
            f"resnet_layers={tuple(resnet_layers)} but checkpoint has {inferred}"
        )
    backbone = None
    if inferred is not None:
        x = backbone = resnet_backbone(p, x, inferred)  # (B, h, w, C)

    kernel = p["embedding/kernel"]
    if kernel.shape[0] != patch_size or kernel.shape[1] != patch_size:
        raise ValueError(f"patch_size={patch_size}, embedding kernel is {kernel.shape}")
    x, grid = patch_embed(x, kernel, p["embedding/bias"])  # (B, N, D)
    b, _, d = x.shape
    has_cls = "cls" in p
    if has_cls:
        cls = np.broadcast_to(np.asarray(p["cls"], np.float64), (b, 1, d))
        x = np.concatenate([cls, x], axis=1)  # (B, N+1, D)
    pos = np.asarray(p["Transformer/posembed_input/pos_embedding"])
    if pos.shape[1] != x.shape[1]:
        raise ValueError(
            f"pos_embedding has {pos.shape[1]} rows, sequence has "
            f"{x.shape[1]} tokens (grid {grid}); resize it first"
        )
    x = x + pos  # z_0
    out = {"backbone": backbone, "grid": grid, "embeddings": x}

    blocks, attns = [], []
    depth = 0
    while f"Transformer/encoderblock_{depth}/LayerNorm_0/scale" in p:
        depth += 1
    for i in range(depth):
        x, w = encoder_block(x, p, i, num_heads=num_heads, gelu=gelu)
        blocks.append(x)
        attns.append(w)
    out["blocks"], out["attention"] = blocks, attns

    x = layer_norm(
        x,
        p["Transformer/encoder_norm/scale"],
        p["Transformer/encoder_norm/bias"],
    )  # (B, N(+1), D)
    out["encoded"] = x
    if pooling == "token":
        if not has_cls:
            raise ValueError("pooling='token' needs a 'cls' parameter")
        x = x[:, 0]  # (B, D)
    else:
        x = x[:, 1:] if has_cls else x
        x = x.mean(axis=1)  # (B, D)
    out["pooled"] = x
    if "pre_logits/kernel" in p:
        x = np.tanh(
            x @ np.asarray(p["pre_logits/kernel"], np.float64) + p["pre_logits/bias"]
        )  # (B, R)
    out["pre_logits"] = x
    if "head/kernel" in p:
        x = x @ np.asarray(p["head/kernel"], np.float64) + p["head/bias"]
    out["logits"] = x  # (B, K)
    return out


def vit_forward(
    params,
    images,
    *,
    num_heads: int,
    patch_size: int,
    gelu: str = "tanh",
    pooling: str = "token",
    resnet_layers=None,
    return_tokens: bool = False,
):
    """Reference ViT logits with Flax/JAX semantics, computed in float64.

    Args:
      params: checkpoint dict (``make_vit_checkpoint`` or ``np.load``).
      images: ``(B, H, W, C)`` float images already in model range [-1, 1].
      num_heads: attention heads (checked against the kernels).
      patch_size: patch size on the (backbone) feature map.
      gelu: ``"tanh"`` (Flax/``jax.nn.gelu`` default, the original) or
        ``"exact"`` (erf; timm / HF / keras-hub).
      pooling: ``"token"`` (class token) or ``"gap"`` (mean of the patch
        tokens, excluding the class token if the checkpoint has one).
      resnet_layers: optional; the hybrid layout is read from the keys and,
        if given, this is checked against it.
      return_tokens: also return the ``encoder_norm`` output sequence.

    Returns:
      ``logits`` ``(B, K)`` float64, or ``(logits, tokens)`` with tokens
      ``(B, N(+1), D)`` when ``return_tokens``.
    """
    out = vit_intermediates(
        params,
        images,
        num_heads=num_heads,
        patch_size=patch_size,
        gelu=gelu,
        pooling=pooling,
        resnet_layers=resnet_layers,
    )
    if return_tokens:
        return out["logits"], out["encoded"]
    return out["logits"]


def map_head(x, params, num_prefix_tokens=0, gelu="exact"):
    """big_vision's `MAPHead` in NumPy: a probe attends to the patch tokens.

    `params` holds the `MAPHead_0/...` keys of the original layout. Returns
    `(batch, dim)`.
    """
    p = "MAPHead_0/"
    mha = p + "MultiHeadDotProductAttention_0/"
    x = np.asarray(x, np.float64)[:, num_prefix_tokens:]
    probe = np.broadcast_to(params[p + "probe"], (x.shape[0], 1, x.shape[-1]))

    def project(tokens, name):
        kernel, bias = params[mha + name + "/kernel"], params[mha + name + "/bias"]
        return np.einsum("bnd,dhk->bnhk", tokens, kernel) + bias

    q, k, v = project(probe, "query"), project(x, "key"), project(x, "value")
    logits = np.einsum("blhk,bnhk->bhln", q, k) / np.sqrt(q.shape[-1])
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)
    context = np.einsum("bhln,bnhk->blhk", weights, v)
    y = np.einsum("blhk,hkd->bld", context, params[mha + "out/kernel"])
    y = y + params[mha + "out/bias"]
    z = layer_norm(y, params[p + "LayerNorm_0/scale"], params[p + "LayerNorm_0/bias"])
    mlp = p + "MlpBlock_0/"
    z = z @ params[mlp + "Dense_0/kernel"] + params[mlp + "Dense_0/bias"]
    z = gelu_exact(z) if gelu == "exact" else gelu_tanh(z)
    z = z @ params[mlp + "Dense_1/kernel"] + params[mlp + "Dense_1/bias"]
    return (y + z)[:, 0]
