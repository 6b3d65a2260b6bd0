"""Shared plumbing: a model's token layout, and a walk through its blocks.

The analyses never build a model that outputs every block at once. A small
sub-model runs the images up to the input of the first Transformer block;
the blocks are then called one after another, asking only the selected ones
for their attention scores, so at most one block's maps (plus whatever the
caller chooses to keep) exist at a time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator

import keras
import numpy as np

from keras_vit.models.features import block_names


@dataclasses.dataclass(frozen=True)
class TokenLayout:
    """Where a ViT's tokens come from.

    Attributes:
        block_names: The `encoderblock_{i}` layer names, in order.
        grid_size: The patch grid `(h, w)`.
        num_prefix_tokens: Tokens before the patches (1 with a class token).
        image_size: The input `(height, width)` in pixels.
        channels: Input channels.
    """

    block_names: tuple[str, ...]
    grid_size: tuple[int, int]
    num_prefix_tokens: int
    image_size: tuple[int, int]
    channels: int

    @property
    def depth(self) -> int:
        return len(self.block_names)

    @property
    def stride(self) -> tuple[int, int]:
        """Pixels between neighbouring patch centres `(dy, dx)`."""
        return (
            self.image_size[0] // self.grid_size[0],
            self.image_size[1] // self.grid_size[1],
        )

    @property
    def num_patches(self) -> int:
        return self.grid_size[0] * self.grid_size[1]


def token_layout(model: keras.Model) -> TokenLayout:
    """Reads the token layout of a model built by `keras_vit.ViT`."""
    names = tuple(block_names(model))
    if not names:
        raise ValueError(
            f"Model {model.name!r} has no 'encoderblock_*' layers; the analyses "
            "need a model built by keras_vit.ViT (or a loaded copy)."
        )
    try:
        posembed = model.get_layer("posembed_input")
    except ValueError:
        raise ValueError(
            f"Model {model.name!r} has no 'posembed_input' layer; the analyses "
            "need a model built by keras_vit.ViT (or a loaded copy)."
        ) from None
    shape = tuple(model.inputs[0].shape)
    if len(shape) != 4 or None in shape[1:]:
        raise ValueError(
            "The analyses need a model with a fixed input size (batch, height, "
            f"width, channels). Received: input shape {shape}"
        )
    return TokenLayout(
        block_names=names,
        grid_size=tuple(int(g) for g in posembed.grid_size),
        num_prefix_tokens=int(posembed.num_prefix_tokens),
        image_size=(int(shape[1]), int(shape[2])),
        channels=int(shape[3]),
    )


def resolve_blocks(blocks: int | Iterable[int] | str, depth: int) -> list[int]:
    """Turns `"all"`, an index or a list of indices into sorted indices."""
    if isinstance(blocks, str):
        if blocks != "all":
            raise ValueError(
                f"`blocks` must be 'all', an int or a list of ints. Received: "
                f"blocks={blocks!r}"
            )
        return list(range(depth))
    if isinstance(blocks, (int, np.integer)):
        blocks = [int(blocks)]
    indices = []
    for index in blocks:
        if not -depth <= int(index) < depth:
            raise ValueError(
                f"Block index {index} is out of range for a model with {depth} blocks."
            )
        indices.append(int(index) % depth)
    if not indices:
        raise ValueError("`blocks` selects no block.")
    return sorted(set(indices))


def check_images(images, layout: TokenLayout) -> np.ndarray:
    """Returns `images` as float32 NumPy, checking they fit the model."""
    images = np.asarray(keras.ops.convert_to_numpy(images), dtype="float32")
    expected = (*layout.image_size, layout.channels)
    if images.ndim != 4 or images.shape[1:] != expected:
        raise ValueError(
            f"Expected images of shape (batch, {expected[0]}, {expected[1]}, "
            f"{expected[2]}) for this model. Received: shape {images.shape}"
        )
    if not len(images):
        raise ValueError("Received an empty batch of images.")
    return images


def to_numpy(value) -> np.ndarray:
    """A tensor, a Keras variable or an array as a NumPy array."""
    if isinstance(value, keras.Variable):
        value = value.numpy()
    return np.asarray(keras.ops.convert_to_numpy(value))


def batch_slices(count: int, batch_size: int) -> Iterator[slice]:
    if int(batch_size) <= 0:
        raise ValueError(f"`batch_size` must be positive. Received: {batch_size}")
    for start in range(0, count, int(batch_size)):
        yield slice(start, min(start + int(batch_size), count))


@dataclasses.dataclass
class BlockStep:
    """One block of the walk, as NumPy-convertible tensors.

    Attributes:
        index: The block index.
        inputs: The block input `(B, N, D)`.
        outputs: The block output `(B, N, D)`.
        scores: Attention probabilities `(B, heads, N, N)`, when asked for.
        after_attention: `inputs + MSA(LN(inputs))`, the state between the
            two residual sub-blocks `(B, N, D)`, when asked for.
    """

    index: int
    inputs: object
    outputs: object
    scores: object = None
    after_attention: object = None


class BlockWalker:
    """Runs images through a ViT one Transformer block at a time.

    Args:
        model: A model built by `keras_vit.ViT` (or a loaded copy).
    """

    def __init__(self, model: keras.Model):
        self.model = model
        self.layout = token_layout(model)
        first = model.get_layer(self.layout.block_names[0])
        # Images -> the first block's input (B, N, D).
        inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
        self.stem = keras.Model(inputs, first.input, name="analysis_stem")

    def block(self, index: int) -> keras.layers.Layer:
        return self.model.get_layer(self.layout.block_names[index])

    def walk(
        self,
        images: np.ndarray,
        last: int | None = None,
        scores_for: Iterable[int] = (),
        after_attention: bool = False,
    ) -> Iterator[BlockStep]:
        """Yields one `BlockStep` per block, from block 0 to block `last`."""
        last = self.layout.depth - 1 if last is None else int(last)
        scores_for = set(scores_for)
        x = self.stem(images, training=False)  # (B, N, D)
        for index in range(last + 1):
            block = self.block(index)
            middle = None
            if after_attention:
                middle = x + block.attention(block.norm_1(x), training=False)
            if index in scores_for:
                y, scores = block(x, training=False, return_attention_scores=True)
            else:
                y, scores = block(x, training=False), None
            yield BlockStep(index, x, y, scores, middle)
            x = y
