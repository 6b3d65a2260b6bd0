"""The model card (`README.md`) of a pretrained folder.

`keras_vit.save_pretrained` writes a folder in timm's Hub format (its
`config.json` and `model.safetensors`), which both keras_vit and timm load.
Its card says so to the Hub: the front matter names `library_name: timm`
(the Hub then offers timm's loading snippet, which works; `keras` would
advertise `keras.saving.load_model`, which cannot read this folder), the
`pipeline_tag` (`image-classification`, or `image-feature-extraction` for a
model without a head), the licence, the datasets and the names of the
metrics, with the tags `timm` and `keras_vit`; the body shows a working
snippet for each library (the repository or the folder filled in), the
model's sizes, its preprocessing, the metrics' values, the training recipe
and the licence.

The card is built from the folder's `config.json` alone (plus the metrics
and recipe, which the folder does not keep) and needs no `huggingface_hub`:
`save_pretrained` writes local folders without it. The front matter is
written by hand, every value that is not a plain word double-quoted with
YAML's escapes, so a name holding `:`, `#`, quotes or newlines stays one
value.

`fields` takes the card fields timm's `push_to_hf_hub(model_card=...)`
takes (`description`, `details`, `usage`, `comparison`, `citation`, `tags`,
`license`, `license_name`, `license_link`) plus `datasets` and `base_model`
(Hub ids). As in timm, the `Dataset` and `Pretrain Dataset` of `details` are
also listed as `datasets`.

Example:

```python
import json

from keras_vit.model_card import render_card

with open("my-vit/config.json") as f:
    card = render_card(json.load(f), repo_id="me/my-vit", metrics={"top1": 0.81})
```
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from keras_vit.models.preprocessing import Preprocessing

# The card fields `fields` takes: timm's `model_card=` keys, and Hub ids.
CARD_FIELDS = (
    "description",
    "details",
    "usage",
    "comparison",
    "citation",
    "tags",
    "license",
    "license_name",
    "license_link",
    "datasets",
    "base_model",
)
_TEXT_FIELDS = ("description", "usage", "comparison", "license", "license_name",
                "license_link")  # fmt: skip
_LIST_FIELDS = ("citation", "tags", "datasets", "base_model")  # a str, or a list
LIBRARY = "timm"  # The folder's format, and the Hub library that loads it.
CLASSIFICATION = "image-classification"
FEATURES = "image-feature-extraction"
_TAGS = ("timm", "keras_vit", "vision-transformer")
# A YAML scalar written bare: a word that YAML reads back as that string.
_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.+/-]*")
_YAML_WORDS = {"y", "n", "yes", "no", "on", "off", "true", "false", "null"}


def card_fields(model_card: Mapping | None, license: str | None = None) -> dict:  # noqa: A002
    """The checked card fields of `model_card`, with the licence agreed.

    Args:
        model_card: A dict of `CARD_FIELDS`, or `None`.
        license: The licence given besides (`save_pretrained(license=...)`).

    Returns:
        A new dict; its `"license"` is the one given either way, if any.

    Raises:
        TypeError: `model_card` is not a dict, or a field has the wrong type.
        ValueError: an unknown field, or two different licences.
    """
    if model_card is None:
        model_card = {}
    if not isinstance(model_card, Mapping):
        raise TypeError(
            "model_card must be a dict of card fields, "
            f"not {type(model_card).__name__}."
        )
    unknown = sorted(str(key) for key in model_card if key not in CARD_FIELDS)
    if unknown:
        raise ValueError(
            f"Unknown model card fields {unknown}; known: {list(CARD_FIELDS)}."
        )
    fields = dict(model_card)
    for key in _TEXT_FIELDS:
        if key in fields and not isinstance(fields[key], str):
            raise TypeError(f"model_card[{key!r}] must be a str.")
    for key in _LIST_FIELDS:
        if key in fields:
            fields[key] = _strings(fields[key], key)
    if "details" in fields and not isinstance(fields["details"], Mapping):
        raise TypeError("model_card['details'] must be a dict.")
    given = fields.get("license")
    if license and given and license != given:
        raise ValueError(
            f"Two licences: license={license!r} and model_card['license']={given!r}."
        )
    if license or given:
        fields["license"] = license or given
    return fields


def _strings(value, key: str) -> list[str]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list | tuple) or not all(
        isinstance(v, str) for v in values
    ):
        raise TypeError(f"model_card[{key!r}] must be a str or a list of str.")
    return list(values)


def render_card(
    config: Mapping,
    *,
    metrics: Mapping | None = None,
    recipe: Mapping | None = None,
    repo_id: str | None = None,
    folder: str | None = None,
    fields: Mapping | None = None,
) -> str:
    """The `README.md` of a pretrained folder.

    Args:
        config: The folder's `config.json` (its `architecture` and its
            `keras_vit` section are read).
        metrics: E.g. `{"top1": 0.81}`: their names go into the front
            matter, their values into a table.
        recipe: The training config, shown as JSON.
        repo_id: The Hub repository (`"org/name"`, optionally
            `"org/name@revision"`) the snippets load from.
        folder: Else the folder they load from (a URL: a local copy of it,
            by its last name); else the folder the card is in (`"."`).
        fields: Card fields (`card_fields`).

    Returns:
        The card's text: YAML front matter, then Markdown.

    Raises:
        TypeError, ValueError: bad `fields` (`card_fields`).
    """
    fields = card_fields(fields)
    ours = config["keras_vit"]
    headless = not ours.get("num_classes")
    license_ = fields.get("license") or ours.get("license")
    title = repo_id.split("@")[0].split("/")[-1] if repo_id else ours["name"]
    lines = _front_matter(fields, headless, license_, metrics)
    lines += [f"# {title}", ""]
    if fields.get("description"):
        lines += [fields["description"].strip(), ""]
    lines += [_summary(ours), ""]
    lines += _details(config, fields)
    lines += _use(repo_id, folder, ours, headless, fields.get("usage"))
    if ours.get("preprocessing"):
        prep = Preprocessing.from_config(ours["preprocessing"])
        lines += ["## Preprocessing", "", prep.describe() + ".", ""]
    if metrics:
        lines += ["## Metrics", "", "| metric | value |", "|---|---|"]
        lines += [f"| {_cell(k)} | {_cell(v)} |" for k, v in metrics.items()]
        lines.append("")
    if recipe:
        text = json.dumps(recipe, indent=2, sort_keys=True, default=str)
        lines += ["## Training recipe", "", *_fenced("json", text), ""]
    if fields.get("comparison"):
        lines += ["## Comparison", "", fields["comparison"].strip(), ""]
    if license_:
        source = ours.get("source") if not fields.get("license") else None
        whose = f" (as `{source}` states)" if source else ""
        lines += ["## Licence", "", f"{license_}{whose}.", ""]
    if fields.get("citation"):
        lines += ["## Citation", ""]
        for citation in fields["citation"]:
            lines += [*_fenced("bibtex", citation.strip()), ""]
    return "\n".join(lines)


def _front_matter(fields, headless: bool, license_, metrics) -> list[str]:
    task = FEATURES if headless else CLASSIFICATION
    tags = list(dict.fromkeys([task, *_TAGS, *fields.get("tags", ())]))
    lines = ["---", *_yaml_list("tags", tags)]
    lines += [f"pipeline_tag: {task}", f"library_name: {LIBRARY}"]
    if license_:
        lines.append(f"license: {_yaml(license_)}")
    for key in ("license_name", "license_link"):
        if fields.get(key):
            lines.append(f"{key}: {_yaml(fields[key])}")
    lines += _yaml_list("datasets", _datasets(fields))
    lines += _yaml_list("base_model", fields.get("base_model", ()))
    lines += _yaml_list("metrics", [str(name) for name in metrics or ()])
    return [*lines, "---", ""]


def _datasets(fields) -> list[str]:
    """`datasets`, then the `Dataset` and `Pretrain Dataset` of `details`
    (lower-cased, as timm lists them)."""
    found = list(fields.get("datasets", ()))
    details = fields.get("details") or {}
    for key in ("Dataset", "Pretrain Dataset"):
        value = details.get(key)
        values = [value] if isinstance(value, str) else list(value or ())
        found += [str(v).lower() for v in values]
    return list(dict.fromkeys(found))


def _yaml_list(key: str, values) -> list[str]:
    values = list(values)
    return [f"{key}:", *(f"- {_yaml(v)}" for v in values)] if values else []


def _yaml(value: str) -> str:
    """`value` as a YAML scalar that reads back as the same string."""
    value = str(value)
    if _PLAIN.fullmatch(value) and value.lower() not in _YAML_WORDS:
        return value
    return '"' + "".join(_yaml_char(c) for c in value) + '"'


def _yaml_char(char: str) -> str:
    if char in '"\\':
        return "\\" + char
    if " " <= char <= "~":
        return char
    code = ord(char)
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _summary(ours) -> str:
    height, width = ours["image_size"]
    return (
        f"A Vision Transformer saved by keras_vit {ours['version']}: width "
        f"{ours['hidden_dim']}, depth {ours['depth']}, {ours['num_heads']} heads, "
        f"MLP {ours['mlp_dim']}, patch {ours['patch_size']}, {height}x{width} px, "
        f"{ours['num_classes'] or 'no'} classes."
    )


def _details(config, fields) -> list[str]:
    ours = config["keras_vit"]
    height, width = ours["image_size"]
    model_type = "Image classification"
    if not ours.get("num_classes"):
        model_type = "Image feature backbone"
    lines = ["## Model Details", "", f"- **Model type:** {model_type}"]
    lines.append(f"- **Architecture:** timm `{config['architecture']}`")
    lines.append(f"- **Image size:** {height} x {width}")
    if ours.get("num_classes"):
        lines.append(f"- **Classes:** {ours['num_classes']}")
    if ours.get("source"):
        lines.append(f"- **Fine-tuned or converted from:** `{ours['source']}`")
    for key, value in (fields.get("details") or {}).items():
        if isinstance(value, list | tuple):
            lines += [f"- **{key}:**", *(f"  - {v}" for v in value)]
        elif isinstance(value, Mapping):
            lines += [f"- **{key}:**", *(f"  - {k}: {v}" for k, v in value.items())]
        else:
            lines.append(f"- **{key}:** {value}")
    return [*lines, ""]


def _use(repo_id, folder, ours, headless: bool, usage) -> list[str]:
    """The "Use" section: a keras_vit and a timm snippet, loading from the
    repository or the folder."""
    if repo_id:
        ours_name, timm_name, where = f"hf://{repo_id}", f"hf-hub:{repo_id}", ""
    else:
        local = _local_name(folder)
        ours_name, timm_name = local, f"local-dir:{local}"
        where = ""
        if folder is None:
            where = "In this folder:"
        elif local != folder:  # a URL
            where = f"From a local copy of `{folder}`:"
    lines = ["## Use", ""]
    if where:
        lines += [where, ""]
    lines += ["With keras_vit:", "", *_fenced("python", _keras_vit_snippet(
        ours_name, ours, headless)), ""]  # fmt: skip
    lines += [
        "With timm (the weights are in its layout; `config.json` holds its "
        "`model_args`):",
        "",
        *_fenced("python", _timm_snippet(timm_name, headless)),
        "",
    ]
    if usage:
        lines += [usage.strip(), ""]
    return lines


def _local_name(folder: str | None) -> str:
    if folder is None:
        return "."
    if "://" in folder:  # a URL: no library loads from it; a copy does
        return folder.rstrip("/").rsplit("/", 1)[-1]
    return folder


def _keras_vit_snippet(name: str, ours, headless: bool) -> str:
    load = f"model = keras_vit.from_pretrained({json.dumps(name)})"
    if not headless:
        return "\n".join(["import keras_vit", "", load,
                          'keras_vit.predict(model, "image.jpg")'])  # fmt: skip
    height, width = ours["image_size"]
    return "\n".join([
        "import numpy as np",
        "",
        "import keras_vit",
        "",
        load,
        f"pixels = np.zeros((1, {height}, {width}, 3), \"float32\")  # normalised"
        " as under Preprocessing",
        f"features = model(pixels)  # (1, {ours['hidden_dim']})",
    ])  # fmt: skip


def _timm_snippet(name: str, headless: bool) -> str:
    output = "features" if headless else "logits"
    return "\n".join([
        "import timm",
        "import torch",
        "from PIL import Image",
        "",
        f"model = timm.create_model({json.dumps(name)}, pretrained=True).eval()",
        "config = timm.data.resolve_model_data_config(model)",
        "transform = timm.data.create_transform(**config, is_training=False)",
        'image = Image.open("image.jpg").convert("RGB")',
        "with torch.no_grad():",
        f"    {output} = model(transform(image).unsqueeze(0))",
    ])  # fmt: skip


def _fenced(language: str, text: str) -> list[str]:
    """`text` in a code fence longer than any run of backticks in it."""
    runs = [len(run) for run in re.findall(r"`+", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return [fence + language, text, fence]


def _cell(value) -> str:
    """`value` as one Markdown table cell."""
    return " ".join(str(value).split()).replace("|", "\\|")
