"""The ViT layers, each registered for `.keras` serialization, and the speed
switches that pick their code paths (`keras_vit/layers/config.py`)."""

from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.layers.class_token import ClassToken
from keras_vit.layers.config import bfloat16_softmax
from keras_vit.layers.config import closed_form_layer_norm
from keras_vit.layers.config import erf_gelu
from keras_vit.layers.config import fused_attention
from keras_vit.layers.config import recompute_activations
from keras_vit.layers.config import set_bfloat16_softmax
from keras_vit.layers.config import set_closed_form_layer_norm
from keras_vit.layers.config import set_erf_gelu
from keras_vit.layers.config import set_fused_attention
from keras_vit.layers.config import set_recompute_activations
from keras_vit.layers.config import speed_switches
from keras_vit.layers.config import use_bfloat16_softmax
from keras_vit.layers.config import use_closed_form_layer_norm
from keras_vit.layers.config import use_erf_gelu
from keras_vit.layers.config import use_fused_attention
from keras_vit.layers.config import use_recompute_activations
from keras_vit.layers.drop_path import DropPath
from keras_vit.layers.layer_norm import LayerNorm
from keras_vit.layers.layer_scale import LayerScale
from keras_vit.layers.map_head import MAPHead
from keras_vit.layers.padding import PadToMultiple
from keras_vit.layers.patch_embedding import PatchEmbedding
from keras_vit.layers.pooling import TokenPooling
from keras_vit.layers.position_embedding import AddPositionEmbedding
from keras_vit.layers.register_tokens import RegisterTokens
from keras_vit.layers.std_conv import StdConv2D
from keras_vit.layers.token_grid import TokenGrid
from keras_vit.layers.transformer_block import TransformerBlock

__all__ = [
    "AddPositionEmbedding",
    "ClassToken",
    "DropPath",
    "LayerNorm",
    "LayerScale",
    "MAPHead",
    "MultiHeadSelfAttention",
    "PadToMultiple",
    "PatchEmbedding",
    "RegisterTokens",
    "StdConv2D",
    "TokenGrid",
    "TokenPooling",
    "TransformerBlock",
    "bfloat16_softmax",
    "closed_form_layer_norm",
    "erf_gelu",
    "fused_attention",
    "recompute_activations",
    "set_bfloat16_softmax",
    "set_closed_form_layer_norm",
    "set_erf_gelu",
    "set_fused_attention",
    "set_recompute_activations",
    "speed_switches",
    "use_bfloat16_softmax",
    "use_closed_form_layer_norm",
    "use_erf_gelu",
    "use_fused_attention",
    "use_recompute_activations",
]
