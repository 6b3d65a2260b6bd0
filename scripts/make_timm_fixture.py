"""Regenerates the small timm / Hugging Face fixtures in `tests/fixtures/`.

The tests check `keras_vit.weights` against real PyTorch implementations
without needing torch: this script builds tiny randomly initialised models
with timm and transformers, saves their weights as `.safetensors` (as those
libraries do), and saves a batch of input images with the outputs the
PyTorch models compute for them (in float64) as `.npz`.

torch, timm and transformers are NOT dependencies of keras_vit. To run this:

    pip install torch==2.13.0            # the CPU wheel, first
    echo "torch==2.13.0" > /tmp/torch-pin.txt
    pip install timm transformers -c /tmp/torch-pin.txt
    python scripts/make_timm_fixture.py [--out tests/fixtures]

Fixtures (each well under 1 MB):

- `timm_vit`: a token-pooled ViT (D=32, depth 2, 2 heads, MLP 64, patch 8,
  32x32 images, 10 classes), also saved in bfloat16 (`timm_vit_bf16`).
- `timm_vit_gap`: no class token, mean pooling, 24x40 (non-square) images.
- `timm_hybrid`: a ResNetV2 (1, 1) stem width 32 + ViT hybrid, 32x32 images,
  stored in bfloat16 to stay small; GroupNorm epsilon set to the reference's
  1e-6 (timm's weight standardisation keeps its own epsilon, inside the
  square root, so this fixture matches to ~1e-5 rather than 1e-7).
- `hf_vit`: `transformers.ViTForImageClassification`, saved with
  `save_pretrained` (the hub key layout).
- `hf_vit_pooler`: `transformers.ViTModel` with its pooler (the original
  `pre_logits`); the expected output is `pooler_output`.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import os
import shutil
import tempfile

import numpy as np
import torch

_TORCHVISION_STUBS = None


def _guard_torchvision() -> str:
    """Lets `import timm` work with a CPU-only torch.

    The torchvision wheels of the package index are CUDA builds whose
    compiled ops cannot load next to a CPU torch; torchvision's import then
    fails registering fake kernels for `torchvision::nms`. If the compiled
    library does not load, declare the two operator schemas it registers
    (no kernels) so that the import completes. timm does not call them.
    """
    global _TORCHVISION_STUBS
    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        return "no torchvision"
    folder = next(iter(spec.submodule_search_locations))
    for name in os.listdir(folder):
        if name.startswith("_C") and name.endswith(".so"):
            try:
                torch.ops.load_library(os.path.join(folder, name))
                return "torchvision ops load"
            except OSError:
                break
    _TORCHVISION_STUBS = torch.library.Library("torchvision", "DEF")
    for op in ("nms", "qnms"):
        _TORCHVISION_STUBS.define(
            f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
        )
    return "declared torchvision::nms/qnms schemas"


def _randomize(model: torch.nn.Module, seed: int) -> None:
    """Random weights at scales that keep activations O(1).

    Default inits leave heads and tokens at zero; random values everywhere
    make the comparison sensitive to every key.
    """
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=gen)
            if name.endswith("bias"):
                value = 0.1 * noise
            elif param.ndim == 1:  # LayerNorm / GroupNorm scale
                value = 1.0 + 0.1 * noise
            elif "cls_token" in name or "pos_embed" in name or "position" in name:
                value = 0.2 * noise
            elif param.ndim == 4 and "backbone" in name:
                # Conv kernels of unit scale, so that the epsilon of the weight
                # standardisation is negligible (timm's differs from Flax's).
                value = noise + 0.5 * torch.randn(
                    (param.shape[0], 1, 1, 1), generator=gen
                )
            else:
                fan_in = int(np.prod(param.shape[1:]))
                value = noise / fan_in**0.5
            param.copy_(value)


def _round_to_bfloat16(model: torch.nn.Module) -> None:
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(param.to(torch.bfloat16).float())


def _images(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


def _run(model, images) -> np.ndarray:
    model = model.double().eval()
    x = torch.from_numpy(images.astype(np.float64)).permute(0, 3, 1, 2)
    with torch.no_grad():
        out = model(x)
    return out.numpy()


def _save_torch(model, path, dtype=torch.float32):
    from safetensors.torch import save_file

    tensors = {
        k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()
    }
    save_file(tensors, path, metadata={"format": "pt"})


def hybrid_backbone():
    """The hybrid fixture's ResNetV2 (1, 1): stem width 32, timm's
    standardised convolutions (eps 1e-8) and GroupNorm (eps 1e-6)."""
    from timm.layers import GroupNormAct
    from timm.layers import StdConv2dSame
    from timm.models.resnetv2 import ResNetV2

    return ResNetV2(
        layers=(1, 1),
        channels=(128, 256),
        stem_chs=32,
        num_classes=0,
        global_pool="",
        preact=False,
        stem_type="same",
        conv_layer=functools.partial(StdConv2dSame, eps=1e-8),
        norm_layer=functools.partial(GroupNormAct, num_groups=32, eps=1e-6),
    )


def make_timm(out: str) -> None:
    from timm.models.vision_transformer import VisionTransformer
    from timm.models.vision_transformer_hybrid import HybridEmbed

    common = dict(embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0, num_classes=10)

    vit = VisionTransformer(img_size=32, patch_size=8, **common)
    _randomize(vit, seed=1)
    _save_torch(vit, f"{out}/timm_vit.safetensors")
    images = _images((2, 32, 32, 3), seed=1)
    np.savez(f"{out}/timm_vit.npz", images=images, logits=_run(vit, images))

    # The same weights rounded to bfloat16, and what they compute.
    bf16 = VisionTransformer(img_size=32, patch_size=8, **common)
    bf16.load_state_dict(vit.float().state_dict())
    _round_to_bfloat16(bf16)
    _save_torch(bf16, f"{out}/timm_vit_bf16.safetensors", torch.bfloat16)
    np.savez(f"{out}/timm_vit_bf16.npz", images=images, logits=_run(bf16, images))

    gap = VisionTransformer(
        img_size=(24, 40), patch_size=8, class_token=False, global_pool="avg",
        fc_norm=False, **common,
    )  # fmt: skip
    _randomize(gap, seed=2)
    _save_torch(gap, f"{out}/timm_vit_gap.safetensors")
    images = _images((2, 24, 40, 3), seed=2)
    np.savez(f"{out}/timm_vit_gap.npz", images=images, logits=_run(gap, images))

    backbone = hybrid_backbone()
    hybrid = VisionTransformer(
        img_size=32,
        patch_size=1,
        embed_layer=functools.partial(HybridEmbed, backbone=backbone),
        **common,
    )
    _randomize(hybrid, seed=3)
    _round_to_bfloat16(hybrid)  # stored in bfloat16: half the bytes
    _save_torch(hybrid, f"{out}/timm_hybrid.safetensors", torch.bfloat16)
    images = _images((2, 32, 32, 3), seed=3)
    np.savez(f"{out}/timm_hybrid.npz", images=images, logits=_run(hybrid, images))


def make_huggingface(out: str) -> None:
    from transformers import ViTConfig
    from transformers import ViTForImageClassification
    from transformers import ViTModel

    config = ViTConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=32,
        patch_size=8,
        num_labels=10,
        layer_norm_eps=1e-6,
        hidden_act="gelu",
    )
    for name, model, seed in (
        ("hf_vit", ViTForImageClassification(config), 4),
        ("hf_vit_pooler", ViTModel(config, add_pooling_layer=True), 5),
    ):
        _randomize(model, seed)
        with tempfile.TemporaryDirectory() as tmp:
            model.save_pretrained(tmp)
            shutil.copy(f"{tmp}/model.safetensors", f"{out}/{name}.safetensors")
        images = _images((2, 32, 32, 3), seed)
        model = model.double().eval()
        x = torch.from_numpy(images.astype(np.float64)).permute(0, 3, 1, 2)
        with torch.no_grad():
            result = model(pixel_values=x)
        output = result.logits if name == "hf_vit" else result.pooler_output
        np.savez(f"{out}/{name}.npz", images=images, logits=output.numpy())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("tests", "fixtures"))
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print(_guard_torchvision())
    torch.manual_seed(0)
    make_timm(args.out)
    make_huggingface(args.out)
    import timm
    import transformers

    versions = {
        "torch": torch.__version__,
        "timm": timm.__version__,
        "transformers": transformers.__version__,
    }
    with open(os.path.join(args.out, "VERSIONS.json"), "w") as f:
        json.dump(versions, f, indent=1)
    for name in sorted(os.listdir(args.out)):
        size = os.path.getsize(os.path.join(args.out, name))
        print(f"{name:32s} {size / 1024:8.1f} KiB")


if __name__ == "__main__":
    main()
