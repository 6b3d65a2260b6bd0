"""Runs a case on timm's ViT (PyTorch on the CPU), eager or `torch.compile`d.

Inference runs under `torch.inference_mode()`; a training step is
`zero_grad`, forward, cross-entropy, backward and an AdamW step. bfloat16 is
`torch.autocast("cpu", dtype=torch.bfloat16)` around the forward pass (and the
loss), with float32 weights: timm's documented mixed precision.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os

import torch
from timing import peak_rss_mb
from timing import time_calls

NUM_CLASSES = 1000
TIMM_NAMES = {"Ti": "tiny", "S": "small", "B": "base", "L": "large", "H": "huge"}

_STUB_LIBRARY = None  # kept alive: the op schemas vanish with it


def _declare_missing_torchvision_ops():
    """Lets `import timm` work where torchvision's compiled ops cannot load.

    The registry's torchvision wheels are CUDA builds; with the CPU build of
    torch their `_C` extension fails to load and torchvision's import then
    stops at its fake-kernel registration for `torchvision::nms`. Declaring
    the schemas of the ops it registers (`nms`, `qnms`) lets the import
    complete; ViT models never call them.
    """
    global _STUB_LIBRARY
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return
    folder = next(iter(spec.submodule_search_locations))
    for entry in os.listdir(folder):
        if entry.startswith("_C") and entry.endswith(".so"):
            try:
                torch.ops.load_library(os.path.join(folder, entry))
                return  # the compiled ops load: nothing to declare
            except OSError:
                break
    _STUB_LIBRARY = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        _STUB_LIBRARY.define(
            f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
        )


def import_timm():
    _declare_missing_torchvision_ops()
    import timm

    return timm


def timm_name(variant: str, image_size: int) -> str:
    size, patch = variant.split("/")
    return f"vit_{TIMM_NAMES[size]}_patch{patch}_{384 if image_size == 384 else 224}"


def run(case) -> dict:
    """Measures one case; returns the timing dict plus memory and versions."""
    timm = import_timm()
    runtime_mb = peak_rss_mb()
    model = timm.create_model(
        timm_name(case.variant, case.image_size),
        pretrained=False,
        num_classes=NUM_CLASSES,
        img_size=case.image_size,
    )
    forward = torch.compile(model) if case.mode == "compile" else model
    autocast = (
        (lambda: torch.autocast("cpu", dtype=torch.bfloat16))
        if case.precision == "bfloat16"
        else contextlib.nullcontext
    )
    images = torch.rand(case.batch, 3, case.image_size, case.image_size) * 2 - 1
    if case.task == "train":
        model.train()
        labels = torch.randint(0, NUM_CLASSES, (case.batch,))
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.05)
        loss_fn = torch.nn.CrossEntropyLoss()

        def step():
            optimizer.zero_grad(set_to_none=True)
            with autocast():
                loss = loss_fn(forward(images), labels)
            loss.backward()
            optimizer.step()
            return float(loss)

    else:
        model.eval()

        def step():
            with torch.inference_mode(), autocast():
                return forward(images).float().numpy()

    result = time_calls(step, case.warmup, case.iters)
    result["runtime_rss_mb"] = runtime_mb
    result["versions"] = f"timm {timm.__version__}, torch {torch.__version__}"
    return result
