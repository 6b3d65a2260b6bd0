"""Checkpoints by name: a tag, a timm name, a Hub repository or a folder.

`resolve(name)` turns what a user types into a `Source`: the local weight
files, the repository's config and the input contract the checkpoint was
trained with. The names, tried in this order:

- a local folder holding a `config.json` (one `keras_vit.save_pretrained`
  wrote, or a downloaded timm, transformers or keras-hub repository);
- `hf://org/repo` (or timm's `hf-hub:org/repo`), optionally `@revision`:
  a Hub repository of timm, transformers or keras-hub;
- a name of `keras_vit.weights.list_weights()` (e.g. `"vit_b16.augreg_in21k"`,
  or the timm name of a checkpoint the table lists);
- a timm name `"<architecture>.<tag>"` (e.g.
  `"vit_base_patch16_224.augreg2_in21k_ft_in1k"`): timm's repository
  `timm/<name>` on the Hub, as `timm.create_model(name, pretrained=True)`;
- a tag (`"augreg_in21k"`) with a `variant`.

The config says what kind of checkpoint it is, as keras-hub tells its
loaders apart: a `keras_vit` section (ours), `architecture` (timm),
`model_type` (transformers), `registered_name` (keras-hub).

Example:

```python
source = resolve("vit_base_patch16_224.augreg2_in21k_ft_in1k")
source.kind, source.preprocessing.mean  # 'timm', (0.5, 0.5, 0.5)
```
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
from collections.abc import Mapping

from keras_vit._export import export
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.zoo import timm_catalog
from keras_vit.weights import hub
from keras_vit.weights import registry
from keras_vit.weights.errors import WeightsNotFoundError

HF_PREFIXES = ("hf://", "hf-hub:")
# timm's `<architecture>.<pretrained tag>`.
TIMM_NAME = re.compile(r"^[a-z][a-z0-9_]*\.[a-z0-9_]+$")
CONFIG = "config.json"
PREPROCESSOR = "preprocessor_config.json"  # transformers
KERAS_HUB_PREPROCESSOR = "preprocessor.json"
KERAS_HUB_WEIGHTS = "model.weights.h5"
# A keras-hub backbone preset's image converter, when it has no preprocessor.
KERAS_HUB_IMAGE_CONVERTER = "image_converter.json"

# Names ending so are file paths (a missing file), never checkpoint names.
_FILE_SUFFIXES = (
    ".npz", ".safetensors", ".pth", ".pt", ".bin", ".h5", ".keras", ".tar",
    ".ckpt", ".json", ".msgpack",
)  # fmt: skip

KINDS = ("tag", "keras_vit", "timm", "transformers", "keras_hub")


@export("keras_vit.weights.Source")
@dataclasses.dataclass(frozen=True)
class Source:
    """A checkpoint found by name.

    Attributes:
        name: What was asked for.
        kind: One of `KINDS`: how its config and keys are read.
        location: The Hub repository or local folder (a tag: its URL).
        files: Local weight files (the shards of a sharded checkpoint).
        config: The repository's `config.json` (empty for a tag).
        preprocessing: The input contract it was trained with.
        class_names: One label per class of its head, when recorded.
        license: The licence its source states, or `None`.
        entry: The `PretrainedWeights` row of a tag, else `None`.
        folder: The local folder holding its files, or `None` (a tag).
    """

    name: str
    kind: str
    location: str
    files: tuple[str, ...]
    config: Mapping = dataclasses.field(default_factory=dict, repr=False)
    preprocessing: Preprocessing = Preprocessing()
    class_names: tuple[str, ...] | None = dataclasses.field(default=None, repr=False)
    license: str | None = None
    entry: registry.PretrainedWeights | None = None
    folder: str | None = None


# How each library resamples a position table to another grid
# (`keras_vit.resample`'s named modes): the convention a checkpoint follows
# when it is loaded at another resolution.
RESAMPLE_CONVENTIONS = {
    "timm": "timm",  # resample_abs_pos_embed: bicubic, antialiased
    "transformers": "huggingface",  # interpolate_pos_encoding: bicubic
    "tag": "reference",  # the original scipy.ndimage.zoom(order=1)
    "keras_hub": "reference",
}


def resample_convention(source: Source) -> str:
    """The resampling mode of the library that wrote `source` (a folder
    `save_pretrained` wrote: that of the checkpoint it came from)."""
    if source.kind == "keras_vit":
        return source.config["keras_vit"].get("resample_method") or "reference"
    if source.kind == "tag" and source.entry is not None and source.entry.hub_repo:
        return "timm"  # a timm file of the table, read without huggingface_hub
    return RESAMPLE_CONVENTIONS.get(source.kind, "reference")


def is_name(weights) -> bool:
    """Whether `weights` is a name `resolve` takes rather than a file path."""
    if not isinstance(weights, str):
        return False
    if weights.startswith(HF_PREFIXES):
        return True
    if os.path.isdir(weights):
        return os.path.isfile(os.path.join(weights, CONFIG))
    if os.path.exists(weights) or weights.endswith(_FILE_SUFFIXES):
        return False
    return registry.find_name(weights) is not None or bool(TIMM_NAME.match(weights))


@export("keras_vit.weights.resolve")
def resolve(
    name: str,
    *,
    variant=None,
    options: hub.HubOptions | None = None,
    cache_dir=None,
) -> Source:
    """Finds the checkpoint `name` and its config: cached, or downloaded.

    Args:
        name: A folder, `hf://org/repo[@revision]`, a name of
            `list_weights()`, a timm name, or a tag (with `variant`).
        variant: The variant a bare tag is looked up for.
        options: How Hub files are fetched (`hub.HubOptions`: revision,
            token, cache, offline).
        cache_dir: The Keras cache root for the tags' original `.npz` files.

    Raises:
        ValueError: an unknown name; the message suggests the closest.
        WeightsNotFoundError: a known name whose files are neither cached
            nor downloadable (the message names the repository, file and
            cache).
    """
    options = options or hub.HubOptions()
    if os.path.isdir(name):
        return _from_folder(name, name)
    if name.startswith(HF_PREFIXES):
        repo, revision = _repo_and_revision(name)
        if revision is not None:
            options = dataclasses.replace(options, revision=revision)
        return _from_hub(name, repo, options)
    entry = registry.find_name(name)
    if entry is None and registry.is_tag(name):
        entry = registry.find(name, _variant_string(variant))
    if entry is not None:
        if entry.hub_repo is not None and _hub_available():
            # The table's pinned commit, unless the caller pins another.
            pinned = dataclasses.replace(
                options, revision=options.revision or entry.revision
            )
            source = _from_hub(name, entry.hub_repo, pinned)
            registry.check_sha256(entry, source.files[0])
            return dataclasses.replace(source, entry=entry)
        return _from_tag(name, entry, cache_dir, options.force_download)
    # keras_vit's own model names ("vit_b16") are no timm architectures.
    ours = {w.name.split(".")[0] for w in registry.PRETRAINED_WEIGHTS}
    ours -= {
        w.timm_name.split(".")[0] for w in registry.PRETRAINED_WEIGHTS if w.timm_name
    }
    if TIMM_NAME.match(name) and name.split(".")[0] not in ours:
        try:
            return _from_hub(name, f"timm/{name}", options)
        except WeightsNotFoundError as error:
            raise WeightsNotFoundError(f"{error}{_timm_name_note(name)}") from error
    raise ValueError(unknown_name_message(name))


def _timm_name_note(name: str) -> str:
    """What the catalog says of a timm name that could not be fetched: a
    checkpoint it lists (a download away), or none, with the closest."""
    if timm_catalog.find(name) is not None:
        return (
            f" {name!r} is a checkpoint of timm {timm_catalog.version()} that "
            "keras_vit loads; it needs one download."
        )
    return (
        f" {name!r} is not among the checkpoints of timm "
        f"{timm_catalog.version()} that keras_vit loads (a newer one may "
        f"exist on the Hub).{_close_names(name)}"
    )


def resolve_weights(weights, variant=None) -> tuple[object, Preprocessing | None]:
    """`weights` for `load_weights`, and its input contract if it records one.

    A checkpoint name is resolved here, once, into its `Source` (its config
    read, its files fetched), which `load_weights` then reads without
    looking the name up again; its contract is its config's. A tag keeps its
    name and gets the table's contract. A file, a model or a dict of arrays
    is returned as it is, with `None`.

    Example:

    ```python
    weights, contract = resolve_weights("vit_small_patch14_reg4_dinov2.lvd142m")
    contract.mean  # (0.485, 0.456, 0.406)
    ```
    """
    if isinstance(weights, Source):
        return weights, weights.preprocessing
    if not isinstance(weights, str):
        return weights, None
    if registry.is_tag(weights) and not os.path.exists(weights):
        try:
            return weights, registry.find(
                weights, _variant_string(variant)
            ).preprocessing
        except ValueError:
            return weights, None  # load_weights says why, with the variants
    if is_name(weights):
        source = resolve(weights, variant=variant)
        return source, source.preprocessing
    return weights, None


def unknown_name_message(name: str) -> str:
    """Why `name` names nothing, with the closest known names."""
    tags = sorted({w.tag for w in registry.PRETRAINED_WEIGHTS})
    hint = _close_names(name)
    return (
        f"Unknown weights {name!r}: not a file, a folder with a config.json, "
        "an hf://org/repo name, a timm name '<architecture>.<tag>' or a known "
        f"tag.{hint} Known tags: {tags}; every name: "
        "keras_vit.weights.list_weights('*pattern*')."
    )


def _close_names(name: str) -> str:
    """A "Did you mean ...?" naming the known names closest to `name`, or ""."""
    known = [w.name for w in registry.list_weights()] + sorted(
        {w.tag for w in registry.PRETRAINED_WEIGHTS}
    )
    close = difflib.get_close_matches(name, known, n=5, cutoff=0.5)
    return f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def _variant_string(variant):
    if variant is None or isinstance(variant, str):
        return variant
    return None  # a ModelSpec: tags are listed by variant string


def _hub_available() -> bool:
    try:
        hub.hub_module()
    except ImportError:
        return False
    return True


def _repo_and_revision(name: str) -> tuple[str, str | None]:
    repo = (
        name.split("://", 1)[1] if name.startswith("hf://") else name.split(":", 1)[1]
    )
    repo, _, revision = repo.partition("@")
    if repo.count("/") != 1 or not all(repo.split("/")):
        raise ValueError(
            f"{name!r} is not a Hub repository name: expected hf://<org>/<repo>, "
            "optionally @<revision>."
        )
    return repo, revision or None


def _read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as error:
        raise WeightsNotFoundError(f"Cannot read {path!r}: {error}") from error
    if not isinstance(value, dict):
        raise WeightsNotFoundError(f"{path!r} does not hold a JSON object.")
    return value


def kind_of(config: Mapping) -> str | None:
    """Which library wrote a `config.json`, by its keys (as keras-hub tells)."""
    if "keras_vit" in config:
        return "keras_vit"
    if "registered_name" in config:
        return "keras_hub"
    if "architecture" in config:
        return "timm"
    if "model_type" in config:
        return "transformers"
    return None


def _from_hub(name: str, repo: str, options: hub.HubOptions) -> Source:
    config_path = hub.download(repo, CONFIG, options)
    config = _read_json(config_path)
    kind = kind_of(config)
    folder = os.path.dirname(config_path)
    extra = {}
    if kind == "transformers":
        path = hub.download(repo, PREPROCESSOR, options, missing_ok=True)
        extra["processor"] = _read_json(path) if path else {}
    if kind == "keras_hub":
        path = hub.download(repo, KERAS_HUB_PREPROCESSOR, options, missing_ok=True)
        if path is None:
            path = hub.download(
                repo, KERAS_HUB_IMAGE_CONVERTER, options, missing_ok=True
            )
            extra["processor"] = _converter_only(path)
        else:
            extra["processor"] = _read_json(path)
        files = (hub.download(repo, KERAS_HUB_WEIGHTS, options),)
    else:
        files = hub.weight_files(repo, options)
    return _source(name, kind, f"hf://{repo}", files, config, folder, **extra)


def _from_folder(name: str, folder: str) -> Source:
    config_path = os.path.join(folder, CONFIG)
    if not os.path.isfile(config_path):
        raise WeightsNotFoundError(
            f"{folder!r} has no {CONFIG}: a pretrained folder holds the config "
            "and the weights (as save_pretrained writes, or a Hub repository)."
        )
    config = _read_json(config_path)
    kind = kind_of(config)
    extra = {}
    if kind in ("transformers", "keras_hub"):
        file = PREPROCESSOR if kind == "transformers" else KERAS_HUB_PREPROCESSOR
        path = os.path.join(folder, file)
        extra["processor"] = _read_json(path) if os.path.isfile(path) else {}
    if kind == "keras_hub" and not extra["processor"]:
        path = os.path.join(folder, KERAS_HUB_IMAGE_CONVERTER)
        extra["processor"] = _converter_only(path if os.path.isfile(path) else None)
    if kind == "keras_hub":
        files = (os.path.join(folder, KERAS_HUB_WEIGHTS),)
    else:
        single = os.path.join(folder, hub.SAFETENSORS)
        index = os.path.join(folder, hub.SAFETENSORS_INDEX)
        if os.path.isfile(single):
            files = (single,)
        elif os.path.isfile(index):
            files = tuple(os.path.join(folder, s) for s in hub.shards_of(index))
        else:
            raise WeightsNotFoundError(
                f"{folder!r} has no {hub.SAFETENSORS} or {hub.SAFETENSORS_INDEX}."
            )
    missing = [f for f in files if not os.path.isfile(f)]
    if missing:
        raise WeightsNotFoundError(f"{folder!r} lacks the weight files {missing}.")
    return _source(name, kind, os.path.abspath(folder), files, config, folder, **extra)


def _converter_only(path: str | None) -> dict:
    """A keras-hub `image_converter.json` as the preprocessor that holds it."""
    return {} if path is None else {"config": {"image_converter": _read_json(path)}}


def _source(name, kind, location, files, config, folder, processor=None) -> Source:
    if kind is None:
        raise WeightsNotFoundError(
            f"The {CONFIG} of {location!r} is none keras_vit reads: expected a "
            "timm config ('architecture'), a transformers config ('model_type'), "
            "a keras-hub config ('registered_name') or one save_pretrained wrote "
            f"('keras_vit'). Its keys: {sorted(config)[:12]}."
        )
    preprocessing, class_names, license_ = _contract(
        kind, config, processor or {}, name
    )
    return Source(
        name=name,
        kind=kind,
        location=location,
        files=tuple(files),
        config=config,
        preprocessing=preprocessing,
        class_names=class_names,
        license=license_,
        folder=folder,
    )


def _contract(kind, config, processor, name):
    """`(preprocessing, class_names, licence)` from a repository's configs."""
    if kind == "keras_vit":
        ours = config["keras_vit"]
        names = ours.get("class_names")
        return (
            Preprocessing.from_config(ours["preprocessing"]),
            None if names is None else tuple(names),
            ours.get("license") or config.get("license"),
        )
    if kind == "timm":
        cfg = config.get("pretrained_cfg") or config  # older configs are flat
        names = config.get("label_names")
        return (
            Preprocessing.from_timm(cfg, source=f"timm pretrained_cfg of {name}"),
            None if not names else tuple(names),
            cfg.get("license") or config.get("license"),
        )
    if kind == "transformers":
        labels = config.get("id2label") or {}
        names = None
        if labels:
            names = tuple(labels[k] for k in sorted(labels, key=int))
        return (
            Preprocessing.from_transformers(
                processor, source=f"transformers preprocessor_config of {name}"
            ),
            names,
            config.get("license"),
        )
    return _keras_hub_contract(processor, name), None, None


def _keras_hub_contract(processor: Mapping, name: str) -> Preprocessing:
    """A keras-hub image converter's scale/offset (or mean/std) and resize."""
    converter = (processor.get("config") or {}).get("image_converter") or {}
    settings = converter.get("config") or {}
    if not settings:  # saved without a preprocessor: ViT's own [-1, 1]
        return Preprocessing(source=f"the paper's (no image converter in {name})")
    scale, offset = settings.get("scale"), settings.get("offset")
    mean, std = settings.get("norm_mean"), settings.get("norm_std")
    if mean is None and scale is not None:
        scales = scale if isinstance(scale, list) else [scale] * 3
        offsets = offset if isinstance(offset, list) else [offset or 0.0] * 3
        # x * scale + offset == (x / 255 - mean) / std.
        std = [1.0 / (255.0 * s) for s in scales]
        mean = [-o * sd for o, sd in zip(offsets, std, strict=True)]
    size = settings.get("image_size")
    return Preprocessing(
        mean=mean if mean is not None else (0.0, 0.0, 0.0),
        std=std if std is not None else (1.0 / 255.0,) * 3,
        interpolation=settings.get("interpolation", "bilinear"),
        crop_mode="center" if settings.get("crop_to_aspect_ratio") else "squash",
        antialias=bool(settings.get("antialias", False)),
        image_size=None if size is None else tuple(size),
        source=f"keras-hub image converter of {name}",
    )


def _from_tag(
    name: str, entry: registry.PretrainedWeights, cache_dir, force_download=False
) -> Source:
    file = registry.fetch(entry, cache_dir, force_download=force_download)
    return Source(
        name=name,
        kind="tag",
        location=entry.url,
        files=(file,),
        preprocessing=entry.preprocessing,
        class_names=None,
        license=entry.license,
        entry=entry,
    )
