"""Every option of a ViT encoder, held once: `EncoderOptions`, and the families.

An encoder turns patch embeddings into the image representation: the prefix
tokens (class, distillation, registers), the position table, the
Transformer blocks, the final norm and the pooling. Every later ViT family
(DeiT III, DINOv2, SigLIP, ...) differs from the paper's only in these
options, so a family is an `EncoderOptions` value (`FAMILIES`). Every
builder takes the object whole: `keras_vit.ViT`, the masked-patch model,
the recipes' configs and the keras-hub interop; and
`keras_vit.models.ViTLayout.of(model).encoder_options` reads it back from a
built model, so an encoder can be rebuilt exactly.

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
import types

from keras_vit.layers.pooling import POOLING_MODES
from keras_vit.layers.transformer_block import MLP_KINDS
from keras_vit.models.preprocessing import IMAGENET
from keras_vit.models.preprocessing import PAPER
from keras_vit.models.preprocessing import SIGLIP
from keras_vit.models.preprocessing import Preprocessing

# `keras_vit.layers.TokenPooling`'s modes (`POOLING_MODES`); the encoder also
# pools with the attention-pooling head ("map") or not at all (None: the
# tokens).
POOLINGS = (*POOLING_MODES, "map", None)
# The projections of an encoder that can carry LoRA adapters
# (keras_vit.finetune.enable_lora's `targets`): the fused query/key/value
# kernel or its slices, the attention output, and both MLP layers.
LORA_TARGETS = ("qkv", "query", "key", "value", "out", "mlp")


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
            is timm's `qkv_bias=False` (Park & Kim's CIFAR ViT). Defaults
            to `True`.
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

    Raises:
        ValueError: An option out of its range or a combination that cannot
            be built; the message names the option.
    """

    class_token: bool = True
    distillation: bool = False
    num_registers: int = 0
    no_embed_class: bool = False
    qk_norm: bool = False
    qkv_bias: bool = True
    layer_scale_init: float | None = None
    mlp: str = "gelu"
    gelu_approximate: bool = False
    dropout_rate: float = 0.0
    attention_dropout_rate: float = 0.0
    drop_path_rate: float = 0.0
    remat: bool = False
    pooling: str | None = "token"
    fc_norm: bool = False

    def __post_init__(self):
        for name, problem in self._problems():
            if problem is not None:
                raise ValueError(
                    f"`{name}` {problem}. Received: {name}={getattr(self, name)!r}"
                )

    def _problems(self):
        """Yields `(option, None or what is wrong with it)`."""
        for name in ("class_token", "distillation", "no_embed_class", "qk_norm",
                     "qkv_bias", "gelu_approximate", "remat", "fc_norm"):  # fmt: skip
            yield name, _bool(getattr(self, name))
        yield "num_registers", _count(self.num_registers)
        yield "mlp", choice_problem(self.mlp, MLP_KINDS)
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
        """The `keras_vit.layers.TransformerBlock` arguments of block `index`."""
        return {
            "dropout_rate": self.dropout_rate,
            "attention_dropout_rate": self.attention_dropout_rate,
            "drop_path_rate": drop_path_rates(self.drop_path_rate, depth)[index],
            "gelu_approximate": self.gelu_approximate,
            "layer_scale_init": self.layer_scale_init,
            "qk_norm": self.qk_norm,
            "qkv_bias": self.qkv_bias,
            "mlp": self.mlp,
        }


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


@dataclasses.dataclass(frozen=True)
class Family:
    """A published ViT recipe: its encoder options and its model defaults.

    Attributes:
        title: The family's name in docs and docstrings.
        options: The `EncoderOptions` every model of the family is built
            with (the caller's keyword arguments override single options).
        defaults: Other `keras_vit.ViT` arguments the family's models
            default to (e.g. DINOv2's 518-px input, no classifier).
        preprocessing: The input contract of the family's checkpoints
            (`keras_vit.Preprocessing`), the models' default.
    """

    title: str
    options: EncoderOptions
    defaults: types.MappingProxyType = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )
    preprocessing: Preprocessing = PAPER

    def arguments(self) -> dict:
        """The `keras_vit.ViT` keywords the family sets: its encoder options
        that differ from the defaults, then its model defaults.

        Example:

        >>> FAMILIES["deit3"].arguments()
        {'no_embed_class': True, 'layer_scale_init': 1e-06}
        """
        default = EncoderOptions()
        changed = {
            name: getattr(self.options, name)
            for name in option_names()
            if getattr(self.options, name) != getattr(default, name)
        }
        return {**changed, **self.defaults}


def _family(
    title: str, options: EncoderOptions, preprocessing: Preprocessing, **defaults
) -> Family:
    return Family(title, options, types.MappingProxyType(defaults), preprocessing)


# The families' encoders, as timm builds their checkpoints. DINOv2 and
# SigLIP are backbones without a published classifier, so their models come
# without the top unless asked for one.
_DINOV2 = EncoderOptions(layer_scale_init=1e-5, num_registers=4, no_embed_class=True)
FAMILIES = types.MappingProxyType(
    {
        "deit3": _family(
            "DeiT III",
            EncoderOptions(layer_scale_init=1e-6, no_embed_class=True),
            IMAGENET,
        ),
        "dinov2": _family(
            "DINOv2 with registers",
            _DINOV2,
            IMAGENET,
            image_size=518,
            include_top=False,
        ),
        "dinov2_swiglu": _family(
            "DINOv2 with registers",
            dataclasses.replace(_DINOV2, mlp="swiglu"),
            IMAGENET,
            image_size=518,
            include_top=False,
        ),
        "siglip": _family(
            "SigLIP",
            EncoderOptions(class_token=False, pooling="map", no_embed_class=True),
            SIGLIP,
            include_top=False,
        ),
    }
)

# The named constructors of the families (`keras_vit.models.families`):
# name -> (variant, family).
FAMILY_MODELS = types.MappingProxyType(
    {
        "DeiT3_S16": ("S/16", "deit3"),
        "DeiT3_B16": ("B/16", "deit3"),
        "DeiT3_L16": ("L/16", "deit3"),
        "DINOv2_S14": ("S/14", "dinov2"),
        "DINOv2_B14": ("B/14", "dinov2"),
        "DINOv2_L14": ("L/14", "dinov2"),
        "DINOv2_g14": ("g/14", "dinov2_swiglu"),
        "SigLIP_B16": ("B/16", "siglip"),
        "SigLIP_So400m14": ("So400m/14", "siglip"),
    }
)
