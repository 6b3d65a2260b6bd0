"""Runs a case on timm's ViT (PyTorch on the CPU), eager or `torch.compile`d.

Inference runs under `torch.inference_mode()`; a training step is
`zero_grad`, forward, cross-entropy, backward and an AdamW step. bfloat16 is
`torch.autocast("cpu", dtype=torch.bfloat16)` around the forward pass (and the
loss), with float32 weights: timm's documented mixed precision.

Inference can also run `torch.compile`d with Inductor's weight freezing
(`compile+freeze`, what Intel recommends for CPU inference), and in int8:
`dynamic` is `torch.ao.quantization.quantize_dynamic` of the `nn.Linear`
layers (int8 weights, activations quantized per call), `pt2e+compile` is
torchao's PT2E flow with `X86InductorQuantizer` (static int8, calibrated on
the input batch), compiled with freezing (needs `torchao`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os

import torch
from cases import FAMILY_MODELS
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
    if variant in FAMILY_MODELS:  # timm's architecture of a family's model
        return FAMILY_MODELS[variant][2]
    size, patch = variant.split("/")
    return f"vit_{TIMM_NAMES[size]}_patch{patch}_{384 if image_size == 384 else 224}"


def _int8_forward(model, mode: str, images):
    """timm's model quantized to int8 by `mode` (see the module docstring)."""
    if mode == "dynamic":
        return torch.ao.quantization.quantize_dynamic(
            model, {torch.nn.Linear}, dtype=torch.qint8
        )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e
    from torchao.quantization.pt2e.quantize_pt2e import prepare_pt2e
    from torchao.quantization.pt2e.quantizer import x86_inductor_quantizer as x86

    quantizer = x86.X86InductorQuantizer()
    quantizer.set_global(x86.get_default_x86_inductor_quantization_config())
    with torch.no_grad():
        graph = torch.export.export(model, (images,)).module()
        graph = prepare_pt2e(graph, quantizer)
        graph(images)  # calibration
        return _frozen_compile(convert_pt2e(graph))


def _frozen_compile(model):
    import torch._inductor.config as inductor

    inductor.freezing = True
    return torch.compile(model)


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
    images = torch.rand(case.batch, 3, case.image_size, case.image_size) * 2 - 1
    forward = model
    if case.mode == "compile":
        forward = torch.compile(model)
    elif case.mode == "compile+freeze":
        forward = _frozen_compile(model.eval())
    elif case.precision == "int8":
        forward = _int8_forward(model.eval(), case.mode, images)
    autocast = (
        (lambda: torch.autocast("cpu", dtype=torch.bfloat16))
        if case.precision == "bfloat16"
        else contextlib.nullcontext
    )
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
