"""Executes the snippets of `save_pretrained`'s model card with timm and keras_vit.

The card of a pretrained folder says what loads it: a keras_vit snippet
(`keras_vit.from_pretrained("hf://org/name")`) and a timm snippet
(`timm.create_model("hf-hub:org/name", pretrained=True)`, then timm's
transform of an image and the forward pass). The tests run the keras_vit
one; this script runs both, as a user would, on tiny random models of a few
families (a classifier and an encoder each):

1. `save_pretrained(model, folder, repo_id=...)`, the folder then laid out
   as a Hub cache (`models--org--name/refs/main`, `snapshots/<hash>/`),
   read offline (`HF_HUB_CACHE`, `HF_HUB_OFFLINE=1`);
2. the card's timm snippet is executed in a folder holding `image.jpg`;
   timm's output is compared with the keras_vit model's on the very pixels
   timm's transform made (NCHW -> NHWC);
3. the card's keras_vit snippet is executed; the model it loads gives the
   same output on those pixels;
4. the same for a branch (`repo_id="org/name@dev"`, the card's
   `hf://org/name@dev` and `hf-hub:org/name@dev`), and the timm snippet of
   the card of a folder saved without `repo_id` (`local-dir:<folder>`).

It prints one line per snippet and exits 1 when an output differs by more
than `--rtol` (1e-4, relative to the largest), 2 when a snippet fails.

torch and timm are not dependencies of keras_vit. To run this:

    pip install torch==2.13.0
    pip install timm -c <(echo torch==2.13.0)
    python scripts/check_model_card.py
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import sys
import tempfile
import traceback

import numpy as np
from PIL import Image

FAMILIES = {
    "plain": dict(),
    "deit3": dict(layer_scale_init=1e-6, no_embed_class=True),
    "dinov2": dict(num_registers=4, layer_scale_init=1e-5, no_embed_class=True),
    "siglip": dict(class_token=False, pooling="map", no_embed_class=True),
}
ORG = "keras-vit-check"


def snippets(card: str) -> dict[str, str]:
    """The card's Python blocks, by the library named above each."""
    found = re.findall(r"With (\w+)[^\n]*\n\n```python\n(.*?)\n```", card, re.S)
    return dict(found)


def lay_out(cache: str, repo_id: str, folder: str) -> None:
    """`folder` as `repo_id` (`org/name@branch`, `main` by default) in the
    Hub cache `cache`."""
    repo, _, branch = repo_id.partition("@")
    base = os.path.join(cache, "models--" + repo.replace("/", "--"))
    commit = hashlib.sha1(repo_id.encode()).hexdigest()
    os.makedirs(os.path.join(base, "refs"), exist_ok=True)
    with open(os.path.join(base, "refs", branch or "main"), "w") as f:
        f.write(commit)
    shutil.copytree(folder, os.path.join(base, "snapshots", commit))


def run(code: str, where: str) -> dict:
    """Executes `code` in the folder `where`; returns its names."""
    namespace = {"__name__": "__card__"}
    previous = os.getcwd()
    os.chdir(where)
    try:
        exec(code, namespace)  # noqa: S102 - the card's own snippet
    finally:
        os.chdir(previous)
    return namespace


def compare(label: str, ours, theirs, rtol: float) -> int:
    """Prints the largest relative difference; 1 when above `rtol`."""
    ours, theirs = np.asarray(ours, np.float64), np.asarray(theirs, np.float64)
    if ours.shape != theirs.shape:
        print(f"FAIL {label}: shape {theirs.shape} != keras_vit's {ours.shape}")
        return 1
    diff = float(np.abs(ours - theirs).max())
    rel = diff / max(float(np.abs(theirs).max()), 1e-12)
    status = "OK  " if rel <= rtol else "FAIL"
    print(f"{status} {label}: output {theirs.shape}, max rel diff {rel:.2e}")
    return 0 if rel <= rtol else 1


def check(family: str, top: bool, root: str, rtol: float) -> int:
    """Runs the two snippets of a `family` model's card; the worst status."""
    import keras_vit

    kind = "classifier" if top else "encoder"
    repo_id = f"{ORG}/{family}-{kind}"
    model = keras_vit.ViT("test/8", image_size=32, num_classes=10,
                          include_top=top, **FAMILIES[family])  # fmt: skip
    rng = np.random.default_rng(0)
    for weight in model.weights:
        weight.assign(rng.normal(0, 0.2, weight.shape).astype(weight.dtype))
    work = os.path.join(root, repo_id.replace("/", "--"))
    os.makedirs(work)
    Image.new("RGB", (40, 48), (200, 30, 90)).save(os.path.join(work, "image.jpg"))
    folders = {}
    for name in (repo_id, f"{repo_id}@dev"):  # main, and a branch
        folder = keras_vit.save_pretrained(model, f"{work}/{name[-3:]}", repo_id=name)
        lay_out(os.environ["HF_HUB_CACHE"], name, folder)
        folders[name] = folder
    local = keras_vit.save_pretrained(model, f"{work}/local")
    folders[f"{family}-{kind} local-dir"] = local
    worst = 0
    for label, folder in folders.items():
        with open(os.path.join(folder, "README.md"), encoding="utf-8") as f:
            code = snippets(f.read())
        try:
            theirs = run(code["timm"], work)
        except Exception:
            traceback.print_exc()
            print(f"FAIL timm snippet of {label}")
            worst = 2
            continue
        output = theirs["logits" if top else "features"].numpy()
        pixels = theirs["transform"](theirs["image"]).unsqueeze(0)
        pixels = pixels.permute(0, 2, 3, 1).numpy()  # (1, H, W, 3)
        worst = max(worst, compare(f"timm {label}", model(pixels), output, rtol))
        if folder == local:
            continue
        try:
            loaded = run(code["keras_vit"], work)["model"]
        except Exception:
            traceback.print_exc()
            print(f"FAIL keras_vit snippet of {label}")
            worst = 2
            continue
        ours = compare(f"keras_vit {label}", model(pixels), loaded(pixels), 0.0)
        worst = max(worst, ours)
    return worst


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rtol", type=float, default=1e-4)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="model-card-") as root:
        # Before huggingface_hub is imported (by timm): the Hub is this cache.
        os.environ["HF_HUB_CACHE"] = os.path.join(root, "hub")
        os.environ["HF_HUB_OFFLINE"] = "1"
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import make_timm_fixture as base
        import timm
        import torch

        print(base._guard_torchvision())
        print(f"torch {torch.__version__}, timm {timm.__version__}")
        worst = 0
        for family in FAMILIES:
            for top in (True, False):
                worst = max(worst, check(family, top, root, args.rtol))
    return worst


if __name__ == "__main__":
    sys.exit(main())
