"""The functional builder shared by `PreActResNet` and `AlterNet`.

Layer names (one layer per block, so per-stage and per-block features come
from names alone):
- `stem_pad`, `stem_conv`, `stem_pool` (ImageNet stem) or `stem_conv`
  (CIFAR stem);
- `stage{s}_block{b}` for a convolution block and `stage{s}_msa{b}` for an
  MSA block, `s` and `b` counted from 1, `b` the position in the stage;
- `head_norm`, `head_relu` (the pre-activation network's final BN-ReLU),
  `pool` and `head`.
"""

from __future__ import annotations

import re

import keras

from keras_vit.layers.conv_blocks import (
    PreActBlock,
    batch_norm,
    torch_kernel_initializer,
)
from keras_vit.layers.local_attention import window_shape
from keras_vit.layers.msa_block import PreActAttentionBlock
from keras_vit.layers.utils import to_pair
from keras_vit.models.cnn_variants import STEMS, CNNVariant

POOLINGS = ("avg", "max")
_BLOCK_NAME = re.compile(r"^stage(\d+)_(block|msa)(\d+)$")


def block_names(model: keras.Model) -> list[str]:
    """Names of a PreActResNet/AlterNet's blocks, in order of depth.

    Example:

    >>> block_names(keras_vit.AlterNet("test", image_size=16))
    ['stage1_block1', 'stage2_block1', 'stage2_msa2']
    """
    found = []
    for layer in model.layers:
        match = _BLOCK_NAME.match(layer.name)
        if match:
            found.append(((int(match.group(1)), int(match.group(3))), layer.name))
    return [name for _, name in sorted(found)]


def stage_names(model: keras.Model) -> list[str]:
    """The last block of every stage: the stage outputs, in order."""
    last = {}
    for name in block_names(model):
        last[_BLOCK_NAME.match(name).group(1)] = name
    return list(last.values())


def cnn_feature_extractor(
    model: keras.Model,
    blocks: list[int] | str | None = "all",
    include_pooled: bool = True,
    include_features: bool = True,
) -> keras.Model:
    """Maps images to a dict of a PreActResNet's or AlterNet's features.

    The CNN counterpart of `keras_vit.feature_extractor`, over the same layers
    (no copies of the weights). Outputs (those that apply):
    - `"pooled"`: the pooled representation `(batch, channels)`;
    - `"features"`: the final activated map `(batch, h, w, channels)`
      (`head_relu`);
    - `"block_{i}"`: the output of block `i` in order of depth (MSA blocks
      included), `(batch, h_i, w_i, channels_i)`; `block_names(model)[i]`
      names it.

    Args:
        model: A model built by `PreActResNet` or `AlterNet`.
        blocks: Block indices (negative from the end), `"all"` (default) or
            `None`.
        include_pooled: Expose `"pooled"`. Defaults to `True`.
        include_features: Expose `"features"`. Defaults to `True`.

    Example:

    ```python
    model = keras_vit.AlterNet("mini", num_classes=10, image_size=32)
    features = cnn_feature_extractor(model, blocks=[-1])
    out = features(images)  # {"pooled", "features", "block_7"}
    ```
    """
    names = block_names(model)
    if not names:
        raise ValueError(
            f"{model.name!r} has no 'stage*_block*' or 'stage*_msa*' layers."
        )
    outputs = {}
    if include_pooled:
        layers = [layer for layer in model.layers if layer.name == "pool"]
        if not layers:
            raise ValueError(
                f"{model.name!r} has no pooling layer (built with pooling=None); "
                "use include_pooled=False."
            )
        outputs["pooled"] = layers[0].output
    if include_features:
        outputs["features"] = model.get_layer("head_relu").output
    if blocks == "all":
        blocks = list(range(len(names)))
    for index in blocks or []:
        if not -len(names) <= index < len(names):
            raise ValueError(
                f"Block index {index} is out of range for {len(names)} blocks."
            )
        index %= len(names)
        outputs[f"block_{index}"] = model.get_layer(names[index]).output
    if not outputs:
        raise ValueError("Nothing to extract: every output was turned off.")
    return keras.Model(model.input, outputs, name=f"{model.name}_features")


def _check_arguments(
    spec,
    image_size,
    stem,
    window_size,
    include_top,
    pooling,
    num_classes,
    channels,
    dropout_rate,
    drop_path_rate,
):
    if stem not in STEMS:
        raise ValueError(f"`stem` must be one of {STEMS}. Received: stem={stem!r}")
    if pooling is not None and pooling not in POOLINGS:
        raise ValueError(
            f"`pooling` must be one of {POOLINGS} or None. Received: "
            f"pooling={pooling!r}"
        )
    if pooling is None and include_top:
        raise ValueError(
            "`pooling=None` returns the feature map and needs `include_top=False`."
        )
    if include_top and int(num_classes) <= 0:
        raise ValueError(
            f"`num_classes` must be positive. Received: num_classes={num_classes}"
        )
    if int(channels) <= 0:
        raise ValueError(f"`channels` must be positive. Received: channels={channels}")
    if int(window_size) <= 0:
        raise ValueError(
            f"`window_size` must be positive. Received: window_size={window_size}"
        )
    rates = {"dropout_rate": dropout_rate, "drop_path_rate": drop_path_rate}
    for key, rate in rates.items():
        if not 0.0 <= rate < 1.0:
            raise ValueError(f"`{key}` must be in [0, 1). Received: {key}={rate}")
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
            rows, cols = window_shape(*size, int(window_size))
            if size[0] % rows or size[1] % cols:
                raise ValueError(
                    f"`window_size`={window_size} does not tile the "
                    f"{size[0]}x{size[1]} map of stage {stage} (image_size="
                    f"{image_size}); pass a window_size dividing it."
                )


def total_stride(spec: CNNVariant, stem: str) -> int:
    """Downsampling of `spec` with `stem`: 4 or 1 for the stem, x2 per stage."""
    return (4 if stem == "imagenet" else 1) * 2 ** (len(spec.depths) - 1)


def build_cnn(
    spec: CNNVariant,
    *,
    default_name: str,
    num_classes: int,
    image_size,
    channels: int,
    include_top: bool,
    pooling: str | None,
    stem: str | None,
    window_size: int | None,
    dropout_rate: float,
    drop_path_rate: float,
    classifier_activation: str | None,
    name: str | None,
) -> keras.Model:
    """Builds the functional model of `spec` (see `PreActResNet`)."""
    image_size = to_pair(image_size, "image_size")
    stem = spec.stem if stem is None else stem
    window_size = spec.window_size if window_size is None else window_size
    _check_arguments(
        spec,
        image_size,
        stem,
        window_size,
        include_top,
        pooling,
        num_classes,
        channels,
        dropout_rate,
        drop_path_rate,
    )
    policy = keras.config.dtype_policy()
    init = torch_kernel_initializer()

    images = keras.Input((*image_size, channels), name="images")
    if stem == "imagenet":
        x = keras.layers.ZeroPadding2D(3, name="stem_pad")(images)
        x = keras.layers.Conv2D(
            spec.stem_width,
            7,
            2,
            use_bias=False,
            kernel_initializer=init,
            name="stem_conv",
        )(x)  # (B, H/2, W/2, C)
        x = keras.layers.MaxPooling2D(3, 2, padding="same", name="stem_pool")(x)
    else:
        x = keras.layers.Conv2D(
            spec.stem_width,
            3,
            padding="same",
            use_bias=False,
            kernel_initializer=init,
            name="stem_conv",
        )(images)  # (B, H, W, C)

    layout = spec.layout()
    total = sum(len(kinds) for kinds in layout)
    index = 0
    bottleneck = spec.block == "bottleneck"
    for stage, kinds in enumerate(layout):
        for position, kind in enumerate(kinds):
            # Stochastic depth grows linearly over all blocks, as the paper's.
            rate = drop_path_rate * index / max(total - 1, 1)
            index += 1
            if kind == "conv":
                x = PreActBlock(
                    spec.widths[stage],
                    strides=2 if stage > 0 and position == 0 else 1,
                    bottleneck=bottleneck,
                    drop_path_rate=rate,
                    name=f"stage{stage + 1}_block{position + 1}",
                )(x)
            else:
                x = PreActAttentionBlock(
                    spec.widths[stage],
                    spec.num_heads[stage],
                    head_dim=spec.head_dim,
                    window_size=window_size,
                    bottleneck=bottleneck,
                    dropout_rate=dropout_rate,
                    drop_path_rate=rate,
                    name=f"stage{stage + 1}_msa{position + 1}",
                )(x)  # (B, h, w, C)

    # The paper's BNGAPBlock: the last block is not activated, so the head is.
    x = batch_norm("head_norm")(x)
    x = keras.layers.ReLU(name="head_relu")(x)  # (B, h, w, C)
    if pooling == "avg":
        x = keras.layers.GlobalAveragePooling2D(name="pool")(x)  # (B, C)
    elif pooling == "max":
        x = keras.layers.GlobalMaxPooling2D(name="pool")(x)
    if include_top:
        # Logits stay float32 under mixed precision.
        x = keras.layers.Dense(
            num_classes,
            kernel_initializer=init,
            activation=classifier_activation,
            dtype="float32" if policy.compute_dtype != "float32" else None,
            name="head",
        )(x)
    return keras.Model(images, x, name=name or default_name)
