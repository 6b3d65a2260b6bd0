"""Rotary position embeddings (RoPE) for 2-D patch grids.

Rotary embeddings encode a patch's position by rotating its query and key
vectors, pair of channels by pair of channels, by angles that grow with the
position, so that the dot product of a query and a key depends on their
relative position (Su et al., 2021; Heo et al., 2024 for images). The four
RoPE families of the model zoo differ only in the positions and the
frequencies:

- `"axial"` (EVA-02, PE, RoPE-ViT): positions `arange(size) + offset`,
  rescaled to `reference_grid` when one is set; frequencies
  `temperature ** (-k / (D_h / 4))`.
- `"dinov3"` (DINOv3): each patch centre normalised to `[-1, 1]`;
  frequencies `2 pi / temperature ** (4k / D_h)`.
- `"mixed"` (RoPE-ViT mixed): positions `arange(size)`; frequencies learned
  per block and head, the two axes mixed.

The two axes take half of a head's channel pairs each (rows first for
`grid_indexing="ij"`, columns first for `"xy"`). The rotation either pairs
neighbouring channels (`(x0, x1) -> (-x1, x0)`, "interleaved") or the two
halves of a head (`[a, b] -> [-b, a]`, `rotate_half`, DINOv3). Prefix tokens
(class, registers) are never rotated. Everything is computed for the grid
the input actually has, so a model with rotary embeddings runs at any image
size.

`RotaryCoordinates` is the model-level layer: it turns the grid into one
coordinate pair per patch, once per forward pass; each attention layer
turns them into its angles (`rotary_angles`) and rotates its queries and
keys (`apply_rotary`). The formulas follow timm's `RotaryEmbeddingCat`,
`RotaryEmbeddingDinoV3` and `RotaryEmbeddingMixed`
(`timm/layers/pos_embed_sincos.py`, timm 1.0.31), which the model zoo's
checkpoints were converted for; proven against timm's outputs in
`tests/test_rope.py`.

Example:

```python
coords = keras_vit.layers.RotaryCoordinates("axial", grid_size=(14, 14))
positions = coords(np.zeros((1, 197, 384), "float32"))  # (196, 2)
```
"""

from __future__ import annotations

import math

import keras
import numpy as np
from keras import ops

from keras_vit.layers.kinds import GRID_INDEXINGS
from keras_vit.layers.kinds import ROPE_KINDS
from keras_vit.utils import to_pair


def fixed_frequencies(kind: str, head_dim: int, temperature: float) -> np.ndarray:
    """The `D_h / 4` frequencies of one axis for a fixed (not learned) kind.

    `"axial"`: `temperature ** (-k / F)`, `k = 0 .. F-1`, `F = D_h / 4`
    (timm's `freq_bands(..., step=1)`); `"dinov3"`: `2 pi / period_k` with
    `period_k = temperature ** (2k / (D_h / 2))` (DINOv3's
    `RopePositionEmbedding`), computed in float32 as both references do.

    Example:

    >>> fixed_frequencies("axial", 16, 100.0)
    array([1.   , 0.31622776, 0.1  , 0.03162278], dtype=float32)
    """
    if kind not in ("axial", "dinov3"):
        raise ValueError(f"{kind!r} rotary embeddings have learned frequencies.")
    if head_dim % 4:
        raise ValueError(
            f"Rotary embeddings need a head width divisible by 4; got {head_dim}."
        )
    count = head_dim // 4
    index = np.arange(count, dtype=np.float32)
    if kind == "axial":
        return (np.float32(temperature) ** (-index / np.float32(count))).astype(
            np.float32
        )
    periods = np.float32(temperature) ** (2 * index / np.float32(head_dim // 2))
    return (np.float32(2 * math.pi) / periods).astype(np.float32)


def rotary_angles(coords, frequencies):
    """Angles `(..., N, D_h / 2)` from coordinates `(N, 2)`.

    Fixed frequencies `(F,)`: `[c0 * f, c1 * f]` (each axis its half).
    Learned (`"mixed"`) frequencies `(2, H, D_h / 2)`: `c0 * f0 + c1 * f1`
    per head, `(H, N, D_h / 2)`.
    """
    coords = ops.cast(coords, "float32")
    if len(frequencies.shape) == 1:
        first = coords[:, :1] * frequencies[None, :]  # (N, F)
        second = coords[:, 1:] * frequencies[None, :]  # (N, F)
        return ops.concatenate([first, second], axis=-1)  # (N, D_h / 2)
    mixed = ops.einsum("nc,chf->hnf", coords, ops.cast(frequencies, "float32"))
    return mixed  # (H, N, D_h / 2)


def sin_cos(angles, rotate_half: bool):
    """`(sin, cos)` laid out for `apply_rotary`, each `(..., N, D_h)`.

    Interleaved: each angle twice in a row (`[a0, a0, a1, a1, ...]`);
    `rotate_half`: the angles, then the angles again (`[a0, a1, ..., a0,
    a1, ...]`).
    """
    if rotate_half:
        doubled = ops.concatenate([angles, angles], axis=-1)
    else:
        doubled = ops.repeat(angles, 2, axis=-1)
    return ops.sin(doubled), ops.cos(doubled)


def apply_rotary(x, sin, cos, rotate_half: bool):
    """Rotates `x (..., N, D_h)` by `(sin, cos)`: `x cos + rot(x) sin`.

    `rot` pairs neighbouring channels, `(x0, x1) -> (-x1, x0)`, or the two
    halves, `[a, b] -> [-b, a]` with `rotate_half`. The product is formed in
    float32 and cast back to `x`'s dtype once.
    """
    dtype = keras.backend.standardize_dtype(x.dtype)
    values = ops.cast(x, "float32")
    if rotate_half:
        first, second = ops.split(values, 2, axis=-1)
        turned = ops.concatenate([-second, first], axis=-1)
    else:
        shape = ops.shape(values)
        pairs = ops.reshape(values, (*shape[:-1], -1, 2))  # (..., D_h / 2, 2)
        turned = ops.stack([-pairs[..., 1], pairs[..., 0]], axis=-1)
        turned = ops.reshape(turned, shape)
    return ops.cast(values * cos + turned * sin, dtype)


def grid_coordinates(
    kind: str,
    grid_h,
    grid_w,
    grid_offset: float = 0.0,
    grid_indexing: str = "ij",
    reference_grid: tuple[int, int] | None = None,
):
    """One coordinate pair per patch, `(grid_h * grid_w, 2)` float32, row-major.

    Channel 0 is the row for `grid_indexing="ij"`, the column for `"xy"`.
    `"axial"`: `arange(size) + grid_offset`, times `reference / size` when a
    `reference_grid` `(h, w)` is given (positions then span the reference
    grid whatever the input's). `"dinov3"`: `2 (arange(size) + 0.5 +
    grid_offset) / size - 1`. `"mixed"`: `arange(size) + grid_offset`.
    `grid_h`, `grid_w` may be tensors (a dynamic-size model).
    """

    def axis(size, reference):
        size_f = ops.cast(size, "float32")
        positions = ops.cast(ops.arange(size), "float32") + grid_offset
        if kind == "dinov3":
            return 2.0 * (positions + 0.5) / size_f - 1.0
        if reference is not None:
            return positions / size_f * float(reference)
        return positions

    ref_h, ref_w = (None, None) if reference_grid is None else reference_grid
    rows = axis(grid_h, ref_h)  # (gh,)
    cols = axis(grid_w, ref_w)  # (gw,)
    row_grid = ops.repeat(rows[:, None], grid_w, axis=1)  # (gh, gw)
    col_grid = ops.repeat(cols[None, :], grid_h, axis=0)  # (gh, gw)
    first, second = (
        (row_grid, col_grid) if grid_indexing == "ij" else (col_grid, row_grid)
    )
    return ops.stack(
        [ops.reshape(first, (-1,)), ops.reshape(second, (-1,))], axis=-1
    )  # (N, 2)


@keras.saving.register_keras_serializable(package="keras_vit")
class RotaryCoordinates(keras.layers.Layer):
    """The patch coordinates of a grid, for the blocks' rotary embeddings.

    Computed once per forward pass from the grid the input has (a fixed
    `grid_size`, or, with `dynamic=True`, `grid_source`'s height and width
    floor-divided by `patch_size`); every attention layer turns them into
    its own angles. Weightless: a model of another image size gets other
    coordinates, the same weights.

    Args:
        kind: One of `ROPE_KINDS`: `"axial"`, `"dinov3"` or `"mixed"`.
        grid_size: The patch grid `(h, w)` the model was built for (a
            fixed-size model's; a dynamic one's native grid).
        grid_offset: Added to each integer position (PE: 1). Defaults to 0.
        grid_indexing: `"ij"` (rows first; default) or `"xy"` (columns
            first).
        reference_grid: `"axial"` only: positions are rescaled so that the
            grid spans this `(h, w)` grid (EVA-02: `(16, 16)`; PE: its
            training grid). Defaults to `None` (integer positions).
        dynamic: Read the grid off `grid_source` at run time. Defaults to
            `False`.
        patch_size: With `dynamic`, the patch size on `grid_source`.
        **kwargs: Base layer arguments.

    Call arguments:
        inputs: The token sequence `(batch, tokens, dim)` (its values are
            not read).
        grid_source: With `dynamic`, the tensor the patch embedding ran on.

    Returns:
        `(grid_h * grid_w, 2)` float32 coordinates, row-major.

    Example:

    >>> layer = keras_vit.layers.RotaryCoordinates("dinov3", grid_size=(2, 2))
    >>> np.asarray(layer(np.zeros((1, 5, 8), "float32")))
    array([[-0.5, -0.5], [-0.5,  0.5], [ 0.5, -0.5], [ 0.5,  0.5]], dtype=float32)
    """

    def __init__(
        self,
        kind: str,
        grid_size: int | tuple[int, int] | None = None,
        grid_offset: float = 0.0,
        grid_indexing: str = "ij",
        reference_grid: tuple[int, int] | None = None,
        dynamic: bool = False,
        patch_size: int | tuple[int, int] | None = None,
        **kwargs,
    ):
        kwargs.setdefault("dtype", "float32")
        super().__init__(**kwargs)
        if kind not in ROPE_KINDS:
            raise ValueError(f"`kind` must be one of {ROPE_KINDS}. Received: {kind!r}")
        if grid_indexing not in GRID_INDEXINGS:
            raise ValueError(
                f"`grid_indexing` must be one of {GRID_INDEXINGS}. "
                f"Received: {grid_indexing!r}"
            )
        self.kind = kind
        self.dynamic = bool(dynamic)
        if grid_size is None:
            raise ValueError("RotaryCoordinates needs the model's `grid_size`.")
        if self.dynamic and patch_size is None:
            raise ValueError("`dynamic=True` needs the `patch_size` of the grid.")
        self.grid_size = to_pair(grid_size, "grid_size")
        self.grid_offset = float(grid_offset)
        self.grid_indexing = grid_indexing
        self.reference_grid = (
            None
            if reference_grid is None
            else to_pair(reference_grid, "reference_grid")
        )
        self.patch_size = (
            None if patch_size is None else to_pair(patch_size, "patch_size")
        )
        self.built = True

    def call(self, inputs, grid_source=None):
        if self.dynamic:
            if grid_source is None:
                raise ValueError("A dynamic RotaryCoordinates needs `grid_source`.")
            shape = ops.shape(grid_source)
            grid_h = shape[1] // self.patch_size[0]
            grid_w = shape[2] // self.patch_size[1]
        else:
            grid_h, grid_w = self.grid_size
        return grid_coordinates(
            self.kind, grid_h, grid_w, self.grid_offset, self.grid_indexing,
            self.reference_grid,
        )  # fmt: skip

    def compute_output_spec(self, inputs, grid_source=None):
        count = None if self.dynamic else self.grid_size[0] * self.grid_size[1]
        return keras.KerasTensor((count, 2), "float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "kind": self.kind,
                "grid_size": self.grid_size,
                "grid_offset": self.grid_offset,
                "grid_indexing": self.grid_indexing,
                "reference_grid": self.reference_grid,
                "dynamic": self.dynamic,
                "patch_size": self.patch_size,
            }
        )
        return config
