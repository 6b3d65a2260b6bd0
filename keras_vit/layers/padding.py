"""Zero-pads images up to a multiple of the token stride (dynamic-size models)."""

from __future__ import annotations

import keras
from keras import ops

from keras_vit._export import export
from keras_vit.utils import to_pair


@export("keras_vit.layers.PadToMultiple")
@keras.saving.register_keras_serializable(package="keras_vit")
class PadToMultiple(keras.layers.Layer):
    """Pads the bottom and right of images to a multiple of `multiple`.

    A dynamic-size ViT with `dynamic_image_pad=True` starts with this layer,
    so that any image size gives whole patches (the remainder would
    otherwise be cropped by the patch embedding). The padding is zeros in the
    model's input range, at the bottom and right, as timm's
    `dynamic_img_pad`.

    Args:
        multiple: The token stride, an int or `(height, width)`.
        **kwargs: Base layer keyword arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: Images `(batch, height, width, channels)`.

    Returns:
        `(batch, ceil(height / m_h) * m_h, ceil(width / m_w) * m_w, channels)`.

    Example:

    >>> layer = keras_vit.layers.PadToMultiple(16)
    >>> layer(np.zeros((1, 100, 130, 3), "float32")).shape
    (1, 112, 144, 3)
    """

    def __init__(self, multiple: int | tuple[int, int], **kwargs):
        super().__init__(**kwargs)
        self.multiple = to_pair(multiple, "multiple")

    def call(self, inputs):
        shape = ops.shape(inputs)
        pad_h = (-shape[1]) % self.multiple[0]
        pad_w = (-shape[2]) % self.multiple[1]
        return ops.pad(inputs, [[0, 0], [0, pad_h], [0, pad_w], [0, 0]])

    def compute_output_shape(self, input_shape):
        batch, height, width, channels = input_shape
        height = (
            None
            if height is None
            else -(-height // self.multiple[0]) * self.multiple[0]
        )
        width = (
            None if width is None else -(-width // self.multiple[1]) * self.multiple[1]
        )
        return (batch, height, width, channels)

    def get_config(self):
        config = super().get_config()
        config.update({"multiple": self.multiple})
        return config
