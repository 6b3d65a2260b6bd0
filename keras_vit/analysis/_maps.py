"""Named feature maps of any model family: a ViT, or one whose layout names them.

The depth analyses (Fourier amplitude, feature-map variance) are written once
over a list of named `(B, H, W, C)` maps:

- a ViT gives its embedding and, per Transformer block, the state after the
  attention residual (`msa_{i}`) and after the MLP residual (`mlp_{i}`), or
  only the block output (`block_{i}`); tokens are laid out on the patch grid
  and prefix tokens (class, registers) dropped;
- a model of another family gives the maps its layout names
  (`ModelLayout.feature_maps`): Park & Kim's ResNet, PreActResNet and
  AlterNet (`keras_vit.parkkim`) give their stem output and every block's
  output, labelled by layer name (`stage{s}_block{b}`, `stage{s}_msa{b}`).

Each map also carries a kind: `"input"` (embedding or stem), `"msa"`, `"mlp"`
or `"conv"`, so a plot can tell attention from convolution/MLP points.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Iterator

import keras
import numpy as np

from keras_vit.analysis._walk import BlockWalker
from keras_vit.models import layout as names
from keras_vit.models.layout import ModelLayout
from keras_vit.models.layout import ViTLayout

VIT = "vit"
CNN = "cnn"


def model_family(model: keras.Model) -> str:
    """`"vit"` for a keras_vit ViT, `"cnn"` for a model of another registered
    family whose layout names its feature maps (Park & Kim's ResNet,
    PreActResNet or AlterNet).

    Raises:
        keras_vit.models.LayoutError: `model` was built by none of them (a
            `ValueError`).
    """
    layout = ModelLayout.of(model)  # LayoutError (a ValueError) otherwise.
    return VIT if isinstance(layout, ViTLayout) else CNN


def _token_map(tokens, grid_size, num_prefix_tokens) -> np.ndarray:
    tokens = np.asarray(keras.ops.convert_to_numpy(tokens))
    batch, _, dim = tokens.shape
    return tokens[:, num_prefix_tokens:].reshape(batch, *grid_size, dim)


@dataclasses.dataclass(frozen=True)
class FeatureMaps:
    """The named maps of one model, computed batch by batch.

    Attributes:
        model: The model.
        family: `"vit"` or `"cnn"`.
        labels: One name per map, in order of depth.
        kinds: `"input"`, `"msa"`, `"mlp"` or `"conv"`, one per map.
        image_size: `(height, width)` of the model input.
        channels: Channels of the model input.
    """

    model: keras.Model = dataclasses.field(repr=False)
    family: str
    labels: tuple[str, ...]
    kinds: tuple[str, ...]
    image_size: tuple[int, int]
    channels: int
    sublayers: bool = True

    @classmethod
    def of(cls, model: keras.Model, sublayers: bool = True) -> FeatureMaps:
        """Reads which maps `model` has.

        Args:
            model: A keras_vit ViT, ResNet, PreActResNet or AlterNet with a fixed
                input size.
            sublayers: For a ViT, two maps per block (after the attention
                and after the MLP residual); otherwise one. Defaults to
                `True`.
        """
        family = model_family(model)
        shape = tuple(model.inputs[0].shape[1:])
        if None in shape:
            raise ValueError(
                "The analyses need a model with a fixed input size. Received: "
                f"input shape {model.inputs[0].shape}"
            )
        if family == VIT:
            depth = BlockWalker(model).layout.depth
            labels, kinds = [names.EMBEDDING], ["input"]
            for index in range(depth):
                if sublayers:
                    labels += [f"msa_{index}", f"mlp_{index}"]
                    kinds += ["msa", "mlp"]
                else:
                    labels.append(f"block_{index}")
                    kinds.append("block")
        else:  # Another family's layout names its maps (e.g. the CNNs').
            labels, kinds, _ = ModelLayout.of(model).feature_maps()
        return cls(
            model, family, tuple(labels), tuple(kinds), shape[:2], shape[2], sublayers
        )

    def iter_maps(self, images) -> Iterator[tuple[int, np.ndarray]]:
        """Yields `(index, map (B, h, w, C))` for one batch, in label order.

        A ViT's blocks are walked one at a time, so only one block's tokens
        exist at once; a CNN runs one sub-model over all its blocks.
        """
        images = np.asarray(keras.ops.convert_to_numpy(images), dtype="float32")
        if problem := self._check(images):
            raise ValueError(problem)
        if self.family == VIT:
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
        """The ViT's `BlockWalker`, or a CNN sub-model: stem and block outputs."""
        if self.family == VIT:
            return BlockWalker(self.model)
        _, _, outputs = ModelLayout.of(self.model).feature_maps()
        return keras.Model(self.model.inputs[0], outputs, name="analysis_maps")

    def _check(self, images: np.ndarray) -> str | None:
        expected = (*self.image_size, self.channels)
        if images.ndim != 4 or images.shape[1:] != expected:
            return (
                f"Expected images of shape (batch, {expected[0]}, {expected[1]}, "
                f"{expected[2]}) for this model. Received: shape {images.shape}"
            )
        if not len(images):
            return "Received an empty batch of images."
        return None
