"""FLOPs of a ViT forward pass, counted from its matrix multiplications.

With P patches of p x p x C pixels, N tokens (P plus the class token), width D,
MLP width M, L blocks and K classes, the multiply-accumulates are

    MACs = P*(p*p*C)*D                                (patch embedding)
         + L * [N*(3*D*D + D*D + 2*D*M) + 2*N*N*D]    (qkv, out, MLP; QK^T, AV)
         + D*K                                        (head)

and FLOPs = 2 x MACs. LayerNorm, softmax, GELU and the residual adds are under
1% and left out. A training step counts as 3 forward passes (forward, and the
backward pass's two products per matmul). ViT-B/16 at 224: 17.56 GMAC =
35.1 GFLOP per image.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Size:
    """Width, depth, MLP width and heads of a ViT size."""

    hidden_dim: int
    depth: int
    mlp_dim: int
    num_heads: int


SIZES = {
    "Ti": Size(192, 12, 768, 3),
    "S": Size(384, 12, 1536, 6),
    "B": Size(768, 12, 3072, 12),
    "L": Size(1024, 24, 4096, 16),
    "H": Size(1280, 32, 5120, 16),
}


def parse(variant: str) -> tuple[Size, int]:
    """`"B/16"` -> (`SIZES["B"]`, 16). A family's model (`"dinov3:S/16"`,
    `"eva02:S/14"`: see `cases.FAMILY_MODELS`) counts as its size: DINOv3's
    rotary embeddings add no matrix products, and EVA-02-S's SwiGLU (three
    384x1024 layers) costs what ViT-S's GELU MLP (two 384x1536) does.

    Raises:
        ValueError: For a name that is not `<size>/<patch>` with a known size.
    """
    variant = variant.split(":")[-1]
    size, sep, patch = variant.partition("/")
    if not sep or size not in SIZES or not patch.isdigit():
        raise ValueError(
            f"Unknown variant {variant!r}: expected '<size>/<patch>' with size in "
            f"{sorted(SIZES)}, e.g. 'B/16'."
        )
    return SIZES[size], int(patch)


def forward_flops(
    variant: str, image_size: int, num_classes: int = 1000, channels: int = 3
) -> float:
    """Forward FLOPs of one image (see the module docstring).

    Args:
        variant: e.g. `"B/16"`.
        image_size: Square image side in pixels.
        num_classes: Classes of the head.
        channels: Input channels.

    Returns:
        FLOPs (2 x multiply-accumulates) per image.

    Example:

    >>> round(forward_flops("B/16", 224) / 1e9, 1)
    35.1
    """
    size, patch = parse(variant)
    if image_size % patch:
        raise ValueError(f"image_size {image_size} is not a multiple of patch {patch}.")
    d, m = size.hidden_dim, size.mlp_dim
    patches = (image_size // patch) ** 2
    tokens = patches + 1
    macs = patches * patch * patch * channels * d
    macs += size.depth * (tokens * (4 * d * d + 2 * d * m) + 2 * tokens * tokens * d)
    macs += d * num_classes
    return 2.0 * macs


def step_flops(task: str, variant: str, image_size: int) -> float:
    """FLOPs per image of an inference call or of a training step (3x)."""
    flops = forward_flops(variant, image_size)
    return 3 * flops if task == "train" else flops
