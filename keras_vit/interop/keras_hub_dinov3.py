"""keras-hub's `DINOV3Backbone` to a keras_vit DINOv3 model and back.

keras-hub's DINOv3 computes what keras_vit's DINOv3 family does: a class
token and registers without a position table, rotary embeddings on the
patch tokens only (patch centres normalised to `[-1, 1]` per axis, periods
`rope_theta ** (4k / D_h)`, the rows' angles then the columns', the two
halves of a head rotated against each other: `RotaryOptions("dinov3",
temperature=rope_theta, rotate_half=True)`), LayerScale on both branches
and a GELU or gated MLP. What differs is the storage, which
`keras_vit.weights.dialects.keras_hub.DINOV3` translates:

- `q_proj`/`k_proj`/`v_proj`/`o_proj` are `Dense` layers, each `(D, D)`;
  keras_vit keeps them per head, fused (`(D, 3, H, D_h)`);
- a bias keras-hub was built without (`use_query_bias=False`, ...) is a
  zero here, or absent: the query and value biases alone are keras_vit's
  `qkv_bias="qv"`, all three `True`, none `False`;
- the gated MLP (`use_gated_mlp=True`, SiLU) keeps `gate_proj` and
  `up_proj` apart; keras_vit's SwiGLU packs them `[gate; value]`;
- the `mask_token` (masked pre-training) has no keras_vit counterpart and
  is left out (a backbone made here keeps its initial zeros); a backbone's
  `apply_layernorm` changes only its `pyramid_outputs`, not its output
  (keras_vit's counterpart is `feature_extractor(model, norm=True)`).

Two training-only settings differ in what they do and are refused when not
zero: keras-hub's `attention_dropout` drops the heads' merged outputs
(keras_vit's `attention_dropout_rate` the attention probabilities), and
keras-hub 0.32's DINOv3 drop path multiplies by uniform noise (no floor)
and cannot run in training; so a keras_vit model with stochastic depth is
refused, while a keras-hub `drop_path_rate` becomes keras_vit's stochastic
depth at the same per-block rates (`0 .. rate`, linear).

keras-hub's backbone has one fixed `image_shape`; the keras_vit model takes
any size (`dynamic_image_size=True`), as the family's, and computes the
backbone of each size. `keras_vit.interop.keras_hub` dispatches here.

Example:

```python
model = dinov3_from_keras_hub(backbone)
backbone = dinov3_to_keras_hub(keras_hub, model, ViTLayout.of(model))
```
"""

from __future__ import annotations

import re

import keras
import numpy as np

from keras_vit.models import layout as names
from keras_vit.models.layout import ViTLayout
from keras_vit.models.options import TRAINING_ONLY
from keras_vit.models.options import EncoderOptions
from keras_vit.models.options import RotaryOptions
from keras_vit.models.variants import custom_spec
from keras_vit.models.vit import ViT
from keras_vit.utils import to_pair
from keras_vit.weights import keys
from keras_vit.weights.checkpoint import Checkpoint
from keras_vit.weights.checkpoint import from_model
from keras_vit.weights.dialects import rules
from keras_vit.weights.dialects.keras_hub import DINOV3
from keras_vit.weights.dialects.keras_hub import GATED_MLP_IN
from keras_vit.weights.errors import CheckpointError

# An attention layer's keys (whose arrays keras_vit keeps per head).
_ATTENTION = re.compile(keys.template_pattern(keys.ATTENTION) + "/")
# Why the training-only settings do not carry over (keras-hub 0.32's
# `DINOV3Attention` and `DINOV3DropPath`, read in its source).
_ATTENTION_DROPOUT = (
    "keras-hub drops the heads' merged outputs before `o_proj`, keras_vit "
    "the attention probabilities"
)
_DROP_PATH = (
    "keras-hub's DINOv3 drop path fails in training and scales by noise "
    "instead of dropping"
)
# keras-hub's activation names for SiLU: the gate of keras_vit's SwiGLU.
_SILU = ("silu", "swish")


def _gated(backbone) -> bool:
    return bool(backbone.use_gated_mlp)


def _qkv_bias(backbone) -> bool | str:
    """keras_vit's `qkv_bias` for keras-hub's three bias switches: the
    smallest that holds every bias the backbone has (zeros for the rest)."""
    query, key, value = (
        bool(backbone.use_query_bias),
        bool(backbone.use_key_bias),
        bool(backbone.use_value_bias),
    )
    if key:
        return True
    return "qv" if query or value else False


def check_keras_hub(backbone) -> None:
    """Refuses, in one line, a `DINOV3Backbone` keras_vit cannot express."""
    data_format = getattr(backbone.embeddings, "data_format", "channels_last")
    activation = backbone.hidden_activation
    problems = [
        (
            data_format != "channels_last",
            "data_format='channels_first' (keras_vit models take channels-last images)",
        ),
        (
            _gated(backbone) and activation not in _SILU,
            f"use_gated_mlp=True with hidden_activation={activation!r} "
            "(keras_vit's gated MLP is SwiGLU: 'silu')",
        ),
        (
            not _gated(backbone) and activation != "gelu",
            f"hidden_activation={activation!r} (keras_vit's MLP is the exact "
            "GELU: 'gelu')",
        ),
        (
            backbone.attention_dropout > 0,
            f"attention_dropout={backbone.attention_dropout} ({_ATTENTION_DROPOUT})",
        ),
        (
            (backbone.hidden_dim // backbone.num_heads) % 4 != 0,
            f"a head width of {backbone.hidden_dim // backbone.num_heads} "
            "(rotary embeddings need a multiple of 4)",
        ),
    ]
    found = [what for bad, what in problems if bad]
    if found:
        raise ValueError(f"Cannot convert {backbone.name!r}: {'; '.join(found)}.")


def dinov3_checkpoint(backbone) -> Checkpoint:
    """A keras-hub `DINOV3Backbone` as a `Checkpoint` for the model
    `dinov3_from_keras_hub` builds: biases it was built without become
    zeros where that model has them."""
    values = {
        variable.path: np.asarray(keras.ops.convert_to_numpy(variable), np.float32)
        for variable in backbone.weights
    }
    params, left = rules.translate(values, DINOV3, heads=int(backbone.num_heads))
    if left:
        raise CheckpointError(
            f"keras-hub variable {left[0]!r} has no keras_vit "
            "counterpart; the model cannot be converted."
        )
    params.update(_zero_biases(backbone, params))
    return Checkpoint(
        params,
        grid_size=_grid(backbone),
        source=f"keras-hub {backbone.name!r}",
        heads_recorded=False,
    )


def _grid(backbone) -> tuple[int, int]:
    height, width = backbone.image_shape[:2]
    patch = int(backbone.patch_size)
    return (int(height) // patch, int(width) // patch)


def _zero_biases(backbone, params: dict) -> dict:
    """Zeros for the biases keras_vit's model has and the backbone lacks."""
    dim, heads = int(backbone.hidden_dim), int(backbone.num_heads)
    width = int(backbone.intermediate_dim) * (2 if _gated(backbone) else 1)
    bias_kind = _qkv_bias(backbone)
    projections = {True: keys.QKV, "qv": ("query", "value"), False: ()}[bias_kind]
    out = {}
    for i in range(int(backbone.num_layers)):
        attention = keys.ATTENTION.format(i=i)
        for name in projections:
            out[f"{attention}/{name}/bias"] = np.zeros((heads, dim // heads), "float32")
        out[f"{attention}/{keys.OUT}/bias"] = np.zeros((dim,), "float32")
        out[keys.MLP_1.format(i=i) + "/bias"] = np.zeros((width,), "float32")
        out[keys.MLP_2.format(i=i) + "/bias"] = np.zeros((dim,), "float32")
    return {key: value for key, value in out.items() if key not in params}


def dinov3_from_keras_hub(backbone, **kwargs) -> keras.Model:
    """The keras_vit DINOv3 model of a `DINOV3Backbone` (weights not loaded).

    It returns the token sequence (`pooling=None`) and takes any image size;
    its native size is the backbone's `image_shape` rounded down to the
    patch (keras-hub's patch embedding drops the remainder, as keras_vit's).
    """
    check_keras_hub(backbone)
    gated = _gated(backbone)
    patch = int(backbone.patch_size)
    spec = custom_spec(
        patch,
        hidden_dim=backbone.hidden_dim,
        depth=backbone.num_layers,
        mlp_dim=backbone.intermediate_dim,
        num_heads=backbone.num_heads,
    )
    encoder = EncoderOptions(
        num_registers=int(backbone.num_register_tokens),
        position_embedding=False,
        rope=RotaryOptions(
            "dinov3", temperature=float(backbone.rope_theta), rotate_half=True
        ),
        layer_scale_init=float(backbone.layer_scale_init_value),
        layer_norm_epsilon=float(backbone.layer_norm_eps),
        qkv_bias=_qkv_bias(backbone),
        mlp="swiglu" if gated else "gelu",
        drop_path_rate=float(backbone.drop_path_rate),
        pooling=None,
    )
    grid = _grid(backbone)
    arguments = dict(
        image_size=(grid[0] * patch, grid[1] * patch),
        channels=int(backbone.image_shape[2]),
        include_top=False,
        dynamic_image_size=True,
        name=f"vit_{backbone.name}",
        options=encoder,
    )
    return ViT(spec, **{**arguments, **kwargs})


# The encoder options the conversion maps, or that `check_model` refuses by
# a name of its own; any other option set away from its default is refused
# as `name=value` (`EncoderOptions.departures`): an option added to keras_vit
# later is never dropped in silence.
_HANDLED = (
    *TRAINING_ONLY, "class_token", "distillation", "position_embedding",
    "no_embed_class", "rope", "qk_norm", "gelu_approximate", "attention_norm",
    "mlp_norm", "pre_norm", "fc_norm", "encoder_norm", "pooling", "map_heads",
    "map_mlp_dim", "pool_include_prefix", "num_registers", "layer_scale_init", "mlp",
    "qkv_bias", "layer_norm_epsilon",
)  # fmt: skip


def check_model(model: keras.Model, layout: ViTLayout) -> None:
    """Refuses, in one line, what keras-hub's DINOv3 cannot express."""
    options = layout.encoder_options
    rope = options.rope
    present = {layer.name for layer in model.layers}
    stride = layout.stride
    lacking = [
        (not options.class_token, "no class token"),
        (options.distillation, "a distillation token"),
        (options.position_embedding, "a position table"),
        (rope is None, "no rotary embeddings"),
        (
            rope is not None and (rope.kind, rope.rotate_half) != ("dinov3", True),
            "rotary embeddings other than DINOv3's (kind='dinov3', rotate_half=True)",
        ),
        (
            rope is not None and (rope.grid_offset, rope.grid_indexing) != (0, "ij"),
            "a rotary grid_offset or grid_indexing='xy'",
        ),
        (options.qk_norm, "QK-norm"),
        (options.gelu_approximate, "the tanh GELU"),
        (options.attention_norm, "an attention norm"),
        (options.mlp_norm, "an MLP norm"),
        (options.pre_norm, "a norm before the blocks"),
        (
            options.dropout_rate > 0,
            f"dropout_rate={options.dropout_rate} (keras-hub has none)",
        ),
        (
            options.attention_dropout_rate > 0,
            f"attention_dropout_rate={options.attention_dropout_rate} "
            f"({_ATTENTION_DROPOUT})",
        ),
        (
            options.drop_path_rate > 0,
            f"drop_path_rate={options.drop_path_rate} ({_DROP_PATH})",
        ),
        (options.fc_norm, "fc_norm"),
        (not options.encoder_norm, "no final norm"),
        (options.pooling == "map", "pooling='map'"),
        (layout.head_name is not None or names.PRE_LOGITS in present, "a head"),
        (names.ROOT_CONV in present, "a ResNet backbone (hybrid)"),
        (stride[0] != stride[1], "a non-square patch"),
        (layout.has_preprocessing, "include_preprocessing"),
    ]
    found = [what for bad, what in lacking if bad]
    found += options.departures(_HANDLED)
    if found:
        raise ValueError(
            f"Cannot convert {model.name!r} to keras-hub's DINOV3Backbone: "
            f"{'; '.join(found)}."
        )


def dinov3_to_keras_hub(
    keras_hub, model: keras.Model, layout: ViTLayout, image_size=None
):
    """The `DINOV3Backbone` of a keras_vit model, every variable checked
    before any is written.

    `image_size` is the backbone's (keras-hub's is fixed); `None` for the
    model's own (its native size when it takes any).
    """
    check_model(model, layout)
    options = layout.encoder_options
    patch = int(layout.stride[0])
    size = layout.native_image_size if image_size is None else image_size
    height, width = to_pair(size, "image_size")
    if layout.pads_images and (height % patch or width % patch):
        raise ValueError(
            f"Cannot convert {model.name!r} at {height}x{width}: it zero-pads "
            f"images to a multiple of {patch}; keras-hub's DINOV3Backbone "
            "crops them."
        )
    block = layout.block(0)
    config = block.get_config()
    gated = options.mlp == "swiglu"
    bias = options.qkv_bias
    hidden = int(layout.embedding.get_config()["hidden_dim"])
    backbone = keras_hub.models.DINOV3Backbone(
        patch_size=patch,
        num_layers=layout.depth,
        hidden_dim=hidden,
        num_heads=int(config["num_heads"]),
        intermediate_dim=int(config["mlp_dim"]),
        layer_scale_init_value=options.layer_scale_init or 1.0,
        num_register_tokens=layout.num_registers,
        hidden_activation="silu" if gated else "gelu",
        use_gated_mlp=gated,
        use_query_bias=bias is not False,
        use_key_bias=bias is True,
        use_value_bias=bias is not False,
        layer_norm_eps=float(options.layer_norm_epsilon),
        image_shape=(height, width, layout.channels),
        rope_theta=float(options.rope.temperature),
        name=f"{model.name}_backbone",
    )
    params = dict(from_model(model).params)
    for i in range(layout.depth):
        for scale in (keys.LAYER_SCALE_1, keys.LAYER_SCALE_2):
            # No LayerScale: keras-hub's, at 1, computes the same.
            params.setdefault(scale.format(i=i), np.ones((hidden,), "float32"))
    values = [
        (variable, _value_for(variable, params, model.name, gated))
        for variable in backbone.weights
        if not variable.path.endswith("/mask_token")
    ]
    for variable, value in values:
        variable.assign(value)
    return backbone


def _value_for(variable, params: dict, name: str, gated: bool) -> np.ndarray:
    """The value of keras-hub `variable` from keras_vit's `params`, checked.

    The attention's per-head arrays are reshaped to keras-hub's flat ones
    (the inverse of the dialect's reshapes); a gated MLP's `gate_proj` and
    `up_proj` are the two halves of keras_vit's packed first layer.
    """
    path, half = variable.path, None
    if gated and "/mlp/gate_proj/" in path:
        path, half = path.replace("/mlp/gate_proj/", f"/mlp/{GATED_MLP_IN}/"), 0
    elif gated and "/mlp/up_proj/" in path:
        path, half = path.replace("/mlp/up_proj/", f"/mlp/{GATED_MLP_IN}/"), 1
    match = rules.find(path, DINOV3)
    key = None if match is None else match.key
    value = params.get(key) if key is not None else None
    if value is None:
        raise CheckpointError(
            f"keras-hub variable {variable.path!r} has no value in {name!r} "
            f"(key {key!r})."
        )
    if half is not None:
        value = np.split(value, 2, axis=-1)[half]
    shape = tuple(variable.shape)
    if _ATTENTION.match(key) and value.size == int(np.prod(shape)):
        value = value.reshape(shape)  # per head -> keras-hub's (D, D), (D,)
    if tuple(value.shape) != shape:
        raise CheckpointError(
            f"{key!r} is {tuple(value.shape)} in {name!r} but keras-hub's "
            f"{variable.path!r} is {shape}."
        )
    return value
