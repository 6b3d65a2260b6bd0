"""Writes `tests/fixtures/patch_resample.npz`: patch kernels resized by timm.

`keras_vit.resample_patch_embedding` resizes a patch-embedding kernel by the
pseudo-inverse of a patch resize (FlexiViT). Its modes are checked in the
tests against this file, made by the library that defines them:

- `<case>/timm`: `timm.layers.resample_patch_embed(w, size)` with its
  defaults (`interpolation="bicubic", antialias=True`), what timm's
  `set_input_size(patch_size=...)` calls;
- `<case>/bilinear`: the same function with `interpolation="bilinear",
  antialias=False`: the half-pixel bilinear resize that big_vision's FlexiViT
  `resample_patchemb` takes from `tf.image.resize` (the tests also build
  big_vision's matrix with TensorFlow itself);
- `model/logits`: the `timm_vit` fixture model (`scripts/make_timm_fixture.py`)
  after `set_input_size(patch_size=4)`, on the images of `timm_vit.npz`
  (float64): timm's kernel and position-table resampling end to end.

Kernels are stored HWIO (keras_vit's layout); cases enlarge, shrink, and
change the aspect. Run once where torch (CPU) and timm are installed (see
`scripts/make_timm_fixture.py` for the installation):

    python scripts/make_patch_resample_fixture.py

The tests need only NumPy to read the file.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import torch
from make_timm_fixture import _guard_torchvision
from make_timm_fixture import _run

FIXTURES = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures"
# (old patch, new patch): shrink, enlarge, shrink by 2 at 16, non-square.
CASES = [((8, 8), (4, 4)), ((8, 8), (12, 12)), ((16, 16), (8, 8)), ((6, 6), (4, 10))]


def main() -> None:
    _guard_torchvision()
    import timm
    from safetensors.torch import load_file
    from timm.layers import resample_patch_embed
    from timm.models.vision_transformer import VisionTransformer

    rng = np.random.default_rng(0)
    arrays = {}
    for index, (old, new) in enumerate(CASES):
        kernel = rng.normal(size=(*old, 3, 5))  # (p_h, p_w, C, D)
        arrays[f"{index}/input"] = kernel
        oihw = torch.tensor(kernel.transpose(3, 2, 0, 1))  # (D, C, p_h, p_w)
        modes = {
            "timm": {},
            "bilinear": dict(interpolation="bilinear", antialias=False),
        }
        for name, kwargs in modes.items():
            out = resample_patch_embed(oihw, list(new), **kwargs)
            arrays[f"{index}/{name}"] = out.numpy().transpose(2, 3, 1, 0)

    # The timm_vit fixture model (make_timm_fixture.make_timm), patch 8 -> 4.
    model = VisionTransformer(
        img_size=32, patch_size=8, embed_dim=32, depth=2, num_heads=2,
        mlp_ratio=2.0, num_classes=10,
    )  # fmt: skip
    model.load_state_dict(load_file(str(FIXTURES / "timm_vit.safetensors")))
    model.set_input_size(patch_size=4)
    images = np.load(FIXTURES / "timm_vit.npz")["images"]
    arrays["model/images"] = images
    arrays["model/logits"] = _run(model, images)
    np.savez(FIXTURES / "patch_resample.npz", **arrays)
    print(  # noqa: T201
        json.dumps({"torch": torch.__version__, "timm": timm.__version__})
    )


if __name__ == "__main__":
    main()
