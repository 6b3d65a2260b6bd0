"""timm's constructor arguments (`model_args`) and `EncoderOptions`, both ways.

A timm Hub repository's `config.json` records the arguments that rebuild its
model (`model_args`), in the vocabulary of the model's class: the
`VisionTransformer`'s (`class_token`, `reg_tokens`, `no_embed_class`,
`init_values`, `global_pool`, ...) or the `Eva`'s (DINOv3, EVA-02, PE,
RoPE-ViT: `num_reg_tokens`, `use_abs_pos_emb`, `use_rot_pos_emb`,
`rope_type`, `ref_feat_shape`, `scale_mlp`, `use_pre_transformer_norm`,
...). Most of what they say is also in the weights' keys (which
`keras_vit.weights.architecture` reads); `options_from_eva_args` reads what
the keys cannot tell, the rotary embedding's settings and the attention
pool's heads, and `eva_args` writes an `EncoderOptions` back in Eva's
vocabulary (`keras_vit.save_pretrained`). The names and defaults are those
of timm 1.0.31's `timm/models/eva.py`.

Example:

```python
rope = options_from_eva_args({"use_rot_pos_emb": True, "rope_type": "dinov3",
                              "rope_temperature": 100}, EncoderOptions()).rope
```
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping

from keras_vit.models.options import EncoderOptions
from keras_vit.models.options import RotaryOptions

# timm's rope_type -> keras_vit's RotaryOptions.kind (and back).
_ROPE_KINDS = {"cat": "axial", "dinov3": "dinov3", "mixed": "mixed"}
_TIMM_ROPE = {kind: name for name, kind in _ROPE_KINDS.items()}
# Arguments only timm's `Eva` takes.
_EVA_ONLY = (
    "use_rot_pos_emb", "use_abs_pos_emb", "num_reg_tokens", "scale_mlp",
    "swiglu_mlp", "rope_type", "attn_type", "use_pre_transformer_norm",
)  # fmt: skip
# keras_vit's pooling -> timm's global_pool.
_POOL = {"token": "token", "gap": "avg", "map": "map", None: ""}


def is_eva(args: Mapping) -> bool:
    """Whether `model_args` are the `Eva` class's (rotary or Eva-only keys)."""
    return any(key in args for key in _EVA_ONLY)


def needs_eva(options: EncoderOptions) -> bool:
    """Whether timm builds a model of `options` with its `Eva` class only
    (rotary embeddings, query/value-only biases, the MLP or attention norms,
    no position table), not its `VisionTransformer`."""
    return bool(
        options.rope is not None
        or options.qkv_bias == "qv"
        or options.mlp_norm
        or options.attention_norm
        or not options.position_embedding
        or not options.encoder_norm
        or options.pool_include_prefix
    )


def options_from_eva_args(args: Mapping, base: EncoderOptions) -> EncoderOptions:
    """`base` with what Eva's `model_args` say that keys cannot: the rotary
    embedding's kind, base, offset, axis order, reference grid and rotation
    layout, and the attention pool's heads and MLP width.

    Args:
        args: A timm `config.json`'s `model_args` of an `Eva` model.
        base: The options read so far (the family's, the keys').
    """
    changes = {}
    if args.get("use_rot_pos_emb", base.rope is not None):
        rope = base.rope or RotaryOptions()
        kind = _ROPE_KINDS.get(args.get("rope_type", _TIMM_ROPE[rope.kind]), rope.kind)
        reference = args.get("ref_feat_shape", rope.reference_grid)
        changes["rope"] = dataclasses.replace(
            rope,
            kind=kind,
            temperature=float(args.get("rope_temperature", rope.temperature)),
            grid_offset=float(args.get("rope_grid_offset", rope.grid_offset)),
            grid_indexing=args.get("rope_grid_indexing", rope.grid_indexing),
            reference_grid=None if kind != "axial" or reference is None
            else tuple(int(g) for g in reference),
            rotate_half=bool(args.get("rope_rotate_half", rope.rotate_half)),
        )  # fmt: skip
    elif "use_rot_pos_emb" in args:
        changes["rope"] = None
    dim = args.get("embed_dim")
    heads, ratio = args.get("attn_pool_num_heads"), args.get("attn_pool_mlp_ratio")
    if heads is not None and heads != args.get("num_heads"):
        changes["map_heads"] = int(heads)
    if ratio is not None and dim and ratio != args.get("mlp_ratio", 4.0):
        changes["map_mlp_dim"] = int(dim * float(ratio))
    if args.get("init_values") is not None:
        changes["layer_scale_init"] = float(args["init_values"])
    return dataclasses.replace(base, **changes)


def eva_args(options: EncoderOptions, *, hidden_dim: int, num_heads: int,
             mlp_dim: int) -> dict:  # fmt: skip
    """The `Eva` constructor arguments of a model of `options` (the encoder
    part; sizes, image size and classes are added by the caller).

    Raises:
        ValueError: options `Eva` has no argument for (a distillation token,
            QK-norm with rotary embeddings is fine; `pre_logits` is the
            caller's).
    """
    if options.distillation:
        raise ValueError("timm's Eva has no distillation token.")
    args = {
        "embed_dim": hidden_dim,
        "num_heads": num_heads,
        "class_token": options.class_token,
        "num_reg_tokens": options.num_registers,
        "no_embed_class": options.no_embed_class,
        "use_abs_pos_emb": options.position_embedding,
        "qkv_bias": options.qkv_bias is not False,
        "qkv_fused": True,
        "qk_norm": options.qk_norm,
        "init_values": options.layer_scale_init,
        "scale_mlp": options.mlp_norm,
        "scale_attn_inner": options.attention_norm,
        "use_pre_transformer_norm": options.pre_norm,
        "use_fc_norm": options.fc_norm,
        "use_post_transformer_norm": options.encoder_norm and not options.fc_norm,
        "global_pool": _POOL[options.pooling],
        # Eva's attention with a full query/key/value bias is `AttentionRope`.
        "attn_type": "rope" if options.qkv_bias is True else "eva",
    }
    args["mlp_ratio"] = _ratio(mlp_dim, hidden_dim)
    if options.mlp == "swiglu":
        args["swiglu_mlp"] = True
    rope = options.rope
    args["use_rot_pos_emb"] = rope is not None
    if rope is not None:
        args.update(
            rope_type=_TIMM_ROPE[rope.kind],
            rope_temperature=rope.temperature,
            rope_grid_offset=rope.grid_offset,
            rope_grid_indexing=rope.grid_indexing,
            rope_rotate_half=rope.rotate_half,
        )
        if rope.reference_grid is not None:
            args["ref_feat_shape"] = list(rope.reference_grid)
    if options.pooling == "map":
        args["attn_pool_num_heads"] = options.map_heads or num_heads
        args["attn_pool_mlp_ratio"] = _ratio(options.map_mlp_dim or mlp_dim, hidden_dim)
    return args


# The options `eva_args` writes; the others are the architecture's own
# (its family's), or change training only.
EVA_EXPRESSED = (
    "class_token", "num_registers", "no_embed_class", "position_embedding",
    "qkv_bias", "qk_norm", "layer_scale_init", "mlp_norm", "attention_norm",
    "pre_norm", "fc_norm", "encoder_norm", "pooling", "mlp", "rope", "map_heads",
    "map_mlp_dim",
)  # fmt: skip


def _ratio(width: int, dim: int) -> float:
    """A ratio timm turns back into `width` (`int(dim * ratio)`): `width /
    dim`, nudged up where float rounding would land just below."""
    ratio = width / dim
    while int(dim * ratio) < width:
        ratio = math.nextafter(ratio, math.inf)
    return ratio
