"""Feature extraction: pooled representation, tokens and every block's output.

The Keras counterpart of timm's `forward_intermediates`: a second functional
model over the same layers (no copies of the weights, no hooks).
"""

from __future__ import annotations

import keras


def block_names(model: keras.Model) -> list[str]:
    """Names of the model's Transformer blocks, in order."""
    names = [layer.name for layer in model.layers if layer.name.startswith("encoderblock_")]
    return sorted(names, key=lambda n: int(n.rsplit("_", 1)[1]))


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
      `(batch, prefix + patches, dim)`.
    - `"block_{i}"`: the output of Transformer block `i`, before the final
      LayerNorm, `(batch, prefix + patches, dim)`.

    Args:
        model: A model built by `keras_vit.ViT` (or a loaded copy).
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
    names = block_names(model)
    if not names:
        raise ValueError(f"{model.name!r} has no 'encoderblock_*' layers.")
    outputs = {}
    if include_pooled:
        pooled = _first_layer(model, ("pre_logits", "pool"))
        if pooled is None:
            raise ValueError(
                f"{model.name!r} has no pooling layer (it was built with "
                "pooling=None); use include_pooled=False."
            )
        outputs["pooled"] = pooled.output
    if include_tokens:
        outputs["tokens"] = model.get_layer("encoder_norm").output
    if blocks == "all":
        blocks = list(range(len(names)))
    for index in blocks or []:
        if not -len(names) <= index < len(names):
            raise ValueError(
                f"Block index {index} is out of range for {len(names)} blocks."
            )
        index %= len(names)
        outputs[f"block_{index}"] = model.get_layer(names[index]).output
    if not outputs:
        raise ValueError("Nothing to extract: every output was turned off.")
    return keras.Model(model.input, outputs, name=f"{model.name}_features")


def _first_layer(model: keras.Model, names: tuple[str, ...]):
    for name in names:
        for layer in model.layers:
            if layer.name == name:
                return layer
    return None
