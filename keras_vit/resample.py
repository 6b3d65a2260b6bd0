"""Position-embedding resampling for a new grid (paper §3.2), in NumPy.

Fine-tuning at a higher resolution keeps the patch size, so the sequence gets
longer and the learned position embeddings must be 2-D interpolated to the new
grid. The reference implementation does this with
`scipy.ndimage.zoom(order=1)`: bilinear interpolation with the corner pixels
aligned. That is the default here; bicubic and half-pixel ("align corners
off") sampling, as timm and Hugging Face use, are options.
"""

from __future__ import annotations

import math

import numpy as np

from keras_vit.layers.utils import to_pair

METHODS = ("bilinear", "bicubic")


def _source_positions(old: int, new: int, align_corners: bool) -> np.ndarray:
    """Where each output sample falls on the input axis, in input pixels."""
    out = np.arange(new, dtype=np.float64)
    if align_corners:
        return out * ((old - 1) / (new - 1)) if new > 1 else np.zeros(1)
    return (out + 0.5) * (old / new) - 0.5


def _cubic(t: np.ndarray, a: float = -0.75) -> np.ndarray:
    """Keys' cubic convolution kernel (a = -0.75, as PyTorch and OpenCV)."""
    t = np.abs(t)
    near = ((a + 2) * t - (a + 3)) * t * t + 1
    far = ((a * t - 5 * a) * t + 8 * a) * t - 4 * a
    return np.where(t <= 1, near, np.where(t < 2, far, 0.0))


def interpolation_matrix(
    old: int, new: int, method: str = "bilinear", align_corners: bool = True
) -> np.ndarray:
    """Returns the `(new, old)` matrix that resamples one axis.

    Args:
        old: Input length.
        new: Output length.
        method: `"bilinear"` or `"bicubic"`.
        align_corners: Whether the first and last samples of both axes
            coincide (as `scipy.ndimage.zoom(order=1)`) or sample centres are
            aligned (half-pixel, as `tf.image.resize`).
    """
    if method not in METHODS:
        raise ValueError(f"`method` must be one of {METHODS}. Received: {method!r}")
    matrix = np.zeros((new, old), dtype=np.float64)
    src = _source_positions(old, new, align_corners)
    rows = np.arange(new)
    if method == "bilinear":
        src = np.clip(src, 0, old - 1)
        left = np.floor(src).astype(int)
        right = np.minimum(left + 1, old - 1)
        frac = src - left
        np.add.at(matrix, (rows, left), 1 - frac)
        np.add.at(matrix, (rows, right), frac)
        return matrix
    base = np.floor(src).astype(int)
    for offset in (-1, 0, 1, 2):
        index = base + offset
        weight = _cubic(src - index)
        np.add.at(matrix, (rows, np.clip(index, 0, old - 1)), weight)
    return matrix


def resample_grid(
    grid: np.ndarray,
    new_grid_size: int | tuple[int, int],
    method: str = "bilinear",
    align_corners: bool = True,
) -> np.ndarray:
    """Resamples a `(height, width, dim)` array to `new_grid_size`.

    Args:
        grid: Array of shape `(height, width, dim)`.
        new_grid_size: The output `(height, width)`, or an int for a square.
        method: `"bilinear"` (default) or `"bicubic"`.
        align_corners: See `interpolation_matrix`. Defaults to `True`.

    Returns:
        Array of shape `(new_height, new_width, dim)` with the input's dtype.
    """
    new_h, new_w = to_pair(new_grid_size, "new_grid_size")
    old_h, old_w = grid.shape[:2]
    rows = interpolation_matrix(old_h, new_h, method, align_corners)
    cols = interpolation_matrix(old_w, new_w, method, align_corners)
    out = np.einsum("ih,hwd,jw->ijd", rows, grid.astype(np.float64), cols)
    return out.astype(grid.dtype)


def resample_position_embedding(
    posemb: np.ndarray,
    new_grid_size: int | tuple[int, int],
    old_grid_size: int | tuple[int, int] | None = None,
    num_prefix_tokens: int = 1,
    method: str = "bilinear",
    align_corners: bool = True,
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
        method: `"bilinear"` (default, the reference) or `"bicubic"`.
        align_corners: Defaults to `True`, which reproduces
            `scipy.ndimage.zoom(order=1)` as the reference does.

    Returns:
        An array of the same rank and dtype, with `prefix + new_h * new_w`
        rows.

    Example:

    >>> posemb = np.random.normal(size=(1, 197, 768))
    >>> resample_position_embedding(posemb, (24, 24)).shape
    (1, 577, 768)
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
