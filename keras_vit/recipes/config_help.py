"""The config fields a command's `--help` lists, read from where they are
documented: one source, no copy to keep in step.

A config field (`keras_vit/recipes/configs/base.py`) is documented by the
comment on its line, or by the comment lines just above it; a field of a
nested field (a frozen dataclass such as `keras_vit.EncoderOptions`, set
as `encoder.<name>`) by the `Attributes:` section of its class's
docstring. `fields(kind)` gives each field's name (nested ones as
`<field>.<name>`), type, default and the first sentence of its
documentation; `describe_fields(kind)` formats them for `--help`. Reading
them imports neither Keras nor TensorFlow (a wing's config may: its module
is imported to list it).

Example:

```python
from keras_vit.recipes.config_help import describe_fields
from keras_vit.recipes.configs.base import TrainConfig

print(describe_fields(TrainConfig))
```
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import io
import re
import textwrap
import tokenize

from keras_vit.recipes.configs.base import BARE_NAMES
from keras_vit.recipes.configs.base import nested_fields


@dataclasses.dataclass(frozen=True)
class Field:
    """One config field as `--help` lists it.

    Attributes:
        name: The name `--set` takes, e.g. `"epochs"` or
            `"encoder.drop_path_rate"`.
        type: Its type as written, e.g. `"int | tuple[int, int]"`.
        default: Its default, as `repr` gives it.
        meaning: The first sentence of its documentation.
    """

    name: str
    type: str
    default: str
    meaning: str


def fields(kind: type) -> list[Field]:
    """Every field of the config class `kind`, the nested fields' last.

    Args:
        kind: A config dataclass, e.g. `TrainConfig`.

    Returns:
        A list of `Field`, in declaration order; a nested field (a frozen
        dataclass, e.g. `encoder`) is given as its own fields,
        `encoder.<name>`, after the others.
    """
    docs = {}
    for cls in reversed(kind.__mro__):  # A subclass's comment wins.
        if dataclasses.is_dataclass(cls):
            docs.update(_comments(cls))
    default = kind()
    nested = nested_fields(kind)
    out = [
        Field(
            field.name,
            _type_name(field.type),
            repr(getattr(default, field.name)),
            _first_sentence(docs.get(field.name, "")),
        )
        for field in dataclasses.fields(kind)
        if field.name not in nested
    ]
    for name, cls in nested.items():
        attributes = _attribute_docs(cls)
        value = getattr(default, name)
        out.extend(
            Field(
                f"{name}.{field.name}",
                _type_name(field.type),
                repr(getattr(value, field.name)),
                _first_sentence(attributes.get(field.name, "")),
            )
            for field in dataclasses.fields(cls)
        )
    return out


def describe_fields(kind: type, width: int = 88) -> str:
    """The `--help` text listing `fields(kind)`: per field a line
    `name: type = default`, then its meaning, indented and wrapped.

    Args:
        kind: A config dataclass.
        width: The column to wrap at.
    """
    bare = [
        field.name
        for field in dataclasses.fields(kind)
        if field.metadata.get(BARE_NAMES)
    ]
    also = (
        f"; a field of {' or '.join(bare)} is also set by its own name, e.g. "
        "--set drop_path_rate=0.1"
        if bare
        else ""
    )
    lines = textwrap.wrap(
        f"config fields (--set KEY=VALUE; the defaults of {kind.__name__}, "
        f"which a --config changes{also}):",
        width,
    )
    for field in fields(kind):
        lines.append(f"  {field.name}: {field.type} = {field.default}")
        lines.extend(
            textwrap.wrap(
                field.meaning or "(undocumented)",
                width,
                initial_indent="      ",
                subsequent_indent="      ",
            )
        )
    return "\n".join(lines)


@functools.cache
def _comments(cls: type) -> dict[str, str]:
    """`{field: its comment}` for the fields `cls` itself declares: the
    comment on the field's line, else the comment lines just above it (not
    a section rule such as `# -- data ---`)."""
    try:
        source = textwrap.dedent(inspect.getsource(cls))
    except (OSError, TypeError):  # Installed without its source files.
        return {}
    comments = {}  # line number -> comment text
    code_lines = set()
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            comments[token.start[0]] = _comment_text(token.string)
        elif token.type not in (
            tokenize.NL,
            tokenize.NEWLINE,
            tokenize.INDENT,
            tokenize.DEDENT,
            tokenize.ENDMARKER,
        ):
            code_lines.update(range(token.start[0], token.end[0] + 1))
    (node,) = ast.parse(source).body
    out = {}
    for statement in node.body:
        if not isinstance(statement, ast.AnnAssign):
            continue
        name = statement.target.id
        lines = range(statement.lineno, statement.end_lineno + 1)
        trailing = [comments[n] for n in lines if n in comments]
        if any(trailing):
            out[name] = " ".join(text for text in trailing if text)
            continue
        above, line = [], statement.lineno - 1
        while line in comments and line not in code_lines:
            if comments[line].startswith("--"):
                break
            above.insert(0, comments[line])
            line -= 1
        if above:
            out[name] = " ".join(text for text in above if text)
    return out


_PRAGMA = re.compile(r"\s*(?:fmt:\s*skip|noqa\b.*|type:\s*ignore\b.*)$")


def _comment_text(comment: str) -> str:
    text = comment.lstrip("#").strip()
    return _PRAGMA.sub("", text).strip()


@functools.cache
def _attribute_docs(cls: type) -> dict[str, str]:
    """`{field: text}` from the `Attributes:` section of `cls`' docstring."""
    docstring = inspect.getdoc(cls) or ""
    out, name, inside = {}, None, False
    for line in docstring.splitlines():
        if line.strip() == "Attributes:":
            inside = True
            continue
        if not inside:
            continue
        if line and not line.startswith(" "):  # The next section.
            break
        match = re.match(r"^ {4}(\w+): (.*)$", line)
        if match:
            name = match[1]
            out[name] = match[2].strip()
        elif name and line.strip():
            out[name] += " " + line.strip()
    return out


# A sentence ends at ". " before a capital, not after "e.g." or "i.e.".
_SENTENCE_END = re.compile(r"(?<![eE]\.g)(?<![iI]\.e)(?<!etc)\.\s+(?=[A-Z(`\"'])")


def _first_sentence(text: str) -> str:
    text = " ".join(text.replace("`", "").split())
    match = _SENTENCE_END.search(text)
    return text[: match.start() + 1] if match else text


def _type_name(annotation) -> str:
    if isinstance(annotation, str):  # `from __future__ import annotations`
        return annotation
    return getattr(annotation, "__name__", None) or str(annotation)
