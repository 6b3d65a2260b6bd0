"""A checkpoint's pretrained config, in timm's `pretrained_cfg` vocabulary.

`model.pretrained_cfg` says where a model's weights came from and how they
were trained and evaluated, with timm's field names (`timm.models.
PretrainedCfg`): `architecture`, `tag`, `hf_hub_id`, `url`, `license`,
`num_classes`, `input_size`, `test_input_size`, `fixed_input_size`,
`pool_size`, `interpolation`, `crop_pct`, `test_crop_pct`, `crop_mode`,
`mean`, `std`, `first_conv`, `classifier`, ... It is read once from the
checkpoint's own record (a timm config's `pretrained_cfg`, a transformers
processor, the table row of a tag) and stays with the model through `.keras`
files and `save_pretrained` folders.

`model.preprocessing` is the contract the model's inputs are prepared with
now; `pretrained_cfg` is the checkpoint's, which it started from (they differ
once `from_pretrained(..., image_size=...)` changes the resolution).

Example:

```python
model = keras_vit.from_pretrained("deit3_small_patch16_224.fb_in22k_ft_in1k")
model.pretrained_cfg["hf_hub_id"]  # 'timm/deit3_small_patch16_224.fb_in22k_ft_in1k'
model.pretrained_cfg["crop_pct"]  # 1.0
```
"""

from __future__ import annotations

from collections.abc import Mapping

# timm 1.0.31's `PretrainedCfg` fields that describe a checkpoint (its
# loading hooks `custom_load`, `state_dict` and `file` are not), in its order.
TIMM_FIELDS = (
    "url", "hf_hub_id", "hf_hub_filename", "source", "architecture", "tag",
    "input_size", "test_input_size", "min_input_size", "fixed_input_size",
    "interpolation", "crop_pct", "test_crop_pct", "crop_mode", "mean", "std",
    "num_classes", "label_offset", "pool_size", "test_pool_size", "first_conv",
    "classifier", "license", "description", "origin_url", "paper_name",
    "paper_ids", "notes",
)  # fmt: skip
# The fields timm writes into a saved folder's `config.json`: timm drops
# where the weights came from (`timm.models._hub.save_config_for_hf`); a
# folder is its own source.
_ORIGIN = ("url", "hf_hub_id", "hf_hub_filename", "source", "architecture")


def from_source(source) -> dict:
    """The pretrained config of a resolved checkpoint (`weights.sources.Source`).

    Example:

    ```python
    cfg = from_source(keras_vit.weights.resolve("vit_b16.augreg_in21k"))
    cfg["url"]  # 'https://storage.googleapis.com/vit_models/augreg/...'
    ```
    """
    cfg: dict = {}
    if source.kind == "keras_vit":  # written by save_pretrained: as it was
        recorded = source.config["keras_vit"].get("pretrained_cfg")
        cfg.update(recorded or source.config.get("pretrained_cfg") or {})
    if source.kind == "timm":
        recorded = source.config.get("pretrained_cfg") or source.config
        cfg.update({k: v for k, v in recorded.items() if k in TIMM_FIELDS})
        cfg["architecture"] = source.config.get("architecture")
        name = source.name.split("/")[-1].split("@")[0]
        if "tag" not in cfg and source.location == f"hf://timm/{name}":
            cfg["tag"] = name.split(".", 1)[1]  # timm's <architecture>.<tag>
    if source.entry is not None:
        entry = source.entry
        cfg.setdefault("tag", entry.tag)
        cfg.setdefault("num_classes", entry.num_classes)
        if entry.timm_name is not None:
            cfg.setdefault("architecture", entry.timm_name.split(".")[0])
        if entry.hub_repo is None:
            cfg["url"] = entry.url
    if source.location.startswith("hf://"):
        hub_id = source.location[len("hf://") :]
        if source.kind == "keras_vit":  # the checkpoint it was saved from
            cfg.setdefault("hf_hub_id", hub_id)
        else:
            cfg["hf_hub_id"] = hub_id
    contract = source.preprocessing.to_timm()
    for key, value in contract.items():
        cfg.setdefault(key, value)
    if source.license is not None:
        cfg.setdefault("license", source.license)
    return _clean(cfg)


def from_entry(entry) -> dict:
    """The pretrained config of a table row (`PretrainedWeights`)."""
    cfg = {"tag": entry.tag, "num_classes": entry.num_classes}
    if entry.timm_name is not None:
        cfg["architecture"] = entry.timm_name.split(".")[0]
    if entry.hub_repo is not None:
        cfg["hf_hub_id"] = entry.hub_repo
    else:
        cfg["url"] = entry.url
    cfg.update(entry.preprocessing.to_timm())
    if entry.license is not None:
        cfg["license"] = entry.license
    return _clean(cfg)


def of_weights(weights, variant=None) -> dict | None:
    """The pretrained config of what `keras_vit.ViT(weights=...)` loaded: a
    resolved `Source`, or a tag of the table; `None` for a file, a model or
    arrays."""
    from keras_vit.weights import registry
    from keras_vit.weights.sources import Source

    if isinstance(weights, Source):
        return from_source(weights)
    if isinstance(weights, str) and registry.is_tag(weights):
        variant = variant if isinstance(variant, str) else None
        try:
            return from_entry(registry.find(weights, variant))
        except ValueError:
            return None
    return None


def for_timm_folder(cfg: Mapping) -> dict:
    """The fields of `cfg` that a saved folder's `config.json` gives timm:
    timm's own names only (its `PretrainedCfg` takes no other), without
    where the weights came from."""
    return {k: v for k, v in cfg.items() if k in TIMM_FIELDS and k not in _ORIGIN}


def _clean(cfg: Mapping) -> dict:
    """JSON-able values (lists for tuples), `None`s dropped, timm's order
    first, then any other recorded field."""
    order = {name: i for i, name in enumerate(TIMM_FIELDS)}
    items = sorted(
        ((k, v) for k, v in cfg.items() if v is not None),
        key=lambda kv: (order.get(kv[0], len(order)), kv[0]),
    )
    return {k: _jsonable(v) for k, v in items}


def _jsonable(value):
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value
