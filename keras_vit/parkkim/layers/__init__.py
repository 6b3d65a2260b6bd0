"""The layers of Park & Kim's CNNs and AlterNet, each registered for
`.keras` serialization: pre- and post-activation residual blocks
(`conv_blocks.py`), AlterNet's MSA block (`msa_block.py`) and its windowed
2-D attention (`local_attention.py`)."""

from keras_vit.parkkim.layers.conv_blocks import PaddedMaxPooling2D
from keras_vit.parkkim.layers.conv_blocks import PostActBlock
from keras_vit.parkkim.layers.conv_blocks import PreActBlock
from keras_vit.parkkim.layers.local_attention import WindowAttention2D
from keras_vit.parkkim.layers.msa_block import PreActAttentionBlock

__all__ = [
    "PaddedMaxPooling2D",
    "PostActBlock",
    "PreActAttentionBlock",
    "PreActBlock",
    "WindowAttention2D",
]
