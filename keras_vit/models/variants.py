"""The variant table and the `"R50+B/16"` variant grammar."""

from __future__ import annotations

import dataclasses
import re
import types

from keras_vit._export import export


@export("keras_vit.models.Variant")
@dataclasses.dataclass(frozen=True)
class Variant:
    """Architecture of one ViT size (Table 1 of the paper)."""

    hidden_dim: int
    depth: int
    mlp_dim: int
    num_heads: int


# B, L, H: Table 1 of arXiv:2010.11929. Ti, S: arXiv:2012.12877 (DeiT), as
# used by the AugReg checkpoints. g: DINOv2's giant (arXiv:2304.07193; its
# SwiGLU MLP is 4096 wide after the gate). So400m: the shape-optimised
# SigLIP (arXiv:2305.13035). "test" is a tiny row for unit tests.
VARIANTS = types.MappingProxyType(
    {
        "test": Variant(hidden_dim=32, depth=2, mlp_dim=64, num_heads=2),
        "Ti": Variant(hidden_dim=192, depth=12, mlp_dim=768, num_heads=3),
        "S": Variant(hidden_dim=384, depth=12, mlp_dim=1536, num_heads=6),
        "B": Variant(hidden_dim=768, depth=12, mlp_dim=3072, num_heads=12),
        "L": Variant(hidden_dim=1024, depth=24, mlp_dim=4096, num_heads=16),
        "H": Variant(hidden_dim=1280, depth=32, mlp_dim=5120, num_heads=16),
        "g": Variant(hidden_dim=1536, depth=40, mlp_dim=4096, num_heads=24),
        "So400m": Variant(hidden_dim=1152, depth=27, mlp_dim=4304, num_heads=16),
    }
)
export("keras_vit.VARIANTS", "keras_vit.models.VARIANTS").constant(__name__, "VARIANTS")


@export("keras_vit.ResNetSpec", "keras_vit.models.ResNetSpec")
@dataclasses.dataclass(frozen=True)
class ResNetSpec:
    """A BiT ResNet backbone for hybrid models (paper §3.1).

    Attributes:
        layers: Bottleneck units per stage, e.g. `(3, 4, 9)`. An empty tuple
            keeps only the stem (7x7/2 convolution and 3x3/2 max-pool).
        width: Channels of the stem; stage `s` has `width * 2**s` bottleneck
            channels and four times as many outputs.
    """

    layers: tuple[int, ...]
    width: int = 64

    @property
    def stride(self) -> int:
        """Total downsampling of the backbone: 4 for the stem, x2 per stage."""
        return 4 * 2 ** max(len(self.layers) - 1, 0)

    @property
    def out_channels(self) -> int:
        if not self.layers:
            return self.width
        return self.width * 4 * 2 ** (len(self.layers) - 1)


# (name, total stride) -> backbone. The paper's R50 hybrid at /16 drops
# stage 4 and extends stage 3 to 9 units, keeping the layer count (§3.1).
BACKBONES = types.MappingProxyType(
    {
        ("R50", 16): ResNetSpec((3, 4, 9)),
        ("R50", 32): ResNetSpec((3, 4, 6, 3)),
        ("R26", 32): ResNetSpec((2, 2, 2, 2)),
    }
)
export("keras_vit.BACKBONES", "keras_vit.models.BACKBONES").constant(
    __name__, "BACKBONES"
)

_VARIANT_PATTERN = re.compile(r"^(?:(R\d+)\+)?([A-Za-z][A-Za-z0-9]*)/(\d+)$")
# A size the table does not list: width x depth x MLP width x heads / patch.
_CUSTOM_PATTERN = re.compile(r"^(\d+)x(\d+)x(\d+)x(\d+)/(\d+)$")


@export("keras_vit.models.ModelSpec")
@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A parsed variant string: size, patch size and optional backbone.

    `patch_size` is the patch on the model's input for plain ViTs, and on the
    backbone's feature map for hybrids (`total_stride // backbone.stride`).
    """

    size: str
    variant: Variant
    patch_size: int
    total_stride: int
    backbone: ResNetSpec | None
    backbone_name: str | None

    @property
    def name(self) -> str:
        """The default model name, e.g. `"vit_b16"`, `"r50_vit_b16"` or
        `"vit_96x6x192x4_p4"`."""
        prefix = "" if self.backbone is None else f"{self.backbone_name.lower()}_"
        if "x" in self.size:  # A spelled-out size: "vit_96x6x192x4_p4".
            return f"{prefix}vit_{self.size}_p{self.total_stride}"
        return f"{prefix}vit_{self.size.lower()}{self.total_stride}"


@export("keras_vit.parse_variant", "keras_vit.models.parse_variant")
def parse_variant(
    variant: str | ModelSpec, backbone: ResNetSpec | tuple[int, ...] | None = None
) -> ModelSpec:
    """Parses `"B/16"`, `"L/32"`, `"R50+B/16"`, `"192x12x768x3/2"` into a `ModelSpec`.

    Args:
        variant: `"<size>/<patch>"`, optionally prefixed with a backbone name
            (`"R50+"`, `"R26+"`). The number after the slash is the total
            stride of a token: the patch size of a plain ViT, and backbone
            stride times patch size of a hybrid. A size the table does not
            list is spelled `"<width>x<depth>x<mlp width>x<heads>/<patch>"`
            (e.g. Park & Kim's CIFAR ViT-Ti, `"192x12x768x3/2"`). A
            `ModelSpec` is returned as it is.
        backbone: A custom `ResNetSpec` (or its `layers` tuple) for a hybrid;
            not allowed together with a backbone name in `variant`, nor with
            a `ModelSpec` (which holds its own backbone).

    Raises:
        ValueError: for an unknown size or backbone, or a stride the backbone
            does not divide.
    """
    if isinstance(variant, ModelSpec):
        if backbone is not None:
            raise ValueError(
                "`backbone=` cannot change a ModelSpec; set its `backbone` field "
                "(or pass a variant name)."
            )
        return variant
    custom = _CUSTOM_PATTERN.match(variant) if isinstance(variant, str) else None
    if custom is not None and backbone is None:
        width, depth, mlp, heads, patch = (int(g) for g in custom.groups())
        if min(width, depth, mlp, heads, patch) <= 0 or width % heads:
            raise ValueError(
                f"Variant {variant!r} needs positive numbers and a width that "
                "the heads divide."
            )
        return custom_spec(
            patch, hidden_dim=width, depth=depth, mlp_dim=mlp, num_heads=heads
        )
    match = _VARIANT_PATTERN.match(variant) if isinstance(variant, str) else None
    if match is None:
        raise ValueError(
            f"Unknown variant {variant!r}. Expected '<size>/<patch>' such as "
            f"'B/16' or 'R50+B/16', with size one of {sorted(VARIANTS)}, or "
            "'<width>x<depth>x<mlp>x<heads>/<patch>' such as '192x12x768x3/2'."
        )
    backbone_name, size, stride = match.group(1), match.group(2), int(match.group(3))
    if stride <= 0:
        raise ValueError(
            f"The patch size in {variant!r} must be a positive integer, e.g. "
            f"'{size}/16'."
        )
    if size not in VARIANTS:
        raise ValueError(
            f"Unknown variant size {size!r} in {variant!r}. Known sizes: "
            f"{list(VARIANTS)}."
        )
    if backbone_name is not None and backbone is not None:
        raise ValueError(
            f"Pass either a backbone in the variant ({variant!r}) or "
            "`backbone=`, not both."
        )
    if backbone_name is not None:
        if (backbone_name, stride) not in BACKBONES:
            known = [f"{n}+?/{s}" for n, s in BACKBONES]
            raise ValueError(
                f"Unknown hybrid backbone {backbone_name!r} at stride {stride} "
                f"in {variant!r}. Known: {known}; or pass `backbone=(...)`."
            )
        backbone = BACKBONES[(backbone_name, stride)]
    elif backbone is not None:
        if not isinstance(backbone, ResNetSpec):
            backbone = ResNetSpec(tuple(int(n) for n in backbone))
        backbone_name = "resnet"
    patch_size = stride
    if backbone is not None:
        if stride % backbone.stride:
            raise ValueError(
                f"The token stride {stride} of {variant!r} is not a multiple of "
                f"the backbone's stride {backbone.stride}."
            )
        patch_size = stride // backbone.stride
    return ModelSpec(size, VARIANTS[size], patch_size, stride, backbone, backbone_name)


@export("keras_vit.models.custom_spec")
def custom_spec(
    patch_size: int, *, hidden_dim: int, depth: int, mlp_dim: int, num_heads: int
) -> ModelSpec:
    """The spec of a plain ViT whose size the table does not list.

    Pass it to `keras_vit.ViT` in place of a variant string (or spell the
    variant `"96x6x192x4/4"`, which `parse_variant` turns into this spec).

    Example:

    ```python
    spec = custom_spec(4, hidden_dim=96, depth=6, mlp_dim=192, num_heads=4)
    model = keras_vit.ViT(spec, image_size=32, num_classes=10)
    ```
    """
    size = Variant(
        hidden_dim=int(hidden_dim),
        depth=int(depth),
        mlp_dim=int(mlp_dim),
        num_heads=int(num_heads),
    )
    return dataclasses.replace(
        parse_variant(f"B/{int(patch_size)}"),
        size=f"{size.hidden_dim}x{size.depth}x{size.mlp_dim}x{size.num_heads}",
        variant=size,
    )
