"""Full-size parity of the newer families against timm (local, not in CI).

For each family, builds the full-size timm model with random weights (no
download: the published checkpoints are not reachable from the test
machines), saves it as `.safetensors` in a temporary directory, loads that
file into the keras_vit constructor through `keras_vit.weights.load_weights`
and prints the largest absolute difference of the outputs on random images
(float32 both sides). DINOv2 is saved at its 518 px grid (37x37) and run at
224 px: timm resamples its table in the graph (`dynamic_img_size`),
keras_vit at load time with `resample_method="timm"`.

    pip install torch==2.13.0
    pip install timm -c <(echo torch==2.13.0)
    python scripts/family_parity.py [--families deit3 dinov2 siglip]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_timm_fixture as base  # noqa: E402

# family -> (timm name, timm kwargs, keras_vit constructor, image size)
CASES = {
    "deit3": ("deit3_small_patch16_224", {}, "DeiT3_S16", 224),
    "dinov2": (
        "vit_small_patch14_reg4_dinov2",
        {"dynamic_img_size": True},
        "DINOv2_S14",
        224,
    ),
    "siglip": ("vit_base_patch16_siglip_224", {}, "SigLIP_B16", 224),
    "siglip_so400m": ("vit_so400m_patch14_siglip_224", {}, "SigLIP_So400m14", 224),
}


def parity(family: str, folder: str) -> tuple[float, float]:
    import timm
    from safetensors.torch import save_file

    import keras_vit
    from keras_vit.weights import load_weights

    name, options, constructor, size = CASES[family]
    reference = timm.create_model(name, pretrained=False, **options).eval()
    torch.manual_seed(0)
    base._randomize(reference, seed=0)
    path = os.path.join(folder, f"{family}.safetensors")
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, path)
    images = base._images((2, size, size, 3), seed=0)
    with torch.no_grad():
        expected = reference(torch.from_numpy(images).permute(0, 3, 1, 2)).numpy()
    model = getattr(keras_vit.models, constructor)(image_size=size)
    load_weights(model, path, resample_method="timm")
    out = model.predict(images, verbose=0)
    return float(np.abs(out - expected).max()), float(np.abs(expected).max())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", nargs="+", default=list(CASES))
    args = parser.parse_args()
    print(base._guard_torchvision())
    with tempfile.TemporaryDirectory() as folder:
        for family in args.families:
            start = time.perf_counter()
            diff, scale = parity(family, folder)
            seconds = time.perf_counter() - start
            print(
                f"{family:14s} max |keras_vit - timm| = {diff:.2e} "
                f"(outputs up to {scale:.2f}; {seconds:.0f} s)"
            )


if __name__ == "__main__":
    main()
