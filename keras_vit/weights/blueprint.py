"""What model a checkpoint needs: read off its config and its keys.

`blueprint(source, params)` answers what `keras_vit.ViT` must be called
with for a checkpoint found by name (`keras_vit.weights.sources.Source`):
the sizes come from the weights' shapes (`architecture.describe`), the
tokens and options from their keys (`architecture.encoder_keys`), and only
what neither records comes from the config: the attention heads of a fused
projection, the pooling, the resolution, the GELU form. The user names the
checkpoint, not the variant.

Example:

```python
plan = blueprint(source, params)
model = keras_vit.ViT(plan.spec, **plan.arguments())
```
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from collections.abc import Mapping

from keras_vit.models import zoo
from keras_vit.models.options import EncoderOptions
from keras_vit.models.options import RotaryOptions
from keras_vit.models.variants import VARIANTS
from keras_vit.models.variants import ModelSpec
from keras_vit.models.variants import custom_spec
from keras_vit.models.variants import parse_variant
from keras_vit.models.zoo import timm_catalog
from keras_vit.weights import architecture
from keras_vit.weights import keys
from keras_vit.weights.dialects.timm_args import is_eva
from keras_vit.weights.dialects.timm_args import options_from_eva_args
from keras_vit.weights.errors import CheckpointError

# timm's `global_pool` -> keras_vit's pooling.
TIMM_POOLING = {"token": "token", "avg": "gap", "map": "map", "avgmax": None}
_GELU_TANH = ("gelu_pytorch_tanh", "gelu_new", "gelu_fast", "gelu_tanh")
# The `layer_norm_eps` default of transformers' config classes, for a config
# that does not state it.
_TRANSFORMERS_EPSILON = {
    "vit": 1e-12, "dinov2": 1e-6, "dinov2_with_registers": 1e-6,
    "siglip_vision_model": 1e-6, "siglip": 1e-6,
}  # fmt: skip


@dataclasses.dataclass(frozen=True)
class Blueprint:
    """The `keras_vit.ViT` call a checkpoint needs.

    Attributes:
        spec: Sizes and patch (`ModelSpec`).
        options: `EncoderOptions`.
        image_size: The resolution of its position table `(h, w)`.
        num_classes: Classes of its head; 0 for none.
        representation_size: Width of its `pre_logits`, or `None`.
        name: A model name.
    """

    spec: ModelSpec
    options: EncoderOptions
    image_size: tuple[int, int]
    num_classes: int
    representation_size: int | None
    name: str

    def arguments(self) -> dict:
        """`keras_vit.ViT` keywords (with `spec` as the variant)."""
        return dict(
            options=self.options,
            image_size=self.image_size,
            num_classes=self.num_classes or 1000,
            include_top=self.num_classes > 0,
            representation_size=self.representation_size,
            name=self.name,
        )


def num_heads_of(kind: str, config: Mapping, hidden_dim: int | None) -> int | None:
    """The attention heads a config records (or implies), else `None`."""
    if kind == "keras_vit":
        return int(config["keras_vit"]["num_heads"])
    if kind == "transformers":
        vision = config.get("vision_config") or config
        heads = vision.get("num_attention_heads")
        return None if heads is None else int(heads)
    if kind == "timm":
        args = config.get("model_args") or {}
        if "num_heads" in args:
            return int(args["num_heads"])
        # timm's size words (the families' `TimmNames.size_words`): the head
        # count is the one figure a fused qkv does not record.
        known = timm_catalog.num_heads(str(config.get("architecture", "")))
        if known is not None:  # timm's own, recorded from its model
            return known
        words = zoo.timm_heads()
        name = f"_{config.get('architecture', '')}_"
        for word in sorted(words, key=len, reverse=True):  # "huge_plus" first
            if f"_{word}_" in name:
                return words[word]
    if hidden_dim:  # the ViT convention of 64-wide heads
        return max(1, hidden_dim // 64)
    return None


def blueprint(
    kind: str, config: Mapping, params: Mapping, name: str, *, num_heads: int
) -> Blueprint:
    """The model a checkpoint in the original layout needs.

    Args:
        kind: The source's kind (`keras_vit.weights.sources.KINDS`).
        config: Its `config.json`.
        params: Its weights in the original layout.
        name: What it was asked for by (for messages and the model name).
        num_heads: Its attention heads (`num_heads_of`).

    Raises:
        CheckpointError: the keys describe no ViT keras_vit builds (a hybrid
            without its backbone sizes, no patch embedding, ...).
    """
    if kind == "timm":
        _check_timm_architecture(config, name)
    shapes = {k: tuple(v.shape) for k, v in params.items()}
    arch = architecture.describe(shapes)
    tokens = architecture.encoder_keys(shapes)
    if arch.backbone is not None:
        raise CheckpointError(
            f"{name!r} is a ResNet+ViT hybrid; load it into keras_vit.ViT("
            "'R50+B/16', ...) with weights=<the file> instead of by name."
        )
    if arch.patch_size is None or not arch.depth or arch.hidden_dim is None:
        raise CheckpointError(
            f"{name!r} has no patch embedding or no Transformer blocks in a "
            f"layout keras_vit reads. First keys: {sorted(shapes)[:6]}."
        )
    mlp_in = shapes.get(keys.MLP_1.format(i=0) + "/kernel")
    mlp_out = shapes.get(keys.MLP_2.format(i=0) + "/kernel")
    swiglu = bool(mlp_in and mlp_out and mlp_in[-1] == 2 * mlp_out[0])
    mlp_dim = mlp_out[0] if mlp_out else arch.mlp_dim
    if num_heads is None:
        raise CheckpointError(
            f"{name!r} does not record its attention heads (a fused qkv "
            "projection does not show them): its config.json has no "
            "model_args.num_heads, and its architecture "
            f"{config.get('architecture')!r} no size word keras_vit knows. "
            "Build the model with keras_vit.ViT and load_weights(model, <file>)."
        )
    spec = _spec(arch, mlp_dim, num_heads)
    hints = _hints(kind, config)
    family = hints.get("family_options") or EncoderOptions()
    image_size = hints.get("image_size")
    if image_size is None:
        image_size = _square_size(tokens, spec)
    grid = (image_size[0] // spec.patch_size, image_size[1] // spec.patch_size)
    embedded = int(tokens.class_token) + int(tokens.distillation)
    rows = tokens.position_rows
    no_embed_class = bool(embedded) and rows == grid[0] * grid[1]
    if rows is not None and rows not in (
        grid[0] * grid[1],
        grid[0] * grid[1] + embedded,
    ):
        # The table is on another grid than the config says: a square one.
        image_size = _square_size(tokens, spec)
        no_embed_class = bool(embedded) and math.isqrt(rows) ** 2 == rows
    pooling = hints.get("pooling")
    if tokens.map_pooling:
        pooling = "map"
    elif pooling is None or pooling == "map":
        pooling = "token" if tokens.class_token else "gap"
    layer_scale = None
    if tokens.layer_scale:  # the family's init value, else timm's usual 1e-5
        layer_scale = family.layer_scale_init or 1e-5
    rope = family.rope
    if tokens.mixed_rope and (rope is None or rope.kind != "mixed"):
        rope = dataclasses.replace(rope or _MIXED, kind="mixed", reference_grid=None)
    elif not tokens.mixed_rope and rope is not None and rope.kind == "mixed":
        rope = None  # the family's mixed frequencies are not in the file
    options = dataclasses.replace(
        family,
        class_token=tokens.class_token,
        distillation=tokens.distillation,
        num_registers=tokens.num_registers,
        no_embed_class=no_embed_class and rows is not None,
        qk_norm=tokens.qk_norm,
        qkv_bias=tokens.qkv_bias,
        layer_scale_init=layer_scale,
        mlp="swiglu" if swiglu else "gelu",
        pooling=pooling,
        fc_norm=tokens.fc_norm,
        encoder_norm=tokens.encoder_norm or tokens.fc_norm,
        position_embedding=rows is not None,
        rope=rope,
        pre_norm=tokens.pre_norm,
        attention_norm=tokens.attention_norm,
        mlp_norm=tokens.mlp_norm,
        **_map_options(family, pooling),
        **({"gelu_approximate": True} if hints.get("gelu_tanh") else {}),
    )
    return Blueprint(
        spec=spec,
        options=options,
        image_size=tuple(int(s) for s in image_size),
        num_classes=int(tokens.num_classes or 0),
        representation_size=tokens.representation_size,
        name=_model_name(name),
    )


# Above this, a timm architecture that the catalog's check found to differ
# is refused; below it, loaded with a warning.
_REFUSED_ERROR = 1e-2


def _check_timm_architecture(config: Mapping, name: str) -> None:
    """Refuses a timm architecture keras_vit is known to compute otherwise:
    QuickGELU towers, and those whose one-block check against timm
    (`keras_vit.models.zoo.timm_catalog`) was far off; warns for those that
    were close but over the check's 1e-4."""
    arch = str(config.get("architecture", ""))
    act = str((config.get("model_args") or {}).get("act_layer") or "")
    if "quickgelu" in arch or "quick_gelu" in act:
        raise CheckpointError(
            f"{name!r}: timm's {arch!r} uses QuickGELU, which keras_vit does "
            "not build (GELU and tanh-GELU only)."
        )
    reason = timm_catalog.refusal(arch) or ""
    if not reason.startswith("relative error"):
        return
    error = float(reason.split()[-1])
    if error > _REFUSED_ERROR:
        raise CheckpointError(
            f"{name!r}: keras_vit does not compute timm's {arch!r} as timm "
            f"does (one block differs by {error:.2g}, relative); not loaded."
        )
    warnings.warn(
        f"{name!r}: one block of timm's {arch!r} was checked {error:.1e} "
        f"(relative) from timm, over the 1e-4 the catalog asks; compare "
        "its outputs before relying on them.",
        stacklevel=3,
    )


def _spec(arch, mlp_dim: int, num_heads: int) -> ModelSpec:
    patch = arch.patch_size[0]
    if arch.patch_size[0] != arch.patch_size[1]:
        raise CheckpointError(f"Non-square patches {arch.patch_size} are not built.")
    row = next(
        (
            size
            for size, v in VARIANTS.items()
            if (v.hidden_dim, v.depth, v.mlp_dim, v.num_heads)
            == (arch.hidden_dim, arch.depth, mlp_dim, num_heads)
        ),
        None,
    )
    if row is not None:
        return parse_variant(f"{row}/{patch}")
    return custom_spec(
        patch, hidden_dim=arch.hidden_dim, depth=arch.depth, mlp_dim=mlp_dim,
        num_heads=num_heads,
    )  # fmt: skip


def config_options(kind: str, config: Mapping) -> EncoderOptions | None:
    """The encoder options a source's config states or implies (its own
    record, or its timm architecture's family and `model_args`), before its
    keys are read; `None` when it says nothing."""
    return _hints(kind, config).get("family_options")


def _map_options(family: EncoderOptions, pooling) -> dict:
    """The attention pool's own options, the family's where it pools so."""
    if pooling != "map":
        return {"map_heads": None, "map_mlp_dim": None, "pool_include_prefix": False}
    return {}


# timm's mixed rotary embeddings (RoPE-ViT), for a file that has their
# learned frequencies but no family to say the rest.
_MIXED = RotaryOptions("mixed", temperature=10.0, grid_indexing="xy")


def _square_size(tokens, spec: ModelSpec) -> tuple[int, int]:
    rows = tokens.position_rows
    if rows is None:
        raise CheckpointError(
            "The checkpoint has no position table and its config names no "
            "image size; pass image_size."
        )
    embedded = int(tokens.class_token) + int(tokens.distillation)
    for cells in (rows, rows - embedded):
        side = math.isqrt(max(cells, 0))
        if side and side * side == cells:
            return (side * spec.patch_size,) * 2
    raise CheckpointError(
        f"The position table's {rows} rows are no square grid; pass image_size."
    )


def _hints(kind: str, config: Mapping) -> dict:
    """What a config says that the keys do not: resolution, pooling, GELU."""
    hints: dict = {}
    if kind == "keras_vit":  # a folder save_pretrained wrote: its own record
        ours = config["keras_vit"]
        hints["image_size"] = tuple(int(s) for s in ours["image_size"])
        hints["family_options"] = EncoderOptions(**ours["options"])
        return hints
    if kind == "timm":
        args = config.get("model_args") or {}
        cfg = config.get("pretrained_cfg") or config
        size = args.get("img_size") or (cfg.get("input_size") or [None])[-2:]
        if isinstance(size, int):
            size = (size, size)
        if size and None not in size:
            hints["image_size"] = tuple(int(s) for s in size)
        pool = config.get("global_pool", args.get("global_pool"))
        if pool is not None:
            hints["pooling"] = TIMM_POOLING.get(pool, pool or None)
        family = zoo.options_for_timm(str(config.get("architecture", "")))
        if is_eva(args):  # what Eva's keys do not say: rotary settings, pool
            family = options_from_eva_args(args, family or EncoderOptions())
        if family is not None:
            hints["family_options"] = family
        act = str(args.get("act_layer", ""))
        hints["gelu_tanh"] = "tanh" in act
    elif kind == "transformers":
        vision = config.get("vision_config") or config
        size = vision.get("image_size")
        if size is not None:
            size = (size, size) if isinstance(size, int) else tuple(size)
            hints["image_size"] = tuple(int(s) for s in size)
        hints["gelu_tanh"] = str(vision.get("hidden_act", "")) in _GELU_TANH
        hints["pooling"] = "token"
        # transformers' LayerNorm epsilon: its config's, else its class's
        # default (ViT's 1e-12 differs from the 1e-6 of timm and the paper).
        model_type = str(vision.get("model_type", config.get("model_type", "")))
        epsilon = vision.get("layer_norm_eps", _TRANSFORMERS_EPSILON.get(model_type))
        if epsilon is not None:
            hints["family_options"] = EncoderOptions(layer_norm_epsilon=float(epsilon))
    return hints


def _model_name(name: str) -> str:
    """A Keras model name from a checkpoint name (letters, digits, `_`)."""
    base = name.rstrip("/").split("/")[-1].split(".")[0]
    base = re.sub(r"[^A-Za-z0-9_]", "_", base).strip("_").lower()
    return base or "vit"
