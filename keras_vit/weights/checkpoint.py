"""Every weight source, read into one `Checkpoint` in the original layout.

The original `.npz` key layout (`Transformer/encoderblock_0/...`,
`keras_vit.weights.keys`) is the common language of `keras_vit.weights`.
Each source becomes a `Checkpoint` in that layout, and one strict
plan-then-assign step (`keras_vit.weights.checks`) loads it, whatever it
came from:

- a pretrained tag (downloaded into the Keras cache) or a checkpoint file:
  its format is picked by file type (`formats.FORMATS`: `.npz`,
  `.safetensors`), its key dialect by its keys (`DIALECTS`: timm, Hugging
  Face, big_vision; an `.npz` of none of them is the original layout), and
  the dialect's table is handed to the one rule engine
  (`dialects.rules.translate`);
- a Keras `.keras` archive or `.weights.h5` file written by a keras_vit
  model, read from its HDF5 weights by layer name (`formats.keras_h5`;
  nothing is assigned, and no model is built, until every key has been
  checked);
- a model in memory (any keras_vit model: a classifier, an encoder, a
  masked-patch pre-training model), through keras_vit's own table
  (`dialects.ours`);
- a dict of arrays in the original layout.

Files are read within one `limits.ReadBudget` per load: the files' sizes
plus the model's parameter bytes (`keras_vit.weights.formats.limits`), so
that no claim in a file allocates more before it is checked.

Example:

```python
params = to_original_layout(read_safetensors("model.safetensors"), num_heads=12)
```
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping

import keras
import numpy as np

from keras_vit._export import export
from keras_vit.models import layout as names
from keras_vit.models import zoo
from keras_vit.models.layout import ViTLayout
from keras_vit.models.options import option_names
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.variants import parse_variant
from keras_vit.weights import architecture
from keras_vit.weights import checks
from keras_vit.weights import keys
from keras_vit.weights import registry
from keras_vit.weights import sources
from keras_vit.weights.dialects import big_vision
from keras_vit.weights.dialects import huggingface
from keras_vit.weights.dialects import ours
from keras_vit.weights.dialects import timm
from keras_vit.weights.dialects.rules import Dialect
from keras_vit.weights.dialects.rules import translate
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.formats import FORMATS
from keras_vit.weights.formats import format_of
from keras_vit.weights.formats import keras_h5
from keras_vit.weights.formats import limits
from keras_vit.weights.formats.npz import normalize

KERAS_SUFFIXES = keras_h5.SUFFIXES

# The foreign key dialects, recognised by their keys in this order.
DIALECTS = (timm.DIALECT, huggingface.DIALECT, big_vision.DIALECT)


@export("keras_vit.weights.Checkpoint")
@dataclasses.dataclass
class Checkpoint:
    """Weights in the original `.npz` layout, whatever their source.

    Attributes:
        params: `{key: array}`, e.g. `{"embedding/kernel": ..., "cls": ...}`.
        grid_size: The patch grid `(h, w)` of the position embedding, when
            the source says (a square table's grid is inferred otherwise).
        source: What it was read from, for messages.
        notes: What reading it involved (e.g. pre-training layers left out).
        heads_recorded: Whether the source stores its attention weights per
            head, so that their shapes tell its number of heads. `False` for
            timm and Hugging Face files, whose fused projections are split
            by the model's heads: messages then do not name a head count.
        preprocessing: The input contract the weights were trained with,
            when the source records one (a tag, a Hub or saved folder);
            `load_weights` gives it to the model.
        class_names: The names of the head's classes, when recorded.
    """

    params: dict[str, np.ndarray]
    grid_size: tuple[int, int] | None = None
    source: str = "weights"
    notes: list[str] = dataclasses.field(default_factory=list)
    heads_recorded: bool = True
    preprocessing: Preprocessing | None = None
    class_names: tuple[str, ...] | None = None


@export("keras_vit.weights.read_checkpoint")
def read_checkpoint(
    weights,
    model: keras.Model,
    layout: dict,
    *,
    cache_dir: str | os.PathLike | None = None,
    tag_variant: str | None = None,
) -> Checkpoint:
    """Reads any weight source into a `Checkpoint` for `model`.

    Args:
        weights: A tag, a checkpoint name or file path, a resolved
            `sources.Source`, a `keras.Model`, a `Checkpoint` or
            `{key: array}` in the original layout.
        model: The model the weights are for (a Keras weights file is read
            by its layer names; a tag is looked up for its variant).
        layout: `ours.checkpoint_layout(model)[0]`, computed once by the
            caller.
        cache_dir: Root of the download cache for tags.
        tag_variant: The variant to look a tag up for (default: the model's).

    Returns:
        A `Checkpoint`.

    Every file is read within `limits.ReadBudget.for_model(model)`: the
    files' sizes plus the model's parameter bytes.
    """
    if isinstance(weights, Checkpoint):
        return weights
    if isinstance(weights, keras.Model):
        return from_model(weights)
    if isinstance(weights, Mapping):
        return Checkpoint(normalize(dict(weights)), source="a dict of arrays")
    budget = limits.ReadBudget.for_model(model)
    if isinstance(weights, sources.Source):  # a name resolved by the caller
        return _from_resolved(weights, model, layout, budget)
    path = os.fspath(weights)
    if registry.is_tag(path) and not os.path.exists(path):
        return _from_tag(path, model, layout, cache_dir, tag_variant, budget)
    if sources.is_name(path):
        source = sources.resolve(path, variant=tag_variant, cache_dir=cache_dir)
        return _from_resolved(source, model, layout, budget)
    if not os.path.exists(path):
        if os.sep in path or path.endswith(_file_suffixes()):
            raise FileNotFoundError(f"No checkpoint file at {path!r}.")
        raise ValueError(sources.unknown_name_message(path))
    if os.path.isdir(path):
        raise CheckpointError(_directory_message(path))
    if path.endswith(KERAS_SUFFIXES):
        return from_keras_file(path, model)
    params, heads_recorded = _read_file(path, layout, budget)
    return Checkpoint(params, source=path, heads_recorded=heads_recorded)


def _file_suffixes() -> tuple[str, ...]:
    """What a directory may hold that `weights=` reads, for the error's hint
    (asked when needed: a wing may register a format after this import)."""
    return (*(s for f in FORMATS for s in f.suffixes), *keras_h5.READABLE_SUFFIXES)


def _directory_message(path: str) -> str:
    """One sentence on why a directory is refused, and what to pass instead."""
    try:
        names = sorted(os.listdir(path))
    except OSError:
        names = []
    if any(n in ("saved_model.pb", "saved_model.pbtxt") for n in names):
        return (
            f"{path!r} is a TensorFlow SavedModel directory, which keras_vit does "
            "not load weights from (an export for serving): pass the .keras, "
            ".weights.h5 or checkpoint file the model was built from."
        )
    files = [os.path.join(path, n) for n in names if n.endswith(_file_suffixes())]
    hint = f", e.g. {files[0]!r}" if files else ""
    kinds = ", ".join(_file_suffixes()[:-1]) + " or " + _file_suffixes()[-1]
    return (
        f"{path!r} is a directory; `weights=` takes a checkpoint file ({kinds})"
        f"{hint}, or a known tag."
    )


def _read_file(path: str, layout: dict, budget: limits.ReadBudget) -> tuple[dict, bool]:
    """A checkpoint file in the original layout: its format, then its dialect.

    Returns:
        `(params, heads_recorded)`: the arrays, and whether the file's own
        shapes tell its number of attention heads (see `Dialect`).
    """
    fmt = format_of(path)
    tensors = fmt.read(path, budget=budget)
    checks.check_finite(tensors, path)  # named by the file's own keys
    dialect = dialect_of(tensors)
    if fmt.original_layout and dialect is None:
        return tensors, True
    params = to_original_layout(tensors, _heads(layout), what=fmt.name)
    return params, dialect.records_heads


def dialect_of(keys) -> Dialect | None:
    """The first of `DIALECTS` that recognises a key set, or `None`."""
    return next((d for d in DIALECTS if d.recognizes(keys)), None)


@export("keras_vit.weights.to_original_layout")
def to_original_layout(
    tensors: dict[str, np.ndarray], num_heads: int | None, *, what: str = "safetensors"
) -> dict[str, np.ndarray]:
    """Translates timm, Hugging Face or big_vision tensors into the original layout.

    The dialect is recognised by the keys (`DIALECTS`). Keys that match no
    rule are passed through unchanged, so that the strict check reports
    them as unexpected.

    Args:
        tensors: `{name: array}`, e.g. from `read_safetensors`.
        num_heads: Attention heads of the target model; PyTorch checkpoints
            store the projections as `(D, D)` matrices and the original layout
            splits them per head.
        what: The file format, for the message about unknown keys.

    Returns:
        `{key: array}` in the original `.npz` layout.

    Raises:
        CheckpointError: for keys of no known dialect.

    Example:

    ```python
    params = to_original_layout(read_safetensors("model.safetensors"), 12)
    ```
    """
    dialect = dialect_of(tensors)
    if dialect is None:
        known = [f"{d.name} (`{d.example}`)" for d in DIALECTS]
        raise CheckpointError(
            f"Unrecognised {what} key layout: expected {', '.join(known[:-1])} or "
            f"{known[-1]} keys. First keys: {list(tensors)[:5]}"
        )
    params, _ = translate(tensors, dialect, num_heads)  # the rest: reported
    return normalize(params)


def _heads(layout: dict) -> int | dict | None:
    """The heads to split a checkpoint's projections by, read off the
    layout a model expects: one number, or, when its attention pool has
    other heads than its blocks, `{pool layer: heads, None: the blocks'}`."""
    heads = {
        k[: -len("/query/kernel")]: int(t.shape[1])
        for k, t in layout.items()
        if k.endswith("/query/kernel")
    }
    pool = heads.pop(keys.MAP_ATTENTION, None)
    blocks = next(iter(heads.values()), None)
    if pool is None or pool == blocks:
        return blocks if blocks is not None else pool
    return {None: blocks, keys.MAP_ATTENTION: pool}


def _from_tag(tag: str, model, layout: dict, cache_dir, variant, budget) -> Checkpoint:
    if variant is None:
        variant = architecture.describe({k: t.shape for k, t in layout.items()}).variant
    entry = registry.find(tag, variant)
    _check_family(entry, model)  # before any download
    stride = parse_variant(entry.variant).total_stride
    file = registry.fetch(entry, cache_dir)
    params, heads_recorded = _read_file(file, layout, budget)
    return Checkpoint(
        params,
        grid_size=(entry.image_size // stride,) * 2,  # the files' grids are square
        source=file,
        notes=[f"Loaded {entry.tag!r} from {file}."],
        heads_recorded=heads_recorded,
        preprocessing=entry.preprocessing,
    )


def _from_resolved(source: sources.Source, model, layout: dict, budget) -> Checkpoint:
    if source.entry is not None:
        _check_family(source.entry, model)
    return from_source(source, _heads(layout), budget=budget)


def from_source(
    source: sources.Source,
    num_heads: int | None,
    *,
    budget: limits.ReadBudget | None = None,
) -> Checkpoint:
    """The weights of a checkpoint found by name (`sources.resolve`).

    Every shard of a sharded checkpoint is read, then translated as one
    file (its dialect is recognised over all keys). A keras-hub preset is
    built by keras-hub itself: `keras_vit.from_pretrained` converts it.

    Args:
        source: A resolved `sources.Source`.
        num_heads: The attention heads the fused projections are split by.
        budget: What reading its files may allocate, shared by every shard
            (`limits.ReadBudget`). Defaults to the cap without a model.
    """
    notes = [f"Loaded {source.name!r} from {source.location}."]
    if source.kind == "keras_hub":
        raise CheckpointError(
            f"{source.name!r} is a keras-hub preset, which keras-hub builds: "
            f"load it with keras_vit.from_pretrained({source.name!r})."
        )
    tensors, original = {}, True
    budget = limits.ReadBudget.default() if budget is None else budget
    for file in source.files:
        fmt = format_of(file)
        part = fmt.read(file, budget=budget)
        checks.check_finite(part, file)
        tensors.update(part)
        original = original and fmt.original_layout
    dialect = dialect_of(tensors)
    if original and dialect is None:  # an original .npz
        params, heads_recorded = tensors, True
    else:
        params = to_original_layout(tensors, num_heads, what="safetensors")
        heads_recorded = dialect.records_heads
    grid = None
    if source.entry is not None:  # the table's files have square grids
        entry = source.entry
        grid = (entry.image_size // parse_variant(entry.variant).total_stride,) * 2
    return Checkpoint(
        params,
        grid_size=grid,
        source=source.location,
        notes=notes,
        heads_recorded=heads_recorded,
        preprocessing=source.preprocessing,
        class_names=source.class_names,
    )


# The encoder options a checkpoint's keys do not fix (the loading rules
# handle the pooling; LayerScale is compared by presence).
_FREE_OPTIONS = (
    "dropout_rate", "attention_dropout_rate", "drop_path_rate", "remat", "pooling",
    "gelu_approximate", "layer_scale_init",
)  # fmt: skip


def _check_family(entry: registry.PretrainedWeights, model: keras.Model) -> None:
    """Refuses, in one line, a family's tag for a model of other options (the
    paper's checkpoints initialise any encoder the strict check lets them)."""
    if entry.family is None or not ViTLayout.describes(model):
        return
    family = zoo.named(entry.family)
    if family.paper:
        return
    want = entry.options or family.options  # the checkpoint's own, exactly
    have = ViTLayout.of(model).encoder_options
    differ = [
        f
        for f in option_names()
        if f not in _FREE_OPTIONS and getattr(want, f) != getattr(have, f)
    ]
    if (want.layer_scale_init is None) != (have.layer_scale_init is None):
        differ.append("layer_scale_init")
    if differ:
        raise CheckpointError(
            f"{entry.tag!r} is a {family.title} checkpoint: this tag "
            f"needs {_builder(family, entry, want, differ)} (the model differs "
            f"in {', '.join(differ)})."
        )


def _builder(family, entry, want, differ) -> str:
    """The call that builds the model a family's checkpoint needs: its named
    constructor, else `family_model` with the options that differ."""
    for name, model in family.models.items():
        if model.variant == entry.variant and family.options_for_model(name) == want:
            return f"keras_vit.models.{name}"
    changed = ", ".join(f"{f}={getattr(want, f)!r}" for f in differ)
    return (
        f"keras_vit.models.family_model({entry.variant!r}, {entry.family!r}, {changed})"
    )


@export("keras_vit.weights.from_model")
def from_model(model: keras.Model) -> Checkpoint:
    """The weights of a keras_vit model in memory, as a `Checkpoint`.

    Pre-training layers (the masked-patch head, the [mask] token) are left
    out with a note; the encoder, `pre_logits` and `head` are kept for the
    loading rules to decide.

    Example:

    ```python
    pretrained = keras_vit.models.masked_patch_model("test/4", image_size=16)
    checkpoint = keras_vit.weights.from_model(pretrained)
    ```
    """
    vit = _find_vit(model)
    checks.check_not_adapted([v.path for v in vit.weights], vit.name, source=True)
    values = {variable.path: variable.numpy() for variable in vit.weights}
    checkpoint = _checkpoint_from_paths(values, ViTLayout.of(vit).grid_size, vit.name)
    # The model's input contract travels with its weights (fine-tuning from
    # a DeiT III `.keras` keeps ImageNet's statistics), as do its classes.
    checkpoint.preprocessing = getattr(vit, "preprocessing", None) or getattr(
        model, "preprocessing", None
    )
    checkpoint.class_names = getattr(vit, "class_names", None)
    return checkpoint


def _find_vit(model: keras.Model) -> keras.Model:
    """`model`, or the one keras_vit model nested in it."""
    if ViTLayout.describes(model):
        return model
    nested = [layer for layer in _nested_models(model) if ViTLayout.describes(layer)]
    if len(nested) != 1:
        raise CheckpointError(
            f"{model.name!r} is not a keras_vit model and holds "
            f"{len(nested)} of them; pass the keras_vit model itself."
        )
    return nested[0]


def _nested_models(model: keras.Model):
    for layer in model.layers:
        if isinstance(layer, keras.Model):
            yield layer
            yield from _nested_models(layer)


@export("keras_vit.weights.from_keras_file")
def from_keras_file(path: str, model: keras.Model) -> Checkpoint:
    """A `.keras` archive or `.weights.h5` file, read by layer name.

    The file's layers are matched to `model`'s by name (at any nesting
    depth); their variables are named after `model`'s layer of the same name
    (Keras numbers them in saving order), so that the checkpoint can be
    checked key by key before anything is assigned. Layers of the file
    that `model` lacks are named when they are keras_vit layers (`head`,
    `pre_logits`, the class token, the pre-training layers); any other is
    reported.

    Args:
        path: A `.keras` or `.weights.h5` file written by Keras.
        model: The model the weights are for.

    Example:

    ```python
    checkpoint = keras_vit.weights.from_keras_file("model.keras", model)
    ```
    """
    values, grid = keras_h5.read_keras_file(path, model)
    checks.check_finite(values, path)  # named by the model's variable paths
    checkpoint = _checkpoint_from_paths(values, grid, path)
    checkpoint.preprocessing, checkpoint.class_names = _saved_contract(path, model)
    return checkpoint


def _saved_contract(path: str, model: keras.Model):
    """`(preprocessing, class_names)` a keras_vit `.keras` file records, or
    `(None, None)` (a `.weights.h5` file, or a model saved without them).

    The `config.json` record is read within the model's budget (its
    declared size checked before it is inflated): a record past the
    budget, or JSON too deep to parse, is refused in one line.
    """
    import zipfile

    if not path.endswith(".keras"):
        return None, None
    budget = limits.budget_for(limits.ReadBudget.for_model(model), path)
    try:
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo("config.json")
            data = limits.read_member(archive, info, path, budget)
    except (OSError, KeyError, zipfile.BadZipFile):
        return None, None
    config = limits.parse_json(bytes(data), path, "config.json", constants=True)
    config = config.get("config") if isinstance(config, dict) else None
    if not isinstance(config, dict):
        return None, None
    prep, names = config.get("preprocessing"), config.get("class_names")
    prep = Preprocessing.from_config(prep) if isinstance(prep, dict) else None
    return prep, tuple(names) if isinstance(names, list) else None


def _checkpoint_from_paths(values, grid, source) -> Checkpoint:
    """`{variable path: array}` -> a `Checkpoint`, pre-training layers left out."""
    params, unmapped = ours.to_checkpoint(values)
    notes = []
    left_out = sorted(
        {
            p.split("/")[0]
            for p in unmapped
            if p.split("/")[0] in names.PRETRAINING_LAYERS
        }
    )
    if left_out:
        notes.append(f"Left out the pre-training layers {left_out} of {source}.")
    for path in unmapped:
        if path.split("/")[0] not in names.PRETRAINING_LAYERS:
            params[path] = np.asarray(values[path])  # reported as unexpected
    return Checkpoint(normalize(params), grid_size=grid, source=source, notes=notes)
