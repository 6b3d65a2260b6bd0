"""keras-hub's ViT, DINOv2 and DINOv3 to keras_vit and back, via `keras_vit.weights`.

keras-hub's `ViTBackbone` is the paper's ViT under other layer names:
separate `query`/`key`/`value` projections in a `keras.layers.MultiHeadAttention`
(the original checkpoint's per-head kernels), blocks counted from 1, and a
position table `(N, D)` without a batch axis. One rule table
(`keras_vit.weights.dialects.keras_hub.VIT`) maps its variable paths onto
the original `.npz` keys, in both directions, on the engine of every other
checkpoint dialect; `DINOV2` does the same for keras-hub's `DINOV2Backbone`
(whose class-token position row becomes part of the class token, as for
Hugging Face's DINOv2 files), and `DINOV3` for keras-hub's `DINOV3Backbone`
(`keras_vit.interop.keras_hub_dinov3`: its rotary embeddings, LayerScale,
registers and gated MLP are the DINOv3 family's):

- `keras_hub_checkpoint(model)` reads a keras-hub model into a
  `keras_vit.weights.Checkpoint`; `from_keras_hub(model)` builds the
  keras_vit model of the same architecture and loads it through
  `keras_vit.weights.load_weights` (strict, every key checked).
- `to_keras_hub(model)` builds the keras-hub model of a keras_vit model and
  writes its variables from `keras_vit.weights.from_model(model)`, all
  checked before any is assigned.
- `save_keras_hub_preset(model, folder)`
  (`keras_vit.interop.keras_hub_preset`) writes that model as a keras-hub
  preset folder, with the model's preprocessing as its image converter:
  keras-hub's `from_preset` does not read `save_pretrained`'s timm folders
  (its timm loader has no ViT).

What one side has and the other lacks is refused in one line naming it
(keras-hub's `"gap"` pooling averages the class token too; keras_vit's
families add LayerScale, registers, QK-norm and more, of which keras-hub's
DINOv2 has LayerScale, registers and SwiGLU, and its DINOv3 rotary
embeddings too). Preprocessing is not part of either network: keras-hub
scales images in its preprocessor, keras_vit optionally in an
`include_preprocessing` layer; convert the network and keep the
preprocessing you use.

keras-hub is an optional dependency: `pip install "keras-hub>=0.32"`.

Example:

```python
backbone = keras_hub.models.ViTBackbone(
    image_shape=(16, 16, 3), patch_size=4, num_layers=2, num_heads=2,
    hidden_dim=32, mlp_dim=64,
)
model = keras_vit.interop.from_keras_hub(backbone)  # the token sequence
back = keras_vit.interop.to_keras_hub(model)  # a keras_hub ViTBackbone
```
"""

from __future__ import annotations

import os

import keras
import numpy as np

from keras_vit._export import export
from keras_vit.interop import keras_hub_dinov3
from keras_vit.layers.layer_norm import LAYER_NORM_EPSILON
from keras_vit.models import layout as names
from keras_vit.models.layout import ViTLayout
from keras_vit.models.options import TRAINING_ONLY
from keras_vit.models.options import EncoderOptions
from keras_vit.models.variants import custom_spec
from keras_vit.models.vit import ViT
from keras_vit.weights import keys
from keras_vit.weights.checkpoint import Checkpoint
from keras_vit.weights.checkpoint import from_model
from keras_vit.weights.dialects import rules
from keras_vit.weights.dialects.keras_hub import DINOV2
from keras_vit.weights.dialects.keras_hub import VIT
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.loader import load_weights


def _keras_hub():
    try:
        import keras_hub
    except ImportError as error:
        raise ImportError(
            'keras_vit.interop.keras_hub needs keras-hub: pip install "keras-hub>=0.32"'
        ) from error
    return keras_hub


def _original_key(path: str) -> str | None:
    """A keras-hub `ViTBackbone` variable path -> its original-layout key."""
    match = rules.find(path, VIT)
    return None if match is None else match.key


def _parts(model):
    """`(backbone, classifier or None)` of a keras-hub ViT model."""
    keras_hub = _keras_hub()
    if isinstance(model, keras_hub.models.ViTImageClassifier):
        return model.backbone, model
    backbones = (
        keras_hub.models.ViTBackbone,
        keras_hub.models.DINOV2Backbone,
        keras_hub.models.DINOV3Backbone,
    )
    if isinstance(model, backbones):
        return model, None
    raise TypeError(
        f"{type(model).__name__} is not a keras-hub ViTBackbone, "
        "ViTImageClassifier, DINOV2Backbone or DINOV3Backbone; no other "
        "keras-hub model converts."
    )


def _is_dinov2(backbone) -> bool:
    return isinstance(backbone, _keras_hub().models.DINOV2Backbone)


def _is_dinov3(backbone) -> bool:
    return isinstance(backbone, _keras_hub().models.DINOV3Backbone)


def _check_hub(backbone, classifier) -> None:
    """Refuses, in one line, what keras_vit cannot express."""
    if backbone.data_format != "channels_last":
        raise ValueError(
            "Cannot convert: data_format='channels_first' (keras_vit models "
            "take channels-last images)."
        )
    if backbone.patch_size[0] != backbone.patch_size[1]:
        raise ValueError(
            f"Cannot convert: the non-square patch_size={backbone.patch_size}."
        )
    if backbone.layer_norm_epsilon != LAYER_NORM_EPSILON:
        raise ValueError(
            f"Cannot convert: layer_norm_epsilon={backbone.layer_norm_epsilon} "
            f"(keras_vit's LayerNorms use {LAYER_NORM_EPSILON})."
        )
    if classifier is not None and classifier.pooling not in ("token", "gap"):
        raise ValueError(f"Cannot convert: pooling={classifier.pooling!r}.")
    if (
        classifier is not None
        and classifier.pooling == "gap"
        and backbone.use_class_token
    ):
        raise ValueError(
            "Cannot convert: keras-hub's pooling='gap' averages the class token "
            "with the patches; keras_vit's leaves it out."
        )


@export("keras_vit.interop.keras_hub_checkpoint")
def keras_hub_checkpoint(model) -> Checkpoint:
    """A keras-hub ViT, DINOv2 or DINOv3 model as a `Checkpoint`.

    Biases the keras-hub model was built without (`use_mha_bias=False`,
    `use_mlp_bias=False`, `use_patch_bias=False`; DINOv3's
    `use_proj_bias=False`, ...) become zeros where the keras_vit model
    `from_keras_hub` builds has them, which computes the same.

    Raises:
        TypeError: `model` is another kind of model.
        CheckpointError: a variable no rule maps (named).

    Example:

    ```python
    checkpoint = keras_vit.interop.keras_hub_checkpoint(backbone)
    keras_vit.weights.load_weights(model, checkpoint)
    ```
    """
    backbone, classifier = _parts(model)
    if _is_dinov3(backbone):
        return keras_hub_dinov3.dinov3_checkpoint(backbone)
    dinov2 = _is_dinov2(backbone)
    values = {
        variable.path: np.asarray(keras.ops.convert_to_numpy(variable), np.float32)
        for variable in (classifier or backbone).weights
    }
    params, left = rules.translate(values, DINOV2 if dinov2 else VIT)
    if left:
        raise CheckpointError(
            f"keras-hub variable {left[0]!r} has no keras_vit "
            "counterpart; the model cannot be converted."
        )
    if dinov2:
        patch = (int(backbone.patch_size),) * 2
    else:
        params.update(_zero_biases(backbone, params))
        patch = backbone.patch_size
    grid = tuple(
        int(s) // int(p) for s, p in zip(backbone.image_shape[:2], patch, strict=True)
    )
    return Checkpoint(params, grid_size=grid, source=f"keras-hub {model.name!r}")


def _zero_biases(backbone, params) -> dict:
    out = {}
    dim, heads = backbone.hidden_dim, backbone.num_heads
    if not backbone.use_patch_bias:
        out[keys.EMBEDDING + "/bias"] = np.zeros((dim,), np.float32)
    for i in range(backbone.num_layers):
        mha = keys.ATTENTION.format(i=i)
        if not backbone.use_mha_bias:
            for name in keys.QKV:
                out[f"{mha}/{name}/bias"] = np.zeros((heads, dim // heads), "float32")
            out[f"{mha}/{keys.OUT}/bias"] = np.zeros((dim,), np.float32)
        if not backbone.use_mlp_bias:
            out[f"{keys.MLP_1.format(i=i)}/bias"] = np.zeros(
                (backbone.mlp_dim,), np.float32
            )
            out[f"{keys.MLP_2.format(i=i)}/bias"] = np.zeros((dim,), np.float32)
    return {k: v for k, v in out.items() if k not in params}


def load_preset(folder: str):
    """The keras-hub model of a preset folder: its task (a classifier) when
    the preset has one (`task.json`), else its backbone.

    Example:

    ```python
    hub_model = load_preset("/path/to/vit_base_patch16_224_imagenet")
    ```
    """
    keras_hub = _keras_hub()
    if os.path.isfile(os.path.join(folder, "task.json")):
        return keras_hub.models.ImageClassifier.from_preset(folder)
    return keras_hub.models.Backbone.from_preset(folder)


@export("keras_vit.interop.from_keras_hub")
def from_keras_hub(model, **kwargs) -> keras.Model:
    """The keras_vit model of a keras-hub ViT, with its weights.

    A `ViTBackbone` becomes a model returning the encoded token sequence
    (`include_top=False, pooling=None`), as the backbone does; a
    `ViTImageClassifier` becomes a classifier with the same pooling,
    `pre_logits` (`intermediate_dim`), head and activation; a
    `DINOV2Backbone` becomes a token-returning model of the DINOv2 family
    (LayerScale, registers, SwiGLU when used, the position table of its
    `image_shape`); a `DINOV3Backbone` a token-returning model of the DINOv3
    family (rotary embeddings, registers, LayerScale, GELU or SwiGLU, the
    query/key/value biases it has) that takes any image size, its
    `mask_token` left out. The outputs are the keras-hub model's. Its
    preprocessor is not converted.

    Args:
        model: A keras-hub `ViTBackbone`, `ViTImageClassifier`,
            `DINOV2Backbone` or `DINOV3Backbone`.
        **kwargs: `keras_vit.ViT` arguments that do not change the
            computation, e.g. `name`, `drop_path_rate`,
            `include_preprocessing`.

    Raises:
        ImportError: keras-hub is not installed.
        TypeError: `model` is another kind of model.
        ValueError: a setting keras_vit cannot express (one line naming it).

    Example:

    ```python
    vit = keras_vit.interop.from_keras_hub(classifier)
    keras_vit.analysis.attention_rollout(vit, images)
    ```
    """
    backbone, classifier = _parts(model)
    if _is_dinov3(backbone):
        vit = keras_hub_dinov3.dinov3_from_keras_hub(backbone, **kwargs)
        load_weights(vit, keras_hub_checkpoint(model))
        return vit
    if _is_dinov2(backbone):
        vit = _dinov2_from_keras_hub(backbone, **kwargs)
        load_weights(vit, keras_hub_checkpoint(model))
        return vit
    _check_hub(backbone, classifier)
    patch = int(backbone.patch_size[0])
    spec = custom_spec(
        patch,
        hidden_dim=backbone.hidden_dim,
        depth=backbone.num_layers,
        mlp_dim=backbone.mlp_dim,
        num_heads=backbone.num_heads,
    )
    height, width, channels = backbone.image_shape
    encoder = EncoderOptions(
        class_token=bool(backbone.use_class_token),
        dropout_rate=float(backbone.dropout_rate),
        attention_dropout_rate=float(backbone.attention_dropout),
        pooling=None if classifier is None else classifier.pooling,
    )
    arguments = dict(
        image_size=(int(height), int(width)),
        channels=int(channels),
        include_top=classifier is not None,
        name=f"vit_{model.name}",
        options=encoder,
    )
    if classifier is not None:
        arguments.update(
            num_classes=int(classifier.num_classes),
            representation_size=classifier.intermediate_dim,
            classifier_activation=classifier.activation,
        )
    vit = ViT(spec, **{**arguments, **kwargs})
    load_weights(vit, keras_hub_checkpoint(model))
    return vit


# The encoder options each keras-hub architecture maps, or that its check
# refuses by a name of its own; any other option set away from its default
# is refused as `name=value` (`EncoderOptions.departures`), so an option
# added to keras_vit later is never dropped in silence. Dropout rates and
# stochastic depth change training only; `remat` is not part of a model.
# keras-hub's DINOv2 has no `fc_norm`; its ViT's check names it.
_DINOV2_HANDLED = (
    *TRAINING_ONLY, "class_token", "qkv_bias", "num_registers", "distillation",
    "layer_scale_init", "qk_norm", "mlp", "gelu_approximate", "layer_norm_epsilon",
    "no_embed_class", "pooling", "map_heads", "map_mlp_dim", "pool_include_prefix",
)  # fmt: skip
_VIT_HANDLED = (*_DINOV2_HANDLED, "fc_norm")


def _check_vit(model: keras.Model, layout: ViTLayout) -> None:
    """Refuses, in one line, what keras-hub's ViT cannot express."""
    block = layout.block(0).get_config()
    present = {layer.name for layer in model.layers}
    lacking = [
        (layout.num_registers > 0, "register tokens"),
        (names.DIST_TOKEN in present, "a distillation token"),
        (names.FC_NORM in present, "fc_norm"),
        (block["layer_scale_init"] is not None, "LayerScale"),
        (block["qk_norm"], "QK-norm"),
        (block["mlp"] != "gelu", f"the {block['mlp']!r} MLP"),
        (block["gelu_approximate"], "the tanh GELU"),
        (
            block["layer_norm_epsilon"] != LAYER_NORM_EPSILON,
            "another LayerNorm epsilon",
        ),
        (names.ROOT_CONV in present, "a ResNet backbone (hybrid)"),
        (layout.dynamic or layout.pads_images, "a dynamic image size"),
        (layout.has_preprocessing, "include_preprocessing"),
    ]
    class_token = names.CLASS_TOKEN in present
    posemb = layout.position_embedding.get_config()
    if class_token and posemb["num_prefix_tokens"] == 0:
        lacking.append((True, "no_embed_class (no class-token position row)"))
    pool = layout.layer(names.POOL) if layout.has(names.POOL) else None
    if pool is not None:
        mode = pool.get_config().get("mode")
        lacking.append((mode not in ("token", "gap"), "pooling='map'"))
        lacking.append(
            (mode == "gap" and class_token, "pooling='gap' that skips the class token")
        )
    if layout.embedding.get_config()["patch_size"][0] != layout.stride[0]:
        lacking.append((True, "a patch embedding on a feature map"))
    found = [what for bad, what in lacking if bad]
    found += layout.encoder_options.departures(_VIT_HANDLED)
    if found:
        raise ValueError(
            f"Cannot convert {model.name!r}: keras-hub's ViT has no {', '.join(found)}."
        )
    if pool is not None and layout.head_name is None:
        raise ValueError(
            f"Cannot convert {model.name!r}: a pooled model without a head "
            "(keras-hub's ViTBackbone returns tokens; build with pooling=None "
            "or with the head)."
        )


@export("keras_vit.interop.to_keras_hub")
def to_keras_hub(model: keras.Model, backbone: str = "vit", image_size=None):
    """The keras-hub ViT of a keras_vit model, with its weights.

    With `backbone="vit"` (default), a model returning tokens
    (`include_top=False, pooling=None`) becomes a `ViTBackbone` and a
    classifier a `ViTImageClassifier` (without a preprocessor) computing the
    same logits. With `backbone="dinov2"`, a model returning tokens with a
    class token becomes a `DINOV2Backbone` (LayerScale, registers, SwiGLU
    and a position table without a class-token row are kept; the DINOv2
    family's models convert). With `backbone="dinov3"`, a model with a class
    token and DINOv3's rotary embeddings (the DINOv3 family's) becomes a
    `DINOV3Backbone` returning its token sequence (`"token"` or `"gap"`
    pooling, which has no weights, is left to the caller; a head is
    refused). Every variable is checked before any is written.

    Args:
        model: A keras_vit model.
        backbone: `"vit"`, `"dinov2"` or `"dinov3"`: which keras-hub
            architecture.
        image_size: `"dinov3"` only: the `image_shape` of the keras-hub
            backbone (which has one fixed size), an int or `(height,
            width)`. Defaults to the model's own (its native size when it
            takes any).

    Raises:
        ImportError: keras-hub is not installed.
        ValueError: a feature the keras-hub architecture lacks (one line
            naming them).

    Example:

    ```python
    model = keras_vit.ViT("test/4", image_size=16, num_classes=3)
    classifier = keras_vit.interop.to_keras_hub(model)
    ```
    """
    keras_hub = _keras_hub()
    if backbone not in ("vit", "dinov2", "dinov3"):
        raise ValueError(
            f"`backbone` must be 'vit', 'dinov2' or 'dinov3'. Received: {backbone!r}"
        )
    if image_size is not None and backbone != "dinov3":
        raise ValueError(
            f"`image_size` is for backbone='dinov3' only (keras-hub's {backbone} "
            "takes the model's own size). Received: "
            f"image_size={image_size!r}"
        )
    layout = ViTLayout.of(model)
    if backbone == "dinov3":
        return keras_hub_dinov3.dinov3_to_keras_hub(
            keras_hub, model, layout, image_size
        )
    if backbone == "dinov2":
        return _dinov2_to_keras_hub(model, layout)
    _check_vit(model, layout)
    block = layout.block(0)
    patch = int(layout.stride[0])
    hidden = int(layout.embedding.get_config()["hidden_dim"])
    hub_backbone = keras_hub.models.ViTBackbone(
        image_shape=(*layout.image_size, layout.channels),
        patch_size=patch,
        num_layers=layout.depth,
        num_heads=int(block.num_heads),
        hidden_dim=hidden,
        mlp_dim=int(block.mlp_dim),
        dropout_rate=float(block.dropout_rate),
        attention_dropout=float(block.attention_dropout_rate),
        use_class_token=names.CLASS_TOKEN in {layer.name for layer in model.layers},
        name=f"{model.name}_backbone",
    )
    target = hub_backbone
    if layout.head_name is not None:
        head = layout.head.get_config()
        pre_logits = (
            model.get_layer(names.PRE_LOGITS) if layout.has(names.PRE_LOGITS) else None
        )
        target = keras_hub.models.ViTImageClassifier(
            backbone=hub_backbone,
            num_classes=int(head["units"]),
            pooling=layout.layer(names.POOL).get_config()["mode"],
            intermediate_dim=None if pre_logits is None else int(pre_logits.units),
            activation=head["activation"] if head["activation"] != "linear" else None,
            name=model.name,
        )
    params = _with_qkv_biases(from_model(model).params, layout, hidden)
    values = [
        (v, _value_for(v, _original_key(v.path), params, model.name))
        for v in target.weights
    ]
    for variable, value in values:
        variable.assign(value)
    return target


def _with_qkv_biases(params: dict, layout: ViTLayout, hidden: int) -> dict:
    """`params` with zero query/key/value biases where the model has none.

    keras-hub's attention always has them; a model built with
    `qkv_bias=False` computes the same with zeros.
    """
    heads = int(layout.block(0).num_heads)
    zeros = np.zeros((heads, hidden // heads), np.float32)
    params = dict(params)
    for i in range(layout.depth):
        for key in keys.QKV_BIASES:
            params.setdefault(key.format(i=i), zeros)
    return params


def _value_for(variable, key, params: dict, name: str) -> np.ndarray:
    """The value of keras-hub `variable` from `params`, checked."""
    value = params.get(key) if key is not None else None
    if value is None:
        raise CheckpointError(
            f"keras-hub variable {variable.path!r} has no value in {name!r} "
            f"(key {key!r})."
        )
    if key == keys.POSEMB_KEY and len(variable.shape) == 2:
        value = value[0]  # (N, D)
    if tuple(value.shape) != tuple(variable.shape):
        raise CheckpointError(
            f"{key!r} is {tuple(value.shape)} in {name!r} but keras-hub's "
            f"{variable.path!r} is {tuple(variable.shape)}."
        )
    return value


# -- DINOv2 ------------------------------------------------------------------


def _swiglu_width(intermediate_dim: int) -> int:
    """The hidden width keras-hub's (and Hugging Face's) SwiGLU rounds to."""
    return (int(intermediate_dim * 2 / 3) + 7) // 8 * 8


def _dinov2_from_keras_hub(backbone, **kwargs) -> keras.Model:
    data_format = getattr(backbone.embeddings, "data_format", "channels_last")
    if data_format != "channels_last":
        raise ValueError(
            "Cannot convert: data_format='channels_first' (keras_vit models "
            "take channels-last images)."
        )
    swiglu = bool(backbone.use_swiglu_ffn)
    mlp_dim = int(backbone.intermediate_dim)
    spec = custom_spec(
        backbone.patch_size,
        hidden_dim=backbone.hidden_dim,
        depth=backbone.num_layers,
        mlp_dim=_swiglu_width(mlp_dim) if swiglu else mlp_dim,
        num_heads=backbone.num_heads,
    )
    height, width, channels = backbone.image_shape
    encoder = EncoderOptions(
        layer_scale_init=float(backbone.layer_scale_init_value),
        num_registers=int(backbone.num_register_tokens),
        no_embed_class=True,
        mlp="swiglu" if swiglu else "gelu",
        dropout_rate=float(backbone.dropout_rate),
        drop_path_rate=float(backbone.drop_path_rate),
        pooling=None,
    )
    arguments = dict(
        image_size=(int(height), int(width)),
        channels=int(channels),
        include_top=False,
        name=f"vit_{backbone.name}",
        options=encoder,
    )
    return ViT(spec, **{**arguments, **kwargs})


def _check_dinov2(model: keras.Model, layout: ViTLayout) -> None:
    """Refuses, in one line, what keras-hub's DINOv2 cannot express."""
    block = layout.block(0).get_config()
    present = {layer.name for layer in model.layers}
    lacking = [
        (names.CLASS_TOKEN not in present, "a model without a class token"),
        (names.DIST_TOKEN in present, "a distillation token"),
        (block["qk_norm"], "QK-norm"),
        (block["gelu_approximate"], "the tanh GELU"),
        (
            block["layer_norm_epsilon"] != LAYER_NORM_EPSILON,
            "another LayerNorm epsilon",
        ),
        (names.ROOT_CONV in present, "a ResNet backbone (hybrid)"),
        (layout.dynamic or layout.pads_images, "a dynamic image size"),
        (layout.has_preprocessing, "include_preprocessing"),
        (layout.image_size[0] != layout.image_size[1], "a non-square image"),
        (
            block["mlp"] == "swiglu" and block["mlp_dim"] % 8 != 0,
            "a SwiGLU width that is not a multiple of 8",
        ),
        (layout.pooled_name is not None, "pooling (it returns the tokens)"),
    ]
    found = [what for bad, what in lacking if bad]
    found += layout.encoder_options.departures(_DINOV2_HANDLED)
    if found:
        raise ValueError(
            f"Cannot convert {model.name!r}: keras-hub's DINOV2Backbone has no "
            f"{', '.join(found)}."
        )


def _dinov2_to_keras_hub(model: keras.Model, layout: ViTLayout):
    keras_hub = _keras_hub()
    _check_dinov2(model, layout)
    block = layout.block(0)
    config = block.get_config()
    swiglu = config["mlp"] == "swiglu"
    mlp_dim = int(config["mlp_dim"])
    hidden = int(layout.embedding.get_config()["hidden_dim"])
    shape = (*layout.image_size, layout.channels)
    backbone = keras_hub.models.DINOV2Backbone(
        patch_size=int(layout.stride[0]),
        num_layers=layout.depth,
        hidden_dim=hidden,
        num_heads=int(config["num_heads"]),
        intermediate_dim=mlp_dim * 3 // 2 if swiglu else mlp_dim,
        layer_scale_init_value=config["layer_scale_init"] or 1.0,
        num_register_tokens=layout.num_registers,
        use_swiglu_ffn=swiglu,
        dropout_rate=float(config["dropout_rate"]),
        # keras-hub drops every block at one rate; keras_vit's last block has it.
        drop_path_rate=layout.encoder_options.drop_path_rate,
        image_shape=shape,
        position_embedding_shape=shape,
        name=f"{model.name}_backbone",
    )
    params = _with_qkv_biases(from_model(model).params, layout, hidden)
    table = params[keys.POSEMB_KEY]
    if table.shape[1] == layout.num_patches:  # no class row: keras-hub adds one
        params[keys.POSEMB_KEY] = np.concatenate(
            [np.zeros_like(table[:, :1]), table], 1
        )
    width = params[keys.POSEMB_KEY].shape[-1]
    for i in range(layout.depth):
        for scale in (keys.LAYER_SCALE_1, keys.LAYER_SCALE_2):
            # No LayerScale: keras-hub's, at 1, computes the same.
            params.setdefault(scale.format(i=i), np.ones((width,), "float32"))
    values = []
    for variable in backbone.weights:
        match = rules.find(variable.path, DINOV2)
        key = None if match is None else match.key
        if variable.path.endswith("/position_embeddings"):
            key = keys.POSEMB_KEY  # the source table equals the used one here
        elif match is not None and key is None:
            continue  # left out on purpose (the mask token)
        values.append((variable, _value_for(variable, key, params, model.name)))
    for variable, value in values:
        variable.assign(value)
    return backbone
