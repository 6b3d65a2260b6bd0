"""Layer-wise learning-rate decay for fine-tuning (BEiT, timm)."""

from __future__ import annotations

import keras

from keras_vit._export import export
from keras_vit.models.layout import ViTLayout


@export("keras_vit.finetune.layer_decay_multipliers")
def layer_decay_multipliers(model: keras.Model, decay: float) -> dict[str, float]:
    """Layer-wise learning-rate decay factors, by variable path (BEiT, timm).

    Layer ids: everything before the first block (patch embedding, hybrid
    stem, class/distillation/register tokens, position embedding) is 0,
    block `i` is `i + 1`, everything after the blocks (final norm, pooling,
    head) is `depth + 1`. The factor is `decay ** (depth + 1 - id)`: 1 for
    the head, `decay` for the last block, `decay ** (depth + 1)` for the
    embeddings, as timm's `param_groups_layer_decay`.

    Example:

    ```python
    rates = layer_decay_multipliers(model, 0.75)
    optimizer = make_optimizer("sgd", 0.01, lr_multipliers=rates)
    ```
    """
    if not 0.0 < float(decay) <= 1.0:
        raise ValueError(f"`decay` must be in (0, 1]. Received: decay={decay}")
    layout = ViTLayout.of(model)
    depth = layout.depth
    blocks = {name: i for i, name in enumerate(layout.block_names)}
    factors, layer_id = {}, 0
    for layer in model.layers:
        if layer.name in blocks:
            layer_id = blocks[layer.name] + 1
        elif layer_id == depth:
            layer_id = depth + 1
        for variable in layer.weights:
            factors[variable.path] = float(decay) ** (depth + 1 - layer_id)
    return factors
