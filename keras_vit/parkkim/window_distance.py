"""Mean attention distance of AlterNet's windowed MSA blocks, in input pixels.

The convolutional counterpart of `keras_vit.analysis.distance`: each MSA
block of an AlterNet attends inside non-overlapping windows of its feature
map (`keras_vit.parkkim.layers.WindowAttention2D`, scores `(B, windows, heads, T,
T)`). For each head, the distance between a query position and the positions
it attends to, weighted by attention, is averaged over queries, windows and
images. Positions are one map cell apart, i.e. `input size / map size`
pixels of the model input, so the figures compare directly with a ViT's
(whose patch centres are `patch_size` pixels apart). There is no prefix
token; attention never leaves its window, so the largest possible distance
is the window's diagonal.

`attention_distance_by_depth` gives both families' figures in one shape.
"""

from __future__ import annotations

import keras
import numpy as np

from keras_vit._export import export
from keras_vit.analysis import FeatureMaps
from keras_vit.analysis import attention_distance_sums
from keras_vit.analysis import attention_distances
from keras_vit.analysis import batch_slices
from keras_vit.analysis import patch_distances
from keras_vit.parkkim.cnn.layout import CNNLayout


def _window_sums(scores, window, stride):
    """Per head: sums of per-query mean distances, and the number of queries."""
    scores = np.asarray(keras.ops.convert_to_numpy(scores), dtype="float64")
    tokens = int(window[0]) * int(window[1])
    if scores.ndim != 5 or scores.shape[3:] != (tokens, tokens):
        raise ValueError(
            f"Expected window attention scores (batch, windows, heads, {tokens}, "
            f"{tokens}) for {window[0]}x{window[1]} windows. Received: shape "
            f"{scores.shape}"
        )
    batch, windows, heads = scores.shape[:3]
    flat = scores.reshape(batch * windows, heads, tokens, tokens)  # (BW, H, T, T)
    return attention_distance_sums(flat, patch_distances(window, stride), 0)


@export("keras_vit.parkkim.window_attention_distance")
def window_attention_distance(
    scores, window: tuple[int, int], stride: float | tuple[float, float]
) -> np.ndarray:
    """Mean attention distance of each head of windowed attention, in pixels.

    Args:
        scores: `(batch, windows, heads, T, T)` attention probabilities with
            `T = window[0] * window[1]` positions per window, row-major.
        window: The window `(h, w)` in map cells.
        stride: Input pixels between neighbouring map cells, an int or
            `(dy, dx)`.

    Returns:
        `(heads,)`: `sum_k a[q, k] d(q, k)` averaged over queries, windows
        and images.

    Example:

    ```python
    scores = np.full((1, 4, 2, 16, 16), 1 / 16)  # uniform in 4x4 windows
    window_attention_distance(scores, (4, 4), stride=2)  # (2,)
    ```
    """
    sums, count = _window_sums(scores, window, stride)
    return sums / count


@export("keras_vit.parkkim.alternet_attention_distances")
def alternet_attention_distances(
    model: keras.Model, images, batch_size: int = 32
) -> dict:
    """Mean attention distance per head of every MSA block of an AlterNet.

    Args:
        model: A model built by `keras_vit.AlterNet` (fixed input size).
        images: `(batch, height, width, channels)` in the model's range.
        batch_size: Images per forward pass. Defaults to 32.

    Returns:
        A dict with `"labels"` (the MSA blocks' layer names), `"distances"`
        (a list of `(heads,)` arrays in pixels; heads differ by stage),
        `"windows"` (each block's window `(h, w)`) and `"strides"` (input
        pixels per map cell).

    Raises:
        ValueError: the model has no MSA block (a PreActResNet).
    """
    layout = CNNLayout.of(model)
    if not layout.msa_names:
        raise ValueError(f"Model {model.name!r} has no MSA block to measure.")
    maps = FeatureMaps.of(model)
    images = np.asarray(images, dtype="float32")
    blocks = [layout.layer(name) for name in layout.msa_names]
    inputs = keras.Model(
        model.inputs[0], [block.input for block in blocks], name="msa_inputs"
    )
    height, width = maps.image_size
    sums = [0.0] * len(blocks)
    counts = [0] * len(blocks)
    windows, strides = [], []
    for part in batch_slices(len(images), batch_size):
        if problem := maps.check_images(images[part]):
            raise ValueError(problem)
        states = inputs(images[part], training=False)
        states = states if isinstance(states, (list, tuple)) else [states]
        for index, (block, state) in enumerate(zip(blocks, states, strict=True)):
            _, scores = block(state, training=False, return_attention_scores=True)
            map_h, map_w = state.shape[1:3]
            window = block.attention.window
            stride = (height / map_h, width / map_w)
            block_sums, queries = _window_sums(scores, window, stride)
            sums[index] = sums[index] + block_sums
            counts[index] += queries
            if len(windows) < len(blocks):
                windows.append(tuple(int(w) for w in window))
                strides.append(stride)
    return {
        "labels": list(layout.msa_names),
        "distances": [np.asarray(s) / c for s, c in zip(sums, counts, strict=True)],
        "windows": windows,
        "strides": strides,
    }


@export("keras_vit.parkkim.attention_distance_by_depth")
def attention_distance_by_depth(model: keras.Model, images, batch_size: int = 32):
    """Mean attention distance per head of every attention block of a model.

    A ViT: each Transformer block (`attention_distances`). An AlterNet: each
    MSA block (`alternet_attention_distances`). A PreActResNet has none:
    empty lists.

    Returns:
        A dict with `"labels"` and `"distances"` (a list of `(heads,)`
        arrays, in pixels of the input).
    """
    if CNNLayout.describes(model):
        if not CNNLayout.of(model).msa_names:
            return {"labels": [], "distances": []}
        result = alternet_attention_distances(model, images, batch_size)
        return {"labels": result["labels"], "distances": result["distances"]}
    distances = attention_distances(model, images, batch_size=batch_size)
    return {
        "labels": [f"block_{i}" for i in range(len(distances))],
        "distances": list(distances),
    }
