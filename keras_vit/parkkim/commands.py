"""The wing's `keras-vit` command, declared without importing the wing.

The entry point `compare = "keras_vit.parkkim.commands:COMPARE"` (group
`keras_vit.plugins.commands` in `pyproject.toml`) names this `Command`;
`keras-vit --help` reads it and imports `keras_vit.parkkim.compare` only
when the command runs. This module imports nothing but
`keras_vit.plugins` (the standard library).

Example:

```python
from keras_vit.parkkim.commands import COMPARE

COMPARE.module  # 'keras_vit.parkkim.compare'
```
"""

from keras_vit.plugins import Command

COMPARE = Command(
    "keras_vit.parkkim.compare", "Park & Kim's comparison: ViT, ResNets, AlterNet"
)
