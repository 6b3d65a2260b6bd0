"""The rule for a checkpoint with or without query/key/value biases.

timm's `VisionTransformer(qkv_bias=False)` (Park & Kim's CIFAR ViT-Ti, for
one) has no `blocks.{i}.attn.qkv.bias`; a keras_vit ViT built with
`qkv_bias=False` has no `qkv_bias` variable; EVA's attention (DINOv3's
`_qkvb`, EVA-02) has query and value biases only (`qkv_bias="qv"`). When the
model and the checkpoint disagree on this alone, the strict check would list
every block's missing or unexpected biases; this rule says what to change
instead.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from keras_vit.weights.architecture import describe
from keras_vit.weights.architecture import differences
from keras_vit.weights.errors import CheckpointError
from keras_vit.weights.keys import QKV_BIASES
from keras_vit.weights.keys import template_pattern

_QKV_BIAS = tuple(re.compile(template_pattern(t)) for t in QKV_BIASES)


def has_qkv_bias(keys) -> bool:
    """Whether original-layout keys include query/key/value biases."""
    return bias_kind(keys) is not False


def bias_kind(keys) -> bool | str:
    """`True` (query, key and value biases), `"qv"` (query and value only)
    or `False` (none), as `keras_vit.EncoderOptions.qkv_bias` names them."""
    query, key, value = (any(p.fullmatch(k) for k in keys) for p in _QKV_BIAS)
    if query and value and not key:
        return "qv"
    return query or key or value


def check_qkv_bias(layout: Mapping, params: Mapping, model_name: str) -> None:
    """Raises when only the query/key/value biases tell model and checkpoint apart.

    Args:
        layout: `{key: target}` the model expects (original layout).
        params: `{key: array}` of the checkpoint (original layout).
        model_name: For the message.

    Raises:
        CheckpointError: the architectures agree but one side has the biases
            and the other has not; the message names the `qkv_bias=` to use.
    """
    in_model, in_checkpoint = bias_kind(layout), bias_kind(params)
    if in_model == in_checkpoint:
        return
    model_arch = describe({k: tuple(t.shape) for k, t in layout.items()})
    ckpt_arch = describe({k: tuple(v.shape) for k, v in params.items()})
    if differences(model_arch, ckpt_arch):
        return  # another variant: reported as such by the strict check
    raise CheckpointError(
        f"The checkpoint has {_WORDS[in_checkpoint]} but the model "
        f"{model_name!r} has {_WORDS[in_model]}; build it with "
        f"`qkv_bias={in_checkpoint!r}`. No weight was changed."
    )


_WORDS = {
    True: "query/key/value biases",
    False: "no query/key/value biases (timm's qkv_bias=False)",
    "qv": "query and value biases only (EVA's attention)",
}
