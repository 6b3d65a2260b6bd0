"""Writes `keras_vit/models/zoo/timm_catalog.json`: timm's checkpoints keras_vit loads.

`keras_vit.weights.list_weights` lists, beside the package's own table,
every pretrained timm checkpoint that `keras_vit.from_pretrained(<timm
name>)` builds and loads: the rows of this file. They are not typed by
hand: this script asks timm 1.0.31 itself.

For every architecture of `timm.list_models(pretrained=True)` whose model
class is timm's `VisionTransformer`, `VisionTransformerDistilled` or `Eva`:

1. The full-size model is built on PyTorch's meta device (no memory) to
   read its sizes: width, depth, heads, MLP width, patch.
2. The same architecture with one block (`depth=1`), randomly initialised,
   is written as timm writes a Hub folder (`config.json` with its
   `architecture`, `model_args` and `pretrained_cfg`, and
   `model.safetensors`), loaded with `keras_vit.from_pretrained(folder)`,
   and both are run on the same random images at the checkpoint's input
   size. The architecture is listed only when keras_vit's output is within
   1e-4 (relative to the largest value) of timm's, once per head size its
   checkpoints have (e.g. 1000, 21843 or none).
3. Each of its checkpoints is a row: the timm name and tag, the Hub
   repository, the input contract (`input_size`, `interpolation`,
   `crop_pct`, `crop_mode`, `mean`, `std`), `num_classes`, the licence, and
   the family `keras_vit.models.zoo.family_of_timm` gives (`"vit"` for
   timm's plain ViTs).

Architectures keras_vit does not build or does not match (ResNet hybrids,
which load by variant; QuickGELU; ...) and those without a
checkpoint under `timm/<name>` are printed with the reason and recorded
under `refused`; `num_heads` records every architecture's heads (what a
config without `model_args` does not say).

Run with a venv that has timm 1.0.31 and torch:

    python scripts/make_timm_catalog.py [--only 'vit_tiny*']

To check some architectures again and keep the rest of the catalog as it
is (e.g. after keras_vit learnt a family):

    python scripts/make_timm_catalog.py --only 'aimv2_*' --merge
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import sys
import tempfile
import traceback

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_timm_fixture as base  # noqa: E402  (the torchvision guard)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(REPO, "keras_vit", "models", "zoo", "timm_catalog.json")
CLASSES = ("VisionTransformer", "VisionTransformerDistilled", "Eva")
ROW_FIELDS = (
    "hf_hub_id", "num_classes", "input_size", "test_input_size", "interpolation",
    "crop_pct", "test_crop_pct", "crop_mode", "mean", "std", "license",
)  # fmt: skip
TOLERANCE = 1e-4


def _sizes(model) -> dict:
    block = model.blocks[0]
    mlp = block.mlp
    fc2 = getattr(mlp, "fc2", None) or getattr(mlp, "w3", None)
    patch = model.patch_embed.patch_size
    return {
        "hidden_dim": int(model.embed_dim),
        "depth": len(model.blocks),
        "num_heads": int(block.attn.num_heads),
        "mlp_dim": int(fc2.in_features),
        "patch_size": int(patch[0] if isinstance(patch, tuple | list) else patch),
    }


def _cfg(name: str) -> dict:
    import timm

    cfg = timm.models.get_pretrained_cfg(name).to_dict()
    return {k: cfg.get(k) for k in ROW_FIELDS}


def verify(name: str, cfg: dict, seed: int = 0) -> str | None:
    """`None` when keras_vit loads one block of checkpoint `name`'s
    architecture as timm computes it, else why not."""
    import timm
    from timm.models import save_for_hf

    import keras_vit

    torch.manual_seed(seed)
    model = timm.create_model(
        name, pretrained=False, depth=1, num_classes=cfg["num_classes"]
    )
    with torch.no_grad():  # every parameter away from its initial value
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    model.eval()
    size = cfg["input_size"][1:]
    images = (
        np.random.default_rng(seed).standard_normal((2, *size, 3)).astype(np.float32)
    )
    with torch.no_grad():
        theirs = model(torch.from_numpy(images).permute(0, 3, 1, 2)).numpy()
    with tempfile.TemporaryDirectory() as folder:
        # As timm writes a Hub folder (`push_to_hf_hub`).
        save_for_hf(model, folder, safe_serialization=True)
        try:
            ours = keras_vit.from_pretrained(folder)
        except Exception as error:  # noqa: BLE001 - the reason is the result
            text = str(error).splitlines()[0]
            text = text.replace(folder, "<folder>")
            text = text.replace(os.path.basename(folder), "<folder>")
            return f"{type(error).__name__}: {text[:160]}"
        if tuple(ours.input_shape[1:3]) != tuple(size):
            return f"built at {ours.input_shape[1:3]}, contract {size}"
        out = np.asarray(ours(images))
    if out.shape != theirs.shape:
        return f"output {out.shape}, timm {theirs.shape}"
    error = float(np.abs(out - theirs).max() / max(np.abs(theirs).max(), 1e-12))
    if not error <= TOLERANCE:
        return f"relative error {error:.2e}"
    return None


def _verdicts(logs) -> dict:
    """`{architecture: None (loads) or the reason}` printed by earlier runs."""
    verdicts = {}
    for log in logs:
        with open(log) as f:
            for line in f:
                if line.startswith("  yes  "):
                    verdicts[line[7:].split(":")[0]] = None
                elif line.startswith("  no   "):
                    arch, _, reason = line[7:].partition(": ")
                    verdicts[arch] = reason.strip()
    return verdicts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", help="A pattern of architectures: a dry run, unless --out."
    )
    parser.add_argument("--out", help=f"Where to write (default {OUT}).")
    parser.add_argument(
        "--shard", help="k/n: check every n-th architecture from the k-th only."
    )
    parser.add_argument(
        "--resume",
        nargs="*",
        default=(),
        help="Logs of earlier runs: their architectures' verdicts are reused.",
    )
    parser.add_argument(
        "--recheck",
        nargs="*",
        default=(),
        help="Check again the architectures refused for a reason holding one "
        "of these texts.",
    )
    parser.add_argument(
        "--merge",
        action="store_true",
        help="With --only: write the checked architectures' verdicts (and "
        "heads) into the existing catalog, keeping its other rows.",
    )
    parser.add_argument(
        "--heads-only",
        action="store_true",
        help="Only record every architecture's heads in the existing catalog "
        "(the checks read them), then stop.",
    )
    args = parser.parse_args()
    if args.shard and not args.out:
        parser.error("--shard checks a part: write it elsewhere with --out")
    if args.heads_only and (args.shard or args.only):
        parser.error("--heads-only records every architecture: no --shard or --only")
    if args.merge and not args.only:
        parser.error("--merge writes the architectures --only selects")
    earlier = {
        arch: reason
        for arch, reason in _verdicts(args.resume).items()
        if not (reason and any(text in reason for text in args.recheck))
    }
    print(base._guard_torchvision())
    import timm

    from keras_vit.models import zoo
    from keras_vit.models.zoo import timm_catalog

    # Check afresh: keras_vit refuses what the current catalog refused.
    timm_catalog.document()["refused"] = {}

    names = timm.list_models(pretrained=True)
    archs = sorted({n.split(".")[0] for n in names})
    if args.only:
        archs = [a for a in archs if fnmatch.fnmatchcase(a, args.only)]
    if args.shard:
        k, n = (int(x) for x in args.shard.split("/"))
        archs = archs[k::n]
    catalog, refused, head_counts = {}, {}, {}
    for arch in archs:
        with torch.device("meta"):
            try:
                full = timm.create_model(arch, pretrained=False)
            except Exception as error:  # noqa: BLE001
                refused[arch] = f"timm cannot build it: {error}"
                continue
        if type(full).__name__ not in CLASSES:
            continue
        # What a config without model_args cannot say (a fused qkv hides it).
        attention = getattr(full.blocks[0], "attn", None)
        if isinstance(getattr(attention, "num_heads", None), int):
            head_counts[arch] = attention.num_heads
        if args.heads_only:
            continue
        tags = sorted(n.split(".", 1)[1] for n in names if n.split(".")[0] == arch)
        rows = {t: _cfg(f"{arch}.{t}") for t in tags}
        rows = {t: r for t, r in rows.items() if r["hf_hub_id"] == f"timm/{arch}.{t}"}
        if not rows:
            refused[arch] = "no checkpoint on the Hub under timm/<name>"
            continue
        reason = earlier.get(arch)
        for classes in sorted({r["num_classes"] for r in rows.values()}):
            if arch in earlier:
                break
            tag = next(t for t, r in rows.items() if r["num_classes"] == classes)
            try:
                reason = verify(f"{arch}.{tag}", rows[tag])
            except Exception as error:  # noqa: BLE001
                reason = f"{type(error).__name__}: {error}"
                traceback.print_exc()
            if reason:
                break
        if reason:
            refused[arch] = reason
            print(f"  no   {arch}: {reason}", flush=True)
            continue
        family = zoo.family_of_timm(arch)
        catalog[arch] = {
            "family": family.name if family is not None else "vit",
            **_sizes(full),
            "checkpoints": {
                tag: {
                    k: v for k, v in row.items() if k != "hf_hub_id" and v is not None
                }
                for tag, row in rows.items()
            },
        }
        print(f"  yes  {arch}: {len(rows)} checkpoints", flush=True)
    if args.heads_only:
        with open(OUT) as f:
            document = json.load(f)
        document["num_heads"] = head_counts
        _write(document, OUT)
        return
    count = sum(len(a["checkpoints"]) for a in catalog.values())
    print(f"{len(catalog)} architectures, {count} checkpoints; {len(refused)} refused")
    if args.merge:
        _merge(archs, catalog, refused, head_counts, args.out or OUT)
        return
    if args.only and not args.out:
        return
    out = args.out or OUT
    document = {
        "timm": timm.__version__,
        "made_by": "scripts/make_timm_catalog.py",
        "architectures": catalog,
        "num_heads": head_counts,
        "refused": refused,
    }
    _write(document, out)


def _merge(archs, catalog, refused, head_counts, out: str) -> None:
    """The existing catalog with `archs`' rows replaced by this run's."""
    with open(OUT) as f:
        document = json.load(f)
    for table in ("architectures", "refused"):
        for arch in archs:
            document[table].pop(arch, None)
    document["architectures"].update(catalog)
    document["refused"].update(refused)
    document["num_heads"].update(head_counts)
    _write(document, out)


def _write(document: dict, out: str) -> None:
    with open(out + ".tmp", "w") as f:
        json.dump(document, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(out + ".tmp", out)
    print(f"wrote {out} ({os.path.getsize(out) / 1024:.0f} KiB)")


if __name__ == "__main__":
    main()
