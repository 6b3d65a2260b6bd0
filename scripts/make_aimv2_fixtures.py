"""Writes `tests/fixtures/aimv2/`: a tiny timm AIMv2, its outputs, timm's counts.

AIMv2 is a timm `VisionTransformer` (`timm/models/vision_transformer.py`,
`aimv2_*`) with RmsNorm everywhere, a norm inside the patch embedding, no
class token, no biases but the patch projection's and a `SwiGLU` MLP. This
script takes `aimv2_large_patch14_224`'s registered arguments, shrinks the
sizes (D=32, depth 2, 2 heads, patch 14, 42x42 images, a 5-class head so
that there are logits), sets every parameter to random values (fixed seed,
the norms' scales away from one) with `make_eva_fixtures.randomize`, and
writes:

- `timm--aimv2_large_patch14_224.apple_pt/`: the model as timm writes a Hub
  folder, by timm's own `save_for_hf` (`config.json` with the architecture,
  `model_args` and `pretrained_cfg`; `model.safetensors` in timm's keys);
- `aimv2.npz`: for `native` (42x42) and `other` (28x70, run with timm's
  `dynamic_img_size=True`): `images_<size>` (NHWC, float16 values; timm ran
  them as float32), `tokens_<size>` (`forward_features`), `pooled_<size>`
  (`forward_head(pre_logits=True)`), `logits_<size>`, `spatial_<size>` and
  `spatial_norm_<size>` (`forward_intermediates` of the last block, NCHW);
  `versions` (JSON);
- `aimv2.json`: for every pretrained AIMv2 tag of timm, its parameter count
  (counted on the meta device) and timm's `pretrained_cfg` (input contract
  and licence; `make_hub_fixtures.CFG_FIELDS`).

torch and timm are not dependencies of keras_vit; the tests read only the
files. Run where timm 1.0.31 is installed:

    python scripts/make_aimv2_fixtures.py [--out tests/fixtures/aimv2]
"""

from __future__ import annotations

import argparse
import json
import pathlib
import sys

import numpy as np
import torch

sys.path.insert(0, str(pathlib.Path(__file__).parent))
import make_eva_fixtures as eva  # noqa: E402  (randomize, outputs, write_json_lines)
import make_timm_fixture as base  # noqa: E402  (the torchvision guard)

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "aimv2"
ARCHITECTURE = "aimv2_large_patch14_224"
TAG = "apple_pt"
SMALL = dict(embed_dim=32, depth=2, num_heads=2, img_size=42, num_classes=5)
OTHER = (28, 70)  # a non-square size: 2x5 patches
PATTERN = "aimv2_*"


def build(dynamic: bool = False):
    import timm

    extra = {"dynamic_img_size": True} if dynamic else {}
    return timm.create_model(ARCHITECTURE, pretrained=False, **SMALL, **extra).eval()


def make_fixture(out: pathlib.Path, seed: int = 0) -> dict:
    from timm.models import save_for_hf

    model = build()
    eva.randomize(model, seed)
    dynamic = build(dynamic=True)
    dynamic.load_state_dict(model.state_dict(), strict=True)
    rng = np.random.default_rng(seed)
    arrays = {}
    for size, (h, w), net in (
        ("native", (SMALL["img_size"],) * 2, model),
        ("other", OTHER, dynamic),
    ):
        # float16 values (stored as float16 to halve the file), run in float32.
        images = rng.normal(size=(2, h, w, 3)).astype(np.float16)
        arrays[f"images_{size}"] = images
        for key, value in eva.outputs(net, images.astype(np.float32)).items():
            arrays[f"{key}_{size}"] = value
    check = eva.outputs(dynamic, arrays["images_native"].astype(np.float32))
    drift = max(float(np.abs(check[k] - arrays[f"{k}_native"]).max()) for k in check)

    import timm

    arrays["versions"] = np.array(
        json.dumps({"timm": timm.__version__, "torch": torch.__version__})
    )
    folder = out / f"timm--{ARCHITECTURE}.{TAG}"
    folder.mkdir(parents=True, exist_ok=True)
    save_for_hf(model, str(folder), safe_serialization=True)
    np.savez(out / "aimv2.npz", **arrays)
    files = [*folder.iterdir(), out / "aimv2.npz"]
    return dict(
        fixture=folder.name,
        params=sum(p.numel() for p in model.parameters()),
        static_vs_dynamic=drift,
        bytes=sum(f.stat().st_size for f in files),
    )


def tables() -> dict:
    """Every pretrained AIMv2 tag of timm: its parameter count on the meta
    device and its `pretrained_cfg`."""
    import timm
    from make_hub_fixtures import CFG_FIELDS
    from make_hub_fixtures import _jsonable

    table = {}
    for name in sorted(timm.list_models(PATTERN, pretrained=True)):
        with torch.device("meta"):
            model = timm.create_model(name, pretrained=False)
        cfg = timm.models.get_pretrained_cfg(name).to_dict()
        table[name] = dict(
            params=sum(p.numel() for p in model.parameters()),
            pretrained_cfg={k: _jsonable(cfg.get(k)) for k in CFG_FIELDS},
        )
    return table


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=pathlib.Path, default=OUT)
    ns = parser.parse_args()
    ns.out.mkdir(parents=True, exist_ok=True)
    print(base._guard_torchvision())  # noqa: T201
    torch.set_num_threads(1)
    print(json.dumps(make_fixture(ns.out)))  # noqa: T201
    import timm

    table = tables()
    eva.write_json_lines(ns.out / "aimv2.json", table, timm=timm.__version__)
    print(json.dumps({"tags": len(table)}))  # noqa: T201


if __name__ == "__main__":
    main()
