"""The choices the layers' arguments take, without importing Keras.

`keras_vit.EncoderOptions` validates its fields against these, and the
command line's help lists them, so they live apart from the layers (which
import Keras and TensorFlow).
"""

# `keras_vit.layers.TokenPooling`'s modes: the class token, or the mean of
# the patch tokens.
POOLING_MODES = ("token", "gap")
# A Transformer block's MLP: the paper's GELU MLP, or a SwiGLU one.
MLP_KINDS = ("gelu", "swiglu")
# An encoder's norms: LayerNorm (the paper's), or RMSNorm (no centring, no
# bias: AIMv2).
NORM_KINDS = ("layer", "rms")
# Which of a head's query and key channels a block's attention biases: all
# three projections (`True`), none (`False`), or the query and value only
# (`"qv"`: EVA's attention, whose key bias is a constant zero).
QKV_BIASES = (True, False, "qv")
# Rotary position embeddings (`keras_vit.layers.rotary`).
ROPE_KINDS = ("axial", "dinov3", "mixed")
# Which axis a rotary embedding's first half of channel pairs follows: the
# rows (`"ij"`) or the columns (`"xy"`).
GRID_INDEXINGS = ("ij", "xy")
