"""Shared plumbing of the analyses: a checked layout, and a walk through blocks.

The analyses never build a model that outputs every block at once. A small
sub-model runs the images up to the input of the first Transformer block;
the blocks are then called one after another, asking only the selected ones
for their attention scores, so at most one block's maps (plus whatever the
caller chooses to keep) exist at a time.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from collections.abc import Iterator

import keras
import numpy as np

from keras_vit._export import export
from keras_vit.models.layout import LayoutError
from keras_vit.models.layout import ViTLayout


@export("keras_vit.analysis.token_layout")
def token_layout(model: keras.Model) -> ViTLayout:
    """The layout of a keras_vit model with a fixed input size.

    Raises:
        ValueError: `model` is not a keras_vit model, or its input size is
            not fixed.
    """
    try:
        layout = ViTLayout.of(model)
    except LayoutError as error:
        raise ValueError(
            f"{error} The analyses need a model built by keras_vit.ViT (or a "
            "loaded copy)."
        ) from None
    if None in layout.image_size:
        raise ValueError(
            "The analyses need a model with a fixed input size (batch, height, "
            f"width, channels). Received: input shape {model.inputs[0].shape}"
        )
    return layout


def resolve_blocks(blocks: int | Iterable[int] | str, layout: ViTLayout) -> list[int]:
    """Turns `"all"`, an index or a list of indices into sorted indices."""
    return layout.block_indices(blocks)


def check_images(images, layout: ViTLayout) -> np.ndarray:
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


@export("keras_vit.analysis.batch_slices")
def batch_slices(count: int, batch_size: int) -> Iterator[slice]:
    """The slices that cut `count` items into batches of `batch_size` (the
    last one shorter), as every analysis runs its images.

    Raises:
        ValueError: `batch_size` is not positive.

    Example:

    ```python
    list(keras_vit.analysis.batch_slices(5, 2))
    # [slice(0, 2), slice(2, 4), slice(4, 5)]
    ```
    """
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

    Each block reports its own intermediates (`TransformerBlock(...,
    return_intermediates=True)`); nothing here re-derives a block's insides.

    Args:
        model: A model built by `keras_vit.ViT` (or a loaded copy).
    """

    def __init__(self, model: keras.Model):
        self.model = model
        self.layout = token_layout(model)
        first = self.layout.block(0)
        # Images -> the first block's input (B, N, D), and the patch
        # coordinates `(N, 2)` of a model with rotary embeddings.
        inputs = model.inputs[0] if len(model.inputs) == 1 else model.inputs
        tokens = keras.tree.flatten(first.input)[0]  # not the coordinates
        coordinates = getattr(self.layout, "rope_coordinates", None)
        self.rotary = coordinates is not None
        outputs = [tokens, coordinates.output] if self.rotary else tokens
        self.stem = keras.Model(inputs, outputs, name="analysis_stem")

    def block(self, index: int) -> keras.layers.Layer:
        return self.layout.block(index)

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
        rope = {}
        if self.rotary:
            x, coordinates = self.stem(images, training=False)  # (B, N, D), (N, 2)
            rope["rope"] = coordinates
        else:
            x = self.stem(images, training=False)  # (B, N, D)
        for index in range(last + 1):
            block = self.block(index)
            if after_attention or index in scores_for:
                y, out = block(x, training=False, return_intermediates=True, **rope)
                scores = out["scores"] if index in scores_for else None
                middle = out["after_attention"] if after_attention else None
            else:
                y, scores, middle = block(x, training=False, **rope), None, None
            yield BlockStep(index, x, y, scores, middle)
            x = y
