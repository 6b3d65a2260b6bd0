"""Feature extraction: pooled representation, tokens and every block's output.

The Keras counterpart of timm's `forward_intermediates`: a second functional
model over the same layers (no copies of the weights, no hooks), for a ViT
and for the CNN family alike; with `spatial=True`, a ViT's blocks come back
as patch maps `(B, h, w, D)` for dense tasks (timm's NCHW maps, channels
last). `FeatureInfo` (timm's `feature_info`) says what each block's map is:
its layer, its channels and its reduction, which a detection or
segmentation neck is built from.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Iterable
from collections.abc import Mapping
from collections.abc import Sequence

import keras

from keras_vit._export import export
from keras_vit.layers.token_grid import TokenGrid
from keras_vit.models.layout import ENCODER_NORM
from keras_vit.models.layout import PROBE_SIZE
from keras_vit.models.layout import LayoutError
from keras_vit.models.layout import ModelLayout
from keras_vit.models.layout import ViTLayout


@export("keras_vit.feature_extractor", "keras_vit.models.feature_extractor")
def feature_extractor(
    model: keras.Model,
    blocks: Iterable[int] | int | str | None = "all",
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
      map's): timm's `forward_intermediates(output_fmt="NCHW")` maps,
      channels last.

    The returned model's `feature_info` attribute (a `FeatureInfo`, as
    timm's `features_only` models carry) gives each exposed block's layer
    name, channels and reduction; `feature_info(model, blocks)` gives the
    same without building an extractor.

    Args:
        model: A model built by `keras_vit.ViT`, `PreActResNet` or `AlterNet`
            (or a loaded copy).
        blocks: The blocks to expose: `"all"` (default), a block index, a
            sequence of indices (negative ones count from the end), or
            `None` for none. timm's `out_indices=n` (the last `n` blocks)
            is `range(-n, 0)`.
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

    Returns:
        A `keras.Model` from the model's input to a dict of the outputs
        above, with a `feature_info` attribute for its `"block_{i}"`.

    Example:

    ```python
    model = keras_vit.ViT_B16()
    features = keras_vit.feature_extractor(model, blocks=[-1, -4])
    out = features(images)  # {"pooled", "tokens", "block_11", "block_8"}
    dense = keras_vit.feature_extractor(
        model, blocks=range(-4, 0), include_pooled=False, include_tokens=False,
        spatial=True, norm=True,
    )
    maps = dense(images)  # {"block_8": (B, 14, 14, 768), ...} at 224 px
    dense.feature_info.channels(), dense.feature_info.reduction()
    # [768, 768, 768, 768], [16, 16, 16, 16]
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
    selected = _selected_blocks(layout, blocks)
    if norm and not isinstance(layout, ViTLayout):
        raise LayoutError(
            f"{model.name!r} is a CNN: it has no final norm to apply to its "
            "blocks; use norm=False."
        )
    for index, output in _block_outputs(layout, selected, spatial, norm).items():
        outputs[f"block_{index}"] = output
    if not outputs:
        raise ValueError("Nothing to extract: every output was turned off.")
    extractor = keras.Model(model.input, outputs, name=f"{model.name}_features")
    extractor.feature_info = FeatureInfo(_block_info(layout), selected)
    return extractor


@export("keras_vit.feature_info", "keras_vit.models.feature_info")
def feature_info(
    model: keras.Model, blocks: Iterable[int] | int | str | None = "all"
) -> FeatureInfo:
    """What each block's feature map of a model is, as timm's `feature_info`.

    The `FeatureInfo` that `feature_extractor(model, blocks=blocks)` carries,
    without building the extractor: for every block, its layer name, the
    channels of its map and its reduction (input pixels per map cell), and
    the blocks `blocks` selects as its `out_indices`. A ViT's maps are its
    patch tokens on the patch grid (`feature_extractor(..., spatial=True)`),
    so their reduction is the token stride: the patch size, times the
    ResNet's stride for a hybrid. One rule serves every family: the numbers
    are read off the shapes of the model's block maps, for the model's input
    size (an axis the model leaves undefined is probed at a size every
    usual stride divides; nothing is computed).

    Args:
        model: A model built by `keras_vit.ViT`, `PreActResNet` or `AlterNet`
            (or a loaded copy).
        blocks: The blocks selected (`out_indices`), as in
            `feature_extractor`: `"all"` (default), a block index, a sequence
            of indices (negative ones count from the end; timm's
            `out_indices=n` is `range(-n, 0)`), or `None` for none.

    Returns:
        A `FeatureInfo` with one entry per block of the model.

    Example:

    ```python
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    info = keras_vit.feature_info(model, blocks=[-1])
    info.out_indices, info.channels(), info.reduction()  # (1,), [32], [4]
    info.module_name()  # ['encoderblock_1']
    info[0]  # {'module': 'encoderblock_0', 'num_chs': 32, 'reduction': 4, ...}
    ```

    Raises:
        LayoutError: `model` was built by none of keras_vit's builders.
        ValueError: A block index out of range.
    """
    layout = ModelLayout.of(model)
    return FeatureInfo(_block_info(layout), _selected_blocks(layout, blocks))


@export("keras_vit.models.FeatureInfo")
class FeatureInfo:
    """The feature maps of a model's blocks: timm's `FeatureInfo`.

    One entry per block, in order of depth, each a dict with timm's keys:
    `"module"` (the block's layer name, e.g. `"encoderblock_3"` or
    `"stage2_block1"`), `"num_chs"` (the channels of its map), `"reduction"`
    (input pixels per map cell: an int, or `(dy, dx)` where the two axes
    differ; timm keeps only the larger) and `"index"` (the block index, the
    `i` of the extractor's `"block_{i}"`). `out_indices` are the selected
    blocks. As in timm, the accessors answer for `out_indices` when `idx` is
    `None`, and otherwise for block `idx` (an int) or blocks `idx` (a list),
    whether selected or not.

    Args:
        info: The entries, one per block, with `"module"`, `"num_chs"` and
            `"reduction"` keys (`"index"` defaults to the position).
        out_indices: The selected block indices (negative ones count from
            the end), kept sorted and absolute.

    Example:

    ```python
    info = keras_vit.models.FeatureInfo(
        [{"module": "encoderblock_0", "num_chs": 32, "reduction": 4},
         {"module": "encoderblock_1", "num_chs": 32, "reduction": 4}],
        out_indices=[-1],
    )
    info.out_indices, info.channels(), info.channels(0)  # (1,), [32], 32
    info.get_dicts(keys=["num_chs"])  # [{'num_chs': 32}]
    ```

    Raises:
        ValueError: An entry without those keys, or an index out of range.
    """

    def __init__(self, info: Sequence[Mapping], out_indices: Iterable[int] = ()):
        entries = []
        for position, entry in enumerate(info):
            missing = {"module", "num_chs", "reduction"} - set(entry)
            if missing:
                raise ValueError(
                    f"Feature info entry {position} lacks {sorted(missing)}."
                )
            entries.append({**entry, "index": entry.get("index", position)})
        self.info = entries
        self.out_indices = tuple(
            sorted({_absolute(i, len(entries)) for i in out_indices})
        )

    def get(self, key: str, idx: int | Sequence[int] | None = None):
        """The value of `key` for `out_indices` (a list), block `idx` (one
        value) or blocks `idx` (a list)."""
        if idx is None:
            return [self.info[i][key] for i in self.out_indices]
        if isinstance(idx, (list, tuple)):
            return [self.info[i][key] for i in idx]
        return self.info[idx][key]

    def get_dicts(
        self, keys: Sequence[str] | None = None, idx: int | Sequence[int] | None = None
    ):
        """The entries (copies; only `keys` if given) for `out_indices`, block
        `idx` or blocks `idx`, as `get`."""

        def entry(i):
            return {k: self.info[i][k] for k in keys or self.info[i]}

        if idx is None:
            return [entry(i) for i in self.out_indices]
        if isinstance(idx, (list, tuple)):
            return [entry(i) for i in idx]
        return entry(idx)

    def channels(self, idx: int | Sequence[int] | None = None):
        """The maps' channels (`"num_chs"`), as `get`."""
        return self.get("num_chs", idx)

    def reduction(self, idx: int | Sequence[int] | None = None):
        """The maps' reductions, input pixels per map cell, as `get`."""
        return self.get("reduction", idx)

    def module_name(self, idx: int | Sequence[int] | None = None):
        """The blocks' layer names (`"module"`), as `get`."""
        return self.get("module", idx)

    def from_other(self, out_indices: Iterable[int]) -> FeatureInfo:
        """The same entries with other `out_indices`."""
        return FeatureInfo(self.info, out_indices)

    def __getitem__(self, index: int) -> dict:
        return dict(self.info[index])

    def __len__(self) -> int:
        return len(self.info)

    def __eq__(self, other) -> bool:
        if not isinstance(other, FeatureInfo):
            return NotImplemented
        return (self.info, self.out_indices) == (other.info, other.out_indices)

    __hash__ = None

    def __repr__(self) -> str:
        return f"FeatureInfo({self.info!r}, out_indices={self.out_indices!r})"


def _absolute(index, depth: int) -> int:
    """A block index (negative from the end) made absolute, checked in range."""
    try:
        if isinstance(index, bool):
            raise TypeError
        index = operator.index(index)
    except TypeError:
        raise ValueError(f"A block index must be an int. Received: {index!r}") from None
    if not -depth <= index < depth:
        raise ValueError(
            f"Block index {index} is out of range for a model with {depth} "
            f"blocks: indices run from {-depth} to {depth - 1}."
        )
    return index % depth


def _selected_blocks(layout: ModelLayout, blocks) -> list[int]:
    """`"all"`, `None`, an index or indices -> sorted distinct block indices."""
    if blocks is None:
        return []
    if isinstance(blocks, str):
        return layout.block_indices(blocks)  # "all", or its error
    if not isinstance(blocks, Iterable):
        blocks = [blocks]
    return sorted({_absolute(index, layout.depth) for index in blocks})


def _block_outputs(
    layout: ModelLayout, indices: Iterable[int], spatial: bool, norm: bool
) -> dict:
    """Block `index` -> its symbolic output: a ViT's normalised and laid out
    on the grid if asked, a CNN's map as it is."""
    outputs = {
        index: layout.layer(layout.block_names[index]).output for index in indices
    }
    if isinstance(layout, ViTLayout):
        outputs = _vit_block_outputs(layout, outputs, spatial, norm)
    return outputs


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


def _block_info(layout: ModelLayout) -> list[dict]:
    """timm's entries for every block, read off the shapes of the block maps.

    The maps (a ViT's on its patch grid) are traced symbolically for an
    input of the model's size, with `PROBE_SIZE` for an axis it leaves
    undefined; the reduction is the input size over the map size.
    """
    model = layout.model
    indices = range(layout.depth)
    maps = _block_outputs(layout, indices, spatial=True, norm=False)
    size = [PROBE_SIZE if s is None else int(s) for s in model.inputs[0].shape[1:3]]
    probe = keras.KerasTensor((1, *size, model.inputs[0].shape[-1]))
    shapes = keras.Model(model.inputs[0], [maps[i] for i in indices])
    shapes = shapes.compute_output_spec(probe)  # [(1, h, w, C)] per block
    return [
        {
            "module": layout.block_names[index],
            "num_chs": int(spec.shape[-1]),
            "reduction": _reduction(size, spec.shape[1:3]),
            "index": index,
        }
        for index, spec in zip(indices, shapes, strict=True)
    ]


def _reduction(size, grid) -> int | tuple[int, int]:
    """Input pixels per map cell: one int, or `(dy, dx)` if the axes differ."""
    dy, dx = (max(1, round(s / g)) for s, g in zip(size, grid, strict=True))
    return dy if dy == dx else (dy, dx)
