"""Position-embedding similarity (ViT paper, Fig. 7 centre).

The cosine similarity of each patch position's learned embedding with every
other position's. Drawn as a grid of grids (tile `(i, j)` shows how similar
position `(i, j)` is to every position), it shows whether the 1-D table
learned the 2-D topology of the image: near positions, and positions in the
same row or column, come out similar.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_vit._export import export
from keras_vit.analysis._walk import to_numpy
from keras_vit.models.layout import ViTLayout
from keras_vit.utils import to_pair


def _embedding_table(source, grid_size, num_prefix_tokens):
    if isinstance(source, keras.Model):
        layer = ViTLayout.of(source).position_embedding
        table = to_numpy(layer.embedding)
        grid_size = layer.grid_size if grid_size is None else grid_size
        if num_prefix_tokens is None:
            num_prefix_tokens = layer.num_prefix_tokens
    else:
        table = to_numpy(source)
        if grid_size is None:
            raise ValueError("Pass `grid_size` with a raw embedding table.")
        num_prefix_tokens = 1 if num_prefix_tokens is None else num_prefix_tokens
    table = np.asarray(table, dtype="float64")
    if table.ndim == 3 and table.shape[0] == 1:
        table = table[0]
    grid_h, grid_w = to_pair(grid_size, "grid_size")
    expected = int(num_prefix_tokens) + grid_h * grid_w
    if table.ndim != 2 or table.shape[0] != expected:
        raise ValueError(
            f"Expected a position-embedding table of shape ({expected}, dim) or "
            f"(1, {expected}, dim) for a {grid_h}x{grid_w} grid with "
            f"{num_prefix_tokens} prefix tokens. Received: shape {table.shape}"
        )
    return table[int(num_prefix_tokens) :], (grid_h, grid_w)


@export("keras_vit.analysis.position_embedding_similarity")
def position_embedding_similarity(
    source,
    grid_size: int | tuple[int, int] | None = None,
    num_prefix_tokens: int | None = None,
) -> np.ndarray:
    """Cosine similarity between the position embeddings of all patches.

    Args:
        source: A model built by `keras_vit.ViT` (its `posembed_input` table
            is read), or a table of shape `(N, dim)` or `(1, N, dim)`.
        grid_size: The patch grid `(h, w)`; read from the model when `source`
            is one, required for a raw table.
        num_prefix_tokens: Rows before the patch rows (the class token's),
            dropped. Read from the model; defaults to 1 for a raw table.

    Returns:
        `(h, w, h, w)`: entry `[i, j, k, l]` is the cosine similarity of
        position `(i, j)` with position `(k, l)`; `[i, j, i, j]` is 1.

    Example:

    ```python
    similarity = position_embedding_similarity(model)  # (14, 14, 14, 14)
    picture = similarity_grid(similarity)               # (209, 209)
    ```
    """
    table, (grid_h, grid_w) = _embedding_table(source, grid_size, num_prefix_tokens)
    norms = np.linalg.norm(table, axis=-1, keepdims=True)  # (P, 1)
    if np.any(norms == 0):
        raise ValueError("A position embedding is all zeros; its cosine is undefined.")
    unit = table / norms
    similarity = unit @ unit.T  # (P, P)
    return similarity.reshape(grid_h, grid_w, grid_h, grid_w)


@export("keras_vit.analysis.similarity_grid")
def similarity_grid(similarity, pad: int = 1, fill: float = np.nan) -> np.ndarray:
    """Lays out `(h, w, h, w)` similarities as one grid-of-grids image.

    Tile `(i, j)` (a `(h, w)` block) holds the similarities of position
    `(i, j)` with every position; tiles are separated by `pad` cells of
    `fill` (NaN, drawn blank by matplotlib).

    Returns:
        `(h * h + (h - 1) * pad, w * w + (w - 1) * pad)` float64.
    """
    similarity = np.asarray(similarity, dtype="float64")
    if similarity.ndim != 4 or similarity.shape[:2] != similarity.shape[2:]:
        raise ValueError(
            f"Expected similarities of shape (h, w, h, w). Received: {similarity.shape}"
        )
    if int(pad) < 0:
        raise ValueError(f"`pad` must be >= 0. Received: pad={pad}")
    grid_h, grid_w = similarity.shape[:2]
    step_h, step_w = grid_h + pad, grid_w + pad
    out = np.full((grid_h * step_h - pad, grid_w * step_w - pad), fill, "float64")
    for i in range(grid_h):
        for j in range(grid_w):
            out[i * step_h : i * step_h + grid_h, j * step_w : j * step_w + grid_w] = (
                similarity[i, j]
            )
    return out
