"""Writes `tests/fixtures/resample.npz`: grids resampled by the real libraries.

Each resampling mode of `keras_vit.resample` is checked in the tests against
a NumPy reference written from its definition and against these outputs of
the libraries that define it:

- `torch.nn.functional.interpolate(mode="bicubic", antialias=True)`: what
  timm's `resample_abs_pos_embed` calls;
- `interpolate(mode="bicubic", align_corners=False)`: Hugging Face's
  `interpolate_pos_encoding`;
- `interpolate(mode="bilinear")` with either corner rule;
- `jax.image.resize(method="linear")`: the resize FlexiViT inverts.

Up- and down-sampling, square and non-square. Run once where torch (CPU) and
jax are installed:

    python scripts/make_resample_fixture.py

The tests need only NumPy to read the file.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np

OUT = pathlib.Path(__file__).resolve().parents[1] / "tests" / "fixtures"
# (old grid, new grid): up, down, square, non-square, mixed.
CASES = [((7, 7), (12, 12)), ((14, 14), (9, 9)), ((6, 4), (11, 3)), ((5, 9), (2, 16))]
TORCH_MODES = {
    "bicubic_antialias": dict(mode="bicubic", align_corners=False, antialias=True),
    "bicubic": dict(mode="bicubic", align_corners=False),
    "bicubic_corners": dict(mode="bicubic", align_corners=True),
    "bilinear_half_pixel": dict(mode="bilinear", align_corners=False),
    "bilinear": dict(mode="bilinear", align_corners=True),
}


def main() -> None:
    import jax
    import jax.numpy as jnp
    import torch
    import torch.nn.functional as F  # noqa: N812

    rng = np.random.default_rng(0)
    arrays, versions = {}, {"torch": torch.__version__, "jax": jax.__version__}
    for index, (old, new) in enumerate(CASES):
        grid = rng.normal(size=(*old, 3))  # (h, w, C)
        arrays[f"{index}/input"] = grid
        chw = torch.tensor(grid.transpose(2, 0, 1)[None])  # (1, C, h, w) float64
        for name, kwargs in TORCH_MODES.items():
            out = F.interpolate(chw, size=new, **kwargs)[0].numpy()
            arrays[f"{index}/{name}"] = out.transpose(1, 2, 0)
        resized = jax.image.resize(jnp.asarray(grid, jnp.float32), (*new, 3), "linear")
        arrays[f"{index}/bilinear_antialias"] = np.asarray(resized, np.float64)
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez(OUT / "resample.npz", **arrays)
    print(json.dumps({"file": str(OUT / "resample.npz"), **versions}))  # noqa: T201


if __name__ == "__main__":
    main()
