"""Attention weights of selected Transformer blocks.

A model that outputs the attention maps of every block materialises
`depth x batch x heads x N x N` floats at once (a known memory trap of
"output all attentions" APIs). Here the images are run up to the input of the
first block by a sub-model, and the blocks are then called one by one; only
the blocks you select return their scores, and blocks after the last
selected one are never run.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Iterator

import keras
import numpy as np

from keras_vit._export import export
from keras_vit.analysis._walk import BlockWalker
from keras_vit.analysis._walk import batch_slices
from keras_vit.analysis._walk import check_images
from keras_vit.analysis._walk import resolve_blocks


@export("keras_vit.analysis.attention_weights")
def attention_weights(
    model: keras.Model,
    images,
    blocks: int | Iterable[int] | str = -1,
    batch_size: int = 32,
) -> dict[int, np.ndarray]:
    """Returns the attention probabilities of the selected blocks.

    Args:
        model: A model built by `keras_vit.ViT` (or a loaded copy).
        images: Images `(batch, height, width, channels)` in the range the
            model expects (`[-1, 1]` unless it has a `preprocessing` layer).
        blocks: A block index (negative counts from the end), a list of
            indices, or `"all"`. Defaults to `-1`, the last block. Memory
            grows with the number of selected blocks only.
        batch_size: Images per forward pass. Defaults to 32.

    Returns:
        A dict `{block_index: scores}` with `scores` of shape
        `(batch, heads, tokens, tokens)` (float32; rows sum to 1; row `q` is
        the distribution of query token `q` over the keys, class token
        first).

    Example:

    ```python
    model = keras_vit.ViT("test/4", image_size=16, num_classes=10)
    maps = attention_weights(model, np.zeros((2, 16, 16, 3)), blocks=[0, -1])
    maps[1].shape  # (2, 2, 17, 17)
    ```
    """
    walker = BlockWalker(model)
    images = check_images(images, walker.layout)
    indices = resolve_blocks(blocks, walker.layout)
    collected: dict[int, list[np.ndarray]] = {index: [] for index in indices}
    for part in batch_slices(len(images), batch_size):
        for step in walker.walk(images[part], last=indices[-1], scores_for=indices):
            if step.scores is not None:
                collected[step.index].append(keras.ops.convert_to_numpy(step.scores))
    return {index: np.concatenate(maps) for index, maps in collected.items()}


@export("keras_vit.analysis.iter_attention_weights")
def iter_attention_weights(
    model: keras.Model,
    images,
    blocks: int | Iterable[int] | str = "all",
) -> Iterator[tuple[int, np.ndarray]]:
    """Yields `(block_index, scores)` one selected block at a time.

    The lowest-memory way to visit many blocks: each map can be reduced (to a
    distance, a rollout product...) and dropped before the next block runs.
    All `images` go through in one pass, so pass a batch that fits.

    Args:
        model: A model built by `keras_vit.ViT` (or a loaded copy).
        images: One batch of images `(batch, height, width, channels)`.
        blocks: Block indices or `"all"` (default).

    Yields:
        `(index, scores)` with `scores` of shape `(batch, heads, N, N)`.

    Example:

    ```python
    for index, scores in iter_attention_weights(model, images):
        print(index, scores.shape)
    ```
    """
    walker = BlockWalker(model)
    images = check_images(images, walker.layout)
    indices = resolve_blocks(blocks, walker.layout)
    for step in walker.walk(images, last=indices[-1], scores_for=indices):
        if step.scores is not None:
            yield step.index, keras.ops.convert_to_numpy(step.scores)
