"""NumPy reference for the RoPE ViTs timm builds with its `Eva` class.

DINOv3, EVA-02, Perception Encoder (PE-Core / PE-Lang / PE-Spatial) and
RoPE-ViT (axial, mixed, each with or without an absolute position
embedding) are one architecture in timm (`timm/models/eva.py`), switched by
constructor arguments. This module is a float64 NumPy port of that forward
pass, written from the formulas (the timm file and function each step
follows are named in comments; no timm code is copied), for proving the
Keras port against. It imports nothing from keras_vit.

`config` is the dict of `timm.models.eva.Eva` constructor arguments a model
is built with (what a `@register_model` function passes, plus `img_size`
and `num_classes`), with `norm_eps` standing for `norm_layer`'s epsilon;
`resolve_config` fills in Eva's defaults. `state` maps timm's state_dict
names to arrays.

Example:

```python
config = resolve_config(dict(
    img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
    use_rot_pos_emb=True, ref_feat_shape=(4, 4), num_classes=5,
))
state = random_state(config)
out = forward(state, config, np.zeros((1, 32, 48, 3)))
out["tokens"].shape  # (1, 1 + 4 * 6, 32)
```
"""

from __future__ import annotations

import math

import numpy as np

# Eva's constructor defaults (timm/models/eva.py, Eva.__init__) for the
# arguments these families use; `norm_eps` is timm's LayerNorm default
# (timm/layers/norm.py, LayerNorm).
EVA_DEFAULTS = dict(
    img_size=224,
    patch_size=16,
    in_chans=3,
    num_classes=1000,
    global_pool="avg",
    embed_dim=768,
    depth=12,
    num_heads=12,
    num_kv_heads=None,
    qkv_bias=True,
    qkv_fused=True,
    qk_norm=False,
    mlp_ratio=4.0,
    swiglu_mlp=False,
    swiglu_align_to=0,
    scale_mlp=False,
    scale_attn_inner=False,
    attn_type="eva",
    init_values=None,
    attn_only_layer_scale=False,
    class_token=True,
    num_reg_tokens=0,
    no_embed_class=False,
    use_abs_pos_emb=True,
    use_rot_pos_emb=False,
    rope_type="cat",
    rope_grid_offset=0.0,
    rope_grid_indexing="ij",
    rope_temperature=10000.0,
    rope_rotate_half=False,
    use_post_norm=False,
    use_pre_transformer_norm=False,
    use_post_transformer_norm=None,
    use_fc_norm=None,
    attn_pool_num_heads=None,
    attn_pool_mlp_ratio=None,
    dynamic_img_size=False,
    ref_feat_shape=None,
    norm_eps=1e-6,
)


def _pair(value):
    if value is None:
        return None
    if isinstance(value, (int, float)):
        return (int(value), int(value))
    return tuple(int(v) for v in value)


def resolve_config(model_args: dict) -> dict:
    """Eva's constructor arguments with defaults and the derived switches.

    Derived (timm/models/eva.py, Eva.__init__): `num_prefix_tokens`,
    `head_dim`, `fc_norm` (on by default only for avg pooling),
    `post_norm` (the final `norm`, on by default when `fc_norm` is off),
    `pre_norm` (`norm_pre`), `patch_bias` (off when `norm_pre` is on),
    `grid` (the pretrained patch grid) and `mlp_hidden`.

    Example:

    ```python
    resolve_config(dict(global_pool="token"))["post_norm"]  # True
    ```
    """
    unknown = sorted(set(model_args) - set(EVA_DEFAULTS))
    if unknown:
        raise ValueError(f"unknown Eva arguments: {unknown}")
    cfg = {**EVA_DEFAULTS, **model_args}
    for key in ("num_kv_heads", "attn_only_layer_scale", "use_post_norm"):
        if cfg[key] != EVA_DEFAULTS[key]:
            raise ValueError(f"{key}={cfg[key]!r} is not implemented by this reference")
    if cfg["use_rot_pos_emb"] and cfg["rope_type"] not in ("cat", "mixed", "dinov3"):
        raise ValueError(f"rope_type={cfg['rope_type']!r} is not implemented")
    cfg["img_size"] = _pair(cfg["img_size"])
    cfg["patch_size"] = _pair(cfg["patch_size"])
    cfg["ref_feat_shape"] = _pair(cfg["ref_feat_shape"])
    cfg["num_prefix_tokens"] = int(bool(cfg["class_token"])) + int(
        cfg["num_reg_tokens"]
    )
    cfg["head_dim"] = cfg["embed_dim"] // cfg["num_heads"]
    fc_norm = (
        cfg["use_fc_norm"]
        if cfg["use_fc_norm"] is not None
        else cfg["global_pool"] == "avg"
    )
    post = cfg["use_post_transformer_norm"]
    cfg["fc_norm"] = bool(fc_norm)
    cfg["post_norm"] = bool(post) if post is not None else not fc_norm
    cfg["pre_norm"] = bool(cfg["use_pre_transformer_norm"])
    cfg["patch_bias"] = not cfg["pre_norm"]
    cfg["grid"] = (
        cfg["img_size"][0] // cfg["patch_size"][0],
        cfg["img_size"][1] // cfg["patch_size"][1],
    )
    # EvaBlock: hidden = int(dim * mlp_ratio); SwiGLU rounds it up to a
    # multiple of align_to (timm/layers/mlp.py, SwiGLU).
    hidden = int(cfg["embed_dim"] * cfg["mlp_ratio"])
    if cfg["swiglu_mlp"] and cfg["swiglu_align_to"]:
        hidden += -hidden % cfg["swiglu_align_to"]
    cfg["mlp_hidden"] = hidden
    # EvaBlock picks the MLP: SwiGLU (separate fc1_g / fc1_x) when a norm
    # or alignment is asked for, else the packed GluMlp; plain Mlp otherwise.
    if not cfg["swiglu_mlp"]:
        cfg["mlp_kind"] = "mlp"
    elif cfg["scale_mlp"] or cfg["swiglu_align_to"]:
        cfg["mlp_kind"] = "swiglu"
    else:
        cfg["mlp_kind"] = "swiglu_packed"
    if cfg["global_pool"] == "token" and not cfg["class_token"]:
        raise ValueError("token pooling needs the class token")
    return cfg


# ---------------------------------------------------------------- shapes


def param_shapes(cfg: dict) -> dict[str, tuple[int, ...]]:
    """timm's state_dict names and shapes for a resolved config.

    Example:

    ```python
    shapes = param_shapes(resolve_config(dict(depth=1)))
    shapes["blocks.0.attn.qkv.weight"]  # (2304, 768)
    ```
    """
    d, hd, heads = cfg["embed_dim"], cfg["head_dim"], cfg["num_heads"]
    attn_dim = hd * heads
    ph, pw = cfg["patch_size"]
    gh, gw = cfg["grid"]
    npt = cfg["num_prefix_tokens"]
    out: dict[str, tuple[int, ...]] = {}
    if cfg["class_token"]:
        out["cls_token"] = (1, 1, d)
    if cfg["num_reg_tokens"]:
        out["reg_token"] = (1, cfg["num_reg_tokens"], d)
    if cfg["use_abs_pos_emb"]:
        rows = gh * gw + (0 if cfg["no_embed_class"] else npt)
        out["pos_embed"] = (1, rows, d)
    out["patch_embed.proj.weight"] = (d, cfg["in_chans"], ph, pw)
    if cfg["patch_bias"]:
        out["patch_embed.proj.bias"] = (d,)
    if cfg["use_rot_pos_emb"] and cfg["rope_type"] == "mixed":
        out["rope.freqs"] = (2, cfg["depth"], heads, hd // 2)
    if cfg["pre_norm"]:
        out["norm_pre.weight"] = out["norm_pre.bias"] = (d,)
    hidden = cfg["mlp_hidden"]
    for i in range(cfg["depth"]):
        b = f"blocks.{i}."
        if cfg["init_values"] is not None:
            out[b + "gamma_1"] = out[b + "gamma_2"] = (d,)
        out[b + "norm1.weight"] = out[b + "norm1.bias"] = (d,)
        a = b + "attn."
        if cfg["qkv_fused"]:
            out[a + "qkv.weight"] = (3 * attn_dim, d)
            if cfg["qkv_bias"] and cfg["attn_type"] == "rope":
                out[a + "qkv.bias"] = (3 * attn_dim,)
            elif cfg["qkv_bias"]:
                out[a + "q_bias"] = out[a + "v_bias"] = (attn_dim,)
        else:
            for name in ("q_proj", "k_proj", "v_proj"):
                out[a + name + ".weight"] = (attn_dim, d)
            names = (
                ("q_proj", "k_proj", "v_proj")
                if cfg["attn_type"] == "rope"
                else ("q_proj", "v_proj")
            )
            if cfg["qkv_bias"]:
                for name in names:
                    out[a + name + ".bias"] = (attn_dim,)
        if cfg["qk_norm"]:
            for name in ("q_norm", "k_norm"):
                out[a + name + ".weight"] = out[a + name + ".bias"] = (hd,)
        if cfg["scale_attn_inner"]:
            out[a + "norm.weight"] = out[a + "norm.bias"] = (attn_dim,)
        out[a + "proj.weight"] = (d, attn_dim)
        out[a + "proj.bias"] = (d,)
        out[b + "norm2.weight"] = out[b + "norm2.bias"] = (d,)
        m = b + "mlp."
        if cfg["mlp_kind"] == "swiglu":
            for name in ("fc1_g", "fc1_x"):
                out[m + name + ".weight"] = (hidden, d)
                out[m + name + ".bias"] = (hidden,)
        elif cfg["mlp_kind"] == "swiglu_packed":
            out[m + "fc1.weight"] = (2 * hidden, d)
            out[m + "fc1.bias"] = (2 * hidden,)
        else:
            out[m + "fc1.weight"] = (hidden, d)
            out[m + "fc1.bias"] = (hidden,)
        if cfg["scale_mlp"]:
            out[m + "norm.weight"] = out[m + "norm.bias"] = (hidden,)
        out[m + "fc2.weight"] = (d, hidden)
        out[m + "fc2.bias"] = (d,)
    if cfg["post_norm"]:
        out["norm.weight"] = out["norm.bias"] = (d,)
    if cfg["global_pool"] == "map":
        pool_hidden = int(d * (cfg["attn_pool_mlp_ratio"] or cfg["mlp_ratio"]))
        out["attn_pool.latent"] = (1, 1, d)
        out["attn_pool.q.weight"], out["attn_pool.q.bias"] = (d, d), (d,)
        out["attn_pool.kv.weight"], out["attn_pool.kv.bias"] = (2 * d, d), (2 * d,)
        out["attn_pool.proj.weight"], out["attn_pool.proj.bias"] = (d, d), (d,)
        out["attn_pool.norm.weight"] = out["attn_pool.norm.bias"] = (d,)
        out["attn_pool.mlp.fc1.weight"] = (pool_hidden, d)
        out["attn_pool.mlp.fc1.bias"] = (pool_hidden,)
        out["attn_pool.mlp.fc2.weight"] = (d, pool_hidden)
        out["attn_pool.mlp.fc2.bias"] = (d,)
    if cfg["fc_norm"]:
        out["fc_norm.weight"] = out["fc_norm.bias"] = (d,)
    if cfg["num_classes"]:
        out["head.weight"] = (cfg["num_classes"], d)
        out["head.bias"] = (cfg["num_classes"],)
    return out


def count_params(cfg: dict) -> int:
    """The number of parameters of a resolved config (all of them trainable)."""
    return sum(math.prod(shape) for shape in param_shapes(cfg).values())


def random_state(cfg: dict, seed: int = 0) -> dict[str, np.ndarray]:
    """Random arrays under every name `param_shapes` gives (for examples)."""
    rng = np.random.default_rng(seed)
    return {k: rng.normal(0, 0.1, size=s) for k, s in param_shapes(cfg).items()}


# ---------------------------------------------------------------- basics


def layer_norm(x, weight, bias, eps):
    """torch.nn.functional.layer_norm over the last axis (biased variance)."""
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * weight + bias


_erf = np.vectorize(math.erf, otypes=[np.float64])


def gelu(x):
    """Exact (erf) GELU, torch.nn.GELU's default."""
    return 0.5 * x * (1.0 + _erf(x / math.sqrt(2.0)))


def silu(x):
    return x / (1.0 + np.exp(-x))


def linear(x, state, name, bias=True):
    """x @ W.T (+ b) with torch's (out, in) weight layout."""
    y = x @ state[name + ".weight"].T
    if bias and name + ".bias" in state:
        y = y + state[name + ".bias"]
    return y


def softmax(x):
    x = x - x.max(-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(-1, keepdims=True)


# ---------------------------------------------------------------- resampling


def _cubic_pil(t, a=-0.5):
    """The cubic convolution kernel with a = -0.5 (Keys), as PIL and
    torch's antialiased bicubic use it."""
    t = np.abs(t)
    return np.where(
        t < 1,
        ((a + 2) * t - (a + 3)) * t * t + 1,
        np.where(t < 2, (((t - 5) * t + 8) * t - 4) * a, 0.0),
    )


def aa_bicubic_matrix(in_size: int, out_size: int) -> np.ndarray:
    """(out, in) weights of torch's `interpolate(mode='bicubic',
    antialias=True, align_corners=False)` along one axis.

    Half-pixel centres; when shrinking the kernel is widened by in/out and
    each output's taps are the input samples inside its support, normalised
    to sum 1 (Pillow's `ImagingResample` scheme, which torch follows).
    """
    scale = in_size / out_size
    support = 2.0 * max(scale, 1.0)
    inv = 1.0 / scale if scale >= 1.0 else 1.0
    out = np.zeros((out_size, in_size))
    for i in range(out_size):
        center = scale * (i + 0.5)
        lo = max(int(center - support + 0.5), 0)
        hi = min(int(center + support + 0.5), in_size)
        taps = np.arange(lo, hi)
        w = _cubic_pil((taps - center + 0.5) * inv)
        out[i, lo:hi] = w / w.sum()
    return out


def resample_pos_embed(pos_embed, new_grid, old_grid, num_prefix_tokens):
    """timm/layers/pos_embed.py, resample_abs_pos_embed: the first
    `num_prefix_tokens` rows are kept, the grid rows resampled with
    antialiased bicubic from `old_grid` to `new_grid` (unchanged when equal).

    pos_embed: (1, prefix + old_h * old_w, C) -> (1, prefix + new_h * new_w, C)
    """
    new_grid, old_grid = tuple(new_grid), tuple(old_grid)
    if new_grid == old_grid:
        return pos_embed
    prefix, grid = pos_embed[:, :num_prefix_tokens], pos_embed[:, num_prefix_tokens:]
    c = grid.shape[-1]
    grid = grid.reshape(old_grid[0], old_grid[1], c)  # (h, w, C)
    rows = aa_bicubic_matrix(old_grid[0], new_grid[0])
    cols = aa_bicubic_matrix(old_grid[1], new_grid[1])
    grid = np.einsum("Hh,hwc,Ww->HWc", rows, grid, cols)
    return np.concatenate([prefix, grid.reshape(1, -1, c)], axis=1)


# ---------------------------------------------------------------- RoPE


def _axis_positions(size, offset, ref):
    """Positions along one axis: index + offset, rescaled by ref/size when a
    reference grid is given (timm/layers/pos_embed_sincos.py, _build_grid,
    grid_type='index'; EVA's scheme for other resolutions)."""
    t = np.arange(size, dtype=np.float64) + offset
    if ref is not None:
        t = t / size * ref
    return t


def _coords(grid_hw, grid_indexing, row_pos, col_pos):
    """(N, 2) coordinates of a row-major (H, W) grid. 'ij' gives (row, col)
    channels, 'xy' gives (col, row) (_build_grid's meshgrid indexing)."""
    rows, cols = np.meshgrid(row_pos, col_pos, indexing="ij")  # (H, W) each
    rows, cols = rows.reshape(-1), cols.reshape(-1)
    if grid_indexing == "ij":
        return np.stack([rows, cols], -1)
    if grid_indexing == "xy":
        return np.stack([cols, rows], -1)
    raise ValueError(f"grid_indexing must be 'ij' or 'xy', not {grid_indexing!r}")


def _layout(angles, rotate_half):
    """Per-frequency angles (..., D/2) to the (..., D) layout: interleaved
    [a0, a0, a1, a1, ...] or half [a0, a1, ..., a0, a1, ...]
    (pos_embed_sincos.py, _rope_layout)."""
    if rotate_half:
        return np.concatenate([angles, angles], -1)
    return np.repeat(angles, 2, axis=-1)


def rope_angles(
    kind: str,
    grid_hw,
    head_dim: int,
    *,
    temperature: float = 10000.0,
    grid_offset: float = 0.0,
    grid_indexing: str = "ij",
    ref_feat_shape=None,
    freqs=None,
):
    """The rotation angle of every position and frequency, (N, head_dim / 2)
    or (depth, heads, N, head_dim / 2) for 'mixed'.

    - 'cat' (RotaryEmbeddingCat, in_pixels=False): bands
      temperature ** (-k / F), k < F = head_dim / 4; positions index +
      grid_offset, times ref / size when ref_feat_shape is set; angles
      [coord0 * bands, coord1 * bands].
    - 'dinov3' (RotaryEmbeddingDinoV3): periods
      temperature ** (2k / (head_dim / 2)); coordinates
      2 * (index + 0.5 + grid_offset) / size - 1 per axis; angles
      2 pi coord / period, [coord0, coord1] blocks.
    - 'mixed' (RotaryEmbeddingMixed): learned freqs (2, depth, heads,
      head_dim / 2); integer positions t_x, t_y (the two coordinate
      channels); angle = t_x * freqs[0] + t_y * freqs[1].
    """
    h, w = grid_hw
    if kind == "cat":
        nb = head_dim // 4
        bands = temperature ** (-np.arange(nb, dtype=np.float64) / nb)
        ref = ref_feat_shape or (None, None)
        coords = _coords(
            grid_hw,
            grid_indexing,
            _axis_positions(h, grid_offset, ref[0]),
            _axis_positions(w, grid_offset, ref[1]),
        )
        return (coords[:, :, None] * bands).reshape(h * w, 2 * nb)
    if kind == "dinov3":
        nq = head_dim // 4
        periods = temperature ** (
            2.0 * np.arange(nq, dtype=np.float64) / (head_dim // 2)
        )
        row = 2.0 * (np.arange(h) + 0.5 + grid_offset) / h - 1.0
        col = 2.0 * (np.arange(w) + 0.5 + grid_offset) / w - 1.0
        coords = _coords(grid_hw, grid_indexing, row, col)
        return (2.0 * math.pi * coords[:, :, None] / periods).reshape(h * w, 2 * nq)
    if kind == "mixed":
        if freqs is None:
            raise ValueError("mixed RoPE needs its learned freqs (rope.freqs)")
        coords = _coords(
            grid_hw,
            grid_indexing,
            np.arange(h, dtype=np.float64),
            np.arange(w, dtype=np.float64),
        )
        fx, fy = np.asarray(freqs, np.float64)  # (depth, heads, head_dim / 2) each
        return (
            coords[:, 0, None] * fx[..., None, :]
            + coords[:, 1, None] * fy[..., None, :]
        )
    raise ValueError(f"unknown RoPE kind {kind!r}")


def rope_sin_cos(
    kind: str,
    grid_hw,
    head_dim: int,
    *,
    temperature: float = 10000.0,
    grid_offset: float = 0.0,
    grid_indexing: str = "ij",
    ref_feat_shape=None,
    rotate_half: bool = False,
    freqs=None,
):
    """(sin, cos), each (N, head_dim) — (depth, heads, N, head_dim) for
    'mixed' — in the layout `apply_rope` with the same `rotate_half` uses.

    Mixed RoPE is always interleaved (timm refuses rotate_half for it).

    Example:

    ```python
    sin, cos = rope_sin_cos("dinov3", (4, 6), 16, temperature=100, rotate_half=True)
    sin.shape  # (24, 16)
    ```
    """
    angles = rope_angles(
        kind,
        grid_hw,
        head_dim,
        temperature=temperature,
        grid_offset=grid_offset,
        grid_indexing=grid_indexing,
        ref_feat_shape=ref_feat_shape,
        freqs=freqs,
    )
    if kind == "mixed" and rotate_half:
        raise ValueError("mixed RoPE is interleaved only")
    return np.sin(_layout(angles, rotate_half)), np.cos(_layout(angles, rotate_half))


def apply_rope(x, sin, cos, rotate_half: bool):
    """x * cos + rotated(x) * sin over the last axis (pos_embed_sincos.py,
    apply_rot_embed): interleaved pairs (x0, x1) -> (-x1, x0), or half
    layout [x_a, x_b] -> [-x_b, x_a]."""
    if rotate_half:
        first, second = np.split(x, 2, axis=-1)
        rotated = np.concatenate([-second, first], -1)
    else:
        pairs = x.reshape(*x.shape[:-1], -1, 2)
        rotated = np.stack([-pairs[..., 1], pairs[..., 0]], -1).reshape(x.shape)
    return x * cos + rotated * sin


def model_rope(state, cfg, grid_hw):
    """The model's (sin, cos) for a patch grid, or None without RoPE
    (Eva._pos_embed + create_rope_embed's per-type arguments)."""
    if not cfg["use_rot_pos_emb"]:
        return None
    kind = cfg["rope_type"]
    return rope_sin_cos(
        kind,
        grid_hw,
        cfg["head_dim"],
        temperature=float(cfg["rope_temperature"]),
        grid_offset=float(cfg["rope_grid_offset"]) if kind != "mixed" else 0.0,
        grid_indexing=cfg["rope_grid_indexing"],
        # ref_feat_shape only reaches the 'cat' embedding.
        ref_feat_shape=cfg["ref_feat_shape"] if kind == "cat" else None,
        rotate_half=bool(cfg["rope_rotate_half"]),
        freqs=state.get("rope.freqs") if kind == "mixed" else None,
    )


# ---------------------------------------------------------------- blocks


def attention(x, state, prefix, cfg, rope):
    """EvaAttention (attn_type 'eva') or AttentionRope (attn_type 'rope').

    Fused qkv rows are [q heads..., k heads..., v heads...]. 'eva' with
    qkv_bias has learned q_bias and v_bias and a zero k bias (separate
    projections: q_proj and v_proj biased, k_proj not); 'rope' has a full
    qkv.bias. RoPE rotates q and k of the patch tokens only (the prefix
    tokens pass unrotated). scale_attn_inner normalises the merged heads
    before proj.

    x: (B, N, D); rope: (sin, cos) each (N - prefix, hd) or (heads, N - prefix, hd).
    """
    b, n, _ = x.shape
    heads, hd = cfg["num_heads"], cfg["head_dim"]
    eva_style = cfg["attn_type"] != "rope"
    if cfg["qkv_fused"]:
        qkv = x @ state[prefix + "qkv.weight"].T
        if prefix + "qkv.bias" in state:
            qkv = qkv + state[prefix + "qkv.bias"]
        elif prefix + "q_bias" in state:
            zeros = np.zeros_like(state[prefix + "q_bias"])
            qkv = qkv + np.concatenate(
                [state[prefix + "q_bias"], zeros, state[prefix + "v_bias"]]
            )
        q, k, v = np.split(qkv, 3, axis=-1)
    else:
        q = linear(x, state, prefix + "q_proj")
        k = linear(x, state, prefix + "k_proj", bias=not eva_style)
        v = linear(x, state, prefix + "v_proj")
    q, k, v = (
        t.reshape(b, n, heads, hd).transpose(0, 2, 1, 3) for t in (q, k, v)
    )  # (B, H, N, hd)
    if cfg["qk_norm"]:
        eps = cfg["norm_eps"]
        q = layer_norm(
            q, state[prefix + "q_norm.weight"], state[prefix + "q_norm.bias"], eps
        )
        k = layer_norm(
            k, state[prefix + "k_norm.weight"], state[prefix + "k_norm.bias"], eps
        )
    if rope is not None:
        npt = cfg["num_prefix_tokens"]
        sin, cos = rope
        half = bool(cfg["rope_rotate_half"])
        q = np.concatenate(
            [q[:, :, :npt], apply_rope(q[:, :, npt:], sin, cos, half)], axis=2
        )
        k = np.concatenate(
            [k[:, :, :npt], apply_rope(k[:, :, npt:], sin, cos, half)], axis=2
        )
    weights = softmax((q * hd**-0.5) @ k.transpose(0, 1, 3, 2))
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(b, n, heads * hd)
    if cfg["scale_attn_inner"]:
        out = layer_norm(
            out,
            state[prefix + "norm.weight"],
            state[prefix + "norm.bias"],
            cfg["norm_eps"],
        )
    return linear(out, state, prefix + "proj")


def mlp(x, state, prefix, cfg):
    """Mlp (fc1, exact GELU, [norm], fc2), GluMlp packed SwiGLU (fc1 rows
    [gate, value]: silu(first half) * second half, fc2), or SwiGLU
    (silu(fc1_g) * fc1_x, [norm], fc2) (timm/layers/mlp.py)."""
    kind = cfg["mlp_kind"]
    if kind == "mlp":
        h = gelu(linear(x, state, prefix + "fc1"))
    elif kind == "swiglu_packed":
        gate, value = np.split(linear(x, state, prefix + "fc1"), 2, axis=-1)
        h = silu(gate) * value
    else:
        h = silu(linear(x, state, prefix + "fc1_g")) * linear(
            x, state, prefix + "fc1_x"
        )
    if cfg["scale_mlp"]:
        h = layer_norm(
            h,
            state[prefix + "norm.weight"],
            state[prefix + "norm.bias"],
            cfg["norm_eps"],
        )
    return linear(h, state, prefix + "fc2")


def block(x, state, i, cfg, rope):
    """EvaBlock: pre-norm residual branches, each scaled by gamma_1 /
    gamma_2 when layer scale is on (init_values set)."""
    p, eps = f"blocks.{i}.", cfg["norm_eps"]
    y = attention(
        layer_norm(x, state[p + "norm1.weight"], state[p + "norm1.bias"], eps),
        state,
        p + "attn.",
        cfg,
        rope,
    )
    if p + "gamma_1" in state:
        y = state[p + "gamma_1"] * y
    x = x + y
    y = mlp(
        layer_norm(x, state[p + "norm2.weight"], state[p + "norm2.bias"], eps),
        state,
        p + "mlp.",
        cfg,
    )
    if p + "gamma_2" in state:
        y = state[p + "gamma_2"] * y
    return x + y


def attention_pool(x, state, cfg):
    """AttentionPoolLatent (timm/layers/attention_pool.py) as Eva builds it
    for global_pool='map': one learned latent query (through q) attends
    over all tokens (prefix included) with kv; then proj, and
    out + mlp(norm(out)); the latent's row is the pooled vector."""
    b, n, d = x.shape
    heads = cfg["attn_pool_num_heads"] or cfg["num_heads"]
    hd = d // heads
    q = linear(state["attn_pool.latent"], state, "attn_pool.q")  # (1, 1, D)
    q = q.reshape(1, 1, heads, hd).transpose(0, 2, 1, 3)  # (1, H, 1, hd)
    kv = (
        linear(x, state, "attn_pool.kv")
        .reshape(b, n, 2, heads, hd)
        .transpose(2, 0, 3, 1, 4)
    )
    k, v = kv[0], kv[1]  # (B, H, N, hd)
    weights = softmax((q * hd**-0.5) @ k.transpose(0, 1, 3, 2))
    out = (weights @ v).transpose(0, 2, 1, 3).reshape(b, 1, d)
    out = linear(out, state, "attn_pool.proj")
    normed = layer_norm(
        out,
        state["attn_pool.norm.weight"],
        state["attn_pool.norm.bias"],
        cfg["norm_eps"],
    )
    out = out + linear(
        gelu(linear(normed, state, "attn_pool.mlp.fc1")), state, "attn_pool.mlp.fc2"
    )
    return out[:, 0]


# ---------------------------------------------------------------- model


def patch_embed(images_nhwc, state, cfg):
    """Non-overlapping conv (patch_embed.proj) as patches @ kernel;
    (B, H, W, C) -> (B, H/p, W/p, D). Sizes must divide by the patch."""
    b, h, w, c = images_nhwc.shape
    ph, pw = cfg["patch_size"]
    if h % ph or w % pw:
        raise ValueError(
            f"image size {(h, w)} is not a multiple of the patch size {(ph, pw)}"
        )
    gh, gw = h // ph, w // pw
    patches = images_nhwc.reshape(b, gh, ph, gw, pw, c).transpose(
        0, 1, 3, 2, 4, 5
    )  # (B, gh, gw, ph, pw, C)
    kernel = state["patch_embed.proj.weight"].transpose(2, 3, 1, 0)  # (ph, pw, C, D)
    x = np.einsum("bijyxc,yxcd->bijd", patches, kernel)
    if "patch_embed.proj.bias" in state:
        x = x + state["patch_embed.proj.bias"]
    return x


def embed(images_nhwc, state, cfg):
    """Patch tokens, prefix tokens [cls, reg_1..reg_R], the absolute
    position embedding (resampled from the pretrained grid when the grid
    differs; with no_embed_class it covers the patches only, else its first
    rows belong to the prefix tokens) (Eva._pos_embed).

    Returns (tokens (B, prefix + gh * gw, D), (gh, gw))."""
    x = patch_embed(np.asarray(images_nhwc, np.float64), state, cfg)
    b, gh, gw, d = x.shape
    x = x.reshape(b, gh * gw, d)
    npt = cfg["num_prefix_tokens"]
    prefix = []
    if cfg["class_token"]:
        prefix.append(np.broadcast_to(state["cls_token"], (b, 1, d)))
    if cfg["num_reg_tokens"]:
        prefix.append(
            np.broadcast_to(state["reg_token"], (b, cfg["num_reg_tokens"], d))
        )
    pos = None
    if cfg["use_abs_pos_emb"]:
        rows = 0 if cfg["no_embed_class"] else npt
        pos = resample_pos_embed(state["pos_embed"], (gh, gw), cfg["grid"], rows)
    if cfg["no_embed_class"]:
        if pos is not None:
            x = x + pos
        x = np.concatenate([*prefix, x], axis=1)
    else:
        x = np.concatenate([*prefix, x], axis=1)
        if pos is not None:
            x = x + pos
    return x, (gh, gw)


def forward(state: dict, config: dict, images_nhwc) -> dict:
    """The whole model on NHWC images of any size the patch divides.

    Returns:
        tokens: `forward_features`, (B, prefix + gh * gw, D) after the
            final norm (when the config has one).
        pooled: `forward_head(pre_logits=True)`, (B, D).
        logits: `forward_head`, (B, num_classes) (= pooled without head).
        blocks: each block's raw output, (B, N, D).
        spatial: the last block's raw patch tokens, (B, gh, gw, D)
            (`forward_intermediates` returns them NCHW).
        grid: (gh, gw).

    Example:

    ```python
    cfg = resolve_config(
        dict(img_size=16, patch_size=8, embed_dim=16, depth=1, num_heads=2)
    )
    out = forward(random_state(cfg), cfg, np.zeros((1, 16, 24, 3)))
    out["spatial"].shape  # (1, 2, 3, 16)
    ```
    """
    cfg = config if "mlp_kind" in config else resolve_config(config)
    state = {k: np.asarray(v, np.float64) for k, v in state.items()}
    eps = cfg["norm_eps"]
    x, grid = embed(images_nhwc, state, cfg)
    if cfg["pre_norm"]:
        x = layer_norm(x, state["norm_pre.weight"], state["norm_pre.bias"], eps)
    rope = model_rope(state, cfg, grid)
    blocks = []
    for i in range(cfg["depth"]):
        # Mixed RoPE has its own frequencies per block (depth axis first).
        block_rope = (
            (rope[0][i], rope[1][i])
            if rope is not None and cfg["rope_type"] == "mixed"
            else rope
        )
        x = block(x, state, i, cfg, block_rope)
        blocks.append(x)
    if cfg["post_norm"]:
        x = layer_norm(x, state["norm.weight"], state["norm.bias"], eps)
    tokens = x
    npt = cfg["num_prefix_tokens"]
    pool = cfg["global_pool"]
    if pool == "map":
        pooled = attention_pool(x, state, cfg)
    elif pool == "token":
        pooled = x[:, 0]
    elif pool == "avg":
        pooled = x[:, npt:].mean(1)
    elif pool == "max":
        pooled = x[:, npt:].max(1)
    elif pool == "avgmax":
        pooled = 0.5 * (x[:, npt:].max(1) + x[:, npt:].mean(1))
    elif pool == "":
        pooled = x
    else:
        raise ValueError(f"unknown global_pool {pool!r}")
    if cfg["fc_norm"]:
        pooled = layer_norm(pooled, state["fc_norm.weight"], state["fc_norm.bias"], eps)
    logits = linear(pooled, state, "head") if cfg["num_classes"] else pooled
    b = x.shape[0]
    spatial = blocks[-1][:, npt:].reshape(b, grid[0], grid[1], -1)
    return dict(
        tokens=tokens,
        pooled=pooled,
        logits=logits,
        blocks=blocks,
        spatial=spatial,
        grid=grid,
    )
