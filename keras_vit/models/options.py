"""Every option of a ViT encoder, held once: `EncoderOptions`.

An encoder turns patch embeddings into the image representation: the prefix
tokens (class, distillation, registers), the position table, the
Transformer blocks, the final norm and the pooling. Every later ViT family
(DeiT III, DINOv2, SigLIP, ...) differs from the paper's only in these
options, so a family holds an `EncoderOptions` value
(`keras_vit.models.zoo`). Every builder takes the object whole:
`keras_vit.ViT`, the masked-patch model, the recipes' configs and the
keras-hub interop; and `keras_vit.models.ViTLayout.of(model).encoder_options`
reads it back from a built model, so an encoder can be rebuilt exactly.

The options each Transformer block takes are marked where they are
declared (`block_option`): `EncoderOptions.block_arguments` hands them to
every block, and the layout reads them back off a block's config, so a new
block option is one field here and one argument of the block.

Example:

```python
options = EncoderOptions(qk_norm=True, num_registers=4)
model = keras_vit.ViT("test/4", image_size=16, options=options)
model = keras_vit.ViT("test/4", image_size=16, qk_norm=True)  # the same
```
"""

from __future__ import annotations

import dataclasses
import inspect
import numbers

from keras_vit._export import export
from keras_vit.layers.kinds import GRID_INDEXINGS
from keras_vit.layers.kinds import MLP_KINDS
from keras_vit.layers.kinds import NORM_KINDS
from keras_vit.layers.kinds import POOLING_MODES
from keras_vit.layers.kinds import QKV_BIASES
from keras_vit.layers.kinds import ROPE_KINDS

# `keras_vit.layers.TokenPooling`'s modes (`POOLING_MODES`); the encoder also
# pools with the attention-pooling head ("map") or not at all (None: the
# tokens).
POOLINGS = (*POOLING_MODES, "map", None)
# The projections of an encoder that can carry LoRA adapters
# (keras_vit.finetune.enable_lora's `targets`): the fused query/key/value
# kernel or its slices, the attention output, and both MLP layers.
LORA_TARGETS = ("qkv", "query", "key", "value", "out", "mlp")
export("keras_vit.finetune.LORA_TARGETS").constant(__name__, "LORA_TARGETS")
# The options that change training only (dropout, stochastic depth,
# rematerialisation): a converter to another library may leave them out.
TRAINING_ONLY = ("dropout_rate", "attention_dropout_rate", "drop_path_rate", "remat")
# Where a block option is read back from a built model: the first block, or
# the last (stochastic depth grows with depth: the last has the full rate).
FIRST_BLOCK, LAST_BLOCK = "first", "last"


def block_option(default, read_from: str = FIRST_BLOCK):
    """A field of `EncoderOptions` that every `TransformerBlock` takes under
    the same name (and returns in its `get_config`)."""
    return dataclasses.field(default=default, metadata={"block": read_from})


@export("keras_vit.RotaryOptions", "keras_vit.models.RotaryOptions")
@dataclasses.dataclass(frozen=True)
class RotaryOptions:
    """Rotary position embeddings on the blocks' queries and keys.

    The patch tokens' queries and keys are rotated by angles that depend on
    their grid position (`keras_vit.layers.rotary`); prefix tokens are not
    rotated. Computed for the grid the input has, so any image size works.

    Attributes:
        kind: `"axial"` (EVA-02, PE, RoPE-ViT: integer positions, or
            positions rescaled to `reference_grid`), `"dinov3"` (DINOv3:
            patch centres normalised to `[-1, 1]`) or `"mixed"` (RoPE-ViT
            mixed: frequencies learned per block and head). Defaults to
            `"axial"`.
        temperature: The frequencies' base (`"axial"`: `temperature **
            (-k / (D_h / 4))`; `"dinov3"`: the periods' base); for
            `"mixed"`, the scale of the initial frequencies. Defaults to
            10000.
        grid_offset: Added to every integer position (PE: 1). Defaults to 0.
        grid_indexing: `"ij"` (rows take the first half of the angles;
            default) or `"xy"` (columns first).
        reference_grid: `"axial"` only: positions are rescaled so that any
            grid spans this `(h, w)` grid (EVA-02: `(16, 16)`). Defaults to
            `None` (integer positions at every size).
        rotate_half: Rotate the two halves of a head against each other
            (DINOv3) instead of neighbouring channel pairs. Defaults to
            `False`.

    Example:

    ```python
    rope = RotaryOptions("dinov3", temperature=100, rotate_half=True)
    model = keras_vit.ViT("test/4", image_size=16, rope=rope,
                          position_embedding=False)
    ```
    """

    kind: str = "axial"
    temperature: float = 10000.0
    grid_offset: float = 0.0
    grid_indexing: str = "ij"
    reference_grid: tuple[int, int] | None = None
    rotate_half: bool = False

    def __post_init__(self):
        if self.reference_grid is not None:
            grid = self.reference_grid
            grid = (grid, grid) if isinstance(grid, numbers.Integral) else grid
            object.__setattr__(self, "reference_grid", tuple(int(g) for g in grid))
        problems = (
            ("kind", choice_problem(self.kind, ROPE_KINDS)),
            ("temperature", _positive_or_none(self.temperature)),
            ("grid_indexing", choice_problem(self.grid_indexing, GRID_INDEXINGS)),
            ("rotate_half", _bool(self.rotate_half)),
            (
                "reference_grid",
                "is for the 'axial' kind only"
                if self.reference_grid is not None and self.kind != "axial"
                else None,
            ),
            (
                "rotate_half",
                "is not supported by 'mixed' rotary embeddings"
                if self.rotate_half and self.kind == "mixed"
                else None,
            ),
        )
        for name, problem in problems:
            if problem is not None:
                raise ValueError(
                    f"`rope.{name}` {problem}. Received: {getattr(self, name)!r}"
                )
        object.__setattr__(self, "temperature", float(self.temperature))
        object.__setattr__(self, "grid_offset", float(self.grid_offset))

    def get_config(self) -> dict:
        """A JSON-able dict (`RotaryOptions(**config)` inverts it)."""
        config = dataclasses.asdict(self)
        if self.reference_grid is not None:
            config["reference_grid"] = list(self.reference_grid)
        return config


@export("keras_vit.EncoderOptions", "keras_vit.models.EncoderOptions")
@dataclasses.dataclass(frozen=True)
class EncoderOptions:
    """The options of a ViT encoder (tokens, position table, blocks, readout).

    Attributes:
        class_token: Prepend a learned class token. Defaults to `True`.
        distillation: Add DeiT's distillation token after the class token
            (a classifier then gets a second head, `head_dist`, on it).
            Defaults to `False`.
        num_registers: Register tokens inserted after the class (and
            distillation) token, with no position embedding (DINOv2 with
            registers: 4). Defaults to 0.
        no_embed_class: The position table covers the patches only and is
            added before the prefix tokens are prepended (DeiT III, DINOv2,
            SigLIP; timm's `no_embed_class`). Defaults to `False` (a
            class-token row, as the paper).
        qk_norm: LayerNorm on queries and keys in every attention layer.
            Defaults to `False`.
        qkv_bias: Biases on the query, key and value projections. `False`
            is timm's `qkv_bias=False` (Park & Kim's CIFAR ViT); `"qv"`
            biases the queries and values only (EVA's attention: the key's
            bias is a constant zero). Defaults to `True`.
        layer_scale_init: Scale both residual branches of every block per
            channel by a learned `LayerScale` starting at this value (DeiT
            III: 1e-6, DINOv2: 1e-5; timm's `init_values`). `None`
            (default) for no scale.
        mlp: The blocks' MLP, `"gelu"` (default) or `"swiglu"` (DINOv2-g).
        gelu_approximate: `False` (default) for the exact erf GELU of the
            paper; `True` for the tanh form the JAX reference computes. It
            applies to the GELU MLPs: the blocks' with `mlp="gelu"`, and the
            attention-pooling head's (`pooling="map"`) whatever `mlp` is
            (with `mlp="swiglu"` and another pooling it changes nothing).
        dropout_rate: Dropout after the position embedding, the attention
            and the MLP layers. Defaults to 0.
        attention_dropout_rate: Dropout on attention probabilities.
            Defaults to 0.
        drop_path_rate: Stochastic depth; block `i` of `L` drops its
            branches with rate `drop_path_rate * i / (L - 1)`. Defaults to 0.
        remat: Rematerialise each block in training (less memory, more
            compute; outputs and gradients unchanged; needs no dropout).
            Not part of a saved model. Defaults to `False`.
        pooling: The image representation: `"token"` (the class token, as
            in the paper; default), `"gap"` (mean of the patch tokens),
            `"map"` (SigLIP's attention pooling) or `None` (no pooling: the
            token sequence; a model without a head only).
        fc_norm: Normalise the pooled representation instead of the token
            sequence (timm's `fc_norm`, used with `"gap"`). Defaults to
            `False`.
        encoder_norm: Normalise the token sequence after the blocks (the
            paper's final LayerNorm); `fc_norm` replaces it. `False` leaves
            the blocks' output as it is (PE-Lang, PE-Spatial). Defaults to
            `True`.
        position_embedding: Add a learned position table (the paper's).
            `False` for a model whose blocks carry positions alone (rotary
            embeddings: DINOv3, RoPE-ViT). Defaults to `True`.
        rope: Rotary position embeddings on the blocks' queries and keys
            (`RotaryOptions`, or a dict of its fields). Defaults to `None`.
        pre_norm: A LayerNorm before the blocks, and a patch embedding
            without bias (Perception Encoder's `norm_pre`). Defaults to
            `False`.
        layer_norm_epsilon: The epsilon of every norm of the encoder
            (blocks, final, pooled, pre-block, patch embedding, attention
            pool). Defaults to 1e-6, the paper's (DINOv3, PE and AIMv2: 1e-5).
        norm: The kind of every norm of the encoder (blocks, query/key,
            attention and MLP norms, final, pooled, pre-block, patch
            embedding): `"layer"` (LayerNorm, the paper's; default) or
            `"rms"` (RMSNorm, `x / sqrt(mean(x^2) + eps) * scale`, no bias:
            AIMv2, timm's `norm_layer=RmsNorm`). `"rms"` does not build the
            attention-pooling head (`pooling="map"`).
        embedding_norm: A norm over the patch embeddings, before the position
            embedding and the prefix tokens (AIMv2; timm's
            `embed_norm_layer`). Unlike `pre_norm`, the patch projection
            keeps its bias. Defaults to `False`.
        proj_bias: Biases on the attention's output projection and on the
            MLP's layers (timm's `proj_bias`). `False` leaves all three out
            (AIMv2). Defaults to `True`.
        res_post_norm: Normalise each residual branch at its output instead
            of its input (`x + LN(MSA(x))`; timm's `ResPostBlock`, Swin V2's
            res-post-norm). `layer_scale_init` is then the initial scale of
            those norms, not a `LayerScale` (timm's `init_values` there).
            Defaults to `False`.
        attention_norm: A LayerNorm over the heads' merged outputs before the
            attention's output projection (EVA-02-CLIP's
            `scale_attn_inner`). Defaults to `False`.
        mlp_norm: A LayerNorm over the MLP's hidden units before its output
            layer (EVA-02's `scale_mlp`, NormFormer). Defaults to `False`.
        map_heads: Heads of the attention-pooling head (`pooling="map"`);
            `None` (default) uses the blocks' (SigLIP); PE's has 8.
        map_mlp_dim: Hidden width of the attention-pooling head's MLP;
            `None` (default) uses the blocks'.
        pool_include_prefix: The attention-pooling head attends to the
            prefix tokens too (PE; timm's `pool_include_prefix`). Defaults to
            `False` (the patch tokens only, as SigLIP's).

    Raises:
        ValueError: An option out of its range or a combination that cannot
            be built; the message names the option.
    """

    class_token: bool = True
    distillation: bool = False
    num_registers: int = 0
    no_embed_class: bool = False
    qk_norm: bool = block_option(False)
    qkv_bias: bool | str = block_option(True)
    layer_scale_init: float | None = block_option(None)
    mlp: str = block_option("gelu")
    gelu_approximate: bool = block_option(False)
    dropout_rate: float = block_option(0.0)
    attention_dropout_rate: float = block_option(0.0)
    drop_path_rate: float = block_option(0.0, read_from=LAST_BLOCK)
    remat: bool = False
    pooling: str | None = "token"
    fc_norm: bool = False
    encoder_norm: bool = True
    position_embedding: bool = True
    rope: RotaryOptions | None = block_option(None)
    pre_norm: bool = False
    layer_norm_epsilon: float = block_option(1e-6)
    norm: str = block_option("layer")
    embedding_norm: bool = False
    proj_bias: bool = block_option(True)
    res_post_norm: bool = block_option(False)
    attention_norm: bool = block_option(False)
    mlp_norm: bool = block_option(False)
    map_heads: int | None = None
    map_mlp_dim: int | None = None
    pool_include_prefix: bool = False

    def __post_init__(self):
        if isinstance(self.rope, dict):  # a saved config, or a JSON one
            object.__setattr__(self, "rope", RotaryOptions(**self.rope))
        for name, problem in self._problems():
            if problem is not None:
                raise ValueError(
                    f"`{name}` {problem}. Received: {name}={getattr(self, name)!r}"
                )

    def _problems(self):
        """Yields `(option, None or what is wrong with it)`."""
        for field in dataclasses.fields(self):
            if isinstance(field.default, bool) and field.name != "qkv_bias":
                yield field.name, _bool(getattr(self, field.name))
        yield (
            "qkv_bias",
            None
            if self.qkv_bias == "qv" or isinstance(self.qkv_bias, bool)
            else f"must be one of {QKV_BIASES}",
        )
        yield "num_registers", _count(self.num_registers)
        yield (
            "rope",
            None
            if self.rope is None or isinstance(self.rope, RotaryOptions)
            else "must be a keras_vit.models.options.RotaryOptions, a dict or None",
        )
        yield "layer_norm_epsilon", _positive_or_none(self.layer_norm_epsilon)
        for name in ("map_heads", "map_mlp_dim"):
            value = getattr(self, name)
            yield (
                name,
                None
                if value is None or _count(value) is None and value
                else ("must be a positive integer or None"),
            )
        for name in ("map_heads", "map_mlp_dim", "pool_include_prefix"):
            yield (
                name,
                "is for pooling='map'"
                if getattr(self, name) not in (None, False) and self.pooling != "map"
                else None,
            )
        yield (
            "no_embed_class",
            "needs a position table (position_embedding=True)"
            if self.no_embed_class and not self.position_embedding
            else None,
        )
        yield "mlp", choice_problem(self.mlp, MLP_KINDS)
        yield "norm", choice_problem(self.norm, NORM_KINDS)
        yield (
            "norm",
            "'rms' does not build the attention-pooling head (pooling='map')"
            if self.norm == "rms" and self.pooling == "map"
            else None,
        )
        yield "pooling", choice_problem(self.pooling, POOLINGS)
        for name in ("dropout_rate", "attention_dropout_rate", "drop_path_rate"):
            yield name, rate_problem(getattr(self, name))
        yield "layer_scale_init", _positive_or_none(self.layer_scale_init)
        yield (
            "pooling",
            "needs a class token ('token' pools it); use 'gap' with class_token=False"
            if self.pooling == "token" and not self.class_token
            else None,
        )
        yield (
            "distillation",
            "needs class_token=True and pooling='token' (DeiT)"
            if self.distillation and not (self.class_token and self.pooling == "token")
            else None,
        )
        yield (
            "fc_norm",
            "normalises the pooled output and needs a pooling"
            if self.fc_norm and self.pooling is None
            else None,
        )
        rates = (self.dropout_rate, self.attention_dropout_rate, self.drop_path_rate)
        yield (
            "remat",
            "needs dropout_rate, attention_dropout_rate and drop_path_rate of 0 "
            "(the recomputed blocks would draw new masks)"
            if self.remat and any(rates)
            else None,
        )

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: class, distillation and registers."""
        return int(self.class_token) + int(self.distillation) + self.num_registers

    def replace(self, **changes) -> EncoderOptions:
        """A copy with `changes`; unknown names raise a `TypeError` that
        suggests the closest option."""
        unknown = sorted(set(changes) - set(option_names()))
        if unknown:
            raise TypeError(_unknown_message(unknown))
        return dataclasses.replace(self, **changes)

    def block_arguments(self, index: int, depth: int) -> dict:
        """The `keras_vit.layers.TransformerBlock` arguments of block `index`:
        every block option, with block `index`'s stochastic-depth rate."""
        arguments = {name: getattr(self, name) for name in block_option_names()}
        arguments["drop_path_rate"] = drop_path_rates(self.drop_path_rate, depth)[index]
        return arguments

    def departures(
        self, expressed=(), reference: EncoderOptions | None = None
    ) -> list[str]:
        """`name=value` of every option that differs from `reference` (the
        defaults) and is not one of the `expressed` names.

        A converter to another library lists the options it maps
        (`expressed`) and refuses the rest through this, so an option added
        later is refused by name until the converter learns it, never
        dropped in silence.

        Example:

        >>> EncoderOptions(qk_norm=True, num_registers=4).departures(
        ...     expressed=("num_registers",))
        ['qk_norm=True']
        """
        reference = EncoderOptions() if reference is None else reference
        return [
            f"{name}={getattr(self, name)!r}"
            for name in option_names()
            if name not in expressed and getattr(self, name) != getattr(reference, name)
        ]

    @classmethod
    def block_options_of(cls, first: dict, last: dict) -> dict:
        """The block options of a built encoder, from its first and last
        blocks' configs (an option a config lacks, saved by an older
        version, takes its default).

        Example:

        ```python
        layout = keras_vit.ViTLayout.of(model)
        EncoderOptions.block_options_of(layout.block(0).get_config(),
                                        layout.block(-1).get_config())
        ```
        """
        read = {}
        for field in dataclasses.fields(cls):
            where = field.metadata.get("block")
            if where is not None:
                config = first if where == FIRST_BLOCK else last
                read[field.name] = config.get(field.name, field.default)
        return read


def drop_path_rates(rate: float, depth: int) -> tuple[float, ...]:
    """Stochastic depth of each of `depth` blocks: linear from 0 to `rate`.

    Block `i` drops its branch with rate `rate * i / (depth - 1)` (the ViT's,
    DeiT's and Park & Kim's ramp; one block gets 0).

    Example:

    >>> drop_path_rates(0.2, 3)
    (0.0, 0.1, 0.2)
    """
    return tuple(rate * i / max(depth - 1, 1) for i in range(depth))


def option_names() -> tuple[str, ...]:
    """The names of `EncoderOptions`' fields, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(EncoderOptions))


def block_option_names() -> tuple[str, ...]:
    """The options every `TransformerBlock` takes (`block_option` fields)."""
    return tuple(
        f.name for f in dataclasses.fields(EncoderOptions) if "block" in f.metadata
    )


def builder_arguments(builder) -> tuple[str, ...]:
    """A model builder's own parameter names (not `options`, not `**`)."""
    return tuple(
        name
        for name, parameter in inspect.signature(builder).parameters.items()
        if name != "options" and parameter.kind is not parameter.VAR_KEYWORD
    )


def resolve_options(
    options: EncoderOptions | None, overrides: dict, arguments: tuple[str, ...] = ()
) -> EncoderOptions:
    """`options` (default `EncoderOptions()`) with keyword `overrides` applied.

    Args:
        options: The encoder options, or `None` for the defaults.
        overrides: `{option: value}`, the builder's `**encoder_options`.
        arguments: The builder's own parameter names, suggested too for a
            misspelt keyword (`num_class` -> `num_classes`).

    Raises:
        TypeError: `options` is not an `EncoderOptions`, or an override
            names no option (the message suggests the closest name).
        ValueError: the result is invalid (see `EncoderOptions`).
    """
    if options is None:
        options = EncoderOptions()
    if not isinstance(options, EncoderOptions):
        raise TypeError(
            "`options` must be a keras_vit.EncoderOptions. "
            f"Received: {type(options).__name__}"
        )
    unknown = sorted(set(overrides) - set(option_names()))
    if unknown:
        raise TypeError(_unknown_message(unknown, arguments))
    return options.replace(**overrides) if overrides else options


def _unknown_message(unknown: list[str], arguments: tuple[str, ...] = ()) -> str:
    import difflib

    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, (*arguments, *option_names()), n=1)
        parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return (
        f"Unexpected keyword argument(s) {', '.join(parts)}; the encoder "
        f"options are {', '.join(option_names())}."
    )


def _bool(value):
    return None if isinstance(value, bool) else "must be True or False"


def _count(value):
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    return None if ok and value >= 0 else "must be an integer >= 0"


def choice_problem(value, choices) -> str | None:
    """`None` if `value` is one of `choices`, else what is wrong (the option
    checks of `EncoderOptions` and of a wing's options objects)."""
    return None if value in choices else f"must be one of {choices}"


def rate_problem(value) -> str | None:
    """`None` for a rate in `[0, 1)`, else what is wrong."""
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    return None if ok and 0 <= value < 1 else "must be a number in [0, 1)"


def _positive_or_none(value):
    if value is None:
        return None
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    return None if ok and value > 0 else "must be a positive number or None"
