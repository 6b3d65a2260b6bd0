"""The tables of ResNets, pre-activation ResNets and AlterNets ("How Do ViTs Work?").

One frozen `CNNVariant` describes the three families: an AlterNet is a
pre-activation ResNet some of whose blocks are multi-head self-attention
(MSA) blocks, a pre-activation ResNet is an AlterNet without them, and a
(post-activation) ResNet has the same rows with the original block order.

Layouts as the paper's official code defines them (Park & Kim, ICLR 2022,
github.com/xxxnell/how-do-vits-work, branch `transformer`, read at commit
9571ff1): `models/preresnet.py` and `models/preresnet_dnn_block.py` for the
pre-activation ResNets, `models/alternet.py` for AlterNet (blocks per stage,
MSA blocks per stage, heads per stage, 64-wide heads, 7x7 windows),
`models/resnet.py` for the stage widths (64, 128, 256, 512) and the strides,
`models/classifier_block.py` (`BNGAPBlock`) for the head.

The MSA placement rule of the code (`AlterNet._make_layer`): a stage of
`depth` blocks with `msa` MSA blocks is `depth - 2 * msa` convolution blocks
followed by `msa` (convolution, MSA) pairs, so the stage always ends in an
MSA block and MSA blocks alternate with convolution blocks from the end:
AlterNet-50's stage 3 is conv, MSA, conv, MSA, conv, MSA.
"""

from __future__ import annotations

import dataclasses
import types

from keras_vit._export import export

BLOCK_KINDS = ("basic", "bottleneck")
STEMS = ("imagenet", "cifar")


@export("keras_vit.parkkim.CNNVariant", "keras_vit.parkkim.cnn.CNNVariant")
@dataclasses.dataclass(frozen=True)
class CNNVariant:
    """Architecture of one pre-activation ResNet or AlterNet.

    Attributes:
        block: `"bottleneck"` (1x1, 3x3, 1x1 convolutions, four times as many
            outputs as `widths[s]`) or `"basic"` (two 3x3 convolutions).
        depths: Blocks per stage, MSA blocks included.
        widths: Width of each stage (bottleneck width, or output width of
            basic blocks). The first block of every stage but the first
            halves the resolution.
        msa_blocks: MSA blocks per stage, placed by the paper's rule (see
            the module docstring). All zeros (or empty) for a ResNet.
        num_heads: Heads of the MSA blocks of each stage.
        head_dim: Width of one attention head.
        window_size: Side of the square attention windows; a feature map no
            larger than the window is attended globally.
        stem: `"imagenet"` (7x7/2 convolution and 3x3/2 max-pool) or
            `"cifar"` (one 3x3/1 convolution), the row's default stem.
        stem_width: Output channels of the stem.
    """

    block: str
    depths: tuple[int, ...]
    widths: tuple[int, ...] = (64, 128, 256, 512)
    msa_blocks: tuple[int, ...] = ()
    num_heads: tuple[int, ...] = ()
    head_dim: int = 64
    window_size: int = 7
    stem: str = "imagenet"
    stem_width: int = 64

    def __post_init__(self):
        stages = len(self.depths)
        if self.block not in BLOCK_KINDS:
            raise ValueError(f"`block` must be one of {BLOCK_KINDS}: {self.block!r}")
        if self.stem not in STEMS:
            raise ValueError(f"`stem` must be one of {STEMS}: {self.stem!r}")
        if not stages or min(self.depths) <= 0:
            raise ValueError(f"`depths` must be positive ints: {self.depths}")
        if len(self.widths) != stages or min(self.widths) <= 0:
            raise ValueError(
                f"`widths` needs {stages} positive ints, one per stage: {self.widths}"
            )
        msa = self.msa_blocks or (0,) * stages
        if len(msa) != stages or min(msa) < 0:
            raise ValueError(
                f"`msa_blocks` needs {stages} ints >= 0, one per stage: "
                f"{self.msa_blocks}"
            )
        for stage, (depth, count) in enumerate(zip(self.depths, msa, strict=True), 1):
            if 2 * count > depth:
                raise ValueError(
                    f"`msa_blocks`: stage {stage} has {count} MSA blocks but only "
                    f"{depth} blocks; each MSA block follows a convolution block."
                )
        if any(msa):
            if len(self.num_heads) != stages or min(self.num_heads) <= 0:
                raise ValueError(
                    f"`num_heads` needs {stages} positive ints, one per stage: "
                    f"{self.num_heads}"
                )
        if self.head_dim <= 0 or self.window_size <= 0 or self.stem_width <= 0:
            raise ValueError(
                "`head_dim`, `window_size` and `stem_width` must be positive."
            )

    @property
    def expansion(self) -> int:
        """Output channels of a block per channel of its width: 4 or 1."""
        return 4 if self.block == "bottleneck" else 1

    @property
    def out_channels(self) -> int:
        """Channels of the last stage's output."""
        return self.widths[-1] * self.expansion

    @property
    def stride(self) -> int:
        """Total downsampling: 4 for the ImageNet stem, x2 per later stage."""
        return (4 if self.stem == "imagenet" else 1) * 2 ** (len(self.depths) - 1)

    def layout(self) -> tuple[tuple[str, ...], ...]:
        """`"conv"` or `"msa"` for every block of every stage.

        Example:

        >>> ALTERNETS["50"].layout()[2]
        ('conv', 'msa', 'conv', 'msa', 'conv', 'msa')
        """
        msa = self.msa_blocks or (0,) * len(self.depths)
        return tuple(
            ("conv",) * (depth - 2 * count) + ("conv", "msa") * count
            for depth, count in zip(self.depths, msa, strict=True)
        )


_PAPER_HEADS = (3, 6, 12, 24)

# Pre-activation ResNets: models/preresnet.py (dnn_18 ... dnn_152). "mini" is
# a quarter-width ResNet-18 for digits/CIFAR-scale runs on a CPU; "test" is a
# tiny row for unit tests.
PREACT_RESNETS = types.MappingProxyType(
    {
        "test": CNNVariant("basic", (1, 2), widths=(8, 16), stem="cifar", stem_width=8),
        "mini": CNNVariant(
            "basic",
            (2, 2, 2, 2),
            widths=(16, 32, 64, 128),
            stem="cifar",
            stem_width=16,
        ),
        "18": CNNVariant("basic", (2, 2, 2, 2)),
        "34": CNNVariant("basic", (3, 4, 6, 3)),
        "50": CNNVariant("bottleneck", (3, 4, 6, 3)),
        "101": CNNVariant("bottleneck", (3, 4, 23, 3)),
        "152": CNNVariant("bottleneck", (3, 8, 36, 3)),
    }
)
export(
    "keras_vit.PREACT_RESNETS",
    "keras_vit.parkkim.PREACT_RESNETS",
    "keras_vit.parkkim.cnn.PREACT_RESNETS",
).constant(__name__, "PREACT_RESNETS")

# Post-activation ResNets: models/resnet.py (dnn_18 ... dnn_152) with
# models/resnet_dnn_block.py; the same stages and widths as the
# pre-activation rows. The paper's CIFAR models use `stem="cifar"` (the code's
# `stem=False`), its ImageNet models the default ImageNet stem.
RESNETS = types.MappingProxyType(dict(PREACT_RESNETS))
export("keras_vit.parkkim.RESNETS", "keras_vit.parkkim.cnn.RESNETS").constant(
    __name__, "RESNETS"
)

# AlterNets: models/alternet.py (dnn_18 ... dnn_152). AlterNet-34 and larger
# have 4 blocks in stage 4 (one more than the ResNet they come from). "mini"
# is the quarter-width AlterNet-18 with 16-wide heads and 4x4 windows, whose
# last stage is global on 32 px inputs; "test" is a tiny row for unit tests
# (a 2x2 grid of 4x4 windows on 16 px inputs).
ALTERNETS = types.MappingProxyType(
    {
        "test": CNNVariant(
            "basic",
            (1, 2),
            widths=(8, 16),
            msa_blocks=(0, 1),
            num_heads=(1, 2),
            head_dim=4,
            window_size=4,
            stem="cifar",
            stem_width=8,
        ),
        "mini": CNNVariant(
            "basic",
            (2, 2, 2, 2),
            widths=(16, 32, 64, 128),
            msa_blocks=(0, 1, 1, 1),
            num_heads=(1, 2, 4, 8),
            head_dim=16,
            window_size=4,
            stem="cifar",
            stem_width=16,
        ),
        "18": CNNVariant(
            "basic", (2, 2, 2, 2), msa_blocks=(0, 1, 1, 1), num_heads=_PAPER_HEADS
        ),
        "34": CNNVariant(
            "basic", (3, 4, 6, 4), msa_blocks=(0, 1, 3, 2), num_heads=_PAPER_HEADS
        ),
        "50": CNNVariant(
            "bottleneck", (3, 4, 6, 4), msa_blocks=(0, 1, 3, 2), num_heads=_PAPER_HEADS
        ),
        "101": CNNVariant(
            "bottleneck", (3, 4, 23, 4), msa_blocks=(0, 1, 3, 2), num_heads=_PAPER_HEADS
        ),
        "152": CNNVariant(
            "bottleneck", (3, 8, 36, 4), msa_blocks=(0, 1, 3, 2), num_heads=_PAPER_HEADS
        ),
    }
)
export(
    "keras_vit.ALTERNETS",
    "keras_vit.parkkim.ALTERNETS",
    "keras_vit.parkkim.cnn.ALTERNETS",
).constant(__name__, "ALTERNETS")


def get_variant(
    table, family: str, variant: str | CNNVariant, *, msa: bool = True
) -> CNNVariant:
    """Looks `variant` up in `table`, or passes a `CNNVariant` through.

    Args:
        table: The family's rows.
        family: The family's name, for messages.
        variant: A row name or a `CNNVariant`.
        msa: Whether the family builds MSA blocks; without them a variant
            that has some is refused.

    Raises:
        ValueError: for an unknown name, listing the known ones, or a
            variant with MSA blocks for a family without them.
    """
    if isinstance(variant, CNNVariant):
        spec = variant
    elif not isinstance(variant, str) or variant not in table:
        raise ValueError(
            f"Unknown {family} variant {variant!r}. Known: {list(table)}, or a "
            "`CNNVariant`."
        )
    else:
        spec = table[variant]
    if not msa and any(spec.msa_blocks):
        raise ValueError(
            "`variant` has MSA blocks; build it with `keras_vit.AlterNet`."
        )
    return spec


def default_name(family: str, variant: str | CNNVariant) -> str:
    """A model's default name: `"resnet50"`, `"alternet_mini"`, or the
    family alone for a `CNNVariant` that is no row.

    Example:

    >>> default_name("preact_resnet", "18"), default_name("alternet", "mini")
    ('preact_resnet18', 'alternet_mini')
    """
    if not isinstance(variant, str):
        return family
    return f"{family}{variant}" if variant.isdigit() else f"{family}_{variant}"
