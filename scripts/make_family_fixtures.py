"""Writes the tiny timm fixtures of the newer ViT families to `tests/fixtures/`.

Each fixture is a randomly initialised timm model of the family's
architecture at test width (D=32, depth 2, 2 heads, MLP 64, patch 8, 32x32
images) saved as `.safetensors`, and an `.npz` with input images and what
timm computes for them in float64 (`logits`: the head's output, or the
pooled features for the families published without a head). The tests
load them with `keras_vit.weights.load_weights` and need neither torch nor
timm.

- `timm_deit3`: LayerScale, position table without a class-token row
  (DeiT III), 10 classes.
- `timm_dinov2`: 4 register tokens, LayerScale, no class-token row
  (DINOv2 with registers), no head (pooled class token); also `logits_48`,
  the same weights run at 48x48 with timm's `dynamic_img_size` (its
  bicubic position-embedding resampling).
- `timm_dinov2_swiglu`: the same with timm's `SwiGLUPacked` MLP (DINOv2-g).
- `timm_siglip`: no class token, attention-pooling head (`global_pool="map"`,
  SigLIP), no classifier.
- `timm_qknorm_fcnorm`: QK-norm, mean pooling with `fc_norm`, 10 classes.
- `timm_deit_distilled`: `VisionTransformerDistilled` (class and
  distillation tokens, two heads averaged in eval mode), 10 classes.
- `timm_clip`: a CLIP image tower (`vit_*_clip_*`): a LayerNorm before the
  first block (`pre_norm`), LayerNorm epsilon 1e-5, 10 classes.
- `timm_rpn`: res-post-norm blocks (timm's `ResPostBlock`, as its
  `vit_base_patch16_rpn_224`: no class token, no query/key/value biases,
  mean pooling with `fc_norm`), 10 classes.

torch and timm are not dependencies of keras_vit. To run this:

    pip install torch==2.13.0
    pip install timm -c <(echo torch==2.13.0)
    python scripts/make_family_fixtures.py [--out tests/fixtures] [--only rpn]
"""

from __future__ import annotations

import argparse
import functools
import io
import os
import sys
import tempfile

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_timm_fixture as base  # noqa: E402

COMMON = dict(
    embed_dim=32, depth=2, num_heads=2, mlp_ratio=2.0, img_size=32, patch_size=8
)


def _write_atomic(path: str, data: bytes) -> None:
    """Writes `data` to `path` completely or not at all."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp_")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; fixtures are shared
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def _save(model, out: str, name: str, **arrays) -> None:
    from safetensors.torch import save

    tensors = {
        k: v.detach().float().contiguous() for k, v in model.state_dict().items()
    }
    _write_atomic(f"{out}/{name}.safetensors", save(tensors, metadata={"format": "pt"}))
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    _write_atomic(f"{out}/{name}.npz", buffer.getvalue())


def _fixture(model, out: str, name: str, seed: int, **extra) -> None:
    base._randomize(model, seed)
    images = _images = base._images((2, 32, 32, 3), seed)
    arrays = dict(images=_images, logits=base._run(model, images))
    for key, value in extra.items():
        arrays[key] = value(model)
    _save(model.float(), out, name, **arrays)


def make_clip(out: str) -> None:
    from timm.models.vision_transformer import VisionTransformer

    clip = VisionTransformer(
        **COMMON,
        num_classes=10,
        pre_norm=True,
        norm_layer=functools.partial(torch.nn.LayerNorm, eps=1e-5),
    )
    _fixture(clip, out, "timm_clip", seed=17)


def make_rpn(out: str) -> None:
    from timm.models.vision_transformer import ResPostBlock
    from timm.models.vision_transformer import VisionTransformer

    rpn = VisionTransformer(
        **COMMON, num_classes=10, block_fn=ResPostBlock, class_token=False,
        global_pool="avg", qkv_bias=False, init_values=1e-5,
    )  # fmt: skip
    _fixture(rpn, out, "timm_rpn", seed=18)


def make(out: str) -> None:
    from timm.layers import SwiGLUPacked
    from timm.models.deit import VisionTransformerDistilled
    from timm.models.vision_transformer import VisionTransformer

    deit3 = VisionTransformer(
        **COMMON, num_classes=10, no_embed_class=True, init_values=1e-6
    )
    _fixture(deit3, out, "timm_deit3", seed=11)

    dinov2 = dict(
        **COMMON, num_classes=0, reg_tokens=4, no_embed_class=True, init_values=1e-5
    )
    model = VisionTransformer(**dinov2)

    def at_48(model):
        dynamic = VisionTransformer(**dinov2, dynamic_img_size=True)
        dynamic.load_state_dict(model.state_dict())
        return base._run(dynamic, base._images((2, 48, 48, 3), 12))

    _fixture(
        model,
        out,
        "timm_dinov2",
        seed=12,
        images_48=lambda m: base._images((2, 48, 48, 3), 12),
        logits_48=at_48,
    )

    swiglu = VisionTransformer(
        **{**dinov2, "mlp_ratio": 4.0}, mlp_layer=SwiGLUPacked, act_layer=torch.nn.SiLU
    )
    _fixture(swiglu, out, "timm_dinov2_swiglu", seed=13)

    siglip = VisionTransformer(
        **COMMON, num_classes=0, class_token=False, global_pool="map"
    )
    _fixture(siglip, out, "timm_siglip", seed=14)

    qk = VisionTransformer(
        **COMMON, num_classes=10, global_pool="avg", fc_norm=True, qk_norm=True
    )
    _fixture(qk, out, "timm_qknorm_fcnorm", seed=15)

    distilled = VisionTransformerDistilled(**COMMON, num_classes=10)
    _fixture(distilled, out, "timm_deit_distilled", seed=16)
    make_clip(out)
    make_rpn(out)


# The fixtures one can write alone (`--only`).
_ALONE = {"clip": make_clip, "rpn": make_rpn}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join("tests", "fixtures"))
    parser.add_argument(
        "--only", choices=sorted(_ALONE), help="Write timm_<this> alone."
    )
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    print(base._guard_torchvision())
    torch.manual_seed(0)
    if args.only:
        _ALONE[args.only](args.out)
    else:
        make(args.out)
    for name in sorted(os.listdir(args.out)):
        if name.startswith("timm_") and any(
            f in name for f in ("deit", "dinov2", "siglip", "qknorm", "clip", "rpn")
        ):
            size = os.path.getsize(os.path.join(args.out, name))
            print(f"{name:32s} {size / 1024:8.1f} KiB")


if __name__ == "__main__":
    main()
