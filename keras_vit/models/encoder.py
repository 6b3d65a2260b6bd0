"""The functional pieces every ViT graph shares: patch tokens, encoder, readout.

`keras_vit.ViT` and the masked-patch pre-training model both call these, so
the layers (named in `keras_vit.models.layout`) and their order are defined
once, and an encoder trained in one model loads into the other by name.
"""

from __future__ import annotations

import contextlib

import keras

from keras_vit.layers import AddPositionEmbedding
from keras_vit.layers import ClassToken
from keras_vit.layers import MAPHead
from keras_vit.layers import PatchEmbedding
from keras_vit.layers import RegisterTokens
from keras_vit.layers import TokenPooling
from keras_vit.layers import TransformerBlock
from keras_vit.layers.layer_norm import norm_layer
from keras_vit.layers.rotary import RotaryCoordinates
from keras_vit.models import layout as names
from keras_vit.models.options import EncoderOptions
from keras_vit.models.resnet import resnet_features
from keras_vit.models.variants import ModelSpec


def check_image_size(spec: ModelSpec, image_size: tuple[int, int]) -> None:
    """Raises a `ValueError` unless the token stride divides `image_size`."""
    for size, axis in zip(image_size, ("height", "width"), strict=True):
        if size % spec.total_stride:
            raise ValueError(
                f"The image {axis} ({size}) is not divisible by the token "
                f"stride {spec.total_stride} of this model. Use an image size "
                f"that is a multiple of {spec.total_stride}."
            )


def patch_tokens(
    images,
    spec: ModelSpec,
    return_grid_source: bool = False,
    options: EncoderOptions | None = None,
):
    """Images `(B, H, W, C)` -> patch embeddings `(B, N, D)` (Eq. 1).

    Runs the hybrid backbone first when `spec` has one. With
    `return_grid_source`, also returns the tensor the patch embedding ran on
    (the images, or the backbone's feature map), from which a dynamic-size
    model reads its patch grid. With `options.pre_norm` the projection has
    no bias (a LayerNorm follows it); with `options.embedding_norm` a norm
    of `options.norm`'s kind follows the projection (AIMv2, timm's
    `embed_norm_layer`: inside the patch embedding, before the position
    embedding).
    """
    x = images
    if spec.backbone is not None:
        x = resnet_features(x, spec.backbone)
    embedding = PatchEmbedding(
        spec.variant.hidden_dim,
        spec.patch_size,
        use_bias=not (options is not None and options.pre_norm),
        name=names.EMBEDDING,
    )
    tokens = embedding(x)  # (B, N, D)
    if options is not None and options.embedding_norm:
        tokens = _norm(options, names.EMBEDDING_NORM)(tokens)  # (B, N, D)
    return (tokens, x) if return_grid_source else tokens


def encode(
    tokens,
    spec: ModelSpec,
    image_size: tuple[int, int],
    options: EncoderOptions,
    *,
    grid_source=None,
    resample_method: str = "bilinear",
):
    """Patch embeddings `(B, N, D)` -> encoded tokens `(B, prefix + N, D)`.

    Prepends the class token (and the distillation token), adds position
    embeddings (unless `options.position_embedding` is off), inserts the
    register tokens, normalises (`options.pre_norm`), runs the Transformer
    blocks (Eq. 2-3), with the patch coordinates of their rotary embeddings
    when `options.rope` is set, and the final LayerNorm (unless
    `options.fc_norm`, which normalises after pooling instead, or
    `options.encoder_norm` is off), all as `options` says. The token
    order is `[class, distillation, registers, patches]`. The position
    table has rows for the class and distillation tokens, unless
    `no_embed_class` (it then covers the patches only and is added before
    the tokens are prepended, as timm's `no_embed_class`); registers never
    get one (DINOv2). With a `grid_source` (what the patch embedding ran
    on), the position embedding of `image_size`'s grid is resampled in the
    graph to each input's grid (`resample_method`): a dynamic-size model.
    With `options.remat`, the blocks are built in a `keras.RematScope`
    naming each: recomputed in the backward pass.
    """
    size = spec.variant
    grid = tuple(s // spec.total_stride for s in image_size)
    leading = int(options.class_token) + int(options.distillation)
    dynamic = grid_source is not None

    def prepend(x):
        if options.distillation:
            x = ClassToken(name=names.DIST_TOKEN)(x)
        if options.class_token:
            x = ClassToken(name=names.CLASS_TOKEN)(x)
        return x

    x = tokens
    if not options.no_embed_class:
        x = prepend(x)
    if options.position_embedding:
        posemb_prefix = 0 if options.no_embed_class else leading
        if not dynamic:
            x = AddPositionEmbedding(grid, posemb_prefix, name=names.POSEMB)(x)
        else:
            x = AddPositionEmbedding(
                grid,
                posemb_prefix,
                dynamic=True,
                patch_size=spec.patch_size,
                resample_method=resample_method,
                name=names.POSEMB,
            )(x, grid_source=grid_source)
    if options.no_embed_class:
        x = prepend(x)
    if options.num_registers:
        x = RegisterTokens(options.num_registers, leading, name=names.REGISTER_TOKENS)(
            x
        )
    x = keras.layers.Dropout(options.dropout_rate, name=names.POSEMB_DROPOUT)(x)
    if options.pre_norm:
        x = _norm(options, names.PRE_NORM)(x)  # (B, prefix + N, D)
    rope = {}
    if options.rope is not None:
        coordinates = RotaryCoordinates(
            options.rope.kind,
            grid_size=grid,
            grid_offset=options.rope.grid_offset,
            grid_indexing=options.rope.grid_indexing,
            reference_grid=options.rope.reference_grid,
            dynamic=dynamic,
            patch_size=spec.patch_size if dynamic else None,
            name=names.ROPE,
        )
        rope["rope"] = (
            coordinates(x, grid_source=grid_source) if dynamic else coordinates(x)
        )  # (N, 2)
    for i in range(size.depth):
        # Only the block itself is recomputed (its sublayers, built inside
        # the scope too, are not named): one recomputation per block.
        scope = keras.RematScope(
            mode="list_of_layers", layer_names=[names.block_name(i)]
        )
        with scope if options.remat else contextlib.nullcontext():
            block = TransformerBlock(
                num_heads=size.num_heads,
                mlp_dim=size.mlp_dim,
                **options.block_arguments(i, size.depth),
                name=names.block_name(i),
            )
        x = block(x, **rope)  # (B, prefix + N, D)
    if options.fc_norm or not options.encoder_norm:
        return x  # (B, prefix + N, D): normalised after pooling, or not at all
    return _norm(options, names.ENCODER_NORM)(x)  # (B, prefix + N, D)


def readout(tokens, spec: ModelSpec, options: EncoderOptions):
    """Encoded tokens `(B, prefix + N, D)` -> the representation `(B, D)`.

    Pools as `options.pooling` says (the class token, the mean of the patch
    tokens, or SigLIP's attention pooling with the variant's heads and MLP
    width), then applies `fc_norm` when asked. Returns `tokens` unchanged
    for `pooling=None`.
    """
    if options.pooling is None:
        return tokens
    prefix = options.num_prefix_tokens
    if options.pooling == "map":
        x = MAPHead(
            options.map_heads or spec.variant.num_heads,
            options.map_mlp_dim or spec.variant.mlp_dim,
            0 if options.pool_include_prefix else prefix,
            layer_norm_epsilon=options.layer_norm_epsilon,
            gelu_approximate=options.gelu_approximate,
            name=names.POOL,
        )(tokens)  # (B, D)
    else:
        x = TokenPooling(options.pooling, prefix, name=names.POOL)(tokens)  # (B, D)
    if options.fc_norm:
        x = _norm(options, names.FC_NORM)(x)  # (B, D)
    return x


def _norm(options: EncoderOptions, name: str) -> keras.layers.Layer:
    """One of the encoder's own norms (outside the blocks), of the options'
    kind and epsilon: `keras.layers.LayerNormalization` or RMSNorm."""
    return norm_layer(
        options.norm, options.layer_norm_epsilon, closed_form=False, name=name
    )
