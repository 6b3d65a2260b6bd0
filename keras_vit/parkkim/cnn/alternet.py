"""AlterNet: a pre-activation ResNet whose stages end in MSA blocks.

From Park & Kim, "How Do Vision Transformers Work?" (ICLR 2022), as its
official code defines it: github.com/xxxnell/how-do-vits-work (branch
`transformer`, commit 9571ff1), `models/alternet.py` (`AlterNet`,
`AttentionBlockB`, `LocalAttention`, `StemB`, `dnn_18` ... `dnn_152`),
`models/attentions.py` (`Attention2d`), `models/preresnet_dnn_block.py` and
`models/classifier_block.py`. Learned from, not copied.
"""

from __future__ import annotations

import keras

from keras_vit._export import export
from keras_vit.models.options import builder_arguments
from keras_vit.parkkim.cnn.builder import build_cnn
from keras_vit.parkkim.cnn.options import CNNOptions
from keras_vit.parkkim.cnn.options import resolve_cnn_options
from keras_vit.parkkim.cnn.variants import ALTERNETS
from keras_vit.parkkim.cnn.variants import CNNVariant
from keras_vit.parkkim.cnn.variants import default_name
from keras_vit.parkkim.cnn.variants import get_variant


@export(
    "keras_vit.AlterNet", "keras_vit.parkkim.AlterNet", "keras_vit.parkkim.cnn.AlterNet"
)
def AlterNet(  # noqa: N802
    variant: str | CNNVariant = "50",
    *,
    num_classes: int = 1000,
    image_size: int | tuple[int, int] = 224,
    channels: int = 3,
    include_top: bool = True,
    name: str | None = None,
    options: CNNOptions | None = None,
    **cnn_options,
) -> keras.Model:
    """Builds an AlterNet: MSA blocks at the end of pre-activation ResNet stages.

    The paper's build-up rule, as its code applies it: a stage of `n`
    blocks with `m` MSA blocks is `n - 2m` convolution blocks, then `m`
    (convolution block, MSA block) pairs. AlterNet-50 (`"50"`):

    | stage | blocks | layout | heads | map at 224 px | attention |
    |---|---|---|---|---|---|
    | 1 | 3 | conv conv conv | - | 56x56 | - |
    | 2 | 4 | conv conv conv MSA | 6 | 28x28 | 7x7 windows |
    | 3 | 6 | (conv MSA) x 3 | 12 | 14x14 | 7x7 windows |
    | 4 | 4 | (conv MSA) x 2 | 24 | 7x7 | global |

    Convolution blocks are `PreActBlock`s, MSA blocks
    `PreActAttentionBlock`s (BN-GELU, 1x1 reduction to a quarter, BN,
    windowed attention with 64-wide heads and a relative position bias,
    projected back; no MLP). Stem and head as `PreActResNet`.

    Layer names: `stem_conv` (and `stem_pad`, `stem_pool`), one layer per
    block, `stage{s}_block{b}` for convolution blocks and `stage{s}_msa{b}`
    for MSA blocks (`b` the position in the stage, from 1), then
    `head_norm`, `head_relu`, `pool`, `head`.

    Args:
        variant: A row of `keras_vit.ALTERNETS` (`"18"`, `"34"`, `"50"`,
            `"101"`, `"152"`, `"mini"`, `"test"`) or a `CNNVariant`.
        num_classes: Classes of the linear head. Defaults to 1000.
        image_size: Input size, an int or `(height, width)`, a multiple of
            the total stride; every MSA stage's map must be tiled by the
            windows. Defaults to 224.
        channels: Input channels. Defaults to 3.
        include_top: Whether to add the linear head (see `PreActResNet`).
        name: Model name. Defaults to e.g. `"alternet50"`.
        options: The network's `keras_vit.parkkim.cnn.CNNOptions` (stem,
            windows, pooling, dropout, stochastic depth, head activation).
            Defaults to `CNNOptions()`: the row's stem and windows, average
            pooling, no dropout or stochastic depth, logits.
        **cnn_options: Single fields of `CNNOptions` by name, applied over
            `options`:
            - `stem`: `"imagenet"` or `"cifar"`; defaults to the row's.
            - `window_size`: Side of the attention windows; defaults to the
              row's (7 for the paper's rows). A map no larger than the
              window is attended globally.
            - `pooling`: `"avg"` (default), `"max"`, or `None` (only without
              the top).
            - `dropout_rate`: Dropout after each attention output
              projection.
            - `drop_path_rate`: Stochastic depth, linear over all blocks.
            - `classifier_activation`: Activation of the head. Defaults to
              `None`.

    Returns:
        A functional `keras.Model` taking `(batch, height, width, channels)`
        images named `"images"`.

    Example:

    ```python
    model = keras_vit.AlterNet("50", num_classes=1000)         # ImageNet
    small = keras_vit.AlterNet("mini", num_classes=10, image_size=32)
    logits = small(np.zeros((1, 32, 32, 3), "float32"))      # (1, 10)
    ```

    Reference:
    - [Park & Kim, 2022](https://arxiv.org/abs/2202.06709), Section 4.
    """
    spec = get_variant(ALTERNETS, "AlterNet", variant)
    options = resolve_cnn_options(options, cnn_options, builder_arguments(AlterNet))
    return build_cnn(
        spec,
        options,
        num_classes=num_classes,
        image_size=image_size,
        channels=channels,
        include_top=include_top,
        name=name or default_name("alternet", variant),
    )


@export(
    "keras_vit.AlterNet18",
    "keras_vit.parkkim.AlterNet18",
    "keras_vit.parkkim.cnn.AlterNet18",
)
def AlterNet18(**kwargs) -> keras.Model:  # noqa: N802
    """Builds AlterNet-18: `AlterNet("18", **kwargs)`."""
    return AlterNet("18", **kwargs)


@export(
    "keras_vit.AlterNet50",
    "keras_vit.parkkim.AlterNet50",
    "keras_vit.parkkim.cnn.AlterNet50",
)
def AlterNet50(**kwargs) -> keras.Model:  # noqa: N802
    """Builds AlterNet-50: `AlterNet("50", **kwargs)`."""
    return AlterNet("50", **kwargs)
