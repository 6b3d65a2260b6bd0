"""Shipped configs of `keras-vit compare`: `compare` (the default, on
glyphs), `compare_quick` (a smoke test) and `compare_authors` (the authors'
published CIFAR-100 models). Each module defines `get_config()`, returning
a `keras_vit.parkkim.config.CompareConfig`; `keras_vit.parkkim` registers
this package with `load_config`, so `--config compare` finds them.

Example:

```python
from keras_vit.recipes.configs.base import load_config
from keras_vit.parkkim.config import CompareConfig

config = load_config("compare_quick", CompareConfig)
```
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
