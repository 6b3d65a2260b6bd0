"""The rescaling layer of `include_preprocessing=True`, from a contract.

Example:

```python
layer = preprocessing_layer(keras_vit.Preprocessing())  # x / 127.5 - 1
```
"""

from __future__ import annotations

import keras

from keras_vit.models import layout as names
from keras_vit.models.preprocessing import Preprocessing


def preprocessing_layer(preprocessing: Preprocessing) -> keras.layers.Rescaling:
    """The `[0, 255] -> (x / 255 - mean) / std` layer of `include_preprocessing`.

    One multiply-add per channel; the paper's `[-1, 1]` as `x / 127.5 - 1`.
    """
    if preprocessing.is_inception:
        return keras.layers.Rescaling(1 / 127.5, offset=-1.0, name=names.PREPROCESSING)
    return keras.layers.Rescaling(
        list(preprocessing.scale), offset=list(preprocessing.offset),
        name=names.PREPROCESSING,
    )  # fmt: skip
