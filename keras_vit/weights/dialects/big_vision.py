"""big_vision's SigLIP image tower (`params/img/...` in an `.npz`), as rules.

big_vision's `models/vit.py` under the image tower of
`proj/image_text/two_towers.py`: the position table at the top
(`pos_embedding`), blocks numbered `LayerNorm_0/1`,
`MultiHeadDotProductAttention_0`, `MlpBlock_0`, and the `MAPHead_0` of
`pool_type="map"` already in the original layout. Kernels are Flax's: no
transposition. Before the rules (`_prepare`), the `params/img/` prefix goes,
the text tower and the sigmoid loss's temperature and bias (`txt/`, `t`,
`b`) are left out, and a scanned encoder (`encoderblock/`, stacked over
depth) is unstacked into one key per block.

Example:

```python
params, left = translate(read_npz("siglip.npz"), DIALECT, heads=12)
```
"""

from __future__ import annotations

import re

import numpy as np

from keras_vit.weights import keys
from keras_vit.weights.dialects.rules import Dialect
from keras_vit.weights.dialects.rules import Rule

_B = keys.template_pattern(keys.BLOCK) + "/"
_IMAGE_TOWER = re.compile(r"^(?:params/)?img/")
_OTHER_PARTS = re.compile(r"^(?:params/)?(?:txt/|t$|b$)")
_SCANNED = "Transformer/encoderblock/"  # stacked over depth -> one per block
_UNSCANNED = keys.BLOCK + "/"

RULES = (
    Rule(r"embedding/(?P<leaf>kernel|bias)", keys.EMBEDDING + "/{leaf}"),
    Rule(r"cls", keys.CLS_KEY),
    Rule(r"pos_embedding", keys.POSEMB_KEY),
    Rule(_B + r"LayerNorm_0/(?P<leaf>scale|bias)", keys.NORM_1 + "/{leaf}"),
    Rule(_B + r"LayerNorm_1/(?P<leaf>scale|bias)", keys.NORM_2 + "/{leaf}"),
    Rule(_B + r"MultiHeadDotProductAttention_0/(?P<leaf>(?:query|key|value|out)/"
         r"(?:kernel|bias))", keys.ATTENTION + "/{leaf}"),
    Rule(_B + r"MlpBlock_0/(?P<leaf>Dense_[01]/(?:kernel|bias))", keys.MLP + "/{leaf}"),
    Rule(r"Transformer/encoder_norm/(?P<leaf>scale|bias)",
         keys.ENCODER_NORM + "/{leaf}"),
    Rule(r"MAPHead_0/(?P<leaf>.+)", keys.MAP + "/{leaf}"),
    Rule(r"head/(?P<leaf>kernel|bias)", keys.HEAD + "/{leaf}"),
)  # fmt: skip


def recognizes(names) -> bool:
    """Whether a key set is a big_vision two-towers image tower (`img/...`)."""
    return any(_IMAGE_TOWER.match(k) for k in names)


def _prepare(tensors: dict) -> dict:
    """The image tower's keys without prefix, its scanned blocks unstacked."""
    out = {}
    for key, value in tensors.items():
        if _OTHER_PARTS.match(key):
            continue
        key = _IMAGE_TOWER.sub("", key)
        if not key.startswith(_SCANNED):
            out[key] = value
            continue
        for i, part in enumerate(np.asarray(value)):
            out[_UNSCANNED.format(i=i) + key[len(_SCANNED) :]] = part
    return out


DIALECT = Dialect(
    "big_vision", RULES, recognizes, prepare=_prepare, example="params/img/..."
)
