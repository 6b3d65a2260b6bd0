"""Quantizing a ViT with Keras's `model.quantize`, attention layers included.

Example:

```python
model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
keras_vit.finetune.quantize(model, "int8")
```
"""

from __future__ import annotations

import keras

from keras_vit import keras_internals
from keras_vit._export import export
from keras_vit.layers.attention import MultiHeadSelfAttention
from keras_vit.models.layout import HEAD_LAYERS


@export("keras_vit.finetune.quantize")
def quantize(
    model: keras.Model, mode: str = "int8", keep_head: bool = True, **kwargs
) -> keras.Model:
    """`model.quantize(mode)` for a ViT: attention with `qk_norm` included.

    Keras quantizes only layers without sublayers; an attention layer with
    `qk_norm` has two (its LayerNorms), so Keras passes over it without a
    word. This quantizes those too. The head layers (`head`, `pre_logits`,
    `head_dist`: a small share of the weights, and what the export reads as
    float logits) stay in float unless `keep_head=False`.

    Args:
        model: A keras_vit ViT, built.
        mode: `"int8"` or `"int4"` (`"float8"` leaves the attention in float,
            with Keras's warning).
        keep_head: Leave the head layers unquantized. Defaults to `True`.
        **kwargs: Passed to `model.quantize` (e.g. `config`).

    Returns:
        `model`, changed in place.
    """

    def wanted(layer):
        return not (keep_head and layer.name in HEAD_LAYERS)

    model.quantize(mode, filters=kwargs.pop("filters", wanted), **kwargs)
    for layer in keras_internals.flatten_layers(model):
        if isinstance(layer, MultiHeadSelfAttention) and not layer.quantization_mode:
            if mode in ("int8", "int4"):
                layer.quantize(mode)
    model.train_function = model.test_function = model.predict_function = None
    return model
