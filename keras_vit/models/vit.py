"""The Vision Transformer as a functional Keras model (`keras_vit.ViT`)."""

from __future__ import annotations

import dataclasses
import numbers

import keras

from keras_vit._export import export
from keras_vit.layers import TokenPooling
from keras_vit.layers.padding import PadToMultiple
from keras_vit.models import layout as names
from keras_vit.models.encoder import check_image_size
from keras_vit.models.encoder import encode
from keras_vit.models.encoder import patch_tokens
from keras_vit.models.encoder import readout
from keras_vit.models.functional import OptimizerFirstModel
from keras_vit.models.options import EncoderOptions
from keras_vit.models.options import builder_arguments
from keras_vit.models.options import resolve_options
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.preprocessing import as_preprocessing
from keras_vit.models.preprocessing_layer import preprocessing_layer
from keras_vit.models.variants import ModelSpec
from keras_vit.models.variants import ResNetSpec
from keras_vit.models.variants import parse_variant
from keras_vit.resample import resolve_method
from keras_vit.utils import to_pair


@export("keras_vit.ViT", "keras_vit.models.ViT")
def ViT(  # noqa: N802
    variant: str | ModelSpec = "B/16",
    *,
    num_classes: int = 1000,
    image_size: int | tuple[int, int] = 224,
    include_top: bool = True,
    representation_size: int | None = None,
    include_preprocessing: bool = False,
    preprocessing: Preprocessing | None = None,
    classifier_activation: str | None = None,
    channels: int = 3,
    backbone: ResNetSpec | tuple[int, ...] | None = None,
    patch_size: int | None = None,
    dynamic_image_size: bool = False,
    dynamic_image_pad: bool = False,
    position_resample: str = "bilinear",
    weights: str | None = None,
    name: str | None = None,
    options: EncoderOptions | None = None,
    **encoder_options,
) -> keras.Model:
    """Builds a Vision Transformer (ViT) or a ResNet+ViT hybrid.

    `y = LN(z_L^0)` of the paper: patches are embedded (Eq. 1), a class token
    and learned position embeddings are added, `depth` pre-LN Transformer
    blocks follow (Eq. 2-3), then the final LayerNorm, pooling, an optional
    tanh "pre-logits" layer and a zero-initialised linear head. What the
    encoder is made of (tokens, blocks, pooling: the options of the later
    ViT families) is one `keras_vit.EncoderOptions`, passed whole as
    `options` or option by option as keywords.

    Args:
        variant: Size and patch, e.g. `"B/16"`, `"L/32"`, `"H/14"`, `"test/8"`,
            or a hybrid such as `"R50+B/16"`. See `keras_vit.VARIANTS`. A
            `keras_vit.models.ModelSpec` (e.g. `parse_variant("S/16")` with
            another `Variant` row) builds a size the table does not list.
        num_classes: Classes of the linear head. Defaults to 1000.
        image_size: Input size, an int or `(height, width)`; must be a multiple
            of the token stride (the patch size, or backbone stride times patch
            size for hybrids). Defaults to 224.
        include_top: Whether to add the classification head. Without it the
            model returns the pooled representation (after `pre_logits` when
            there is one), or the whole token sequence
            `(batch, tokens, hidden_dim)` with `pooling=None`.
        representation_size: Width of the tanh "pre-logits" layer used during
            pre-training. Defaults to `None` (no such layer).
        include_preprocessing: Prepend a layer mapping `[0, 255]` RGB pixels
            to the inputs the encoder expects, `(x / 255 - mean) / std` of
            `preprocessing`. Defaults to `False` (the model takes normalised
            inputs).
        preprocessing: The input contract (`keras_vit.Preprocessing`: mean,
            std, resize, crop) the model carries as `model.preprocessing`
            and every keras_vit tool that feeds it pixels applies. Defaults
            to the checkpoint's when `weights` names one (a tag, a timm or
            Hub name), else the paper's `[-1, 1]` range.
        classifier_activation: Activation of the head, e.g. `"softmax"`.
            Defaults to `None` (logits).
        channels: Input channels. Defaults to 3.
        backbone: A custom hybrid backbone (`ResNetSpec` or its stage tuple).
        patch_size: Overrides the variant's patch size (on the images, or on
            the backbone's feature map for hybrids), e.g. `"B/16"` with
            `patch_size=8`. With `weights`, the checkpoint's patch embedding
            is resized to it (FlexiViT, `keras_vit.resample_patch_embedding`)
            and a tag is looked up for `variant`. Defaults to the variant's.
        dynamic_image_size: Accept images of any size at run time: the input
            is `(batch, None, None, channels)` and the position embedding
            (of `image_size`'s grid, the checkpoint's) is resampled in the
            graph to each batch's grid, as timm's `dynamic_img_size`.
            Defaults to `False` (a fixed size, the fastest).
        dynamic_image_pad: With `dynamic_image_size`, zero-pad images at the
            bottom and right to a multiple of the token stride instead of
            cropping the remainder. Defaults to `False`.
        position_resample: How a dynamic model resamples its position
            embedding: `"bilinear"` (default, the reference's; equals
            `keras_vit.with_image_size`), or another method or named mode of
            `keras_vit.resample` (`"timm"`, `"huggingface"`).
        weights: A pretrained tag or a checkpoint path, loaded with
            `keras_vit.weights.load_weights` (position embeddings resampled
            to `image_size`, head replaced when `num_classes` differs).
        name: Model name. Defaults to e.g. `"vit_b16"`.
        options: The encoder's `keras_vit.EncoderOptions` (class and
            distillation tokens, registers, position table, QK-norm,
            LayerScale, MLP kind, dropouts, stochastic depth, remat,
            pooling, `fc_norm`). Defaults to `EncoderOptions()`: the paper's
            ViT with class-token pooling.
        **encoder_options: Single fields of `EncoderOptions` by name (e.g.
            `qk_norm=True`, `pooling="gap"`), applied over `options`. With
            `distillation=True` a second head `head_dist` reads the
            distillation token and the model returns the mean of the two
            heads' logits (timm's `VisionTransformerDistilled` in
            inference); for distillation training take both heads:
            `keras.Model(model.input, [model.get_layer(n).output for n in
            ("head", "head_dist")])`.

    Returns:
        A functional `keras.Model` taking `(batch, height, width, channels)`
        images named `"images"`.

    Raises:
        TypeError: A keyword argument that is neither an argument here nor
            an encoder option (the message suggests the closest).
        ValueError: An argument out of range or a combination that cannot be
            built; the message names it.

    Example:

    ```python
    model = keras_vit.ViT("L/16", num_classes=100, image_size=384)
    logits = model(np.zeros((1, 384, 384, 3), "float32"))  # (1, 100)
    features = keras_vit.ViT("S/16", include_top=False, pooling="gap")
    ```

    Reference:
    - [Dosovitskiy et al., 2021](https://arxiv.org/abs/2010.11929).
    """
    options = resolve_options(options, encoder_options, _ARGUMENTS)
    spec = parse_variant(variant, backbone)
    if patch_size is not None:
        spec = with_patch_size(spec, patch_size)
    image_size = to_pair(image_size, "image_size")
    check_image_size(spec, image_size)
    _check_arguments(
        options, include_top, channels, num_classes, representation_size,
        classifier_activation,
    )  # fmt: skip
    if dynamic_image_pad and not dynamic_image_size:
        raise ValueError("`dynamic_image_pad=True` needs `dynamic_image_size=True`.")
    resolve_method(position_resample, None)  # validates
    policy = keras.config.dtype_policy()
    if weights is not None:
        # Here, not at the top: the weights package reads the models' layouts.
        from keras_vit.weights.sources import resolve_weights

        weights, contract = resolve_weights(weights, variant)  # a name: once
        preprocessing = contract if preprocessing is None else preprocessing
    preprocessing = as_preprocessing(preprocessing)

    input_size = (None, None) if dynamic_image_size else image_size
    images = keras.Input((*input_size, channels), name=names.INPUT)
    x = images
    if include_preprocessing:
        x = preprocessing_layer(preprocessing)(x)
    if dynamic_image_pad:
        x = PadToMultiple(spec.total_stride, name=names.PADDING)(x)
    x, grid_source = patch_tokens(
        x, spec, return_grid_source=True, options=options
    )  # (B, N, D)
    tokens = encode(
        x,
        spec,
        image_size,
        options,
        grid_source=grid_source if dynamic_image_size else None,
        resample_method=position_resample,
    )  # (B, prefix + N, D)
    x = readout(tokens, spec, options)  # (B, D), or the tokens without pooling
    if options.pooling is not None and representation_size is not None:
        x = keras.layers.Dense(
            representation_size, activation="tanh", name=names.PRE_LOGITS
        )(x)
    if include_top:
        # Zero-initialised head: the paper's fine-tuning rule, and the
        # reference's initialisation. Logits stay float32 under mixed precision.
        x = keras.layers.Dense(
            num_classes,
            kernel_initializer="zeros",
            bias_initializer="zeros",
            activation=classifier_activation,
            dtype="float32" if policy.compute_dtype != "float32" else None,
            name=names.HEAD,
        )(x)
    if options.distillation:
        x = _distilled_logits(x, tokens, options, num_classes, policy)
    # A functional model whose first training step is traced once.
    model = OptimizerFirstModel(images, x, name=name or spec.name)
    model.preprocessing = preprocessing
    if weights is not None:
        # Here, not at the top: the weights package reads the models' layouts.
        from keras_vit.weights.loader import load_weights
        from keras_vit.weights.pretrained_cfg import of_weights

        resized = patch_size is not None
        load_weights(
            model,
            weights,
            resample_patch=resized,
            tag_variant=variant if resized else None,
        )
        model.pretrained_cfg = of_weights(weights, variant)
    return model


# ViT's own parameters, suggested for a misspelt keyword.
_ARGUMENTS = builder_arguments(ViT)


def _distilled_logits(logits, tokens, options, num_classes, policy):
    """DeiT: a head on the distillation token (token 1), averaged with `head`."""
    dist = TokenPooling(
        "token", options.num_prefix_tokens, index=1, name=names.DIST_POOL
    )(tokens)
    dist = keras.layers.Dense(
        num_classes,
        kernel_initializer="zeros",
        bias_initializer="zeros",
        dtype="float32" if policy.compute_dtype != "float32" else None,
        name=names.HEAD_DIST,
    )(dist)  # (B, K)
    return keras.layers.Average(name=names.DISTILLED_LOGITS)([logits, dist])


def with_patch_size(spec: ModelSpec, patch_size: int) -> ModelSpec:
    """`spec` with another patch size (on the backbone's map for hybrids)."""
    integral = isinstance(patch_size, numbers.Integral)
    if isinstance(patch_size, bool) or not integral or patch_size <= 0:
        raise ValueError(
            f"`patch_size` must be a positive integer. Received: {patch_size!r}"
        )
    backbone_stride = spec.total_stride // spec.patch_size
    return dataclasses.replace(
        spec, patch_size=int(patch_size), total_stride=backbone_stride * int(patch_size)
    )


def _check_arguments(
    options, include_top, channels, num_classes, representation_size,
    classifier_activation,
):  # fmt: skip
    if include_top and not _positive_int(num_classes):
        raise ValueError(
            "`num_classes` must be a positive integer when `include_top=True` "
            "(use include_top=False for no head). "
            f"Received: num_classes={num_classes!r}"
        )
    if representation_size is not None and not _positive_int(representation_size):
        raise ValueError(
            "`representation_size` must be a positive integer or None. "
            f"Received: representation_size={representation_size!r}"
        )
    if options.pooling is None and (include_top or representation_size):
        raise ValueError(
            "`pooling=None` returns the token sequence and needs "
            "`include_top=False` and no `representation_size`."
        )
    if options.distillation and not (
        include_top and representation_size is None and classifier_activation is None
    ):
        raise ValueError(
            "`distillation=True` needs include_top=True, no representation_size "
            "and no classifier_activation (the two heads' logits are averaged)."
        )
    if not _positive_int(channels):
        raise ValueError(
            f"`channels` must be a positive integer. Received: channels={channels!r}"
        )


def _positive_int(value) -> bool:
    return (
        isinstance(value, numbers.Integral)
        and not isinstance(value, bool)
        and value > 0
    )


# The `ViT` arguments a run config (`TrainConfig`) sets by name, besides its
# `variant` and its encoder options (`encoder`).
RUN_ARGUMENTS = (
    "image_size",
    "channels",
    "representation_size",
    "patch_size",
    "dynamic_image_size",
    "dynamic_image_pad",
    "position_resample",
)


def build_for_run(config, num_classes: int) -> keras.Model:
    """The ViT of a run config (the `"vit"` architecture's `build`).

    Reads the config's `variant`, `encoder` and `RUN_ARGUMENTS` fields by
    name (the core does not import the recipes); the recipe then starts it
    from `init_from` and adds LoRA adapters (`keras_vit.recipes.initialise`).

    Example:

    ```python
    model = build_for_run(TrainConfig(variant="test/4", image_size=16), 10)
    ```
    """
    return ViT(
        config.variant,
        num_classes=num_classes,
        options=config.encoder,
        **{name: getattr(config, name) for name in RUN_ARGUMENTS},
    )
