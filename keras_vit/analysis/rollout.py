"""Attention rollout (Abnar & Zuidema, 2020; ViT paper, Appendix D).

How much each input token contributes to each output token, following the
attention through every layer. For each block the heads are fused (averaged
by default) into `A`; the residual connection is accounted for by mixing in
the identity, `0.5 * (A + I)`, and the rows are renormalised so each stays a
distribution. The rollout is the product of these matrices from the first
block to the last, `R = Â_L ... Â_1`: row `t` of `R` is a distribution over
the input tokens, for output token `t`.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np

from keras_vit._export import export
from keras_vit.analysis._walk import BlockWalker
from keras_vit.analysis._walk import batch_slices
from keras_vit.analysis._walk import check_images

HEAD_FUSIONS = ("mean", "max", "min")


def fuse_heads(scores, head_fusion: str = "mean", residual: bool = True) -> np.ndarray:
    """One block's attention as a row-stochastic `(batch, N, N)` matrix.

    Args:
        scores: Attention probabilities `(batch, heads, N, N)`.
        head_fusion: `"mean"` (default, as in the paper), `"max"` or `"min"`
            over heads.
        residual: Mix in the identity for the residual path, `0.5 * (A + I)`.
            Defaults to `True`.

    Returns:
        `(batch, N, N)` float64 with rows summing to 1.
    """
    scores = np.asarray(keras.ops.convert_to_numpy(scores), dtype="float64")
    if scores.ndim != 4 or scores.shape[-1] != scores.shape[-2]:
        raise ValueError(
            "Expected attention scores of shape (batch, heads, N, N). "
            f"Received: shape {scores.shape}"
        )
    if head_fusion not in HEAD_FUSIONS:
        raise ValueError(
            f"`head_fusion` must be one of {HEAD_FUSIONS}. Received: "
            f"head_fusion={head_fusion!r}"
        )
    fused = getattr(np, head_fusion)(scores, axis=1)  # (B, N, N)
    if residual:
        fused = 0.5 * (fused + np.eye(fused.shape[-1]))
    return fused / fused.sum(axis=-1, keepdims=True)


@export("keras_vit.analysis.attention_rollout")
def attention_rollout(
    attentions: Sequence, head_fusion: str = "mean", residual: bool = True
) -> np.ndarray:
    """Rolls attention out through the layers: `R = Â_L ... Â_1`.

    Args:
        attentions: Per-block attention probabilities, first block first,
            each `(batch, heads, N, N)`.
        head_fusion: `"mean"` (default), `"max"` or `"min"` over heads.
        residual: Account for the residual path with `0.5 * (A + I)`.
            Defaults to `True`.

    Returns:
        `(batch, N, N)`: row `t` is the distribution of output token `t` over
        the input tokens (rows sum to 1).

    Example:

    ```python
    maps = attention_weights(model, images, blocks="all")
    rollout = attention_rollout([maps[i] for i in sorted(maps)])
    ```
    """
    if not len(attentions):
        raise ValueError("`attentions` is empty: pass one map per block.")
    rollout = None
    for scores in attentions:
        fused = fuse_heads(scores, head_fusion, residual)  # (B, N, N)
        rollout = fused if rollout is None else fused @ rollout
    return rollout


@export("keras_vit.analysis.output_token_map")
def output_token_map(
    rollout,
    grid_size: tuple[int, int],
    num_prefix_tokens: int = 1,
    token: int | str | None = None,
) -> np.ndarray:
    """The rollout row of one output token, on the patch grid.

    Args:
        rollout: `(batch, N, N)` from `attention_rollout`.
        grid_size: The patch grid `(h, w)`.
        num_prefix_tokens: Tokens before the patches (1 with a class token).
        token: Output token whose map to take: an index, `"mean"` (the
            average over the patch tokens, what `pooling="gap"` reads), or
            `None` (default): the class token when there is one, else
            `"mean"`.

    Returns:
        `(batch, h, w)`: the weight of each input patch (prefix columns are
        dropped, so a map sums to at most 1).
    """
    rollout = np.asarray(rollout)
    grid_h, grid_w = grid_size
    expected = num_prefix_tokens + grid_h * grid_w
    if rollout.ndim != 3 or rollout.shape[1:] != (expected, expected):
        raise ValueError(
            f"Expected a rollout of shape (batch, {expected}, {expected}) for a "
            f"{grid_h}x{grid_w} grid with {num_prefix_tokens} prefix tokens. "
            f"Received: shape {rollout.shape}"
        )
    if token is None:
        token = 0 if num_prefix_tokens else "mean"
    if token == "mean":
        row = rollout[:, num_prefix_tokens:].mean(axis=1)  # (B, N)
    elif isinstance(token, (int, np.integer)) and -expected <= token < expected:
        row = rollout[:, token]  # (B, N)
    else:
        raise ValueError(
            f"`token` must be an index below {expected}, 'mean' or None. "
            f"Received: token={token!r}"
        )
    return row[:, num_prefix_tokens:].reshape(-1, grid_h, grid_w)


@export("keras_vit.analysis.attention_rollout_maps")
def attention_rollout_maps(
    model: keras.Model,
    images,
    token: int | str | None = None,
    head_fusion: str = "mean",
    residual: bool = True,
    batch_size: int = 32,
) -> np.ndarray:
    """Rollout maps of an output token on the patch grid, for a model.

    The product is accumulated block by block, so only one block's attention
    maps and one `(batch, N, N)` running product exist at a time.

    Args:
        model: A model built by `keras_vit.ViT` (or a loaded copy).
        images: `(batch, height, width, channels)` in the model's range.
        token: See `output_token_map`; defaults to the class token.
        head_fusion: `"mean"` (default), `"max"` or `"min"` over heads.
        residual: Account for the residual path. Defaults to `True`.
        batch_size: Images per forward pass. Defaults to 32.

    Returns:
        `(batch, h, w)` maps; `to_image_space` resizes them to pixels.

    Example:

    ```python
    maps = attention_rollout_maps(model, images)           # (B, h, w)
    heat = to_image_space(maps, images.shape[1:3])         # (B, H, W)
    picture = overlay(images[0], heat[0])                  # (H, W, 3) uint8
    ```
    """
    walker = BlockWalker(model)
    layout = walker.layout
    images = check_images(images, layout)
    maps = []
    for part in batch_slices(len(images), batch_size):
        rollout = None
        for step in walker.walk(images[part], scores_for=range(layout.depth)):
            fused = fuse_heads(step.scores, head_fusion, residual)
            rollout = fused if rollout is None else fused @ rollout
        maps.append(
            output_token_map(rollout, layout.grid_size, layout.num_prefix_tokens, token)
        )
    return np.concatenate(maps)


@export("keras_vit.analysis.to_image_space")
def to_image_space(maps, image_size: tuple[int, int]) -> np.ndarray:
    """Resizes `(batch, h, w)` patch maps to `(batch, height, width)` pixels.

    Bilinear interpolation with half-pixel centres, so each patch value sits
    at its patch centre.
    """
    maps = np.asarray(maps, dtype="float32")
    if maps.ndim != 3:
        raise ValueError(f"Expected maps (batch, h, w). Received: shape {maps.shape}")
    resized = keras.ops.image.resize(
        maps[..., None], tuple(int(s) for s in image_size), interpolation="bilinear"
    )
    return keras.ops.convert_to_numpy(resized)[..., 0]


# A dark-to-bright ramp (black, purple, red, orange, pale yellow) for heat maps.
_RAMP = np.array(
    [[0, 0, 4], [87, 16, 110], [188, 55, 84], [249, 142, 9], [252, 255, 164]],
    dtype="float32",
)


def colorize(values) -> np.ndarray:
    """Maps values in `[0, 1]` to RGB `[0, 255]` float32 along a heat ramp."""
    values = np.clip(np.asarray(values, dtype="float32"), 0.0, 1.0)
    position = values * (len(_RAMP) - 1)
    low = np.minimum(np.floor(position).astype(int), len(_RAMP) - 2)
    frac = (position - low)[..., None]
    return _RAMP[low] * (1 - frac) + _RAMP[low + 1] * frac


@export("keras_vit.analysis.overlay")
def overlay(
    image,
    heatmap,
    alpha: float = 0.6,
    value_range: tuple[float, float] = (-1.0, 1.0),
    mode: str = "heatmap",
) -> np.ndarray:
    """Draws a heat map over an image.

    Args:
        image: `(height, width, channels)` with 1 or 3 channels.
        heatmap: `(height, width)` (see `to_image_space`); it is rescaled to
            `[0, 1]` by its own minimum and maximum.
        alpha: Weight of the coloured heat map in `"heatmap"` mode.
        value_range: The range of `image`'s values. Defaults to `(-1, 1)`,
            the model's range; use `(0, 255)` for raw pixels.
        mode: `"heatmap"` (default) blends a colour ramp over the image;
            `"mask"` multiplies the image by the map, as in the paper's
            Fig. 6.

    Returns:
        An RGB `uint8` array `(height, width, 3)`.
    """
    image = np.asarray(image, dtype="float32")
    heatmap = np.asarray(heatmap, dtype="float32")
    if image.ndim != 3 or image.shape[-1] not in (1, 3):
        raise ValueError(
            f"Expected an image (height, width, 1 or 3). Received: shape {image.shape}"
        )
    if heatmap.shape != image.shape[:2]:
        raise ValueError(
            f"The heat map {heatmap.shape} must match the image size "
            f"{image.shape[:2]}; resize it with to_image_space."
        )
    low, high = value_range
    if not high > low:
        raise ValueError(f"Empty `value_range`: {value_range}")
    rgb = np.clip((image - low) / (high - low), 0, 1) * 255.0
    rgb = np.repeat(rgb, 3, axis=-1) if rgb.shape[-1] == 1 else rgb
    span = heatmap.max() - heatmap.min()
    heat = (heatmap - heatmap.min()) / span if span > 0 else np.zeros_like(heatmap)
    if mode == "heatmap":
        out = (1 - alpha) * rgb + alpha * colorize(heat)
    elif mode == "mask":
        out = rgb * heat[..., None]
    else:
        raise ValueError(f"`mode` must be 'heatmap' or 'mask'. Received: {mode!r}")
    return np.clip(np.rint(out), 0, 255).astype("uint8")
