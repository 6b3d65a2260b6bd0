"""Shipped configs of `train` and `pretrain_masked`.

`python -m recipes.train --config <name>` (and `recipes.pretrain_masked`).
Each module defines `get_config()`, returning a `TrainConfig` (`train`) or
a `PretrainConfig` (`pretrain_masked`) (see `base.py`); its docstring gives
the command, the hardware, the expected accuracy and time. A wing adds its
own package of configs (`base.register_config_package`: `keras-vit
compare`'s are in `keras_vit.parkkim.configs`). A shipped config is
imported when it is asked for, by name (`base.load_config`).

Example:

```python
from keras_vit.recipes.configs.base import load_config

config = load_config("digits")
```
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
