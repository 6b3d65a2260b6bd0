"""Feature extraction: pooled representation, tokens and every block's output.

The Keras counterpart of timm's `forward_intermediates`: a second functional
model over the same layers (no copies of the weights, no hooks), for a ViT
and for the CNN family alike.
"""

from __future__ import annotations

import warnings

import keras

from keras_vit.models.layout import LayoutError
from keras_vit.models.layout import ModelLayout


def feature_extractor(
    model: keras.Model,
    blocks: list[int] | str | None = "all",
    include_pooled: bool = True,
    include_tokens: bool = True,
    *,
    include_features: bool | None = None,
) -> keras.Model:
    """Returns a model mapping images to a dict of intermediate features.

    One contract for every keras_vit model (`keras_vit.models.ModelLayout`
    tells the families apart). Outputs (those that apply):
    - `"pooled"`: the image representation `(batch, dim)`: for a ViT the
      pooled token after the final LayerNorm, passed through `pre_logits`
      when the model has that layer (what the paper's few-shot evaluation
      uses); for a CNN the globally pooled map.
    - `"tokens"` (a ViT): the full sequence after the final LayerNorm,
      `(batch, prefix + patches, dim)` (after the last block for a model
      built with `fc_norm=True`, which normalises after pooling); the
      prefix is `ViTLayout.of(model).num_prefix_tokens` tokens (class,
      distillation, registers). `"features"` (a PreActResNet or AlterNet):
      the final activated map `(batch, h, w, channels)`.
    - `"block_{i}"`: the output of block `i` in order of depth (a ViT's
      before the final LayerNorm; a CNN's MSA blocks included).

    Args:
        model: A model built by `keras_vit.ViT`, `PreActResNet` or `AlterNet`
            (or a loaded copy).
        blocks: Block indices to expose (negative indices count from the
            end), `"all"` (default), or `None` for none.
        include_pooled: Expose `"pooled"`. Defaults to `True`.
        include_tokens: Expose the final sequence or map (`"tokens"` or
            `"features"`). Defaults to `True`.
        include_features: Deprecated: the old name of `include_tokens`
            for a CNN; when given, it decides, with a `DeprecationWarning`.

    Example:

    ```python
    model = keras_vit.ViT_B16()
    features = keras_vit.feature_extractor(model, blocks=[-1, -4])
    out = features(images)  # {"pooled", "tokens", "block_11", "block_8"}
    ```
    """
    if include_features is not None:
        warnings.warn(
            "feature_extractor(include_features=...) is deprecated: pass "
            "include_tokens=..., which switches the final map of every model.",
            DeprecationWarning,
            stacklevel=2,
        )
        include_tokens = include_features
    layout = ModelLayout.of(model)
    outputs = {}
    if include_pooled:
        if layout.pooled_name is None:
            raise LayoutError(
                f"{model.name!r} has no pooling layer (it was built with "
                "pooling=None); use include_pooled=False."
            )
        outputs["pooled"] = layout.pooled.output
    if include_tokens:
        outputs[layout.final_key] = layout.final.output
    selected = [] if blocks is None or blocks == [] else layout.block_indices(blocks)
    for index in selected:
        outputs[f"block_{index}"] = layout.layer(layout.block_names[index]).output
    if not outputs:
        raise ValueError("Nothing to extract: every output was turned off.")
    return keras.Model(model.input, outputs, name=f"{model.name}_features")


def cnn_feature_extractor(
    model: keras.Model,
    blocks: list[int] | str | None = "all",
    include_pooled: bool = True,
    include_features: bool = True,
) -> keras.Model:
    """Deprecated: `feature_extractor` serves every keras_vit model."""
    warnings.warn(
        "keras_vit.cnn_feature_extractor is deprecated: call "
        "keras_vit.feature_extractor, which serves every keras_vit model.",
        DeprecationWarning,
        stacklevel=2,
    )
    return feature_extractor(model, blocks, include_pooled, include_features)
