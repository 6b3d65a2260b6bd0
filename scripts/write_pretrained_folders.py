"""Writes `keras_vit.save_pretrained` folders for `check_timm_loads.py`.

Each of the four timm fixture repositories of `tests/fixtures/hub/` (AugReg
ViT, DeiT III, DINOv2 with registers, SigLIP) is loaded by its timm name
from a Hub cache laid out on disk, saved again with `save_pretrained`, and
given a `keras_vit_check.npz` (`pixels`: random normalised NHWC images,
`logits`: what keras_vit computes for them). With `--families`, every zoo
family's model at test size (`family_model("test/8", family)`, random
weights, 10 classes) is written too, under `family_<name>`; a family timm
cannot build is printed and skipped. `check_timm_loads.py` then loads each
folder in timm and compares. Runs in keras_vit's environment:

    python scripts/write_pretrained_folders.py OUT [--families]
    /path/to/timm-env/bin/python scripts/check_timm_loads.py OUT/*
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))
from helpers import TIMM  # noqa: E402
from helpers import hub_cache  # noqa: E402
from helpers import randomize  # noqa: E402

import keras_vit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="folder to write the model folders into")
    parser.add_argument(
        "--families", action="store_true", help="also every zoo family at test size"
    )
    args = parser.parse_args()
    cache = hub_cache(os.path.join(args.out, ".hf_home"))
    rng = np.random.default_rng(0)
    models = {
        name: keras_vit.from_pretrained(name, cache_dir=cache, local_files_only=True)
        for name in TIMM
    }
    for family in keras_vit.models.zoo.families() if args.families else ():
        model = keras_vit.models.family_model(
            "test/8", family.name, image_size=32, num_classes=10, include_top=True
        )
        randomize(model, seed=len(models))
        models[f"family_{family.name}"] = model
    for name, model in models.items():
        try:
            folder = keras_vit.save_pretrained(
                model, os.path.join(args.out, name), overwrite=True
            )
        except ValueError as error:  # what timm cannot build, said in one line
            print(f"skipped {name}: {error}")
            continue
        pixels = rng.uniform(-2, 2, (2, 32, 32, 3)).astype("float32")
        np.savez(
            os.path.join(folder, "keras_vit_check.npz"),
            pixels=pixels,
            logits=np.asarray(model(pixels), np.float64),
        )
        print(f"wrote {folder}")


if __name__ == "__main__":
    main()
