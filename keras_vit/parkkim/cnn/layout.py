"""The one description of a built ResNet, PreActResNet or AlterNet: its layer names.

The CNN counterpart of `keras_vit.models.layout` (whose `INPUT`, `POOL` and
`HEAD` names it shares): the builder, the feature extractor and the analyses
spell the CNN layer names here only. Graph order:

- `stem_pad`, `stem_conv`, `stem_pool` (ImageNet stem) or `stem_conv`
  (CIFAR stem), with `stem_norm` and `stem_relu` after `stem_conv` in a
  post-activation `ResNet`;
- one layer per block: `stage{s}_block{b}` (convolution block) or
  `stage{s}_msa{b}` (MSA block), `s` and `b` counted from 1, `b` the
  block's position in its stage;
- `head_norm`, `head_relu` (the final BN-ReLU of a pre-activation network;
  a post-activation `ResNet`'s last block ends in its own ReLU), `pool`,
  `head`.

Example:

```python
model = keras_vit.AlterNet("test", image_size=16)
layout = CNNLayout.of(model)
layout.block_names  # ('stage1_block1', 'stage2_block1', 'stage2_msa2')
layout.stage_names  # ('stage1_block1', 'stage2_msa2')
```
"""

from __future__ import annotations

import dataclasses
import re

import keras

from keras_vit._export import export
from keras_vit.models.layout import HEAD
from keras_vit.models.layout import POOL
from keras_vit.models.layout import LayoutError
from keras_vit.models.layout import ModelLayout

STEM_PAD = "stem_pad"
STEM_CONV = "stem_conv"
STEM_POOL = "stem_pool"
STEM_NORM = "stem_norm"
STEM_RELU = "stem_relu"
HEAD_NORM = "head_norm"
HEAD_RELU = "head_relu"
BLOCK_KINDS = {"conv": "block", "msa": "msa"}

_BLOCK = re.compile(r"^stage(\d+)_(block|msa)(\d+)$")


def block_name(stage: int, position: int, kind: str) -> str:
    """`stage{stage}_block{position}` or `stage{stage}_msa{position}` (from 1)."""
    return f"stage{int(stage)}_{BLOCK_KINDS[kind]}{int(position)}"


def parse_block_name(name: str) -> tuple[int, int, str] | None:
    """`(stage, position, kind)` of a block name, or `None` for other names."""
    match = _BLOCK.match(name)
    if match is None:
        return None
    kind = "conv" if match.group(2) == "block" else "msa"
    return int(match.group(1)), int(match.group(3)), kind


@export("keras_vit.parkkim.CNNLayout", "keras_vit.parkkim.cnn.CNNLayout")
@dataclasses.dataclass(frozen=True)
class CNNLayout(ModelLayout):
    """What a built ResNet, PreActResNet or AlterNet is made of.

    Attributes:
        model: The model described.
        block_names: Every block's layer name, in order of depth.
        stage_names: The last block of every stage (the stage outputs).
        msa_names: The MSA blocks' names, in order (empty for a ResNet).
        pooled_name: `"pool"`, or `None` for a model built with
            `pooling=None`.
        head_name: `"head"` when the model has a classifier, else `None`.
    """

    model: keras.Model = dataclasses.field(repr=False, compare=False)
    block_names: tuple[str, ...]
    stage_names: tuple[str, ...]
    msa_names: tuple[str, ...]
    pooled_name: str | None
    head_name: str | None

    final_key = "features"

    @classmethod
    def describes(cls, model: keras.Model) -> bool:
        return any(parse_block_name(layer.name) for layer in model.layers)

    @classmethod
    def of(cls, model: keras.Model) -> CNNLayout:
        """Reads the layout of a model built by `PreActResNet` or `AlterNet`.

        Raises:
            LayoutError: `model` has no `stage*_block*`/`stage*_msa*` layers.
        """
        found = sorted(
            (parsed[:2], layer.name)
            for layer in model.layers
            if (parsed := parse_block_name(layer.name)) is not None
        )
        if not found:
            raise LayoutError(
                f"Model {model.name!r} has no 'stage*_block*' or 'stage*_msa*' "
                "layers: it was not built by keras_vit's ResNet, PreActResNet or "
                "AlterNet."
            )
        blocks = tuple(name for _, name in found)
        last = {}
        for (stage, _), name in found:
            last[stage] = name
        names = {layer.name for layer in model.layers}
        return cls(
            model=model,
            block_names=blocks,
            stage_names=tuple(last.values()),
            msa_names=tuple(n for n in blocks if parse_block_name(n)[2] == "msa"),
            pooled_name=POOL if POOL in names else None,
            head_name=HEAD if HEAD in names else None,
        )

    def feature_maps(self) -> tuple[tuple[str, ...], tuple[str, ...], list]:
        """`("stem", *blocks)`, their kinds and outputs: the stem's map (the
        first block's input) and every block's output."""
        labels = ("stem", *self.block_names)
        kinds = ("input", *(parse_block_name(n)[2] for n in self.block_names))
        first = self.layer(self.block_names[0])
        outputs = [first.input] + [self.layer(n).output for n in self.block_names]
        return labels, kinds, outputs

    @property
    def features(self) -> keras.layers.Layer:
        """The final activated feature map's layer.

        `head_relu` in a pre-activation network; the last block in a
        post-activation `ResNet` (its output is already activated).
        """
        if self.has(HEAD_RELU):
            return self.layer(HEAD_RELU)
        return self.layer(self.block_names[-1])

    @property
    def final(self) -> keras.layers.Layer:
        """The final activated feature map's layer (`features`)."""
        return self.features
