"""Writes `keras_vit.save_pretrained` folders for `check_timm_loads.py`.

Each of the four timm fixture repositories of `tests/fixtures/hub/` (AugReg
ViT, DeiT III, DINOv2 with registers, SigLIP) is loaded by its timm name
from a Hub cache laid out on disk, saved again with `save_pretrained`, and
given a `keras_vit_check.npz` (`pixels`: random normalised NHWC images,
`logits`: what keras_vit computes for them). `check_timm_loads.py` then
loads each folder in timm and compares. Runs in keras_vit's environment:

    python scripts/write_pretrained_folders.py OUT
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

import keras_vit  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", help="folder to write the model folders into")
    args = parser.parse_args()
    cache = hub_cache(os.path.join(args.out, ".hf_home"))
    rng = np.random.default_rng(0)
    for name in TIMM:
        model = keras_vit.from_pretrained(name, cache_dir=cache, local_files_only=True)
        folder = keras_vit.save_pretrained(
            model, os.path.join(args.out, name), overwrite=True
        )
        pixels = rng.uniform(-2, 2, (2, 32, 32, 3)).astype("float32")
        np.savez(
            os.path.join(folder, "keras_vit_check.npz"),
            pixels=pixels,
            logits=np.asarray(model(pixels), np.float64),
        )
        print(f"wrote {folder}")


if __name__ == "__main__":
    main()
