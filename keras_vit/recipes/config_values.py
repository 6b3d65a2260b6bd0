"""Config values: `--set key=value` overrides and the checks of a field's value.

`override(config, ["key=value", ...])` reads each value as a Python literal
(or a bare word for a text field), converts it to the field's type
(`check_type`) and returns a new config; a field holding a frozen dataclass
(`nested_fields`: `encoder`, a wing's `analysis`) is set field by field.
`within`, `one_of`, `positive_or_none` and `size_ok` are the verdicts a
config class's `_checks` yield: `True`, or what is wrong. This module knows
no config class (`keras_vit.recipes.configs.base` defines them) and imports
the standard library only.

Example:

```python
from keras_vit.recipes.config_values import parse_image_size

parse_image_size("224x320")  # (224, 320)
```
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import math
import types
import typing

Config = typing.TypeVar("Config")

# The spellings a command line may give a yes/no field.
_BOOLEAN_WORDS = {"true": True, "yes": True, "on": True, "1": True,
                  "false": False, "no": False, "off": False, "0": False}  # fmt: skip


# The metadata key of a nested field (a frozen dataclass, set field by field:
# `--set encoder.pooling=gap`) whose fields the command line also takes by
# their own names (`--set pooling=gap`).
BARE_NAMES = "bare_names"


class ConfigError(ValueError):
    """A config value (or `--set` override) that cannot be used."""


def override(config: Config, assignments: list[str]) -> Config:
    """Applies `key=value` overrides to `config`, checking every type and value.

    Args:
        config: The config to change (any `RunConfig` subclass).
        assignments: Strings `"key=value"`; the value is a Python literal,
            or a bare word for `str` fields; yes/no fields also take
            `true/false`, `yes/no`, `on/off`, `1/0`; `image_size` also takes
            `224x320` or `224,320`. A field of a nested field (a frozen
            dataclass, `nested_fields`) is set as `field.name=value`
            (`encoder.qk_norm=true`, `analysis.hessian_top_k=3`); an encoder
            option also by its own name (`qk_norm=true`).

    Returns:
        A new config of the same class.

    Raises:
        ConfigError: An unknown key, a value of the wrong type or out of its
            range; the message names the field.

    Example:

    ```python
    from keras_vit.recipes.configs.base import TrainConfig

    override(TrainConfig(), ["epochs=3", "dataset=cifar10"]).epochs  # 3
    ```
    """
    nested = nested_fields(type(config))
    plain = {
        key: hint
        for key, hint in typing.get_type_hints(type(config)).items()
        if key not in nested
    }
    inner = {field: typing.get_type_hints(kind) for field, kind in nested.items()}
    bare = {  # Bare names, where no plain field has the name.
        name: field
        for field, kind in nested.items()
        if _takes_bare_names(type(config), field)
        for name in inner[field]
        if name not in plain
    }
    changes, parts = {}, {field: {} for field in nested}
    for assignment in assignments:
        key, sep, text = assignment.partition("=")
        key = key.strip()
        if not sep or not key:
            raise ConfigError(f"overrides look like key=value, not {assignment!r}")
        field, dot, name = key.partition(".")
        if dot and field in nested:
            if name not in inner[field]:
                close = difflib.get_close_matches(name, inner[field], n=1)
                hint = f" (did you mean {field}.{close[0]}?)" if close else ""
                raise ConfigError(
                    f"{key} is no {field} option{hint}; every {field} option is "
                    f"in {_source_file(nested[field])}"
                )
        elif key in bare:
            field, name = bare[key], key
        elif key in plain:
            field, name = None, key
        else:
            known = [*plain, *bare, *(f"{f}.{n}" for f in nested for n in inner[f])]
            close = difflib.get_close_matches(key, known, n=3)
            hint = f"did you mean {' or '.join(close)}? " if close else ""
            if key in nested:
                hint = f"{key} is set field by field ({key}.<name>=...); "
            raise ConfigError(
                f"unknown config key {key!r}; {hint}--help lists every "
                f"{type(config).__name__} field"
            )
        text = text.strip()
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            value = text  # A bare word, e.g. dataset=cifar10.
        if key == "image_size" and not isinstance(value, (tuple, list)):
            try:  # 224, 224,320 or 224x320 (not Python's 0x10 = 16).
                value = parse_image_size(text)
            except ValueError as error:
                raise ConfigError(f"image_size={text!r}: {error}") from None
        if field is None:
            changes[name] = check_type(key, value, plain[name])
        else:
            parts[field][name] = check_type(key, value, inner[field][name])
    for field, values in parts.items():
        if values:
            try:
                changes[field] = dataclasses.replace(getattr(config, field), **values)
            except ValueError as error:
                raise ConfigError(str(error).replace("`", "")) from None
    return dataclasses.replace(config, **changes)


def nested_fields(kind: type) -> dict[str, type]:
    """`{field: its class}` for the fields of the config class `kind` that
    hold a frozen dataclass (`encoder`: `EncoderOptions`; a wing's, e.g.
    `CompareConfig.analysis`), which the command line sets field by field."""
    return {
        name: hint
        for name, hint in typing.get_type_hints(kind).items()
        if isinstance(hint, type)
        and dataclasses.is_dataclass(hint)
        and hint.__dataclass_params__.frozen
    }


def _takes_bare_names(kind: type, field: str) -> bool:
    (found,) = [f for f in dataclasses.fields(kind) if f.name == field]
    return bool(found.metadata.get(BARE_NAMES))


def _source_file(kind: type) -> str:
    """`keras_vit/models/options.py` for `EncoderOptions`."""
    return kind.__module__.replace(".", "/") + ".py"


def check_type(key: str, value, hint):
    """Returns `value` converted to the field type `hint`, or raises.

    Accepts ints for float fields, lists for tuple fields, `None` for
    optional fields and a dict of fields for a dataclass field (`rope`).

    Raises:
        ConfigError: `value` does not fit `hint`.
    """
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(hint):
            try:
                return check_type(key, value, option)
            except ConfigError:
                if isinstance(value, dict) and dataclasses.is_dataclass(option):
                    raise  # Its own message names the field that is wrong.
                continue
        raise ConfigError(f"{key}={value!r} does not fit {_type_name(hint)}")
    if hint is type(None):
        if value is None:
            return None
    elif hint is bool:
        if isinstance(value, bool):
            return value
        word = str(value).strip().lower()
        if not isinstance(value, float) and word in _BOOLEAN_WORDS:
            return _BOOLEAN_WORDS[word]  # true/false, yes/no, on/off, 1/0
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if math.isfinite(value):
                return float(value)
    elif hint is str:
        if isinstance(value, str):
            return value
    elif origin is tuple:
        args = typing.get_args(hint)
        if isinstance(value, (tuple, list)):
            if len(args) == 2 and args[1] is Ellipsis:
                return tuple(check_type(key, v, args[0]) for v in value)
            if len(value) == len(args):
                return tuple(
                    check_type(key, v, a) for v, a in zip(value, args, strict=True)
                )
    elif dataclasses.is_dataclass(hint) and isinstance(hint, type):
        # An option group inside an option (`rope`): its instance, or a dict
        # of its fields, each checked against the field's own type.
        if isinstance(value, hint):
            return value
        if isinstance(value, dict):
            return _dataclass_from_dict(key, value, hint)
    else:
        raise TypeError(f"Unsupported config type {hint!r} for {key!r}.")
    raise ConfigError(f"{key}={value!r} does not fit {_type_name(hint)}")


def _dataclass_from_dict(key: str, value: dict, kind: type):
    """`kind(**value)`, each value checked against its field's type; one
    `ConfigError` naming every unknown key, or the field's own refusal."""
    hints = typing.get_type_hints(kind)
    fields = [f.name for f in dataclasses.fields(kind) if f.init]
    unknown = sorted(str(name) for name in value if name not in fields)
    if unknown:
        raise ConfigError(
            f"{key}: no {_type_name(kind)} field {', '.join(unknown)}; "
            f"its fields: {', '.join(fields)}"
        )
    checked = {
        name: check_type(f"{key}.{name}", item, hints[name])
        for name, item in value.items()
    }
    try:
        return kind(**checked)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"{key}: {error}".replace("`", "")) from None


def parse_image_size(text: str) -> tuple[int, int]:
    """`"224"` -> `(224, 224)`; `"224,320"` or `"224x320"` -> `(224, 320)`.

    Raises:
        ValueError: not one or two positive integers.
    """
    parts = str(text).lower().replace("x", ",").split(",")
    try:
        sides = tuple(int(part) for part in parts)
    except ValueError:
        sides = ()
    if len(sides) == 1:
        sides *= 2
    if len(sides) != 2 or min(sides) <= 0:
        raise ValueError(f"not an image size: {text!r} (use 224, 224,320 or 224x320)")
    return sides


def positive_or_none(value):
    """`True` for `None` or a positive value, else what is wrong (a `_checks`
    entry's verdict, as for every config class, the wing's included)."""
    return value is None or value > 0 or "must be positive (or None)"


def within(value, low, high, *, low_open=False, high_open=False):
    above = value > low if low_open else value >= low
    below = value < high if high_open else value <= high
    if above and below:
        return True
    return (
        f"must be in {'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
    )


def one_of(value, choices):
    """`True` if `value` is one of `choices` (and of its type), else what is
    wrong (a `_checks` entry's verdict)."""
    # `True == 1`: compare types too, so that verbose=True is refused.
    if any(value == c and type(value) is type(c) for c in choices):
        return True
    return f"must be one of {', '.join(map(repr, choices))}"


def size_ok(size):
    sides = (size, size) if isinstance(size, int) else tuple(size)
    if len(sides) == 2 and all(isinstance(s, int) and s > 0 for s in sides):
        return True
    return "must be a positive int or (height, width)"


def _type_name(hint) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")
