"""Regenerates the Park & Kim fixtures in `tests/fixtures/` (`parkkim_*`).

`tests/test_parkkim_models.py` checks keras_vit's ResNet, its ViT with
`qkv_bias=False`, the `.pth` reader and the CIFAR-100 preprocessing against
the authors' own PyTorch code, without needing torch: this script runs that
code on random weights and saves what it computes.

It imports the authors' repository (github.com/xxxnell/how-do-vits-work,
branch `transformer`, commit 9571ff1: `models/resnet.py`,
`models/resnet_dnn_block.py`, `models/classifier_block.py`, `models/__init__.py`
`_save`, `ops/datasets.py` `get_cifar100`) and timm's `VisionTransformer`.
Nothing of theirs is copied here; the only change to their code is the
stage widths of the small ResNets (below).

To run it (torch, timm and the authors' code are NOT dependencies of
keras_vit):

    python -m venv /tmp/pk-torch
    /tmp/pk-torch/bin/pip install torch==2.13.0           # the CPU wheel, first
    echo "torch==2.13.0" > /tmp/torch-pin.txt
    /tmp/pk-torch/bin/pip install timm einops requests tqdm pyyaml \\
        -c /tmp/torch-pin.txt
    git clone -b transformer https://github.com/xxxnell/how-do-vits-work /tmp/pk
    /tmp/pk-torch/bin/python scripts/make_parkkim_fixtures.py --authors /tmp/pk

Fixtures (about 1 MB in all):

- `parkkim_resnet_basic.pth.tar`: their `ResNet` with `BasicBlock`s, blocks
  (2, 1, 1, 1), stage widths (4, 8, 16, 32), the CIFAR stem (`stem=False`),
  10 classes; saved by their `models._save` with an AdamW state beside the
  weights (`{"name", "state_dict", "optimizer"}`), as their checkpoints are.
  `parkkim_resnet_basic_legacy.pth.tar`: the same state dict in torch's legacy
  (pre-1.6, non-zip) format.
- `parkkim_resnet_bottleneck.pth`: `Bottleneck`s, the same blocks and widths
  (outputs 16 ... 128), the ImageNet stem (7x7/2, BN, ReLU, MaxPool2d(3, 2,
  padding=1)), a bare `torch.save(model.state_dict())`, 64 px inputs.
- `parkkim_vit.pth.tar`: timm `VisionTransformer(img_size=32, patch_size=2,
  embed_dim=32, depth=2, num_heads=2, qkv_bias=False, num_classes=10)` (the
  authors' ViT-Ti call with a smaller width and depth), saved as
  `{"name", "state_dict"}`.
- `parkkim_*.npz`: uint8 images, the inputs their CIFAR-100 evaluation
  transform makes of them (`ops.datasets.get_cifar100`'s `transform_test`),
  the logits of the model in eval mode, computed in float64, and the
  feature maps of the first image as the authors' notebooks take them
  (ResNet: `layer0` and every block; ViT: patch embedding, then each
  `Residual(norm1, attn)` and `Residual(norm2, mlp)`, class token dropped).
  The bottleneck file also holds a random map and torch's
  `MaxPool2d(3, 2, padding=1)` of it.
- `parkkim_arch.json`: every state-dict key and shape, and the parameter
  count, of the full-size published architectures (their
  `get_model("resnet_50", num_classes=100, stem=False)` and the README's
  ViT-Ti), of their CIFAR ResNet-18 and ImageNet ResNet-50 (1000 classes),
  and the versions used.

The small ResNets change only the stage widths of their `models/resnet.py`
(64, 128, 256, 512 hard-coded there): the module's source is loaded with
those four numbers replaced, everything else (stem, `_make_layer`, blocks,
`GAPBlock`, `forward`) is theirs.
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import types

import numpy as np
import torch

WIDTHS = (4, 8, 16, 32)
DEPTHS = [2, 1, 1, 1]
NUM_CLASSES = 10
SEED = 0


def _load_sibling(name: str):
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _scaled_resnet_module(authors: str, widths) -> types.ModuleType:
    """Their `models/resnet.py` with the stage widths 64/128/256/512 replaced."""
    with open(os.path.join(authors, "models", "resnet.py")) as f:
        source = f.read()
    table = dict(zip((64, 128, 256, 512), widths, strict=True))
    count = 0

    def swap(match):
        nonlocal count
        count += 1
        return str(table[int(match.group(0))])

    scaled = re.sub(r"(?<![\w.])(64|128|256|512)(?![\w.])", swap, source)
    # layer0 (2 x 64 per stem), four _make_layer calls (8), four smooth
    # layers, two classifier widths.
    if count != 18:
        raise SystemExit(f"Unexpected models/resnet.py: {count} widths replaced.")
    module = types.ModuleType("models.resnet_scaled")
    module.__file__ = os.path.join(authors, "models", "resnet.py")
    exec(compile(scaled, module.__file__, "exec"), module.__dict__)  # noqa: S102
    return module


def _randomize(model: torch.nn.Module, seed: int, images: torch.Tensor) -> None:
    """Random weights, and BatchNorm statistics of random-weight activations.

    Every parameter is random (unit-scale activations); the running means and
    variances are those of the randomised network on `images` (momentum
    None: the exact average), so that inference-mode BatchNorm is exercised
    with non-trivial statistics.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen, dtype=param.dtype)
            if param.ndim == 1:
                value = (1.0 if name.endswith("weight") else 0.0) + 0.2 * noise
            else:
                value = noise / int(np.prod(param.shape[1:])) ** 0.5
            param.copy_(value)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None
    model.train()
    with torch.no_grad():
        model(images)
    for norm in norms:
        norm.momentum = 0.1
        norm.running_var.mul_(
            1.0 + 0.2 * torch.rand(norm.running_var.shape, generator=gen)
        )
    model.float().double()  # the float32 values the file will hold
    model.eval()


def _nhwc(x: torch.Tensor) -> np.ndarray:
    return x.permute(0, 2, 3, 1).numpy()


def _uint8_images(count: int, size: int, seed: int) -> np.ndarray:
    """Smooth random uint8 images (a low-resolution field, upsampled)."""
    rng = np.random.default_rng(seed)
    low = rng.uniform(0, 255, (count, size // 4, size // 4, 3))
    images = np.repeat(np.repeat(low, 4, axis=1), 4, axis=2)
    images += rng.normal(0, 20, images.shape)
    return np.clip(np.round(images), 0, 255).astype(np.uint8)


def _eval_transform(datasets_module):
    """The authors' CIFAR-100 `transform_test`, from their `get_cifar100`."""

    class _Capture:
        def __init__(self, root, train, download, transform):
            self.transform = transform

    real = datasets_module.torchvision.datasets.CIFAR100
    datasets_module.torchvision.datasets.CIFAR100 = _Capture
    try:
        _, test = datasets_module.get_cifar100()
    finally:
        datasets_module.torchvision.datasets.CIFAR100 = real
    defaults = inspect.signature(datasets_module.get_cifar100).parameters
    return test.transform, defaults["mean"].default, defaults["std"].default


def _transform(images: np.ndarray, transform) -> torch.Tensor:
    from PIL import Image

    return torch.stack([transform(Image.fromarray(image)) for image in images])


def _resnet_maps(model, x: torch.Tensor) -> list[np.ndarray]:
    blocks = [model.layer0, *model.layer1, *model.layer2, *model.layer3, *model.layer4]
    maps = []
    with torch.no_grad():
        for block in blocks:
            x = block(x)
            maps.append(_nhwc(x))
    return maps


def _vit_maps(model, x: torch.Tensor) -> list[np.ndarray]:
    """The README's block sequence of a timm ViT, class token dropped."""
    maps = []
    with torch.no_grad():
        x = model.patch_embed(x)
        cls = model.cls_token.expand(x.shape[0], -1, -1)
        x = model.pos_drop(torch.cat((cls, x), dim=1) + model.pos_embed)
        maps.append(x[:, 1:].numpy())
        for block in model.blocks:
            x = x + block.attn(block.norm1(x))
            maps.append(x[:, 1:].numpy())
            x = x + block.mlp(block.norm2(x))
            maps.append(x[:, 1:].numpy())
    return maps


def _save_npz(path: str, **arrays) -> None:
    np.savez_compressed(path, **arrays)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def _shapes(model: torch.nn.Module) -> dict:
    return {k: list(v.shape) for k, v in model.state_dict().items()}


def _count(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--authors", required=True, help="how-do-vits-work checkout")
    parser.add_argument(
        "--out",
        default=os.path.join(os.path.dirname(__file__), "..", "tests", "fixtures"),
    )
    args = parser.parse_args(argv)
    authors = os.path.abspath(args.authors)
    os.makedirs(args.out, exist_ok=True)

    timm_fixture = _load_sibling("make_timm_fixture")
    print(timm_fixture._guard_torchvision())
    sys.path.insert(0, authors)
    import models  # the authors' package
    import models.classifier_block
    import models.resnet_dnn_block as blocks
    import ops.datasets
    import timm

    torch.manual_seed(SEED)
    transform, mean, std = _eval_transform(ops.datasets)
    images = _uint8_images(4, 32, SEED)
    inputs = _transform(images, transform).double()  # (B, 3, 32, 32)
    calibration = torch.randn(64, 3, 32, 32, dtype=torch.float64)

    # --- ResNet, basic blocks, CIFAR stem, the authors' checkpoint format.
    scaled = _scaled_resnet_module(authors, WIDTHS)
    basic = scaled.ResNet(
        blocks.BasicBlock,
        DEPTHS,
        num_classes=NUM_CLASSES,
        stem=False,
        name="resnet_test",
    ).double()
    _randomize(basic, SEED, calibration)
    with torch.no_grad():
        logits = basic(inputs).numpy()
    maps = _resnet_maps(basic, inputs[:1])
    basic = basic.float()
    optimizer = torch.optim.AdamW(basic.parameters(), lr=1e-3)
    # One step so that the optimizer state holds tensors; the weights saved
    # are those the logits were computed with (restored after the step).
    saved = {k: v.clone() for k, v in basic.state_dict().items()}
    basic.train()
    basic(inputs[:2].float()).sum().backward()
    optimizer.step()
    basic.load_state_dict(saved)
    basic.eval()
    path = os.path.join(args.out, "parkkim_resnet_basic.pth.tar")
    models._save(basic, path, optimizer)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    legacy = os.path.join(args.out, "parkkim_resnet_basic_legacy.pth.tar")
    torch.save(
        {"name": basic.name, "state_dict": basic.state_dict()},
        legacy,
        _use_new_zipfile_serialization=False,
    )
    print(f"wrote {legacy} ({os.path.getsize(legacy)} bytes)")
    _save_npz(
        os.path.join(args.out, "parkkim_resnet_basic.npz"),
        images=images,
        inputs=_nhwc(inputs.float()),
        logits=logits,
        **{f"map_{i}": m.astype(np.float32) for i, m in enumerate(maps)},
    )

    # --- ResNet, bottlenecks, ImageNet stem, a bare state dict.
    big_images = torch.randn(2, 3, 64, 64, dtype=torch.float64)
    bottleneck = scaled.ResNet(
        blocks.Bottleneck, DEPTHS, num_classes=NUM_CLASSES, stem=True, name="resnet_b"
    ).double()
    _randomize(bottleneck, SEED + 1, torch.randn(32, 3, 64, 64, dtype=torch.float64))
    with torch.no_grad():
        logits = bottleneck(big_images).numpy()
    maps = _resnet_maps(bottleneck, big_images[:1])
    path = os.path.join(args.out, "parkkim_resnet_bottleneck.pth")
    torch.save(bottleneck.float().state_dict(), path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    pool_input = torch.randn(1, 3, 16, 16, dtype=torch.float64)
    pool = torch.nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
    _save_npz(
        os.path.join(args.out, "parkkim_resnet_bottleneck.npz"),
        inputs=_nhwc(big_images.float()),
        logits=logits,
        pool_input=_nhwc(pool_input),
        pool_output=_nhwc(pool(pool_input)),
        **{f"map_{i}": m.astype(np.float32) for i, m in enumerate(maps)},
    )

    # --- timm ViT with qkv_bias=False, as the README builds ViT-Ti.
    vit = timm.models.vision_transformer.VisionTransformer(
        num_classes=NUM_CLASSES,
        img_size=32,
        patch_size=2,
        embed_dim=32,
        depth=2,
        num_heads=2,
        qkv_bias=False,
    )
    vit.name = "vit_test"
    timm_fixture._randomize(vit, SEED + 2)
    if any(k.endswith("qkv.bias") for k in vit.state_dict()):
        raise SystemExit("timm built query/key/value biases despite qkv_bias=False.")
    vit = vit.double().eval()
    with torch.no_grad():
        logits = vit(inputs).numpy()
    maps = _vit_maps(vit, inputs[:1])
    vit = vit.float()
    path = os.path.join(args.out, "parkkim_vit.pth.tar")
    models._save(vit, path)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")
    _save_npz(
        os.path.join(args.out, "parkkim_vit.npz"),
        images=images,
        inputs=_nhwc(inputs.float()),
        logits=logits,
        **{f"map_{i}": m.astype(np.float32) for i, m in enumerate(maps)},
    )

    # --- The full-size published architectures: keys, shapes, counts.
    resnet50 = models.get_model("resnet_50", num_classes=100, stem=False, verbose=False)
    vit_ti = timm.models.vision_transformer.VisionTransformer(
        num_classes=100,
        img_size=32,
        patch_size=2,
        embed_dim=192,
        depth=12,
        num_heads=3,
        qkv_bias=False,
    )
    try:
        commit = subprocess.run(
            ["git", "-C", authors, "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown (not a git checkout)"
    resnet18 = models.get_model("resnet_18", num_classes=100, stem=False, verbose=False)
    imagenet50 = models.get_model(
        "resnet_50", num_classes=1000, stem=True, verbose=False
    )
    arch = {
        "resnet_50": {"params": _count(resnet50), "state_dict": _shapes(resnet50)},
        "resnet_18": {"params": _count(resnet18), "state_dict": _shapes(resnet18)},
        "resnet_50_imagenet": {
            "params": _count(imagenet50),
            "state_dict": _shapes(imagenet50),
        },
        "vit_ti": {"params": _count(vit_ti), "state_dict": _shapes(vit_ti)},
        "cifar100_mean": list(mean),
        "cifar100_std": list(std),
        "versions": {
            "torch": torch.__version__,
            "timm": timm.__version__,
            "numpy": np.__version__,
            "how-do-vits-work": commit,
        },
    }
    path = os.path.join(args.out, "parkkim_arch.json")
    with open(path, "w") as f:
        json.dump(arch, f, indent=1)
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


if __name__ == "__main__":
    main()
