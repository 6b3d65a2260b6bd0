"""Every option of a CNN of the comparison, held once: `CNNOptions`.

The CNN counterpart of `keras_vit.EncoderOptions`: what a `ResNet`,
`PreActResNet` or `AlterNet` is built with beyond its row (`CNNVariant`) and
its input and head (`num_classes`, `image_size`, `channels`, `include_top`,
`name`). Every constructor takes the object whole (`options=`) or option by
option as keywords, and hands it to the builder as it is.

Example:

```python
options = CNNOptions(stem="cifar", drop_path_rate=0.1)
model = ResNet("50", num_classes=100, image_size=32, options=options)
model = ResNet("50", num_classes=100, image_size=32, stem="cifar",
               drop_path_rate=0.1)  # the same
```
"""

from __future__ import annotations

import dataclasses
import difflib
import numbers

from keras_vit._export import export
from keras_vit.models.options import choice_problem
from keras_vit.models.options import rate_problem
from keras_vit.parkkim.cnn.variants import STEMS
from keras_vit.parkkim.cnn.variants import CNNVariant

# Global pooling of the final map; `None` returns the map (no top only).
POOLINGS = ("avg", "max", None)
# The options only MSA blocks use: a network without them (`ResNet`,
# `PreActResNet`) takes none of them.
MSA_OPTIONS = ("window_size", "dropout_rate")


@export("keras_vit.parkkim.CNNOptions", "keras_vit.parkkim.cnn.CNNOptions")
@dataclasses.dataclass(frozen=True)
class CNNOptions:
    """The options of a ResNet, PreActResNet or AlterNet.

    Attributes:
        stem: `"imagenet"` (7x7/2 convolution, 3x3/2 max-pool) or `"cifar"`
            (one 3x3/1 convolution, the paper's `stem=False`). `None`
            (default) takes the row's (`CNNVariant.stem`).
        pooling: Global pooling of the final map: `"avg"` (default, the
            paper's), `"max"`, or `None` (the map itself; a model without
            the top only).
        drop_path_rate: Stochastic depth; block `i` of `L` (all blocks, MSA
            blocks included) drops its branch with rate
            `drop_path_rate * i / (L - 1)`, as the paper's code.
            Defaults to 0.
        classifier_activation: Activation of the head (a Keras activation
            name or callable). Defaults to `None` (logits, float32 under
            mixed precision).
        window_size: Side of AlterNet's attention windows. `None` (default)
            takes the row's (`CNNVariant.window_size`, 7 for the paper's
            rows). MSA blocks only.
        dropout_rate: Dropout after each attention output projection.
            Defaults to 0. MSA blocks only.

    Raises:
        ValueError: An option out of its range; the message names it.
    """

    stem: str | None = None
    pooling: str | None = "avg"
    drop_path_rate: float = 0.0
    classifier_activation: object = None
    window_size: int | None = None
    dropout_rate: float = 0.0

    def __post_init__(self):
        for name, problem in self._problems():
            if problem is not None:
                raise ValueError(
                    f"`{name}` {problem}. Received: {name}={getattr(self, name)!r}"
                )

    def _problems(self):
        """Yields `(option, None or what is wrong with it)`."""
        yield "stem", choice_problem(self.stem, (*STEMS, None))
        yield "pooling", choice_problem(self.pooling, POOLINGS)
        yield "drop_path_rate", rate_problem(self.drop_path_rate)
        yield "dropout_rate", rate_problem(self.dropout_rate)
        yield "window_size", _positive_or_none(self.window_size)
        activation = self.classifier_activation
        yield (
            "classifier_activation",
            None
            if activation is None or isinstance(activation, str) or callable(activation)
            else "must be an activation name, a callable or None",
        )

    def replace(self, **changes) -> CNNOptions:
        """A copy with `changes`; unknown names raise a `TypeError` that
        suggests the closest option."""
        unknown = sorted(set(changes) - set(option_names()))
        if unknown:
            raise TypeError(_unknown_message(unknown))
        return dataclasses.replace(self, **changes)

    def for_variant(self, spec: CNNVariant) -> CNNOptions:
        """These options with `stem` and `window_size` filled from the row
        where they are `None`."""
        return dataclasses.replace(
            self,
            stem=spec.stem if self.stem is None else self.stem,
            window_size=spec.window_size
            if self.window_size is None
            else self.window_size,
        )


def option_names() -> tuple[str, ...]:
    """The names of `CNNOptions`' fields, in declaration order."""
    return tuple(f.name for f in dataclasses.fields(CNNOptions))


def resolve_cnn_options(
    options: CNNOptions | None,
    overrides: dict,
    arguments: tuple[str, ...] = (),
    *,
    msa: bool = True,
) -> CNNOptions:
    """`options` (default `CNNOptions()`) with keyword `overrides` applied.

    Args:
        options: The CNN options, or `None` for the defaults.
        overrides: `{option: value}`, the constructor's `**cnn_options`.
        arguments: The constructor's own parameter names, suggested too for
            a misspelt keyword (`num_class` -> `num_classes`).
        msa: Whether the network has MSA blocks. Without them the MSA
            options (`window_size`, `dropout_rate`) are not keywords of the
            constructor, and `options` must leave them at their defaults.

    Raises:
        TypeError: `options` is not a `CNNOptions`, or an override names no
            option of the constructor (the message suggests the closest).
        ValueError: the result is invalid (see `CNNOptions`), or `options`
            sets an MSA option for a network without MSA blocks.
    """
    if options is None:
        options = CNNOptions()
    if not isinstance(options, CNNOptions):
        raise TypeError(
            "`options` must be a keras_vit.parkkim.cnn.CNNOptions. "
            f"Received: {type(options).__name__}"
        )
    accepted = option_names() if msa else _non_msa_names()
    unknown = sorted(set(overrides) - set(accepted))
    if unknown:
        raise TypeError(_unknown_message(unknown, arguments, accepted))
    if not msa:
        default = CNNOptions()
        for name in MSA_OPTIONS:
            if getattr(options, name) != getattr(default, name):
                raise ValueError(
                    f"`{name}` applies to MSA blocks; this network has none "
                    f"(build it with `AlterNet`). Received: "
                    f"{name}={getattr(options, name)!r}"
                )
    return options.replace(**overrides) if overrides else options


def _non_msa_names() -> tuple[str, ...]:
    return tuple(name for name in option_names() if name not in MSA_OPTIONS)


def _unknown_message(
    unknown: list[str],
    arguments: tuple[str, ...] = (),
    accepted: tuple[str, ...] | None = None,
) -> str:
    accepted = option_names() if accepted is None else accepted
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, (*arguments, *accepted), n=1)
        parts.append(f"{name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return (
        f"Unexpected keyword argument(s) {', '.join(parts)}; the CNN options "
        f"are {', '.join(accepted)}."
    )


def _positive_or_none(value):
    if value is None:
        return None
    ok = isinstance(value, numbers.Integral) and not isinstance(value, bool)
    return None if ok and value > 0 else "must be a positive integer or None"
