"""Feature extraction: pooled representation, tokens and every block's output.

The Keras counterpart of timm's `forward_intermediates`: a second functional
model over the same layers (no copies of the weights, no hooks).
"""

from __future__ import annotations

import keras

from keras_vit.models.layout import LayoutError
from keras_vit.models.layout import ViTLayout


def block_names(model: keras.Model) -> list[str]:
    """Names of the model's Transformer blocks, in order."""
    return list(ViTLayout.of(model).block_names)


def feature_extractor(
    model: keras.Model,
    blocks: list[int] | str | None = "all",
    include_pooled: bool = True,
    include_tokens: bool = True,
) -> keras.Model:
    """Returns a model mapping images to a dict of intermediate features.

    Outputs (those that apply):
    - `"pooled"`: the image representation `(batch, dim)`: the pooled token
      after the final LayerNorm, passed through `pre_logits` when the model
      has that layer (what the paper's few-shot evaluation uses).
    - `"tokens"`: the full sequence after the final LayerNorm,
      `(batch, prefix + patches, dim)` (after the last block for a model
      built with `fc_norm=True`, which normalises after pooling); the
      prefix is `ViTLayout.of(model).num_prefix_tokens` tokens (class,
      distillation, registers).
    - `"block_{i}"`: the output of Transformer block `i`, before the final
      LayerNorm, `(batch, prefix + patches, dim)`.

    A `keras_vit.PreActResNet` or `keras_vit.AlterNet` gets the same
    contract from `keras_vit.models.cnn_feature_extractor`: `"pooled"`,
    `"block_{i}"` for every block in order of depth, and (for
    `include_tokens`) `"features"`, the final activated map.

    Args:
        model: A model built by `keras_vit.ViT` (or a loaded copy), or a
            pre-activation ResNet or AlterNet.
        blocks: Block indices to expose (negative indices count from the
            end), `"all"` (default), or `None` for none.
        include_pooled: Expose `"pooled"`. Defaults to `True`.
        include_tokens: Expose `"tokens"`. Defaults to `True`.

    Example:

    ```python
    model = keras_vit.ViT_B16()
    features = keras_vit.feature_extractor(model, blocks=[-1, -4])
    out = features(images)  # {"pooled", "tokens", "block_11", "block_8"}
    ```
    """
    try:
        layout = ViTLayout.of(model)
    except LayoutError:
        from keras_vit.models.cnn import cnn_feature_extractor
        from keras_vit.models.cnn_layout import CNNLayout

        CNNLayout.of(model)  # raises for a model of neither kind
        return cnn_feature_extractor(model, blocks, include_pooled, include_tokens)
    outputs = {}
    if include_pooled:
        if layout.pooled_name is None:
            raise ValueError(
                f"{model.name!r} has no pooling layer (it was built with "
                "pooling=None); use include_pooled=False."
            )
        outputs["pooled"] = layout.pooled.output
    if include_tokens:
        outputs["tokens"] = layout.tokens.output
    selected = [] if blocks is None or blocks == [] else layout.block_indices(blocks)
    for index in selected:
        outputs[f"block_{index}"] = layout.block(index).output
    if not outputs:
        raise ValueError("Nothing to extract: every output was turned off.")
    return keras.Model(model.input, outputs, name=f"{model.name}_features")
