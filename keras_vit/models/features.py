"""Feature extraction: pooled representation, tokens and every block's output.

The Keras counterpart of timm's `forward_intermediates`: a second functional
model over the same layers (no copies of the weights, no hooks), for a ViT
and for the CNN family alike; with `spatial=True`, a ViT's blocks come back
as patch maps `(B, h, w, D)` for dense tasks (timm's `output_fmt="NHWC"`).
"""

from __future__ import annotations

import warnings

import keras

from keras_vit._export import export
from keras_vit.layers.token_grid import TokenGrid
from keras_vit.models.layout import ENCODER_NORM
from keras_vit.models.layout import LayoutError
from keras_vit.models.layout import ModelLayout
from keras_vit.models.layout import ViTLayout


@export("keras_vit.feature_extractor", "keras_vit.models.feature_extractor")
def feature_extractor(
    model: keras.Model,
    blocks: list[int] | str | None = "all",
    include_pooled: bool = True,
    include_tokens: bool = True,
    *,
    spatial: bool = False,
    norm: bool = False,
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
      before the final LayerNorm unless `norm=True`; a CNN's MSA blocks
      included). With `spatial=True`, a ViT's is the patch map
      `(batch, h, w, dim)` for dense tasks: the prefix tokens dropped, the
      patches laid out on the patch grid of each batch (a dynamic-size or
      padded model's grid follows its input; a hybrid's is its ResNet
      map's), as timm's `forward_intermediates(output_fmt="NHWC")`.

    Args:
        model: A model built by `keras_vit.ViT`, `PreActResNet` or `AlterNet`
            (or a loaded copy).
        blocks: Block indices to expose (negative indices count from the
            end), `"all"` (default), or `None` for none.
        include_pooled: Expose `"pooled"`. Defaults to `True`.
        include_tokens: Expose the final sequence or map (`"tokens"` or
            `"features"`). Defaults to `True`.
        spatial: Return each `"block_{i}"` of a ViT as a map `(batch, h, w,
            dim)` of its patch tokens (class, distillation and register
            tokens removed) instead of the sequence `(batch, prefix +
            h * w, dim)`. `"tokens"` stays the sequence. A CNN's blocks are
            maps already (unchanged). Defaults to `False`.
        norm: Apply the final LayerNorm (`encoder_norm`) to each
            `"block_{i}"` of a ViT, as timm's `forward_intermediates(...,
            norm=True)`; then `"block_{L-1}"` is `"tokens"` (as a map with
            `spatial=True`). A model built with `fc_norm=True` has no norm
            on the tokens (it normalises after pooling), so, as timm (whose
            `norm` is then the identity), its blocks come back unchanged.
            Defaults to `False`. Not for a CNN.
        include_features: Deprecated: the old name of `include_tokens`
            for a CNN; when given, it decides, with a `DeprecationWarning`.

    Example:

    ```python
    model = keras_vit.ViT_B16()
    features = keras_vit.feature_extractor(model, blocks=[-1, -4])
    out = features(images)  # {"pooled", "tokens", "block_11", "block_8"}
    dense = keras_vit.feature_extractor(
        model, blocks=[2, 5, 8, 11], include_pooled=False, include_tokens=False,
        spatial=True, norm=True,
    )
    maps = dense(images)  # {"block_2": (B, 14, 14, 768), ...} at 224 px
    ```

    Raises:
        LayoutError: `include_pooled=True` on a model without pooling, or
            `norm=True` on a CNN.
        ValueError: A block index out of range, or every output turned off.
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
    block_outputs = {
        index: layout.layer(layout.block_names[index]).output for index in selected
    }
    if isinstance(layout, ViTLayout):
        block_outputs = _vit_block_outputs(layout, block_outputs, spatial, norm)
    elif norm:
        raise LayoutError(
            f"{model.name!r} is a CNN: it has no final norm to apply to its "
            "blocks; use norm=False."
        )
    for index, output in block_outputs.items():
        outputs[f"block_{index}"] = output
    if not outputs:
        raise ValueError("Nothing to extract: every output was turned off.")
    return keras.Model(model.input, outputs, name=f"{model.name}_features")


def _vit_block_outputs(
    layout: ViTLayout, outputs: dict, spatial: bool, norm: bool
) -> dict:
    """A ViT's block outputs, normalised and laid out on the grid if asked.

    The final norm is the model's own `encoder_norm` layer, called again
    (the weights are shared). The grid is read in the graph off what the
    patch embedding ran on, so it follows the input's size.
    """
    if norm and layout.has(ENCODER_NORM):
        encoder_norm = layout.encoder_norm
        outputs = {
            index: encoder_norm(output) for index, output in outputs.items()
        }  # (B, prefix + N, D)
    if not spatial:
        return outputs
    embedding = layout.embedding
    grid_source = embedding.input  # (B, H, W, C): images or a ResNet map
    maps = {}
    for index, output in outputs.items():
        grid = TokenGrid(
            layout.num_prefix_tokens,
            embedding.patch_size,
            dtype=layout.block(index).dtype_policy,
            name=f"block_{index}_grid",
        )
        maps[index] = grid(output, grid_source=grid_source)  # (B, h, w, D)
    return maps
