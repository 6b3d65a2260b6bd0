"""What a checkpoint's keys and shapes say about the model that made it.

`describe` reads the architecture (width, depth, heads, MLP width, patch,
hybrid backbone) off a `{key: shape}` mapping in the original `.npz` layout.
Applied both to a checkpoint and to the layout a model expects, it tells a
checkpoint of another variant (a B/16 file for an L/16 model) apart from one
with a few bad keys, and names both (`"ViT-B/16"`, `"R50+ViT-B/16"`).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from keras_vit.models.variants import BACKBONES
from keras_vit.models.variants import VARIANTS
from keras_vit.weights import keys

_BLOCK = keys.template_pattern(keys.BLOCK)
_ATTENTION = keys.template_pattern(keys.ATTENTION)
_QKV = "(?:" + "|".join(keys.QKV) + ")"
_MLP_1 = keys.template_pattern(keys.MLP_1)
_MLP_2 = keys.template_pattern(keys.MLP_2)
_BLOCK_PREFIX = re.compile(f"^{_BLOCK}/")
_UNIT_PREFIX = re.compile(f"^{keys.template_pattern(keys.UNIT)}/")


@dataclasses.dataclass(frozen=True)
class Architecture:
    """What a set of checkpoint shapes says about the model that made it.

    Attributes:
        hidden_dim: Token width `D`.
        depth: Number of encoder blocks.
        num_heads: Attention heads.
        mlp_dim: Hidden width of the MLP blocks.
        patch_size: `(height, width)` of the patch embedding.
        backbone: `(units per stage, stem width)` of a hybrid's ResNet, or
            `None` for a plain ViT.
    """

    hidden_dim: int | None
    depth: int
    num_heads: int | None
    mlp_dim: int | None
    patch_size: tuple[int, int] | None
    backbone: tuple[tuple[int, ...], int] | None

    @property
    def name(self) -> str:
        """A readable name such as `"ViT-B/16"` or `"R50+ViT-B/16"`."""
        size = next(
            (
                name
                for name, v in VARIANTS.items()
                if (v.hidden_dim, v.depth, v.mlp_dim, v.num_heads)
                == (self.hidden_dim, self.depth, self.mlp_dim, self.num_heads)
            ),
            None,
        )
        patch = self.patch_size[0] if self.patch_size else None
        if size is None:
            return (
                f"ViT(hidden_dim={self.hidden_dim}, depth={self.depth}, "
                f"num_heads={self.num_heads}, mlp_dim={self.mlp_dim}, "
                f"patch_size={self.patch_size}, backbone={self.backbone})"
            )
        if self.backbone is None:
            return f"ViT-{size}/{patch}"
        layers, width = self.backbone
        stride = 4 * 2 ** max(len(layers) - 1, 0) * (patch or 1)
        prefix = next(
            (
                name
                for (name, _), spec in BACKBONES.items()
                if (spec.layers, spec.width) == (layers, width)
            ),
            f"ResNet{layers}x{width}",
        )
        return f"{prefix}+ViT-{size}/{stride}"

    @property
    def variant(self) -> str | None:
        """The `keras_vit.ViT` variant string (`"R50+B/16"`), if it has one."""
        name = self.name
        if not name.startswith(("ViT-", "R")) or "(" in name:
            return None
        return name.replace("ViT-", "")


def describe(shapes: Mapping[str, tuple[int, ...]]) -> Architecture:
    """Reads the architecture off checkpoint keys and shapes.

    Every field is read from the first key that determines it, so that one
    missing key is reported as missing rather than as another architecture.

    Args:
        shapes: `{key: shape}` in the original `.npz` layout.

    Returns:
        An `Architecture`; fields the keys do not determine are `None`.
    """

    def first(candidates):
        for pattern, axis in candidates:
            for key, shape in shapes.items():
                if re.fullmatch(pattern, key) and len(shape) > abs(axis):
                    return int(shape[axis])
        return None

    blocks = {int(m["i"]) for k in shapes if (m := _BLOCK_PREFIX.match(k))}
    kernel = shapes.get(keys.EMBEDDING_KEY)
    patch = tuple(int(d) for d in kernel[:2]) if kernel and len(kernel) == 4 else None
    backbone = None
    units = {}
    for key in shapes:
        match = _UNIT_PREFIX.match(key)
        if match:
            stage, unit = int(match["s"]), int(match["u"])
            units[stage] = max(units.get(stage, 0), unit)
    roots = (keys.ROOT_CONV + "/", keys.ROOT_NORM + "/")
    if units or any(k.startswith(roots) for k in shapes):
        layers = tuple(units.get(s, 0) for s in range(1, max(units, default=0) + 1))
        width = first(
            [(f"{keys.ROOT_CONV}/kernel", -1), (f"{keys.ROOT_NORM}/scale", 0)]
        )
        backbone = (layers, width)
    return Architecture(
        hidden_dim=first(
            [(re.escape(keys.EMBEDDING_KEY), -1),
             (re.escape(keys.ENCODER_NORM + "/scale"), 0),
             (re.escape(keys.CLS_KEY), -1), (f"{_ATTENTION}/{_QKV}/kernel", 0)]
        ),
        depth=len(blocks),
        num_heads=first(
            [(f"{_ATTENTION}/{_QKV}/kernel", 1), (f"{_ATTENTION}/{_QKV}/bias", 0),
             (f"{_ATTENTION}/{keys.OUT}/kernel", 0)]
        ),
        mlp_dim=first(
            [(f"{_MLP_1}/kernel", -1), (f"{_MLP_1}/bias", 0), (f"{_MLP_2}/kernel", 0)]
        ),
        patch_size=patch,
        backbone=backbone,
    )  # fmt: skip


def differences(model: Architecture, checkpoint: Architecture) -> list[str]:
    """Fields on which two architectures differ, where both are known."""
    out = []
    for field in ("hidden_dim", "depth", "num_heads", "mlp_dim", "patch_size"):
        a, b = getattr(model, field), getattr(checkpoint, field)
        if a is not None and b is not None and a != b:
            out.append(field)
    a, b = model.backbone, checkpoint.backbone
    if (a is None) != (b is None):
        out.append("backbone")
    elif a is not None and (
        a[0] != b[0] or (a[1] is not None and b[1] is not None and a[1] != b[1])
    ):
        out.append("backbone")
    return out
