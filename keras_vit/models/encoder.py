"""The functional pieces every ViT graph shares: patch tokens and the encoder.

`keras_vit.ViT` and the masked-patch pre-training model both call these, so
the layers (named in `keras_vit.models.layout`) and their order are defined
once, and an encoder trained in one model loads into the other by name.
"""

from __future__ import annotations

import contextlib

import keras

from keras_vit.layers import AddPositionEmbedding
from keras_vit.layers import ClassToken
from keras_vit.layers import PatchEmbedding
from keras_vit.layers import RegisterTokens
from keras_vit.layers import TransformerBlock
from keras_vit.layers.transformer_block import LAYER_NORM_EPSILON
from keras_vit.models import layout as names
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


def patch_tokens(images, spec: ModelSpec, return_grid_source: bool = False):
    """Images `(B, H, W, C)` -> patch embeddings `(B, N, D)` (Eq. 1).

    Runs the hybrid backbone first when `spec` has one. With
    `return_grid_source`, also returns the tensor the patch embedding ran on
    (the images, or the backbone's feature map), from which a dynamic-size
    model reads its patch grid.
    """
    x = images
    if spec.backbone is not None:
        x = resnet_features(x, spec.backbone)
    embedding = PatchEmbedding(
        spec.variant.hidden_dim, spec.patch_size, name=names.EMBEDDING
    )
    tokens = embedding(x)  # (B, N, D)
    return (tokens, x) if return_grid_source else tokens


def encode(
    tokens,
    spec: ModelSpec,
    image_size: tuple[int, int],
    *,
    class_token: bool = True,
    dropout_rate: float = 0.0,
    attention_dropout_rate: float = 0.0,
    drop_path_rate: float = 0.0,
    gelu_approximate: bool = False,
    grid_source=None,
    resample_method: str = "bilinear",
    distillation: bool = False,
    num_registers: int = 0,
    no_embed_class: bool = False,
    layer_scale_init: float | None = None,
    qk_norm: bool = False,
    mlp: str = "gelu",
    final_norm: bool = True,
    remat: bool = False,
):
    """Patch embeddings `(B, N, D)` -> encoded tokens `(B, prefix + N, D)`.

    Prepends the class token (and the distillation token), adds position
    embeddings, inserts the register tokens, runs the Transformer blocks
    (Eq. 2-3) and the final LayerNorm (unless `final_norm=False`). The
    token order is `[class, distillation, registers, patches]`. The
    position table has rows for the class and distillation tokens, unless
    `no_embed_class` (it then covers the patches only and is added before
    the tokens are prepended, as timm's `no_embed_class`); registers never
    get one (DINOv2). Block `i` of `L` drops its branches with rate
    `drop_path_rate * i / (L - 1)`. With a `grid_source` (what the patch
    embedding ran on), the position embedding of `image_size`'s grid is
    resampled in the graph to each input's grid (`resample_method`): a
    dynamic-size model. With `remat`, the blocks are built in a
    `keras.RematScope` naming each: recomputed in the backward pass.
    """
    size = spec.variant
    grid = tuple(s // spec.total_stride for s in image_size)
    leading = int(class_token) + int(distillation)

    def prepend(x):
        if distillation:
            x = ClassToken(name=names.DIST_TOKEN)(x)
        if class_token:
            x = ClassToken(name=names.CLASS_TOKEN)(x)
        return x

    x = tokens
    if not no_embed_class:
        x = prepend(x)
    posemb_prefix = 0 if no_embed_class else leading
    if grid_source is None:
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
    if no_embed_class:
        x = prepend(x)
    if num_registers:
        x = RegisterTokens(num_registers, leading, name=names.REGISTER_TOKENS)(x)
    x = keras.layers.Dropout(dropout_rate, name=names.POSEMB_DROPOUT)(x)
    if remat and (dropout_rate or attention_dropout_rate or drop_path_rate):
        # The backward pass reruns each block: new random masks would make
        # its gradients those of another forward pass.
        raise ValueError(
            "`remat=True` needs dropout_rate, attention_dropout_rate and "
            "drop_path_rate of 0: the recomputed blocks would draw new masks."
        )
    for i in range(size.depth):
        # Only the block itself is recomputed (its sublayers, built inside
        # the scope too, are not named): one recomputation per block.
        scope = keras.RematScope(
            mode="list_of_layers", layer_names=[names.block_name(i)]
        )
        with scope if remat else contextlib.nullcontext():
            block = TransformerBlock(
                num_heads=size.num_heads,
                mlp_dim=size.mlp_dim,
                dropout_rate=dropout_rate,
                attention_dropout_rate=attention_dropout_rate,
                drop_path_rate=drop_path_rate * i / max(size.depth - 1, 1),
                gelu_approximate=gelu_approximate,
                layer_scale_init=layer_scale_init,
                qk_norm=qk_norm,
                mlp=mlp,
                name=names.block_name(i),
            )
        x = block(x)  # (B, prefix + N, D)
    if not final_norm:
        return x  # (B, prefix + N, D)
    norm = keras.layers.LayerNormalization(
        epsilon=LAYER_NORM_EPSILON, name=names.ENCODER_NORM
    )
    return norm(x)  # (B, prefix + N, D)
