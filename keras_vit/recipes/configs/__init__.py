"""Shipped configs of `train`, `pretrain_masked` and `compare`.

`python -m recipes.train --config <name>` (and `recipes.pretrain_masked`,
`recipes.compare`). Each module defines `get_config()`, returning a
`TrainConfig` (`train`), a `PretrainConfig` (`pretrain_masked`) or a
`CompareConfig` (`compare`) (see `base.py`); its docstring gives the
command, the hardware, the expected accuracy and time. A shipped config is
imported when it is asked for, by name (`base.load_config`).

Example:

```python
from keras_vit.recipes.configs.base import load_config

config = load_config("digits")
```
"""

from keras_vit.recipes.configs import base

__all__ = ["base"]
