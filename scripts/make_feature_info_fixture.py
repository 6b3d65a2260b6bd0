"""Writes `tests/fixtures/timm_feature_info.json`: timm's `feature_info`.

`keras_vit.models.feature_info` describes a model's block maps with timm's
fields (`module`, `num_chs`, `reduction`, `index`); `tests/test_feature_info.py`
checks its channels and reductions against what timm itself reports for the
same architectures, without needing timm. For each tiny Hub fixture
(`tests/fixtures/hub/timm--<name>/config.json`: the architecture and its
`model_args`) the script builds `timm.create_model(architecture,
pretrained=False, **model_args)` and records:

- `feature_info`: the model's own list (every block), as timm's dicts;
- `selections`: for a few `out_indices` (an int n, "the last n", and
  sequences with negative indices), the `features_only=True` model's
  `feature_info`: its resolved `out_indices`, `module_name()`,
  `channels()` and `reduction()`, and the shape of each map it returns
  for one 32x32 image (timm's NCHW).

Also `timm_hybrid`: the hybrid of `scripts/make_timm_fixture.py` (a
ResNetV2 (1, 1) stem of width 32 under a patch-1 ViT, 32x32 images), built
by hand and wrapped in `timm.models.FeatureGetterNet`, whose reduction is
the ResNet's stride times the patch size.

torch and timm are not dependencies of keras_vit. To run this (the versions
the fixture was made with are recorded in it):

    python scripts/make_feature_info_fixture.py [--out tests/fixtures]
"""

from __future__ import annotations

import argparse
import functools
import glob
import json
import os

import torch
from make_timm_fixture import _guard_torchvision
from make_timm_fixture import hybrid_backbone

HUB = os.path.join("tests", "fixtures", "hub")
# `out_indices` asked of every model (depth 2): timm's int n and sequences.
SELECTIONS = (1, 2, [0], [-1], [0, -1])


def _selection(model, out_indices) -> dict:
    """What a `features_only` model says of its maps, and their shapes."""
    info = model.feature_info
    with torch.no_grad():
        maps = model(torch.zeros(1, 3, 32, 32))
    return {
        "out_indices": out_indices,
        "resolved": [int(i) for i in info.out_indices],
        "module": info.module_name(),
        "num_chs": info.channels(),
        "reduction": info.reduction(),
        "shapes": [list(m.shape) for m in maps],  # (1, C, h, w)
    }


def _hub_models(timm) -> dict:
    records = {}
    for folder in sorted(glob.glob(os.path.join(HUB, "timm--*", "config.json"))):
        with open(folder) as f:
            config = json.load(f)
        name = os.path.basename(os.path.dirname(folder)).removeprefix("timm--")
        arch, args = config["architecture"], config["model_args"]
        model = timm.create_model(arch, pretrained=False, **args)
        records[name] = {
            "architecture": arch,
            "feature_info": model.feature_info,
            "selections": [
                _selection(
                    timm.create_model(
                        arch,
                        pretrained=False,
                        features_only=True,
                        out_indices=out_indices,
                        **args,
                    ).eval(),
                    out_indices,
                )  # fmt: skip
                for out_indices in SELECTIONS
            ],
        }
    return records


def _hybrid():
    from timm.models.vision_transformer import VisionTransformer
    from timm.models.vision_transformer_hybrid import HybridEmbed

    backbone = hybrid_backbone()
    return functools.partial(
        VisionTransformer,
        img_size=32,
        patch_size=1,
        embed_layer=functools.partial(HybridEmbed, backbone=backbone),
        embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0, num_classes=10,
    )  # fmt: skip


def _hybrid_record() -> dict:
    from timm.models._features import FeatureGetterNet

    build = _hybrid()
    return {
        "architecture": "VisionTransformer + HybridEmbed(ResNetV2 (1, 1))",
        "feature_info": build().feature_info,
        "selections": [
            _selection(FeatureGetterNet(build(), out_indices=o).eval(), o)
            for o in SELECTIONS
        ],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("tests", "fixtures"))
    args = parser.parse_args()
    _guard_torchvision()
    import timm

    torch.manual_seed(0)
    fixture = {
        "versions": {"timm": timm.__version__, "torch": torch.__version__},
        "models": {**_hub_models(timm), "timm_hybrid": _hybrid_record()},
    }
    path = os.path.join(args.out, "timm_feature_info.json")
    with open(path, "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
