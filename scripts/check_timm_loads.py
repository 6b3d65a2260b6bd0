"""Checks that timm loads a `keras_vit.save_pretrained` folder and agrees.

The folder holds `config.json` in timm's Hub format (`architecture`,
`num_classes`, `global_pool`, `model_args`, `pretrained_cfg`),
`model.safetensors` in timm's key layout, and `keras_vit_check.npz` with
`pixels` (NHWC float32, already normalised) and the `logits` keras_vit
computed for them. This script builds the model as timm's Hub loader would
(`timm.create_model(architecture, pretrained=True, ...)`, the weights from
the folder's file, strictly), runs it on the same pixels (NCHW, float64)
and prints the largest absolute and relative differences. It exits 1 when
the relative difference exceeds `--rtol` (1e-4), 2 when timm cannot build
or load the model.

torch and timm are not dependencies of keras_vit. To run this:

    pip install torch==2.13.0
    pip install timm -c <(echo torch==2.13.0)
    python scripts/check_timm_loads.py FOLDER [FOLDER ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_timm_fixture as base  # noqa: E402

CONFIG = "config.json"
WEIGHTS = "model.safetensors"
CHECK = "keras_vit_check.npz"


def create(folder: str):
    """The timm model of `folder`, with the folder's weights loaded."""
    import timm

    with open(os.path.join(folder, CONFIG), encoding="utf-8") as f:
        config = json.load(f)
    kwargs = dict(config.get("model_args", {}))
    kwargs["num_classes"] = config["num_classes"]
    if "global_pool" in config:
        kwargs["global_pool"] = config["global_pool"]
    # The folder's own pretrained config (its `num_classes` above all: timm
    # drops the head when it differs from the architecture's default one).
    overlay = dict(config.get("pretrained_cfg", {}))
    overlay["file"] = os.path.join(os.path.abspath(folder), WEIGHTS)
    overlay.pop("hf_hub_id", None)
    overlay["source"] = ""  # the file, never the Hub
    model = timm.create_model(
        config["architecture"],
        pretrained=True,
        pretrained_cfg_overlay=overlay,
        **kwargs,
    )
    return model.eval(), config


def _state_dict_matches(model, folder: str) -> list[str]:
    """Keys of the file and of the model that differ (timm loads non-strictly
    for some architectures, e.g. SigLIP without its MAP head)."""
    from safetensors.torch import load_file

    written = load_file(os.path.join(folder, WEIGHTS))
    expected = model.state_dict()
    problems = [f"missing in file: {k}" for k in expected if k not in written]
    problems += [f"not in model: {k}" for k in written if k not in expected]
    problems += [
        f"shape {tuple(written[k].shape)} != model {tuple(v.shape)}: {k}"
        for k, v in expected.items()
        if k in written and written[k].shape != v.shape
    ]
    problems += [
        f"value differs: {k}"
        for k, v in expected.items()
        if k in written
        and written[k].shape == v.shape
        and not torch.equal(written[k].float(), v.float())
    ]
    return problems


def check(folder: str, rtol: float) -> int:
    print(f"== {folder}")
    try:
        model, config = create(folder)
    except Exception:  # reported, then the next folder
        traceback.print_exc()
        print(f"FAIL: timm could not build/load {config_name(folder)}")
        return 2
    problems = _state_dict_matches(model, folder)
    if problems:
        print("FAIL: the file is not the model's state dict:")
        for line in problems[:20]:
            print("   ", line)
        return 2
    expected = np.load(os.path.join(folder, CHECK))
    pixels, logits = expected["pixels"], expected["logits"]
    x = torch.from_numpy(pixels.astype(np.float64)).permute(0, 3, 1, 2)
    with torch.no_grad():
        out = model.double()(x).numpy()
    if out.shape != logits.shape:
        print(f"FAIL: timm gives {out.shape}, keras_vit {logits.shape}")
        return 1
    diff = np.abs(out - logits)
    abs_diff = float(diff.max())
    rel_diff = abs_diff / max(float(np.abs(out).max()), 1e-12)
    print(
        f"{config['architecture']} ({type(model).__name__}, "
        f"{len(model.state_dict())} tensors, output {out.shape}): "
        f"max abs diff {abs_diff:.3e}, max rel diff {rel_diff:.3e}"
    )
    if rel_diff > rtol:
        print(f"FAIL: relative difference above {rtol:g}")
        return 1
    print("OK")
    return 0


def config_name(folder: str) -> str:
    try:
        with open(os.path.join(folder, CONFIG), encoding="utf-8") as f:
            return repr(json.load(f).get("architecture"))
    except (OSError, ValueError):
        return repr(folder)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", nargs="+")
    parser.add_argument("--rtol", type=float, default=1e-4)
    args = parser.parse_args()
    print(base._guard_torchvision())
    import timm

    print(f"torch {torch.__version__}, timm {timm.__version__}")
    worst = 0
    for folder in args.folders:
        worst = max(worst, check(folder, args.rtol))
    return worst


if __name__ == "__main__":
    sys.exit(main())
