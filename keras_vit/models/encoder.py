"""The functional pieces every ViT graph shares: patch tokens and the encoder.

`keras_vit.ViT` and the masked-patch pre-training model both call these, so
the layers (named in `keras_vit.models.layout`) and their order are defined
once, and an encoder trained in one model loads into the other by name.
"""

from __future__ import annotations

import keras

from keras_vit.layers import AddPositionEmbedding
from keras_vit.layers import ClassToken
from keras_vit.layers import PatchEmbedding
from keras_vit.layers import TransformerBlock
from keras_vit.layers.transformer_block import LAYER_NORM_EPSILON
from keras_vit.models import layout as names
from keras_vit.models.resnet import resnet_features
from keras_vit.models.variants import ModelSpec


def check_image_size(spec: ModelSpec, image_size: tuple[int, int]) -> None:
    """Raises a `ValueError` unless the token stride divides `image_size`."""
    for size, axis in zip(image_size, ("height", "width")):
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
):
    """Patch embeddings `(B, N, D)` -> encoded tokens `(B, prefix + N, D)`.

    Prepends the class token, adds position embeddings, runs the
    Transformer blocks (Eq. 2-3) and the final LayerNorm. Block `i` of `L`
    drops its branches with rate `drop_path_rate * i / (L - 1)`. With a
    `grid_source` (what the patch embedding ran on), the position embedding
    of `image_size`'s grid is resampled in the graph to each input's grid
    (`resample_method`): a dynamic-size model.
    """
    size = spec.variant
    grid = tuple(s // spec.total_stride for s in image_size)
    x = tokens
    if class_token:
        x = ClassToken(name=names.CLASS_TOKEN)(x)
    if grid_source is None:
        x = AddPositionEmbedding(grid, int(class_token), name=names.POSEMB)(x)
    else:
        x = AddPositionEmbedding(
            grid,
            int(class_token),
            dynamic=True,
            patch_size=spec.patch_size,
            resample_method=resample_method,
            name=names.POSEMB,
        )(x, grid_source=grid_source)
    x = keras.layers.Dropout(dropout_rate, name=names.POSEMB_DROPOUT)(x)
    for i in range(size.depth):
        x = TransformerBlock(
            num_heads=size.num_heads,
            mlp_dim=size.mlp_dim,
            dropout_rate=dropout_rate,
            attention_dropout_rate=attention_dropout_rate,
            drop_path_rate=drop_path_rate * i / max(size.depth - 1, 1),
            gelu_approximate=gelu_approximate,
            name=names.block_name(i),
        )(x)
    norm = keras.layers.LayerNormalization(
        epsilon=LAYER_NORM_EPSILON, name=names.ENCODER_NORM
    )
    return norm(x)  # (B, prefix + N, D)
