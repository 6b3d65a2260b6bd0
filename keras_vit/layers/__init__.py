"""The ViT layers, each registered for `.keras` serialization."""

from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.class_token import ClassToken
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.layer_norm import LayerNorm
from keras_vit.layers.patch_embedding import PatchEmbedding
from keras_vit.layers.pooling import TokenPooling
from keras_vit.layers.position_embedding import AddPositionEmbedding
from keras_vit.layers.std_conv import StdConv2D
from keras_vit.layers.transformer_block import TransformerBlock

__all__ = [
    "AddPositionEmbedding",
    "ClassToken",
    "DropPath",
    "LayerNorm",
    "MultiHeadSelfAttention",
    "PatchEmbedding",
    "StdConv2D",
    "TokenPooling",
    "TransformerBlock",
]
