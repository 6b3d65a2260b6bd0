"""Rebuilds a ViT at another input resolution, weights carried over."""

from __future__ import annotations

import keras

from keras_vit._export import export
from keras_vit.models import layout as names
from keras_vit.models.layout import ViTLayout
from keras_vit.utils import to_pair


@export("keras_vit.with_image_size", "keras_vit.models.with_image_size")
def with_image_size(
    model: keras.Model,
    image_size: int | tuple[int, int],
    method: str = "bilinear",
    align_corners: bool | None = None,
) -> keras.Model:
    """Returns a copy of `model` that takes images of `image_size`.

    The architecture and every weight are kept; only the position-embedding
    table is resampled to the new patch grid (the class-token row is kept)
    and rotary embeddings take the new grid's coordinates,
    the paper's recipe for fine-tuning or serving at a higher resolution
    (§3.2). Works for plain and hybrid models, square or not. The weights
    move through `keras_vit.weights.load_weights`, like every other load.
    A dynamic-size model (`dynamic_image_size=True`) becomes a fixed-size
    one, equal to it at that size: what LiteRT and ONNX exports need.

    Args:
        model: A functional model built by `keras_vit.ViT` (or loaded).
        image_size: The new input size, an int or `(height, width)`. Must be
            a multiple of the model's token stride.
        method: `"bilinear"` (default, the reference), another method or a
            named mode (`"timm"`, `"huggingface"`; see `keras_vit.resample`).
        align_corners: Defaults to the method's convention (`True` for
            `"bilinear"`, as the reference's `scipy.ndimage.zoom(order=1)`).

    Returns:
        A new `keras.Model`; `model` is left unchanged.

    Example:

    ```python
    model_224 = keras_vit.ViT_B16(num_classes=10)
    model_384 = keras_vit.with_image_size(model_224, 384)
    ```
    """
    # Here, not at the top: the weights package reads the models' layouts.
    from keras_vit.weights.loader import load_weights

    new_h, new_w = to_pair(image_size, "image_size")
    layout = ViTLayout.of(model)
    stride_h, stride_w = layout.stride
    if new_h % stride_h or new_w % stride_w:
        raise ValueError(
            f"image_size={(new_h, new_w)} is not a multiple of the model's token "
            f"stride {(stride_h, stride_w)}."
        )
    new_grid = (new_h // stride_h, new_w // stride_w)

    config = model.get_config()
    for layer_config in config["layers"]:
        # Layers are rebuilt from the new input instead of their old shapes.
        layer_config.pop("build_config", None)
        if layer_config["class_name"] == "InputLayer":
            shape = layer_config["config"]["batch_shape"]
            layer_config["config"]["batch_shape"] = [shape[0], new_h, new_w, *shape[3:]]
        if layer_config["config"].get("name") == names.POSEMB:
            layer_config["config"]["grid_size"] = list(new_grid)
            if layer_config["config"].get("dynamic"):
                layer_config["config"]["dynamic"] = False
                method = layer_config["config"]["resample_method"]
                align_corners = None
        if layer_config["config"].get("name") == names.ROPE:  # rotary positions
            layer_config["config"].update(grid_size=list(new_grid), dynamic=False)
    resized = model.__class__.from_config(config)
    load_weights(resized, model, resample_method=method, align_corners=align_corners)
    return resized
