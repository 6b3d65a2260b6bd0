"""Named feature maps of any model: a ViT, or one whose layout names them.

The depth analyses (Fourier amplitude, feature-map variance) are written once
over a list of named `(B, H, W, C)` maps. Which maps a model has is its
layout's to say (`keras_vit.models.ModelLayout.of(model)`):

- a ViT's token layout (`ViTLayout`) is walked block by block: its
  embedding and, per Transformer block, the state after the attention
  residual (`msa_{i}`) and after the MLP residual (`mlp_{i}`), or only the
  block output (`block_{i}`); tokens are laid out on the patch grid and
  prefix tokens (class, registers) dropped;
- any other layout names its maps by layer output
  (`ModelLayout.feature_maps`), e.g. the stem output and every block's
  output of a convolutional network, labelled by layer name.

Each map also carries a kind: `"input"` (embedding or stem), `"msa"`, `"mlp"`,
`"block"` or `"conv"`, so a plot can tell attention from convolution/MLP
points.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator

import keras
import numpy as np

from keras_vit._export import export
from keras_vit.analysis._walk import BlockWalker
from keras_vit.models import layout as names
from keras_vit.models.layout import ModelLayout
from keras_vit.models.layout import ViTLayout


def _token_map(tokens, grid_size, num_prefix_tokens) -> np.ndarray:
    tokens = np.asarray(keras.ops.convert_to_numpy(tokens))
    batch, _, dim = tokens.shape
    return tokens[:, num_prefix_tokens:].reshape(batch, *grid_size, dim)


@export("keras_vit.analysis.FeatureMaps")
@dataclasses.dataclass(frozen=True)
class FeatureMaps:
    """The named maps of one model, computed batch by batch.

    Attributes:
        model: The model.
        layout: Its `keras_vit.models.ModelLayout`, which says what its maps
            are: a ViT's tokens are walked block by block; another layout
            names its maps by layer output (`ModelLayout.feature_maps`).
        labels: One name per map, in order of depth.
        kinds: `"input"`, `"msa"`, `"mlp"`, `"block"` or `"conv"`, one per
            map.
        image_size: `(height, width)` of the model input.
        channels: Channels of the model input.
        sublayers: For a ViT, two maps per block (after the attention and
            after the MLP residual) rather than one.

    Example:

    ```python
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    maps = keras_vit.analysis.FeatureMaps.of(model)
    maps.labels[:3]  # ('embedding', 'msa_0', 'mlp_0')
    for index, value in maps.iter_maps(images):  # value: (B, h, w, C)
        ...
    ```
    """

    model: keras.Model = dataclasses.field(repr=False)
    layout: ModelLayout = dataclasses.field(repr=False)
    labels: tuple[str, ...]
    kinds: tuple[str, ...]
    image_size: tuple[int, int]
    channels: int
    sublayers: bool = True

    @classmethod
    def of(cls, model: keras.Model, sublayers: bool = True) -> FeatureMaps:
        """Reads which maps `model` has.

        Args:
            model: A keras_vit model with a fixed input size: a ViT, or a
                model of another registered architecture whose layout names
                its feature maps.
            sublayers: For a ViT, two maps per block (after the attention
                and after the MLP residual); otherwise one. Defaults to
                `True`.

        Raises:
            keras_vit.models.LayoutError: `model` was built by no registered
                architecture, or its layout names no feature maps (a
                `ValueError`).
            ValueError: the input size is not fixed.
        """
        layout = ModelLayout.of(model)  # LayoutError (a ValueError) otherwise.
        shape = tuple(model.inputs[0].shape[1:])
        if None in shape:
            raise ValueError(
                "The analyses need a model with a fixed input size. Received: "
                f"input shape {model.inputs[0].shape}"
            )
        if _walks_tokens(layout):
            labels, kinds = [names.EMBEDDING], ["input"]
            for index in range(layout.depth):
                if sublayers:
                    labels += [f"msa_{index}", f"mlp_{index}"]
                    kinds += ["msa", "mlp"]
                else:
                    labels.append(f"block_{index}")
                    kinds.append("block")
        else:  # The layout names its maps by layer output.
            labels, kinds, _ = layout.feature_maps()
        return cls(
            model,
            layout,
            tuple(labels),
            tuple(kinds),
            shape[:2],
            shape[2],
            sublayers,
        )

    def iter_maps(self, images) -> Iterator[tuple[int, np.ndarray]]:
        """Yields `(index, map (B, h, w, C))` for one batch, in label order.

        A ViT's blocks are walked one at a time, so only one block's tokens
        exist at once; a layout that names its maps by layer output runs one
        sub-model over all of them.
        """
        images = np.asarray(keras.ops.convert_to_numpy(images), dtype="float32")
        if problem := self.check_images(images):
            raise ValueError(problem)
        if _walks_tokens(self.layout):
            walker = self._runner
            layout = walker.layout
            point = 0
            for step in walker.walk(images, after_attention=self.sublayers):
                states = [step.inputs] if step.index == 0 else []
                states += [step.after_attention] if self.sublayers else []
                states.append(step.outputs)
                for state in states:
                    yield (
                        point,
                        _token_map(state, layout.grid_size, layout.num_prefix_tokens),
                    )
                    point += 1
            return
        for point, value in enumerate(self._runner(images, training=False)):
            yield point, np.asarray(keras.ops.convert_to_numpy(value))

    @functools.cached_property
    def _runner(self):
        """The ViT's `BlockWalker`, or a sub-model whose outputs are the maps
        the layout names."""
        if _walks_tokens(self.layout):
            return BlockWalker(self.model)
        _, _, outputs = self.layout.feature_maps()
        return keras.Model(self.model.inputs[0], outputs, name="analysis_maps")

    def check_images(self, images: np.ndarray) -> str | None:
        """`None` for a non-empty batch `(B, height, width, channels)` of
        the model's input size, else what is wrong with it (one line)."""
        expected = (*self.image_size, self.channels)
        if images.ndim != 4 or images.shape[1:] != expected:
            return (
                f"Expected images of shape (batch, {expected[0]}, {expected[1]}, "
                f"{expected[2]}) for this model. Received: shape {images.shape}"
            )
        if not len(images):
            return "Received an empty batch of images."
        return None


def _walks_tokens(layout: ModelLayout) -> bool:
    """Whether the maps are a ViT's tokens, walked block by block (the
    layouts that name their maps by layer output say so themselves)."""
    return isinstance(layout, ViTLayout)
