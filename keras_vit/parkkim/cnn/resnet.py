"""The post-activation ResNet of "How Do Vision Transformers Work?".

The CNN of the paper's Fourier and feature-map-variance figures, as the
official code defines it: github.com/xxxnell/how-do-vits-work (branch
`transformer`, commit 9571ff1), `models/resnet.py` (`ResNet`, `dnn_18` ...
`dnn_152`), `models/resnet_dnn_block.py` (`BasicBlock`, `Bottleneck`) and
`models/classifier_block.py` (`GAPBlock`). Learned from, not copied.
"""

from __future__ import annotations

import keras

from keras_vit._export import export
from keras_vit.models import layout as names
from keras_vit.models.options import builder_arguments
from keras_vit.models.options import drop_path_rates
from keras_vit.parkkim.cnn import layout as cnn_names
from keras_vit.parkkim.cnn.builder import build_head
from keras_vit.parkkim.cnn.builder import build_stem
from keras_vit.parkkim.cnn.builder import check_arguments
from keras_vit.parkkim.cnn.options import CNNOptions
from keras_vit.parkkim.cnn.options import resolve_cnn_options
from keras_vit.parkkim.cnn.variants import RESNETS
from keras_vit.parkkim.cnn.variants import CNNVariant
from keras_vit.parkkim.cnn.variants import default_name
from keras_vit.parkkim.cnn.variants import get_variant
from keras_vit.parkkim.layers.conv_blocks import PostActBlock
from keras_vit.utils import to_pair


@export("keras_vit.parkkim.ResNet", "keras_vit.parkkim.cnn.ResNet")
def ResNet(  # noqa: N802
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
    """Builds a post-activation ResNet, the CNN of Park & Kim's analyses.

    The original ResNet (He et al., 2016) as Park & Kim's code writes it:
    a stem with BatchNorm and ReLU, stages of `PostActBlock`s (BatchNorm
    after every convolution, ReLU after the residual sum; the first block of
    stages 2+ halves the resolution with its 3x3 convolution and a strided
    1x1 + BatchNorm shortcut), then global average pooling and a linear
    layer (`GAPBlock`: no normalisation in the head). Every block's output
    is activated, so the last block's output is the final feature map.

    | stem | layers | output at 224 px / 32 px |
    |---|---|---|
    | `"imagenet"` | 7x7/2 conv, BN, ReLU, 3x3/2 max-pool (padded as PyTorch) | 56x56 |
    | `"cifar"` | 3x3/1 conv, BN, ReLU | 32x32 |

    Layer names: `stem_pad`, `stem_conv`, `stem_norm`, `stem_relu`,
    `stem_pool` (ImageNet stem; `stem_conv`, `stem_norm`, `stem_relu` for
    the CIFAR stem), one layer per block `stage{s}_block{b}` (from 1), then
    `pool` and `head`. `keras_vit.load_weights` reads the state dict of the
    authors' PyTorch model into it (`keras_vit.parkkim.authors`).

    Args:
        variant: A row of `keras_vit.parkkim.cnn.RESNETS` (`"18"`, `"34"`,
            `"50"`, `"101"`, `"152"`, `"mini"`, `"test"`) or a `CNNVariant`.
        num_classes: Classes of the linear head. Defaults to 1000.
        image_size: Input size, an int or `(height, width)`, a multiple of
            the total stride (32 with the ImageNet stem, 8 with the CIFAR
            stem and four stages). Defaults to 224.
        channels: Input channels. Defaults to 3.
        include_top: Whether to add the linear head. Without it the model
            returns the pooled features, or the last block's map
            `(batch, h, w, channels)` when `pooling=None`.
        name: Model name. Defaults to e.g. `"resnet50"`.
        options: The network's `keras_vit.parkkim.cnn.CNNOptions` (stem,
            pooling, stochastic depth, head activation). Defaults to
            `CNNOptions()`: the row's stem, average pooling, no stochastic
            depth, logits. Its MSA options (`window_size`, `dropout_rate`)
            must stay unset: this network has no MSA blocks.
        **cnn_options: Single fields of `CNNOptions` by name, applied over
            `options`:
            - `stem`: `"imagenet"` or `"cifar"` (the code's `stem=False`,
              used for its CIFAR models). Defaults to the row's: ImageNet
              for the paper's rows, CIFAR for `"mini"` and `"test"`.
            - `pooling`: `"avg"` (default, the paper's), `"max"`, or `None`
              (only without the top).
            - `drop_path_rate`: Stochastic depth; block `i` of `L` drops its
              branch with rate `drop_path_rate * i / (L - 1)`, as the code's
              `sd`. Defaults to 0.
            - `classifier_activation`: Activation of the head. Defaults to
              `None` (logits, float32 under mixed precision).

    Returns:
        A functional `keras.Model` taking `(batch, height, width, channels)`
        images named `"images"`.

    Example:

    ```python
    model = keras_vit.parkkim.cnn.ResNet("50", num_classes=100, image_size=32,
                                        stem="cifar")
    logits = model(np.zeros((1, 32, 32, 3), "float32"))  # (1, 100)
    ```

    Reference:
    - [He et al., 2016](https://arxiv.org/abs/1512.03385).
    - [Park & Kim, 2022](https://arxiv.org/abs/2202.06709).
    """
    spec = get_variant(RESNETS, "ResNet", variant, msa=False)
    options = resolve_cnn_options(
        options, cnn_options, builder_arguments(ResNet), msa=False
    ).for_variant(spec)
    image_size = to_pair(image_size, "image_size")
    check_arguments(
        spec,
        options,
        image_size,
        include_top=include_top,
        num_classes=num_classes,
        channels=channels,
    )
    images = keras.Input((*image_size, channels), name=names.INPUT)
    x = build_stem(images, spec, options.stem, post_activation=True)

    # Stochastic depth grows linearly over all blocks, as the code's.
    rates = iter(drop_path_rates(options.drop_path_rate, sum(spec.depths)))
    for stage, depth in enumerate(spec.depths):
        for position in range(depth):
            x = PostActBlock(
                spec.widths[stage],
                strides=2 if stage > 0 and position == 0 else 1,
                bottleneck=spec.block == "bottleneck",
                drop_path_rate=next(rates),
                name=cnn_names.block_name(stage + 1, position + 1, "conv"),
            )(x)  # (B, h, w, C)

    # The code's GAPBlock: the blocks end in a ReLU, so the head does not.
    x = build_head(x, options, include_top=include_top, num_classes=num_classes)
    return keras.Model(images, x, name=name or default_name("resnet", variant))


@export("keras_vit.parkkim.ResNet18", "keras_vit.parkkim.cnn.ResNet18")
def ResNet18(**kwargs) -> keras.Model:  # noqa: N802
    """Builds a post-activation ResNet-18: `ResNet("18", **kwargs)`."""
    return ResNet("18", **kwargs)


@export("keras_vit.parkkim.ResNet50", "keras_vit.parkkim.cnn.ResNet50")
def ResNet50(**kwargs) -> keras.Model:  # noqa: N802
    """Builds a post-activation ResNet-50: `ResNet("50", **kwargs)`."""
    return ResNet("50", **kwargs)
