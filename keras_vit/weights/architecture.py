"""What a checkpoint's keys and shapes say about the model that made it.

`describe` reads the architecture (width, depth, heads, MLP width, patch,
hybrid backbone) off a `{key: shape}` mapping in the original `.npz` layout.
Applied both to a checkpoint and to the layout a model expects, it tells a
checkpoint of another variant (a B/16 file for an L/16 model) apart from one
with a few bad keys, and names both (`"ViT-B/16"`, `"R50+ViT-B/16"`). A
figure the shapes do not determine is `None` and is not named: the heads of
a timm or Hugging Face file, whose fused projections do not record them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping

from keras_vit._export import export
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


@export("keras_vit.weights.Architecture")
@dataclasses.dataclass(frozen=True)
class Architecture:
    """What a set of checkpoint shapes says about the model that made it.

    Attributes:
        hidden_dim: Token width `D`.
        depth: Number of encoder blocks.
        num_heads: Attention heads, or `None` where the shapes do not tell
            (fused `(D, D)` projections, or no attention key).
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
        """A readable name such as `"ViT-B/16"` or `"R50+ViT-B/16"`.

        Where a figure is unknown (`None`), the name lists only the known
        ones and says what is not known, e.g. `"ViT(hidden_dim=32, depth=2,
        mlp_dim=64, patch_size=(8, 8); num_heads not recorded)"`: a variant
        name would imply a head count.
        """
        size = self._size()
        patch = self.patch_size[0] if self.patch_size else None
        if size is None or self.num_heads is None:
            known = [
                f"{field}={value}"
                for field in _FIELDS
                if (value := getattr(self, field)) is not None
            ]
            if self.backbone is not None:
                known.append(f"backbone={self.backbone}")
            unknown = [f for f in _FIELDS if getattr(self, f) is None]
            note = f"; {', '.join(unknown)} not recorded" if unknown else ""
            return f"ViT({', '.join(known)}{note})"
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
        """The `keras_vit.ViT` variant string (`"R50+B/16"`, or a size the
        table does not list spelled out, `"1280x32x5120x20/16"`), if the
        shapes determine one."""
        name = self.name
        if not name.startswith(("ViT-", "R")) or "(" in name:
            return self.spelled() if self.backbone is None else None
        return name.replace("ViT-", "")

    def spelled(self, heads: str | None = None) -> str | None:
        """The variant as `keras_vit.ViT` takes it, for a plain ViT: its row
        name (`"S/16"`), or `"<width>x<depth>x<mlp>x<heads>/<patch>"`.

        Args:
            heads: What to write for an unknown head count (e.g. `"H"`);
                `None` gives no spelling when it is unknown.

        Returns:
            The spelling, or `None` for a hybrid, a non-square patch or an
            unknown figure.
        """
        if self.backbone is not None or self._size() is not None:
            name = self.name
            return None if "(" in name else name.replace("ViT-", "")
        sizes = (self.hidden_dim, self.depth, self.mlp_dim, self.patch_size)
        if None in sizes or not self.depth or sizes[3][0] != sizes[3][1]:
            return None
        count = self.num_heads if self.num_heads is not None else heads
        if count is None:
            return None
        return (
            f"{self.hidden_dim}x{self.depth}x{self.mlp_dim}x{count}"
            f"/{self.patch_size[0]}"
        )

    def build_hint(self, flag: str = "--variant ") -> str:
        """How to ask for this architecture on a command line, from what the
        shapes determine, e.g. `"--variant S/16"`, or, for a file that does
        not record its heads, `"--variant 32x2x64xH/8 with H its number of
        attention heads, which the file does not record (test/8 has these
        sizes and 2 heads)"`.

        Args:
            flag: What goes before the spelling (`"--set variant="`).
        """
        if self.num_heads is not None or self.backbone is not None:
            spelled = self.spelled()
            return f"{flag}{spelled}" if spelled else f"{flag}<its variant>"
        spelled = self.spelled(heads="H")
        if spelled is None:
            return f"{flag}<its variant>"
        rows = [
            f"{row}/{self.patch_size[0]} has these sizes and "
            f"{VARIANTS[row].num_heads} heads"
            for row in self.rows_like()
        ]
        return (
            f"{flag}{spelled} with H its number of attention heads, which the "
            "file does not record" + (f" ({'; '.join(rows)})" if rows else "")
        )

    def rows_like(self) -> list[str]:
        """The `keras_vit.VARIANTS` rows of this width, depth and MLP width
        (whatever their heads), e.g. `["S"]`."""
        return [
            name
            for name, v in VARIANTS.items()
            if (v.hidden_dim, v.depth, v.mlp_dim)
            == (self.hidden_dim, self.depth, self.mlp_dim)
        ]

    def _size(self) -> str | None:
        """The `VARIANTS` row of these sizes and heads, if one is."""
        return next(
            (
                name
                for name, v in VARIANTS.items()
                if (v.hidden_dim, v.depth, v.mlp_dim, v.num_heads)
                == (self.hidden_dim, self.depth, self.mlp_dim, self.num_heads)
            ),
            None,
        )


# The figures `Architecture.name` lists, in order.
_FIELDS = ("hidden_dim", "depth", "num_heads", "mlp_dim", "patch_size")


@export("keras_vit.weights.describe")
def describe(
    shapes: Mapping[str, tuple[int, ...]], *, heads_recorded: bool = True
) -> Architecture:
    """Reads the architecture off checkpoint keys and shapes.

    Every field is read from the first key that determines it, so that one
    missing key is reported as missing rather than as another architecture.

    Args:
        shapes: `{key: shape}` in the original `.npz` layout.
        heads_recorded: Whether the shapes came from the source itself; pass
            `False` for a timm or Hugging Face file, whose attention weights
            were split by another model's head count
            (`keras_vit.weights.Checkpoint.heads_recorded`).

    Returns:
        An `Architecture`; fields the keys do not determine are `None`.
    """

    def first(candidates):
        for pattern, axis, *rank in candidates:
            for key, shape in shapes.items():
                if not re.fullmatch(pattern, key) or len(shape) <= abs(axis):
                    continue
                if not rank or len(shape) == rank[0]:
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
        # Per head: `(D, heads, D / heads)` kernels, `(heads, D / heads)`
        # biases; an unsplit 2-D kernel tells no head count.
        num_heads=first(
            [(f"{_ATTENTION}/{_QKV}/kernel", 1, 3), (f"{_ATTENTION}/{_QKV}/bias", 0, 2),
             (f"{_ATTENTION}/{keys.OUT}/kernel", 0, 3)]
        ) if heads_recorded else None,
        mlp_dim=first(
            # The output layer's input: the hidden width of a GELU MLP and of a
            # packed SwiGLU alike (whose first layer is twice as wide).
            [(f"{_MLP_2}/kernel", 0), (f"{_MLP_1}/kernel", -1), (f"{_MLP_1}/bias", 0)]
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


@dataclasses.dataclass(frozen=True)
class EncoderKeys:
    """What a checkpoint's keys say about its encoder's options and heads.

    Read off the keys (and a few shapes) alone, like `Architecture`; compare
    it with the `encoder_keys` of the layout a model expects to name, in the
    options' own terms, why a checkpoint does not fit.

    Attributes:
        class_token: It has a class token (`cls`).
        distillation: It has DeiT's distillation token (`dist`).
        num_registers: Its register tokens (`reg`), 0 for none.
        qk_norm: Its attention layers normalise queries and keys.
        qkv_bias: Its query/key/value projections have biases: `True`,
            `False`, or `"qv"` for the queries and values only (EVA).
        layer_scale: Its blocks have LayerScale (the values are loaded, so
            the init value is not recorded).
        fc_norm: It normalises the pooled representation (timm's `fc_norm`)
            instead of the token sequence.
        pre_norm: It normalises the tokens before the blocks (PE).
        attention_norm: Its attention normalises the merged heads.
        mlp_norm: Its MLP normalises its hidden units.
        mixed_rope: It has learned (mixed) rotary frequencies.
        encoder_norm: It normalises the token sequence after the blocks.
        map_pooling: It pools with an attention head (`pooling="map"`).
        position_rows: Rows of its position table, or `None` for none.
        representation_size: Width of its `pre_logits` layer, or `None`.
        num_classes: Classes of its head, or `None` for no head.
    """

    class_token: bool
    distillation: bool
    num_registers: int
    qk_norm: bool
    qkv_bias: bool | str
    layer_scale: bool
    fc_norm: bool
    map_pooling: bool
    position_rows: int | None
    representation_size: int | None
    num_classes: int | None
    pre_norm: bool = False
    attention_norm: bool = False
    mlp_norm: bool = False
    mixed_rope: bool = False
    encoder_norm: bool = True

    @property
    def num_prefix_tokens(self) -> int:
        """Tokens before the patches: class, distillation and registers."""
        return int(self.class_token) + int(self.distillation) + self.num_registers


def encoder_keys(shapes: Mapping[str, tuple[int, ...]]) -> EncoderKeys:
    """Reads the encoder's tokens, options and task layers off its keys.

    Args:
        shapes: `{key: shape}` in the original `.npz` layout.

    Returns:
        An `EncoderKeys`.
    """

    def any_key(template: str) -> bool:
        pattern = re.compile(keys.template_pattern(template))
        return any(pattern.fullmatch(key) for key in shapes)

    def width(key: str, axis: int = -1) -> int | None:
        shape = shapes.get(key)
        return int(shape[axis]) if shape else None

    registers = shapes.get(keys.REG_KEY)
    posemb = shapes.get(keys.POSEMB_KEY)
    return EncoderKeys(
        class_token=keys.CLS_KEY in shapes,
        distillation=keys.DIST_KEY in shapes,
        num_registers=int(registers[-2]) if registers and len(registers) >= 2 else 0,
        qk_norm=any_key(keys.QUERY_NORM + "/scale"),
        qkv_bias=_qkv_bias(any_key),
        layer_scale=any_key(keys.LAYER_SCALE_1),
        fc_norm=keys.FC_NORM + "/scale" in shapes,
        map_pooling=keys.MAP_PROBE_KEY in shapes,
        position_rows=int(posemb[-2]) if posemb and len(posemb) >= 2 else None,
        representation_size=width(keys.PRE_LOGITS_KEYS[0]),
        num_classes=width(keys.HEAD_KEYS[0]),
        pre_norm=keys.PRE_NORM + "/scale" in shapes,
        attention_norm=any_key(keys.ATTENTION_NORM + "/scale"),
        mlp_norm=any_key(keys.MLP_NORM + "/scale"),
        mixed_rope=any_key(keys.ROPE_FREQS),
        encoder_norm=keys.ENCODER_NORM + "/scale" in shapes,
    )


def _qkv_bias(any_key) -> bool | str:
    """`True` for query, key and value biases, `"qv"` for the query's and
    value's only (EVA), `False` for none."""
    query, key, value = (any_key(t) for t in keys.QKV_BIASES)
    if query and value and not key:
        return "qv"
    return query or key or value
