"""The one description of a built ViT: its layer names, tokens and parts.

Every keras_vit model is a functional Keras model whose layers carry fixed
names. Those names are the contract between the model builders, the weights
path, feature extraction, the analyses, the exports and the recipes, and
they are spelled here only. `ViTLayout.of(model)` reads a built (or loaded)
model once and answers the questions the rest of the package asks: where
the blocks are, what the patch grid and the prefix tokens are, which layers
pool, project and classify.

Example:

```python
model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
layout = keras_vit.models.ViTLayout.of(model)
layout.grid_size, layout.num_prefix_tokens, layout.depth  # (4, 4), 1, 2
layout.block(0)  # the first TransformerBlock
```
"""

from __future__ import annotations

import dataclasses

import keras

from keras_vit._export import export
from keras_vit.layers.map_head import MAPHead
from keras_vit.models import architectures
from keras_vit.models.architectures import LayoutError
from keras_vit.models.options import EncoderOptions

# The input and the layers, in graph order.
INPUT = "images"
PREPROCESSING = "preprocessing"
PADDING = "image_padding"
EMBEDDING = "embedding"
# The norm over the patch embeddings, before the position table (AIMv2).
EMBEDDING_NORM = "embedding_norm"
CLASS_TOKEN = "class_token"
DIST_TOKEN = "dist_token"
POSEMB = "posembed_input"
# The patch coordinates of rotary position embeddings, and the LayerNorm
# before the blocks (Perception Encoder's `norm_pre`).
ROPE = "rope_coordinates"
PRE_NORM = "pre_norm"
REGISTER_TOKENS = "register_tokens"
POSEMB_DROPOUT = "posembed_dropout"
BLOCK_PREFIX = "encoderblock_"
ENCODER_NORM = "encoder_norm"
POOL = "pool"
FC_NORM = "fc_norm"
PRE_LOGITS = "pre_logits"
HEAD = "head"
# A distilled model (DeiT) adds a second head on the distillation token and
# averages the two heads' logits.
HEAD_DIST = "head_dist"
DIST_POOL = "dist_pool"
DISTILLED_LOGITS = "distilled_logits"
# The masked-patch pre-training model (paper §4.6) adds these.
PATCH_CORRUPTION = "patch_corruption"
MEAN_COLOR_TARGETS = "mean_color_targets"
MASKED_PATCH_HEAD = "masked_patch_head"

# The BiT ResNet of the hybrids: its root, then units named by a template
# with `{s}` the stage and `{u}` the unit, both from 1 (`unit_name`).
ROOT_CONV = "conv_root"
ROOT_NORM = "gn_root"
UNIT = "block{s}_unit{u}"

# Layers that belong to a task head, not to the encoder. The weights path
# applies one rule to them (`keras_vit.weights.load_weights`).
HEAD_LAYERS = (PRE_LOGITS, HEAD, HEAD_DIST, MASKED_PATCH_HEAD)
# Layers that only exist for pre-training; an encoder copied out of a
# pre-training model leaves them behind.
PRETRAINING_LAYERS = (PATCH_CORRUPTION, MEAN_COLOR_TARGETS, MASKED_PATCH_HEAD)


# An input side for shape inference (symbolic, never computed) that every
# usual stride (8, 14, 16, 28, 32, ...) divides: strides and reductions are
# read off the shapes a model gives it.
PROBE_SIZE = 2**6 * 3**2 * 5 * 7  # 20160


def block_name(index: int) -> str:
    """The name of Transformer block `index`: `"encoderblock_{index}"`."""
    return f"{BLOCK_PREFIX}{int(index)}"


def block_index(name: str) -> int | None:
    """The index of a block name, or `None` for any other name."""
    if not name.startswith(BLOCK_PREFIX):
        return None
    suffix = name[len(BLOCK_PREFIX) :]
    return int(suffix) if suffix.isdigit() else None


def unit_name(stage: int, unit: int) -> str:
    """The name prefix of a hybrid ResNet unit, e.g. `"block1_unit1"` (from 1)."""
    return UNIT.format(s=int(stage), u=int(unit))


@export("keras_vit.models.ModelLayout")
class ModelLayout:
    """What every layout answers: layers by name, blocks by index, pooling.

    Subclasses are frozen dataclasses with `model`, `block_names` and
    `pooled_name` fields (`ViTLayout`; a wing's, e.g. `keras_vit.parkkim.CNNLayout`), a
    `describes(model)` test and a `final` layer (the encoded token sequence
    of a ViT, the last activated map of a CNN; `final_key` names it).
    `ModelLayout.of(model)` reads a model with the layout of the
    architecture that built it (`keras_vit.models.architectures`).

    Example:

    ```python
    layout = ModelLayout.of(keras_vit.AlterNet("test", image_size=16))
    type(layout).__name__, layout.final_key  # 'CNNLayout', 'features'
    ```
    """

    final_key: str = "final"

    @classmethod
    def of(cls, model: keras.Model) -> ModelLayout:
        """The layout of any keras_vit model: a `ViTLayout` or a wing's.

        The architecture that built `model` (`keras_vit.models.architectures`)
        names the layout that reads it.

        Raises:
            LayoutError: `model` was built by none of keras_vit's builders.
        """
        return architectures.architecture_of(model).layout.of(model)

    @classmethod
    def describes(cls, model: keras.Model) -> bool:
        """Whether `model` has the layers this kind of layout reads."""
        raise NotImplementedError

    @property
    def depth(self) -> int:
        return len(self.block_names)

    def feature_maps(self) -> tuple[tuple[str, ...], tuple[str, ...], list]:
        """`(labels, kinds, outputs)`: the maps the depth analyses read
        (`keras_vit.analysis.FeatureMaps`) of a layout whose maps are layer
        outputs (a ViT's are walked block by block instead): one label,
        one kind (`"input"`, `"conv"`, `"msa"`) and one symbolic output
        `(B, h, w, C)` each, in order of depth."""
        raise LayoutError(
            f"{type(self).__name__} does not name feature maps by layer output."
        )

    def layer(self, name: str) -> keras.layers.Layer:
        """The model's layer called `name`, with a `LayoutError` if absent."""
        for layer in self.model.layers:
            if layer.name == name:
                return layer
        raise LayoutError(f"Model {self.model.name!r} has no {name!r} layer.")

    def has(self, name: str) -> bool:
        return any(layer.name == name for layer in self.model.layers)

    def block_indices(self, blocks) -> list[int]:
        """`"all"`, an index or indices -> sorted distinct indices in range."""
        if isinstance(blocks, str):
            if blocks != "all":
                raise ValueError(
                    "`blocks` must be 'all', an int or a list of ints. "
                    f"Received: blocks={blocks!r}"
                )
            return list(range(self.depth))
        if isinstance(blocks, int) or hasattr(blocks, "__index__"):
            blocks = [blocks]
        indices = []
        for index in blocks:
            if not -self.depth <= int(index) < self.depth:
                raise ValueError(
                    f"Block index {index} is out of range for a model with "
                    f"{self.depth} blocks."
                )
            indices.append(int(index) % self.depth)
        if not indices:
            raise ValueError("`blocks` selects no block.")
        return sorted(set(indices))

    @property
    def pooled(self) -> keras.layers.Layer:
        """The layer whose output is the image representation."""
        if self.pooled_name is None:
            raise LayoutError(
                f"Model {self.model.name!r} has no pooling layer (it was built "
                "with pooling=None)."
            )
        return self.layer(self.pooled_name)


@export("keras_vit.ViTLayout", "keras_vit.models.ViTLayout")
@dataclasses.dataclass(frozen=True)
class ViTLayout(ModelLayout):
    """What a built keras_vit model is made of.

    Attributes:
        model: The model described.
        block_names: The Transformer blocks' layer names, in order.
        grid_size: The patch grid `(h, w)` of the position embedding.
        num_prefix_tokens: Tokens before the patches: the class token, the
            distillation token and the register tokens, in that order.
        num_registers: Register tokens among them (DINOv2), 0 for none.
        image_size: The input `(height, width)` in pixels, or `None` for an
            axis the model leaves undefined.
        channels: Input channels.
        pooled_name: The layer whose output is the image representation
            (`pre_logits` when present, else `fc_norm`, else `pool`), or
            `None` for a model built with `pooling=None`.
        tokens_name: The layer whose output is the encoded token sequence
            (`encoder_norm`, or the last block when the model normalises
            after pooling with `fc_norm`).
        head_name: `"head"` when the model has a classifier, else `None`.
        has_preprocessing: Whether a rescaling layer comes first, mapping
            `[0, 255]` pixels by the model's contract (`model.preprocessing`).
    """

    model: keras.Model = dataclasses.field(repr=False, compare=False)
    block_names: tuple[str, ...]
    grid_size: tuple[int, int]
    num_prefix_tokens: int
    num_registers: int
    image_size: tuple[int | None, int | None]
    channels: int
    pooled_name: str | None
    tokens_name: str
    head_name: str | None
    has_preprocessing: bool

    final_key = "tokens"

    @classmethod
    def describes(cls, model: keras.Model) -> bool:
        names = {layer.name for layer in model.layers}
        positions = POSEMB in names or ROPE in names
        return positions and any(block_index(n) is not None for n in names)

    @classmethod
    def of(cls, model: keras.Model) -> ViTLayout:
        """Reads the layout of a model built by keras_vit (or a loaded copy).

        Raises:
            LayoutError: `model` has no Transformer blocks or no position
                embedding, i.e. it was not built by keras_vit.
        """
        names = {layer.name for layer in model.layers}
        blocks = sorted(
            (n for n in names if block_index(n) is not None), key=block_index
        )
        if not blocks or not ({POSEMB, ROPE} & names):
            missing = (
                "Transformer blocks"
                if not blocks
                else f"a {POSEMB!r} or {ROPE!r} layer"
            )
            raise LayoutError(
                f"Model {model.name!r} has no {missing}: it was not built by "
                "keras_vit.ViT (or a keras_vit model builder)."
            )
        grid_layer = model.get_layer(POSEMB if POSEMB in names else ROPE)
        shape = tuple(model.inputs[0].shape)
        if len(shape) != 4:
            raise LayoutError(
                f"Model {model.name!r} takes inputs of shape {shape}; expected "
                "(batch, height, width, channels)."
            )
        pooled = next((n for n in (PRE_LOGITS, FC_NORM, POOL) if n in names), None)
        registers = (
            int(model.get_layer(REGISTER_TOKENS).num_tokens)
            if REGISTER_TOKENS in names
            else 0
        )
        prefix = int(CLASS_TOKEN in names) + int(DIST_TOKEN in names) + registers
        return cls(
            model=model,
            block_names=tuple(blocks),
            grid_size=tuple(int(g) for g in grid_layer.grid_size),
            num_prefix_tokens=prefix,
            num_registers=registers,
            image_size=tuple(None if s is None else int(s) for s in shape[1:3]),
            channels=int(shape[3]),
            pooled_name=pooled,
            tokens_name=ENCODER_NORM if ENCODER_NORM in names else blocks[-1],
            head_name=HEAD if HEAD in names else None,
            has_preprocessing=PREPROCESSING in names,
        )

    @property
    def encoder_options(self) -> EncoderOptions:
        """The `EncoderOptions` the model was built with, read off its layers.

        Building `keras_vit.ViT(variant, options=layout.encoder_options)`
        gives the same encoder (same layers, same weights layout). Two
        options a built model does not keep come back as their defaults:
        `remat` (not saved), and `no_embed_class` when there is no class or
        distillation token (the two settings then build the same model).
        """
        names = {layer.name for layer in self.model.layers}
        leading = int(CLASS_TOKEN in names) + int(DIST_TOKEN in names)
        first = self.block(0).get_config()
        blocks = EncoderOptions.block_options_of(first, self.block(-1).get_config())
        pooling, map_options = None, {}
        if POOL in names:
            pool = self.layer(POOL)
            pooling = "map" if isinstance(pool, MAPHead) else pool.mode
            if pooling == "map":
                heads, mlp_dim = int(pool.num_heads), int(pool.mlp_dim)
                map_options = {
                    "map_heads": None if heads == first["num_heads"] else heads,
                    "map_mlp_dim": None if mlp_dim == first["mlp_dim"] else mlp_dim,
                    "pool_include_prefix": bool(
                        self.num_prefix_tokens and pool.num_prefix_tokens == 0
                    ),
                }
        posemb = POSEMB in names
        return EncoderOptions(
            class_token=CLASS_TOKEN in names,
            distillation=DIST_TOKEN in names,
            num_registers=self.num_registers,
            no_embed_class=bool(
                posemb and leading and self.position_embedding.num_prefix_tokens == 0
            ),
            pooling=pooling,
            fc_norm=FC_NORM in names,
            encoder_norm=ENCODER_NORM in names or FC_NORM in names,
            position_embedding=posemb,
            pre_norm=PRE_NORM in names,
            embedding_norm=EMBEDDING_NORM in names,
            **map_options,
            **blocks,
        )

    # -- geometry ------------------------------------------------------------
    @property
    def num_patches(self) -> int:
        return self.grid_size[0] * self.grid_size[1]

    @property
    def dynamic(self) -> bool:
        """Whether the model takes images of any size (`dynamic_image_size`)."""
        return None in self.image_size

    @property
    def stride(self) -> tuple[int, int]:
        """Pixels between neighbouring patch centres `(dy, dx)`: the token stride."""
        if not self.dynamic:
            return (
                self.image_size[0] // self.grid_size[0],
                self.image_size[1] // self.grid_size[1],
            )
        # Images -> what the patch embedding runs on, inferred on a probe size
        # (shapes only, nothing is computed): its downsampling times the patch.
        # Every usual stride divides the probe, so a padded model's padding
        # adds nothing to it.
        probe = PROBE_SIZE
        stem = keras.Model(self.model.inputs[0], self.embedding.input)
        shape = stem.compute_output_spec(
            keras.KerasTensor((1, probe, probe, self.channels))
        ).shape
        patch = self.grid_layer.patch_size
        return (
            round(probe / shape[1]) * patch[0],
            round(probe / shape[2]) * patch[1],
        )

    @property
    def native_image_size(self) -> tuple[int, int]:
        """The input size the position table was made for (grid x stride)."""
        stride = self.stride
        return (self.grid_size[0] * stride[0], self.grid_size[1] * stride[1])

    @property
    def pads_images(self) -> bool:
        """Whether images are zero-padded to a multiple of the token stride."""
        return self.has(PADDING)

    # -- layers --------------------------------------------------------------
    def block(self, index: int) -> keras.layers.Layer:
        """Transformer block `index` (negative indices count from the end)."""
        return self.layer(self.block_names[self.block_indices(index)[0]])

    @property
    def position_embedding(self) -> keras.layers.Layer:
        """The learned position table (`AddPositionEmbedding`).

        Raises:
            LayoutError: the model has none (its positions are rotary).
        """
        if not self.has(POSEMB):
            raise LayoutError(
                f"Model {self.model.name!r} has no position table: its blocks "
                "take positions from rotary embeddings (`rope`)."
            )
        return self.layer(POSEMB)

    @property
    def grid_layer(self) -> keras.layers.Layer:
        """The layer that knows the patch grid: the position table, else the
        rotary coordinates (`grid_size`, `dynamic`, `patch_size`)."""
        return self.layer(POSEMB if self.has(POSEMB) else ROPE)

    @property
    def rope_coordinates(self) -> keras.layers.Layer | None:
        """The `RotaryCoordinates` layer of a model with rotary embeddings."""
        return self.layer(ROPE) if self.has(ROPE) else None

    @property
    def embedding(self) -> keras.layers.Layer:
        return self.layer(EMBEDDING)

    @property
    def encoder_norm(self) -> keras.layers.Layer:
        return self.layer(ENCODER_NORM)

    @property
    def tokens(self) -> keras.layers.Layer:
        """The layer whose output is the encoded token sequence."""
        return self.layer(self.tokens_name)

    @property
    def final(self) -> keras.layers.Layer:
        """The encoded token sequence's layer (`tokens`)."""
        return self.tokens

    @property
    def head(self) -> keras.layers.Layer | None:
        return None if self.head_name is None else self.layer(self.head_name)
