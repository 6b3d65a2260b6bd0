"""The functional builders of the CNN family.

`build_cnn` builds `PreActResNet` and `AlterNet`; `build_stem`,
`build_head`, `check_arguments` and `total_stride` are shared with the
post-activation `ResNet` (`keras_vit.parkkim.cnn.resnet`). Each takes the
model's `CNNOptions` whole. Layer names are spelled in
`keras_vit.parkkim.cnn.layout`.
"""

from __future__ import annotations

import keras

from keras_vit._export import export
from keras_vit.models import layout as names
from keras_vit.models.functional import OptimizerFirstModel
from keras_vit.models.options import drop_path_rates
from keras_vit.parkkim.cnn import layout as cnn_names
from keras_vit.parkkim.cnn.options import CNNOptions
from keras_vit.parkkim.cnn.variants import CNNVariant
from keras_vit.parkkim.layers.conv_blocks import PaddedMaxPooling2D
from keras_vit.parkkim.layers.conv_blocks import PreActBlock
from keras_vit.parkkim.layers.conv_blocks import batch_norm
from keras_vit.parkkim.layers.conv_blocks import torch_kernel_initializer
from keras_vit.parkkim.layers.local_attention import window_shape
from keras_vit.parkkim.layers.msa_block import PreActAttentionBlock
from keras_vit.utils import to_pair


def check_arguments(
    spec: CNNVariant,
    options: CNNOptions,
    image_size: tuple[int, int],
    *,
    include_top: bool,
    num_classes: int,
    channels: int,
) -> None:
    """Refuses a model that cannot be built, naming the argument.

    `options` holds concrete values (`CNNOptions.for_variant`); each option
    was checked on its own when it was made, what is left here is the
    model's arguments and how they meet the options and the row.
    """
    if options.pooling is None and include_top:
        raise ValueError(
            "`pooling=None` returns the feature map and needs `include_top=False`."
        )
    if include_top and int(num_classes) <= 0:
        raise ValueError(
            f"`num_classes` must be positive. Received: num_classes={num_classes}"
        )
    if int(channels) <= 0:
        raise ValueError(f"`channels` must be positive. Received: channels={channels}")
    stem, window_size = options.stem, options.window_size
    stride = total_stride(spec, stem)
    if image_size[0] % stride or image_size[1] % stride:
        raise ValueError(
            f"`image_size` {image_size} must be a multiple of the total stride "
            f"{stride} (stem {stem!r}, {len(spec.depths)} stages)."
        )
    size = [s // (4 if stem == "imagenet" else 1) for s in image_size]
    for stage, kinds in enumerate(spec.layout(), 1):
        if stage > 1:
            size = [s // 2 for s in size]
        if "msa" in kinds:
            rows, cols = window_shape(*size, window_size)
            if size[0] % rows or size[1] % cols:
                raise ValueError(
                    f"`window_size`={window_size} does not tile the "
                    f"{size[0]}x{size[1]} map of stage {stage} (image_size="
                    f"{image_size}); pass a window_size dividing it."
                )


def total_stride(spec: CNNVariant, stem: str) -> int:
    """Downsampling of `spec` with `stem`: 4 or 1 for the stem, x2 per stage."""
    return (4 if stem == "imagenet" else 1) * 2 ** (len(spec.depths) - 1)


def build_stem(images, spec: CNNVariant, stem: str, *, post_activation=False):
    """The stem: PyTorch's ResNet stem geometry, with or without BN-ReLU.

    `"imagenet"`: a 7x7/2 convolution padded by 3, then (post-activation)
    BatchNorm and ReLU, then a 3x3/2 max-pool padded by one pixel on every
    side (`PaddedMaxPooling2D`, `torch.nn.MaxPool2d(3, 2, padding=1)`).
    `"cifar"`: a 3x3/1 convolution padded by 1, then (post-activation)
    BatchNorm and ReLU. The pre-activation networks have no normalisation in
    the stem (Park & Kim's `StemB` and `stem=False` stems).
    """
    init = torch_kernel_initializer()
    if stem == "imagenet":
        x = keras.layers.ZeroPadding2D(3, name=cnn_names.STEM_PAD)(images)
        x = keras.layers.Conv2D(
            spec.stem_width,
            7,
            2,
            use_bias=False,
            kernel_initializer=init,
            name=cnn_names.STEM_CONV,
        )(x)  # (B, H/2, W/2, C)
    else:
        x = keras.layers.Conv2D(
            spec.stem_width,
            3,
            padding="same",
            use_bias=False,
            kernel_initializer=init,
            name=cnn_names.STEM_CONV,
        )(images)  # (B, H, W, C)
    if post_activation:
        x = batch_norm(cnn_names.STEM_NORM)(x)
        x = keras.layers.ReLU(name=cnn_names.STEM_RELU)(x)
    if stem == "imagenet":
        x = PaddedMaxPooling2D(3, 2, 1, name=cnn_names.STEM_POOL)(x)  # (B, H/4, W/4, C)
    return x


@export("keras_vit.parkkim.cnn.build_cnn")
def build_cnn(
    spec: CNNVariant,
    options: CNNOptions,
    *,
    num_classes: int,
    image_size,
    channels: int,
    include_top: bool,
    name: str,
) -> keras.Model:
    """Builds the functional pre-activation network of `spec` (see
    `PreActResNet` and `AlterNet`) with `options` (`CNNOptions`; a `None`
    stem or window size is the row's)."""
    image_size = to_pair(image_size, "image_size")
    options = options.for_variant(spec)
    check_arguments(
        spec,
        options,
        image_size,
        include_top=include_top,
        num_classes=num_classes,
        channels=channels,
    )
    images = keras.Input((*image_size, channels), name=names.INPUT)
    x = build_stem(images, spec, options.stem)  # (B, H/4, W/4, C) or (B, H, W, C)

    layout = spec.layout()
    # Stochastic depth grows linearly over all blocks, as the paper's.
    rates = iter(drop_path_rates(options.drop_path_rate, sum(map(len, layout))))
    bottleneck = spec.block == "bottleneck"
    for stage, kinds in enumerate(layout):
        for position, kind in enumerate(kinds):
            block_name = cnn_names.block_name(stage + 1, position + 1, kind)
            if kind == "conv":
                x = PreActBlock(
                    spec.widths[stage],
                    strides=2 if stage > 0 and position == 0 else 1,
                    bottleneck=bottleneck,
                    drop_path_rate=next(rates),
                    name=block_name,
                )(x)
            else:
                x = PreActAttentionBlock(
                    spec.widths[stage],
                    spec.num_heads[stage],
                    head_dim=spec.head_dim,
                    window_size=options.window_size,
                    bottleneck=bottleneck,
                    dropout_rate=options.dropout_rate,
                    drop_path_rate=next(rates),
                    name=block_name,
                )(x)  # (B, h, w, C)

    # The paper's BNGAPBlock: the last block is not activated, so the head is.
    x = batch_norm(cnn_names.HEAD_NORM)(x)
    x = keras.layers.ReLU(name=cnn_names.HEAD_RELU)(x)  # (B, h, w, C)
    x = build_head(x, options, include_top=include_top, num_classes=num_classes)
    return OptimizerFirstModel(images, x, name=name)


def build_head(x, options: CNNOptions, *, include_top: bool, num_classes: int):
    """Global pooling (`pool`) and the linear head (`head`) of an activated map."""
    if options.pooling == "avg":
        x = keras.layers.GlobalAveragePooling2D(name=names.POOL)(x)  # (B, C)
    elif options.pooling == "max":
        x = keras.layers.GlobalMaxPooling2D(name=names.POOL)(x)
    if include_top:
        # Logits stay float32 under mixed precision.
        policy = keras.config.dtype_policy()
        x = keras.layers.Dense(
            num_classes,
            kernel_initializer=torch_kernel_initializer(),
            activation=options.classifier_activation,
            dtype="float32" if policy.compute_dtype != "float32" else None,
            name=names.HEAD,
        )(x)
    return x
