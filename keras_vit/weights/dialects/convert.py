"""The array conversions the dialects' rules name, and whole-checkpoint steps.

Each converter is a plain callable `(array, heads) -> array` (a tuple of
arrays when one source array becomes several keys), as `Rule.convert`
expects; `heads` is the target model's number of attention heads. A
converter that cannot split an array returns it whole (then reported as
mis-shaped) or `None` (then its source key is reported as unexpected).

PyTorch stores a linear layer's weight as `(out, in)` and a convolution's
as `(out, in, height, width)`; the original layout uses `(in, out)` and
`(height, width, in, out)`, and keeps the attention projections per head.

Example:

```python
q, k, v = split(3, dense_to_heads)(timm_qkv_weight, heads=12)  # (D, 12, D / 12)
```
"""

from __future__ import annotations

import dataclasses

import numpy as np

from keras_vit.weights import keys
from keras_vit.weights.dialects.rules import Convert
from keras_vit.weights.dialects.rules import same


def transpose(value, heads=None):
    """A linear layer's weight: `(out, in)` -> `(in, out)`."""
    return np.transpose(value)


def conv_to_hwio(value, heads=None):
    """A convolution kernel: `(out, in, h, w)` -> `(h, w, in, out)`."""
    return np.transpose(value, (2, 3, 1, 0))


def add_batch_axis(value, heads=None):
    """A position table without batch axis: `(N, D)` -> `(1, N, D)`."""
    return value[None] if value.ndim == 2 else value


def dense_to_heads(value, heads):
    """A query/key/value weight: `(D_out, D_in)` -> `(D_in, H, D_out / H)`."""
    if heads is None or value.shape[0] % heads:
        return np.transpose(value)  # left 2-D: reported as mis-shaped
    return np.transpose(value).reshape(value.shape[1], heads, -1)


def bias_to_heads(value, heads):
    """A query/key/value bias: `(D,)` -> `(H, D / H)`."""
    if heads is None or value.shape[0] % heads:
        return value
    return value.reshape(heads, -1)


def out_to_heads(value, heads):
    """An attention output weight: `(D_out, D_in)` -> `(H, D_in / H, D_out)`."""
    if heads is None or value.shape[1] % heads:
        return np.transpose(value)
    return np.transpose(value).reshape(heads, -1, value.shape[0])


def split(parts: int, each: Convert = same) -> Split:
    """A converter splitting a fused projection into `parts`, each converted.

    `split(3, dense_to_heads)` turns timm's `qkv` weight `(3D, D)` into the
    three per-head query, key and value kernels; it gives `None` when the
    first axis is not a multiple of `parts`.
    """
    return Split(parts, each)


@dataclasses.dataclass(frozen=True)
class Split:
    """Splits an array into equal parts along axis 0 (see `split`).

    Attributes:
        parts: How many parts (3 for query/key/value, 2 for key/value).
        each: The converter applied to every part.
    """

    parts: int
    each: Convert = same

    def __call__(self, value, heads=None):
        if value.shape[0] % self.parts:
            return None
        chunks = np.split(value, self.parts, axis=0)
        return tuple(self.each(chunk, heads) for chunk in chunks)


@dataclasses.dataclass(frozen=True)
class Unstack:
    """Takes a fused variable apart along `axis`: one array per index.

    keras_vit's attention keeps query, key and value in one `qkv_kernel`
    `(D, 3, H, D / H)`; `Unstack(1)` gives the three kernels of the original
    layout, and `axis` tells the loader where to stack them back.
    `None` for an array without that axis.

    Attributes:
        axis: The stacking axis.
    """

    axis: int

    def __call__(self, value, heads=None):
        if value.ndim <= self.axis:
            return None
        return tuple(
            np.take(value, i, axis=self.axis) for i in range(value.shape[self.axis])
        )


def fold_class_position(params: dict) -> None:
    """Moves the class token's position row into the token, in place.

    Hugging Face's `Dinov2Model` and keras-hub's `DINOV2Backbone` keep a
    class-token row in their position table; the DINOv2 family here (as
    timm) has a table of the patches only (`no_embed_class`). Adding the row
    to the class token once is exact: the class token is the same for every
    image, and the registers are inserted after the position embedding in
    both. Left as it is when the shapes do not fit (the strict check
    reports them).
    """
    table, cls = params.get(keys.POSEMB_KEY), params.get(keys.CLS_KEY)
    if (
        table is None
        or cls is None
        or table.ndim != 3
        or cls.shape != table[:, :1].shape
    ):
        return
    params[keys.CLS_KEY] = cls + table[:, :1]
    params[keys.POSEMB_KEY] = table[:, 1:]
