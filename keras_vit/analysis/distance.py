"""Mean attention distance (ViT paper, Fig. 7 right and Appendix D).

For each head, the image-space distance between a query patch and the
patches it attends to, weighted by the attention, averaged over queries and
images: the transformer's analogue of a CNN's receptive-field size.

Convention for the class token (and any other prefix token): it has no
position in the image, so it is excluded both as a query and as a key. Each
patch query's attention over the patch keys is renormalised to sum to 1
before the weighted distance is taken, so the value is "how far away is the
attention this patch pays to patches". Distances are between patch centres,
in pixels of the model input (`stride` pixels between neighbouring patches;
for a hybrid model the stride of its token grid).
"""

from __future__ import annotations

from collections.abc import Iterable

import keras
import numpy as np

from keras_vit._export import export
from keras_vit.analysis._walk import BlockWalker
from keras_vit.analysis._walk import batch_slices
from keras_vit.analysis._walk import check_images
from keras_vit.analysis._walk import resolve_blocks
from keras_vit.utils import to_pair


@export("keras_vit.analysis.patch_distances")
def patch_distances(
    grid_size: tuple[int, int], stride: int | tuple[int, int]
) -> np.ndarray:
    """Euclidean distances between patch centres, in pixels.

    Args:
        grid_size: The patch grid `(h, w)`.
        stride: Pixels between neighbouring patch centres, an int or
            `(dy, dx)`.

    Returns:
        `(h * w, h * w)` float64, patches in row-major order.
    """
    grid_h, grid_w = to_pair(grid_size, "grid_size")
    stride_y, stride_x = to_pair(stride, "stride")
    rows, cols = np.meshgrid(np.arange(grid_h), np.arange(grid_w), indexing="ij")
    y = rows.reshape(-1) * float(stride_y)  # (P,)
    x = cols.reshape(-1) * float(stride_x)
    return np.hypot(y[:, None] - y[None, :], x[:, None] - x[None, :])  # (P, P)


@export("keras_vit.analysis.attention_distance_sums")
def attention_distance_sums(
    scores, distances: np.ndarray, num_prefix_tokens: int = 0
) -> tuple[np.ndarray, int]:
    """The parts of a mean attention distance, to add up over batches.

    For each head and each patch query, the mean distance to the patch keys
    it attends to (attention renormalised over patches), summed over images
    and queries; and the number of `(image, query)` pairs summed. Their
    ratio is `mean_attention_distance`; sums of several batches (or of the
    windows of windowed attention, flattened into the batch) give the mean
    over all of them.

    Args:
        scores: Attention probabilities `(batch, heads, N, N)`, with
            `N = num_prefix_tokens + P`.
        distances: `(P, P)` distances between the patches, e.g.
            `patch_distances(grid_size, stride)`.
        num_prefix_tokens: Tokens before the patches, excluded as queries
            and keys. Defaults to 0.

    Returns:
        `(sums (heads,), count)`.

    Raises:
        ValueError: scores of another shape, or a query that pays no
            attention to any patch.

    Example:

    ```python
    scores = np.full((1, 2, 4, 4), 0.25)  # 2 heads, uniform over 2x2 patches
    sums, count = attention_distance_sums(scores, patch_distances((2, 2), 16))
    sums / count  # (2,) pixels
    ```
    """
    scores = np.asarray(keras.ops.convert_to_numpy(scores), dtype="float64")
    patches = distances.shape[0]
    expected = num_prefix_tokens + patches
    if scores.ndim != 4 or scores.shape[2:] != (expected, expected):
        raise ValueError(
            f"Expected attention scores (batch, heads, {expected}, {expected}) "
            f"for {patches} patches and {num_prefix_tokens} prefix tokens. "
            f"Received: shape {scores.shape}"
        )
    patch_scores = scores[:, :, num_prefix_tokens:, num_prefix_tokens:]  # (B,H,P,P)
    mass = patch_scores.sum(axis=-1)  # (B, H, P)
    if np.any(mass <= 0):
        raise ValueError("A query pays no attention to any patch; cannot renormalise.")
    per_query = (patch_scores * distances).sum(axis=-1) / mass  # (B, H, P)
    return per_query.sum(axis=(0, 2)), per_query.shape[0] * per_query.shape[2]


@export("keras_vit.analysis.mean_attention_distance")
def mean_attention_distance(
    scores,
    grid_size: tuple[int, int],
    stride: int | tuple[int, int],
    num_prefix_tokens: int = 1,
) -> np.ndarray:
    """Mean attention distance of each head, in pixels.

    Args:
        scores: Attention probabilities `(batch, heads, N, N)` of one block.
        grid_size: The patch grid `(h, w)`, with `N = prefix + h * w`.
        stride: Pixels between neighbouring patch centres (the patch size for
            a plain ViT).
        num_prefix_tokens: Tokens before the patches, excluded as queries and
            keys (see the module docstring). Defaults to 1.

    Returns:
        `(heads,)`: for each head, `sum_k a[q, k] * d(q, k)` over patch keys
        (attention renormalised over patches), averaged over patch queries
        and images.

    Example:

    ```python
    scores = attention_weights(model, images, blocks=0)[0]
    mean_attention_distance(scores, grid_size=(14, 14), stride=16)
    ```
    """
    distances = patch_distances(grid_size, stride)
    sums, count = attention_distance_sums(scores, distances, int(num_prefix_tokens))
    return sums / count


@export("keras_vit.analysis.attention_distances")
def attention_distances(
    model: keras.Model,
    images,
    blocks: int | Iterable[int] | str = "all",
    batch_size: int = 32,
) -> np.ndarray:
    """Mean attention distance per head for each selected block of a model.

    Each block's maps are reduced as soon as they are computed, so memory
    stays at one block's maps for one batch.

    Args:
        model: A model built by `keras_vit.ViT` (or a loaded copy).
        images: `(batch, height, width, channels)` in the model's range.
        blocks: Block indices or `"all"` (default).
        batch_size: Images per forward pass. Defaults to 32.

    Returns:
        `(num_selected_blocks, heads)` distances in pixels, blocks in
        increasing order.

    Example:

    ```python
    distances = attention_distances(model, images)  # (depth, heads)
    ```
    """
    walker = BlockWalker(model)
    layout = walker.layout
    images = check_images(images, layout)
    indices = resolve_blocks(blocks, layout)
    distances = patch_distances(layout.grid_size, layout.stride)
    sums = {index: 0.0 for index in indices}
    count = 0
    for part in batch_slices(len(images), batch_size):
        for step in walker.walk(images[part], last=indices[-1], scores_for=indices):
            if step.scores is not None:
                block_sums, _ = attention_distance_sums(
                    step.scores, distances, layout.num_prefix_tokens
                )
                sums[step.index] = sums[step.index] + block_sums
        count += (part.stop - part.start) * layout.num_patches  # queries seen
    return np.stack([sums[index] / count for index in indices])
