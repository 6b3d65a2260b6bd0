"""The pre-activation ResNet baseline of "How Do Vision Transformers Work?"."""

from __future__ import annotations

import keras

from keras_vit._export import export
from keras_vit.models.options import builder_arguments
from keras_vit.parkkim.cnn.builder import build_cnn
from keras_vit.parkkim.cnn.options import CNNOptions
from keras_vit.parkkim.cnn.options import resolve_cnn_options
from keras_vit.parkkim.cnn.variants import PREACT_RESNETS
from keras_vit.parkkim.cnn.variants import CNNVariant
from keras_vit.parkkim.cnn.variants import default_name
from keras_vit.parkkim.cnn.variants import get_variant


@export(
    "keras_vit.PreActResNet",
    "keras_vit.parkkim.PreActResNet",
    "keras_vit.parkkim.cnn.PreActResNet",
)
def PreActResNet(  # noqa: N802
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
    """Builds a pre-activation ResNet, the CNN baseline of Park & Kim (2022).

    A stem without normalisation, stages of `PreActBlock`s (BN-ReLU before
    every convolution; the first block of stages 2+ halves the resolution),
    and the paper's head: BatchNorm, ReLU, global pooling, a linear layer.
    The layout is the paper's code's (`models/preresnet.py`,
    `models/preresnet_dnn_block.py`, `models/classifier_block.py` of
    github.com/xxxnell/how-do-vits-work); see `keras_vit.PREACT_RESNETS`.

    Layer names: `stem_conv` (and `stem_pad`, `stem_pool`), one layer per
    block `stage{s}_block{b}` (from 1), then `head_norm`, `head_relu`,
    `pool` and `head`.

    Args:
        variant: A row of `keras_vit.PREACT_RESNETS` (`"18"`, `"34"`,
            `"50"`, `"101"`, `"152"`, `"mini"`, `"test"`) or a `CNNVariant`.
        num_classes: Classes of the linear head. Defaults to 1000.
        image_size: Input size, an int or `(height, width)`, a multiple of
            the total stride (32 with the ImageNet stem, 8 with the CIFAR
            stem and four stages). Defaults to 224.
        channels: Input channels. Defaults to 3.
        include_top: Whether to add the linear head. Without it the model
            returns the pooled features, or the final activated feature map
            `(batch, h, w, channels)` when `pooling=None`.
        name: Model name. Defaults to e.g. `"preact_resnet50"`.
        options: The network's `keras_vit.parkkim.cnn.CNNOptions` (stem,
            pooling, stochastic depth, head activation). Defaults to
            `CNNOptions()`: the row's stem, average pooling, no stochastic
            depth, logits. Its MSA options (`window_size`, `dropout_rate`)
            must stay unset: this network has no MSA blocks.
        **cnn_options: Single fields of `CNNOptions` by name, applied over
            `options`:
            - `stem`: `"imagenet"` (7x7/2 convolution, 3x3/2 max-pool) or
              `"cifar"` (a 3x3/1 convolution, the paper's `stem=False`).
              Defaults to the row's: ImageNet for the paper's rows, CIFAR
              for `"mini"` and `"test"`.
            - `pooling`: `"avg"` (default, the paper's), `"max"`, or `None`
              (only without the top).
            - `drop_path_rate`: Stochastic depth; block `i` of `L` drops its
              branch with rate `drop_path_rate * i / (L - 1)`. Defaults
              to 0.
            - `classifier_activation`: Activation of the head. Defaults to
              `None` (logits, float32 under mixed precision).

    Returns:
        A functional `keras.Model` taking `(batch, height, width, channels)`
        images named `"images"`.

    Example:

    ```python
    model = keras_vit.PreActResNet("50", num_classes=100, image_size=32,
                                   stem="cifar")
    same = keras_vit.PreActResNet("50", num_classes=100, image_size=32,
                                  options=cnn.CNNOptions(stem="cifar"))
    logits = model(np.zeros((1, 32, 32, 3), "float32"))  # (1, 100)
    ```

    Reference:
    - [He et al., 2016](https://arxiv.org/abs/1603.05027).
    - [Park & Kim, 2022](https://arxiv.org/abs/2202.06709).
    """
    spec = get_variant(PREACT_RESNETS, "PreActResNet", variant, msa=False)
    options = resolve_cnn_options(
        options, cnn_options, builder_arguments(PreActResNet), msa=False
    )
    return build_cnn(
        spec,
        options,
        num_classes=num_classes,
        image_size=image_size,
        channels=channels,
        include_top=include_top,
        name=name or default_name("preact_resnet", variant),
    )


@export(
    "keras_vit.PreActResNet18",
    "keras_vit.parkkim.PreActResNet18",
    "keras_vit.parkkim.cnn.PreActResNet18",
)
def PreActResNet18(**kwargs) -> keras.Model:  # noqa: N802
    """Builds a pre-activation ResNet-18: `PreActResNet("18", **kwargs)`."""
    return PreActResNet("18", **kwargs)


@export(
    "keras_vit.PreActResNet50",
    "keras_vit.parkkim.PreActResNet50",
    "keras_vit.parkkim.cnn.PreActResNet50",
)
def PreActResNet50(**kwargs) -> keras.Model:  # noqa: N802
    """Builds a pre-activation ResNet-50: `PreActResNet("50", **kwargs)`."""
    return PreActResNet("50", **kwargs)
