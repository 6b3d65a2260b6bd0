"""timm's pretrained checkpoints that keras_vit builds and loads by name.

`timm_catalog.json` beside this module is written by
`scripts/make_timm_catalog.py` from timm itself (its `list_models(
pretrained=True)` and `pretrained_cfg`s): every checkpoint of a timm
`VisionTransformer` or `Eva` architecture that `keras_vit.from_pretrained`
was checked to load as timm computes it (one block of each architecture,
against timm, before the row was written). Each row has the family that
`keras_vit.models.zoo.family_of_timm` gives its architecture (`"vit"` for
an architecture without a family of its own: timm's plain ViTs, EVA-01,
RADIO, TIPS, ...), the model's sizes and the input contract timm states.

The rows are read when first asked for; `keras_vit.weights.list_weights`
lists them beside the package's own table.

Example:

```python
from keras_vit.models.zoo import timm_catalog

[w.name for w in timm_catalog.checkpoints() if w.name.startswith("vit_tiny")][:1]
# ['vit_tiny_patch16_224.augreg_in21k']
```
"""

from __future__ import annotations

import functools
import json
from importlib import resources

from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.variants import VARIANTS
from keras_vit.models.zoo.registry import HF_URL
from keras_vit.models.zoo.registry import PretrainedWeights
from keras_vit.models.zoo.registry import options_for_timm

FILE = "timm_catalog.json"


@functools.cache
def document() -> dict:
    """The catalog file as written (`timm`: the version it was made with)."""
    text = resources.files(__package__).joinpath(FILE).read_text(encoding="utf-8")
    return json.loads(text)


def version() -> str:
    """The timm version the catalog was made from."""
    return str(document()["timm"])


@functools.cache
def checkpoints() -> tuple[PretrainedWeights, ...]:
    """Every checkpoint of the catalog, as `PretrainedWeights` (unpinned: no
    revision or checksum is known for them)."""
    rows = []
    for arch, entry in sorted(document()["architectures"].items()):
        variant = _variant(entry)
        options = options_for_timm(arch)
        for tag, cfg in sorted(entry["checkpoints"].items()):
            name = f"{arch}.{tag}"
            size = tuple(int(s) for s in cfg["input_size"][1:])
            contract = Preprocessing.from_timm(
                cfg, source=f"timm pretrained_cfg of {name}"
            )
            rows.append(
                PretrainedWeights(
                    tag=tag,
                    variant=variant,
                    file_name=f"timm_{name}.safetensors",
                    url=f"{HF_URL}/timm/{name}/resolve/main/model.safetensors",
                    image_size=size[0],
                    num_classes=int(cfg["num_classes"] or 0),
                    family=entry["family"],
                    preprocessing=contract,
                    hub_repo=f"timm/{name}",
                    license=cfg.get("license"),
                    timm_name=name,
                    options=options,
                )
            )
    return tuple(rows)


def num_heads(architecture: str) -> int | None:
    """The attention heads of timm's `architecture` (any ViT or EVA one
    timm 1.0.31 has checkpoints of), or `None`: what a timm config without
    `model_args` does not record."""
    return document().get("num_heads", {}).get(architecture)


def refusal(architecture: str) -> str | None:
    """Why timm's `architecture` is not in the catalog (the check's reason,
    e.g. `"relative error 6.52e-01"`), or `None` for one it lists or never
    checked."""
    return document().get("refused", {}).get(architecture)


def find(name: str) -> PretrainedWeights | None:
    """The catalog's row of timm name `name`, or `None`."""
    return _by_name().get(name)


@functools.cache
def _by_name() -> dict:
    return {w.name: w for w in checkpoints()}


def _variant(entry: dict) -> str:
    """The table's variant of these sizes (`"S/16"`), else spelled out."""
    sizes = (entry["hidden_dim"], entry["depth"], entry["mlp_dim"], entry["num_heads"])
    for row, v in VARIANTS.items():
        if (v.hidden_dim, v.depth, v.mlp_dim, v.num_heads) == sizes:
            return f"{row}/{entry['patch_size']}"
    return "x".join(str(s) for s in sizes) + f"/{entry['patch_size']}"
