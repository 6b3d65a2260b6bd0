"""Resampling position embeddings to a new grid (paper §3.2): every mode, once.

Fine-tuning at another resolution keeps the patch size, so the sequence
changes length and the learned position embeddings are 2-D interpolated to
the new grid. Libraries differ in how, and the differences show in the
logits (up to 2.5e-2 relative between the first two below on a 224-px
S/16 at 288x160), so each convention is a named mode:

| `method` | what | as in |
|---|---|---|
| `"bilinear"` + `align_corners=True` (default; alias `"reference"`) | linear, corner samples aligned | the original `scipy.ndimage.zoom(order=1)` |
| `"bicubic"` + `align_corners=False` (alias `"huggingface"`) | Keys cubic, a = -0.75, half-pixel, border replicated, no antialiasing | Hugging Face's `interpolate_pos_encoding` (`F.interpolate(mode="bicubic")`) |
| `"bicubic_antialias"` (alias `"timm"`) | cubic a = -0.5, half-pixel, support widened by the scale when shrinking, weights normalised | timm's `resample_abs_pos_embed` (`F.interpolate(mode="bicubic", antialias=True)`, PIL's filter) |

`"bilinear"` + `align_corners=False` and `"bicubic"` + `align_corners=True`
are also accepted (PyTorch's definitions), and `"bilinear_antialias"` is
`jax.image.resize(method="linear")`, the resize FlexiViT applies to its
position embeddings.

Each axis is resampled by a `(new, old)` weight matrix. The matrices are
written once, over an array namespace: NumPy here (`interpolation_matrix`,
used when loading checkpoints and by `keras_vit.with_image_size`), and
`keras.ops` inside a dynamic-size model's graph
(`keras_vit.layers.AddPositionEmbedding(dynamic=True)`), where the new grid
is a tensor.

`resample_patch_embedding` (FlexiViT, Beyer et al. 2023) resizes a patch
embedding kernel to another patch size by the pseudo-inverse of the resize
that would be applied to the patches, so that a patch resized with the same
operator gives the same token. Which resize is inverted is a named mode:

| `method` | the patch resize | as in |
|---|---|---|
| `"flexivit"` (default; = `"bilinear"`) | linear, half-pixel, no antialiasing | big_vision's FlexiViT `resample_patchemb` (`tf.image.resize(method="bilinear")`) |
| `"timm"` (= `"bicubic_antialias"`) | cubic a = -0.5, half-pixel, widened when shrinking (PIL) | timm's `resample_patch_embed` defaults (`F.interpolate(mode="bicubic", antialias=True)`) |

The other half-pixel methods (`"bicubic"`, `"bilinear_antialias"`) are
accepted too. The modes give different kernels, hence different features,
from the same checkpoint (figures in `docs/weights.md`): pick the library
whose numbers are to be reproduced.
"""  # noqa: E501

from __future__ import annotations

import math
import types

import numpy as np

from keras_vit._export import export
from keras_vit.utils import to_pair

METHODS = ("bilinear", "bicubic", "bicubic_antialias", "bilinear_antialias")
# Named conventions: (method, align_corners).
MODES = {
    "reference": ("bilinear", True),
    "huggingface": ("bicubic", False),
    "timm": ("bicubic_antialias", False),
}
# Named patch resizes (always half-pixel) for `resample_patch_embedding`.
PATCH_MODES = {
    "flexivit": "bilinear",  # big_vision flexi/vit.py resample_patchemb
    "timm": "bicubic_antialias",  # timm layers/patch_embed.py resample_patch_embed
}

NUMPY = types.SimpleNamespace(
    arange=lambda n, dtype: np.arange(n, dtype=dtype),
    cast=lambda x, dtype: np.asarray(x).astype(dtype),
    abs=np.abs,
    floor=np.floor,
    clip=np.clip,
    where=np.where,
    maximum=np.maximum,
    sum=np.sum,
)


def resolve_method(method: str, align_corners: bool | None) -> tuple[str, bool]:
    """`(method, align_corners)` for a method name or a named mode.

    `align_corners=None` takes the mode's (or, for a plain method, `True`
    for `"bilinear"` and `False` otherwise).
    """
    if method in MODES:
        mode_method, mode_corners = MODES[method]
        if align_corners is not None and align_corners != mode_corners:
            raise ValueError(
                f"method={method!r} fixes align_corners={mode_corners}. "
                f"Received: align_corners={align_corners}"
            )
        return mode_method, mode_corners
    if method not in METHODS:
        raise ValueError(
            f"`method` must be one of {METHODS} or a named mode {tuple(MODES)}. "
            f"Received: method={method!r}"
        )
    if align_corners is None:
        align_corners = method == "bilinear"
    if align_corners and method.endswith("_antialias"):
        raise ValueError(f"method={method!r} works with align_corners=False only.")
    return method, bool(align_corners)


def _keys_cubic(t, a: float, xp):
    """Keys' cubic convolution kernel with parameter `a`."""
    t = xp.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return xp.where(t <= 1, near, xp.where(t < 2, far, 0.0 * t))


def _triangle(t, xp):
    return xp.maximum(1.0 - xp.abs(t), 0.0 * t)


def weight_matrix(old: int, new, method: str, align_corners: bool, xp=NUMPY):
    """The `(new, old)` matrix resampling one axis, over array namespace `xp`.

    Args:
        old: Input length (a Python int).
        new: Output length: an int, or a scalar tensor when `xp` is
            `keras.ops` (the grid of a dynamic-size model).
        method: One of `METHODS`.
        align_corners: Corner-aligned (`True`) or half-pixel sampling.
        xp: `keras_vit.resample.NUMPY` (float64) or `keras.ops` (float32).
    """
    dtype = "float64" if xp is NUMPY else "float32"
    out = xp.arange(new, dtype=dtype)  # (new,)
    src_index = xp.arange(old, dtype=dtype)[None, :]  # (1, old)
    new_f = xp.cast(new, dtype)
    if method.endswith("_antialias"):
        # PIL / PyTorch `antialias=True` / jax.image.resize: the kernel is
        # stretched by the scale when shrinking, then each row normalised.
        scale = old / new_f
        stretch = xp.maximum(scale, 1.0)
        center = (out + 0.5) * scale  # (new,)
        t = (src_index + 0.5 - center[:, None]) / stretch  # (new, old)
        if method == "bicubic_antialias":
            weights = _keys_cubic(t, -0.5, xp)
        else:
            weights = _triangle(t, xp)
        return weights / xp.sum(weights, axis=1, keepdims=True)
    if align_corners:
        step = xp.where(new_f > 1, (old - 1) / xp.maximum(new_f - 1, 1.0), 0.0)
        src = out * step  # (new,)
    else:
        src = (out + 0.5) * (old / new_f) - 0.5
    if method == "bilinear":
        src = xp.clip(src, 0.0, float(old - 1))
        return _triangle(src[:, None] - src_index, xp)
    # Bicubic: four taps around floor(src), out-of-range taps clamped to the
    # border (as PyTorch and TensorFlow do).
    base = xp.floor(src)
    weights = 0.0 * (src[:, None] - src_index)
    for offset in (-1.0, 0.0, 1.0, 2.0):
        tap = base + offset  # (new,)
        weight = _keys_cubic(src - tap, -0.75, xp)
        index = xp.clip(tap, 0.0, float(old - 1))
        hit = xp.cast(index[:, None] == src_index, dtype)  # (new, old)
        weights = weights + hit * weight[:, None]
    return weights


def interpolation_matrix(
    old: int, new: int, method: str = "bilinear", align_corners: bool | None = None
) -> np.ndarray:
    """Returns the `(new, old)` float64 matrix that resamples one axis.

    Args:
        old: Input length.
        new: Output length.
        method: One of `METHODS`, or a named mode (`"reference"`,
            `"huggingface"`, `"timm"`).
        align_corners: Whether the first and last samples of both axes
            coincide (as `scipy.ndimage.zoom(order=1)`) or sample centres
            are aligned (half-pixel). Defaults to the method's convention.
    """
    method, align_corners = resolve_method(method, align_corners)
    return weight_matrix(int(old), int(new), method, align_corners)


def resample_grid(
    grid: np.ndarray,
    new_grid_size: int | tuple[int, int],
    method: str = "bilinear",
    align_corners: bool | None = None,
) -> np.ndarray:
    """Resamples a `(height, width, dim)` array to `new_grid_size`.

    Args:
        grid: Array of shape `(height, width, dim)`.
        new_grid_size: The output `(height, width)`, or an int for a square.
        method: See `interpolation_matrix`. Defaults to `"bilinear"`.
        align_corners: See `interpolation_matrix`.

    Returns:
        Array of shape `(new_height, new_width, dim)` with the input's dtype.
    """
    new_h, new_w = to_pair(new_grid_size, "new_grid_size")
    old_h, old_w = grid.shape[:2]
    rows = interpolation_matrix(old_h, new_h, method, align_corners)
    cols = interpolation_matrix(old_w, new_w, method, align_corners)
    out = np.einsum("ih,hwd,jw->ijd", rows, grid.astype(np.float64), cols)
    return out.astype(grid.dtype)


@export("keras_vit.resample_position_embedding")
def resample_position_embedding(
    posemb: np.ndarray,
    new_grid_size: int | tuple[int, int],
    old_grid_size: int | tuple[int, int] | None = None,
    num_prefix_tokens: int = 1,
    method: str = "bilinear",
    align_corners: bool | None = None,
) -> np.ndarray:
    """Resamples a position-embedding table to a new patch grid.

    The first `num_prefix_tokens` rows (the class token's) are kept as they
    are; the remaining rows are treated as a row-major `old_grid_size` grid and
    interpolated to `new_grid_size`.

    Args:
        posemb: Array of shape `(1, prefix + h * w, dim)` or
            `(prefix + h * w, dim)`.
        new_grid_size: The target grid `(height, width)`, or an int.
        old_grid_size: The source grid. Defaults to the square grid that fits
            the table; non-square tables must pass it.
        num_prefix_tokens: Rows at the start that are not part of the grid.
            Defaults to 1 (the class token). Use 0 for tables without one.
        method: `"bilinear"` (default, the reference), `"bicubic"`,
            `"bicubic_antialias"`, or a named mode: `"reference"`,
            `"huggingface"`, `"timm"` (see the module docstring).
        align_corners: Defaults to the method's convention (`True` for
            `"bilinear"`, which reproduces `scipy.ndimage.zoom(order=1)`).

    Returns:
        An array of the same rank and dtype, with `prefix + new_h * new_w`
        rows.

    Example:

    >>> posemb = np.random.normal(size=(1, 197, 768))
    >>> resample_position_embedding(posemb, (24, 24)).shape
    (1, 577, 768)
    >>> resample_position_embedding(posemb, (18, 10), method="timm").shape
    (1, 181, 768)
    """
    posemb = np.asarray(posemb)
    squeeze = posemb.ndim == 3
    if squeeze:
        if posemb.shape[0] != 1:
            raise ValueError(
                "A 3-D position embedding must have shape (1, tokens, dim). "
                f"Received: posemb.shape={posemb.shape}"
            )
        posemb = posemb[0]
    if posemb.ndim != 2:
        raise ValueError(
            "`posemb` must have shape (tokens, dim) or (1, tokens, dim). "
            f"Received: posemb.shape={posemb.shape}"
        )
    prefix, grid = posemb[:num_prefix_tokens], posemb[num_prefix_tokens:]
    num_patches = grid.shape[0]
    if old_grid_size is None:
        side = math.isqrt(num_patches)
        if side * side != num_patches:
            raise ValueError(
                f"The table has {num_patches} grid positions, which is not a "
                "square: pass `old_grid_size=(height, width)`."
            )
        old_grid_size = (side, side)
    old_h, old_w = to_pair(old_grid_size, "old_grid_size")
    if old_h * old_w != num_patches:
        raise ValueError(
            f"old_grid_size={old_grid_size} has {old_h * old_w} positions but "
            f"the table has {num_patches} (after {num_prefix_tokens} prefix "
            "tokens)."
        )
    grid = grid.reshape(old_h, old_w, -1)
    new = resample_grid(grid, new_grid_size, method, align_corners)
    out = np.concatenate([prefix, new.reshape(-1, new.shape[-1])], axis=0)
    return out[None] if squeeze else out


def resolve_patch_method(method: str) -> str:
    """The interpolation method of a patch-resize mode (see the module doc).

    `"flexivit"` is `"bilinear"` and `"timm"` is `"bicubic_antialias"`; a
    plain method of `METHODS` is returned as it is. The patch resize is
    always half-pixel (`align_corners=False`), as in both references.
    """
    if not isinstance(method, str) or PATCH_MODES.get(method, method) not in METHODS:
        raise ValueError(
            f"The patch resize `method` must be one of {tuple(PATCH_MODES)} or "
            f"{METHODS}. Received: method={method!r}"
        )
    return PATCH_MODES.get(method, method)


def resize_patch_matrix(
    old_patch: tuple[int, int],
    new_patch: tuple[int, int],
    method: str = "flexivit",
) -> np.ndarray:
    """The `(new_h*new_w, old_h*old_w)` matrix that resizes one flat patch.

    Args:
        old_patch: `(p_h, p_w)`.
        new_patch: `(q_h, q_w)`.
        method: `"flexivit"` (default: half-pixel bilinear without
            antialiasing, `tf.image.resize(method="bilinear")` as big_vision's
            `resample_patchemb` calls it), `"timm"` (`F.interpolate(
            mode="bicubic", antialias=True)`, timm's `resample_patch_embed`),
            or a method of `METHODS` (half-pixel).
    """
    method = resolve_patch_method(method)
    rows = weight_matrix(int(old_patch[0]), int(new_patch[0]), method, False)
    cols = weight_matrix(int(old_patch[1]), int(new_patch[1]), method, False)
    return np.kron(rows, cols)  # row-major flattening of (h, w)


@export("keras_vit.resample_patch_embedding")
def resample_patch_embedding(
    kernel: np.ndarray,
    new_patch_size: int | tuple[int, int],
    method: str = "flexivit",
) -> np.ndarray:
    """Resizes a patch-embedding kernel to another patch size (FlexiViT).

    With `B` the matrix that resizes a flattened `(p, p)` patch to `(q, q)`
    (`resize_patch_matrix`), the new kernel of each input channel and output
    feature is `pinv(B^T) w`. Enlarging a patch this way keeps every token
    exactly: `<B x, pinv(B^T) w> = <x, w>`; shrinking keeps it in the
    least-squares sense. Which resize `B` is matters (the modes give
    different kernels): `"flexivit"` is big_vision's, `"timm"` timm's.

    Args:
        kernel: `(p_h, p_w, channels, dim)` (HWIO, the layout of
            `PatchEmbedding` and the original checkpoints).
        new_patch_size: The new `(q_h, q_w)`, or an int.
        method: The patch resize to invert: `"flexivit"` (default; bilinear,
            half-pixel, no antialiasing: big_vision's `resample_patchemb`),
            `"timm"` (bicubic with antialiasing: the defaults of timm's
            `resample_patch_embed`), or a method of `METHODS`.

    Returns:
        `(q_h, q_w, channels, dim)` with the input's dtype.

    Example:

    >>> kernel = np.random.normal(size=(16, 16, 3, 768))
    >>> resample_patch_embedding(kernel, 8).shape
    (8, 8, 3, 768)
    >>> resample_patch_embedding(kernel, 8, method="timm").shape  # timm's numbers
    (8, 8, 3, 768)

    Reference:
    - [Beyer et al., 2023](https://arxiv.org/abs/2212.08013), FlexiViT §3.
    """
    resolve_patch_method(method)
    kernel = np.asarray(kernel)
    if kernel.ndim != 4:
        raise ValueError(
            "`kernel` must have shape (patch_h, patch_w, channels, dim). "
            f"Received: shape {kernel.shape}"
        )
    old = kernel.shape[:2]
    new = to_pair(new_patch_size, "new_patch_size")
    if tuple(old) == tuple(new):
        return kernel.copy()
    resize = resize_patch_matrix(old, new, method)  # (q*q, p*p)
    inverse = np.linalg.pinv(resize.T)  # (q*q, p*p)
    flat = kernel.reshape(old[0] * old[1], -1).astype(np.float64)  # (p*p, C*D)
    out = inverse @ flat  # (q*q, C*D)
    return out.reshape(*new, *kernel.shape[2:]).astype(kernel.dtype)
