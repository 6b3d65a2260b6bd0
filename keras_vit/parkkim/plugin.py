"""The Park & Kim wing as a keras_vit plug-in: importing this module
registers it.

keras_vit finds this module through the wing's entry point (group
`keras_vit.plugins` in `pyproject.toml`) and imports it when it meets a
name it does not know (`keras_vit.plugins.load_plugins`); `import
keras_vit.parkkim` imports it too. It registers, in the core's tables:

- the architectures `"resnet"`, `"preact_resnet"` and `"alternet"`
  (`cnn/family.py`, `keras_vit.models.architectures`), and with them the
  wing's Keras classes (`layers/`), so a saved `.keras` file of a CNN
  loads;
- the dataset `"glyphs"` (`glyphs.py`, `keras_vit.data.datasets`);
- the checkpoint format `torch.save` (`.pth`, `.pth.tar`, `.pt`; `pth.py`,
  `keras_vit.weights.formats`);
- the configs of `keras-vit compare` (`configs/`,
  `keras_vit.recipes.configs.base.register_config_package`).

Its command, `keras-vit compare`, is declared apart (`commands.py`, entry
point group `keras_vit.plugins.commands`), so that `keras-vit --help` lists it
without importing this module.

Example:

```python
import keras_vit.parkkim.plugin
from keras_vit.models import architectures

architectures.named("alternet").title  # 'AlterNet'
```
"""

from keras_vit.data.datasets import register_source
from keras_vit.parkkim import glyphs
from keras_vit.parkkim import pth
from keras_vit.parkkim.cnn import family
from keras_vit.recipes.configs.base import register_config_package
from keras_vit.weights.formats import Format
from keras_vit.weights.formats import register_format

# `family` registered the architectures on import (and imported the layers).
ARCHITECTURES = (family.RESNET, family.PREACT_RESNET, family.ALTERNET)

register_source("glyphs", glyphs.glyphs, test_split="test")
register_format(
    Format("torch.save", pth.SUFFIXES, lambda head: False, pth.read_state_dict,
           recognizes=pth.is_torch_file)
)  # fmt: skip
register_config_package("keras_vit.parkkim.configs")
