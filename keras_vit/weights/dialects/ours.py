"""keras_vit's own variables and the original layout: one table, both ways.

`RULES` maps each variable path of a keras_vit model
(`encoderblock_0/attention/qkv_kernel`) onto its original-layout key(s).
Keras kernels use Flax's axis order, so every weight is a copy; the only
reshaping is the fused `qkv_kernel`/`qkv_bias` of `MultiHeadSelfAttention`
(and `kv_kernel`/`kv_bias` of the attention pool), taken apart by
`Unstack` into the separate query/key/value arrays. Read forwards
(`to_checkpoint`) it turns a model's values into a checkpoint; read
backwards (`checkpoint_layout`) it says which keys a model expects and
where each goes, which is what `keras_vit.weights.checks` loads by.

Example:

```python
layout, unmapped = checkpoint_layout(keras_vit.ViT("test/4", image_size=16))
layout["Transformer/encoderblock_0/MultiHeadDotProductAttention_1/key/kernel"]
# Target(path='encoderblock_0/attention/qkv_kernel', part=(1, 1), shape=(32, 2, 16))
```
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np

from keras_vit.models import layout as names
from keras_vit.weights import keys
from keras_vit.weights.dialects.convert import Unstack
from keras_vit.weights.dialects.layers import keras_dense
from keras_vit.weights.dialects.layers import keras_norm
from keras_vit.weights.dialects.rules import Dialect
from keras_vit.weights.dialects.rules import Rule
from keras_vit.weights.dialects.rules import find
from keras_vit.weights.dialects.rules import same
from keras_vit.weights.dialects.rules import translate

_BLOCK = names.BLOCK_PREFIX + "{i}"
_ATTENTION = _BLOCK + "/attention"
_POOL = names.POOL


def _path(template: str) -> str:
    return keys.template_pattern(template)


def _one(path: str, key, convert=same) -> Rule:
    return Rule(_path(path), key, convert)


def _dense(path: str, layer: str) -> tuple[Rule, Rule]:
    return keras_dense(_path(path), layer)


def _norm(path: str, layer: str) -> tuple[Rule, Rule, Rule]:
    """A LayerNorm's `gamma`/`beta`, or an RMSNorm's `scale` (no bias)."""
    return (*keras_norm(_path(path), layer), _one(path + "/scale", layer + "/scale"))


# Variable path template -> original-layout key(s).
RULES = (
    *_dense(names.EMBEDDING, keys.EMBEDDING),
    *_norm(names.EMBEDDING_NORM, keys.EMBEDDING_NORM),
    _one(names.CLASS_TOKEN + "/token", keys.CLS_KEY),
    _one(names.DIST_TOKEN + "/token", keys.DIST_KEY),
    _one(names.REGISTER_TOKENS + "/tokens", keys.REG_KEY),
    _one(names.POSEMB + "/embedding", keys.POSEMB_KEY),
    *_norm(_BLOCK + "/norm_1", keys.NORM_1),
    _one(_ATTENTION + "/qkv_kernel", keys.QKV_KERNELS, Unstack(1)),
    _one(_ATTENTION + "/qkv_bias", keys.QKV_BIASES, Unstack(0)),
    _one(_ATTENTION + "/qv_bias", keys.QV_BIASES, Unstack(0)),
    _one(_ATTENTION + "/out_kernel", keys.ATTENTION + "/out/kernel"),
    _one(_ATTENTION + "/out_bias", keys.ATTENTION + "/out/bias"),
    *_norm(_ATTENTION + "/query_norm", keys.QUERY_NORM),
    *_norm(_ATTENTION + "/key_norm", keys.KEY_NORM),
    *_norm(_ATTENTION + "/norm", keys.ATTENTION_NORM),
    _one(_ATTENTION + "/rope_freqs", keys.ROPE_FREQS),
    _one(_BLOCK + "/layer_scale_1/gamma", keys.LAYER_SCALE_1),
    _one(_BLOCK + "/layer_scale_2/gamma", keys.LAYER_SCALE_2),
    *_norm(_BLOCK + "/norm_2", keys.NORM_2),
    *_dense(_BLOCK + "/mlp_dense_1", keys.MLP_1),
    *_dense(_BLOCK + "/mlp_dense_2", keys.MLP_2),
    *_norm(_BLOCK + "/mlp_norm", keys.MLP_NORM),
    *_norm(names.PRE_NORM, keys.PRE_NORM),
    *_norm(names.ENCODER_NORM, keys.ENCODER_NORM),
    *_dense(names.PRE_LOGITS, keys.PRE_LOGITS),
    *_dense(names.HEAD, keys.HEAD),
    # timm's `fc_norm`, DeiT's distillation head, the attention pool (MAP).
    *_norm(names.FC_NORM, keys.FC_NORM),
    *_dense(names.HEAD_DIST, keys.HEAD_DIST),
    _one(_POOL + "/probe", keys.MAP_PROBE_KEY),
    _one(_POOL + "/query_kernel", keys.MAP_ATTENTION + "/query/kernel"),
    _one(_POOL + "/query_bias", keys.MAP_ATTENTION + "/query/bias"),
    _one(_POOL + "/kv_kernel", keys.KV_KERNELS, Unstack(1)),
    _one(_POOL + "/kv_bias", keys.KV_BIASES, Unstack(0)),
    _one(_POOL + "/out_kernel", keys.MAP_ATTENTION + "/out/kernel"),
    _one(_POOL + "/out_bias", keys.MAP_ATTENTION + "/out/bias"),
    *_norm(_POOL + "/norm", keys.MAP_NORM),
    *_dense(_POOL + "/mlp_dense_1", keys.MAP_MLP_1),
    *_dense(_POOL + "/mlp_dense_2", keys.MAP_MLP_2),
    # The BiT ResNet of the hybrids: `block1_unit1_conv1` -> `block1/unit1/conv1`.
    _one(names.ROOT_CONV + "/kernel", keys.ROOT_CONV + "/kernel"),
    *_norm(names.ROOT_NORM, keys.ROOT_NORM),
    _one(names.UNIT + "_conv{n}/kernel", keys.UNIT_CONV + "/kernel"),
    *_norm(names.UNIT + "_gn{n}", keys.UNIT_NORM),
)  # fmt: skip

DIALECT = Dialect("keras_vit", RULES)


@dataclasses.dataclass(frozen=True)
class Target:
    """Where one checkpoint array goes in a model.

    Attributes:
        path: The variable's path, e.g. `"encoderblock_0/attention/qkv_kernel"`.
        part: `None`, or `(axis, index)` when the array is one slice of the
            variable along `axis` (the stacked query/key/value).
        shape: The shape the checkpoint array must have.
    """

    path: str
    part: tuple[int, int] | None
    shape: tuple[int, ...]


def checkpoint_layout(model: keras.Model) -> tuple[dict[str, Target], list[str]]:
    """The checkpoint keys (original layout) that `model` expects.

    Args:
        model: A model built by `keras_vit.ViT`.

    Returns:
        `(layout, unmapped)`: `layout` maps each expected checkpoint key to its
        `Target`; `unmapped` lists model variable paths that no rule maps
        (layers `keras_vit` did not create).
    """
    layout, unmapped = {}, []
    for variable in model.weights:
        shape = tuple(int(d) for d in variable.shape)
        match = find(variable.path, DIALECT)
        if match is None:
            unmapped.append(variable.path)
        elif isinstance(match.rule.convert, Unstack):
            axis = match.rule.convert.axis
            for index, key in enumerate(match.key):
                part_shape = shape[:axis] + shape[axis + 1 :]
                layout[key] = Target(variable.path, (axis, index), part_shape)
        else:
            layout[match.key] = Target(variable.path, None, shape)
    return layout, unmapped


def to_checkpoint(
    values: dict[str, np.ndarray],
) -> tuple[dict[str, np.ndarray], list[str]]:
    """Model variable values -> checkpoint arrays (the table read forwards).

    Args:
        values: `{variable path: array}`, e.g. `{"encoder_norm/gamma": ...}`.

    Returns:
        `(params, unmapped)`: `params` in the original layout (the fused
        query/key/value variables split into their three keys); `unmapped`
        lists the paths no rule maps.
    """
    values = {path: np.asarray(value) for path, value in values.items()}
    params, unmapped = translate(values, DIALECT)
    for path in unmapped:
        del params[path]
    return params, unmapped
