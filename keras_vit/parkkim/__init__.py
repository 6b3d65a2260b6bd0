"""Park & Kim's "How Do Vision Transformers Work?" (ICLR 2022), as one wing.

Everything the comparison of the paper needs beyond a ViT lives here, on
top of the core (`keras_vit.models`, `.layers`, `.weights`, `.data`,
`.analysis`, `.recipes`), which imports nothing from it:

- `cnn/`: the post-activation ResNet of the authors' code, a
  pre-activation ResNet and AlterNet, with their rows and layout, and
  `cnn/family.py`, which registers them as model families
  (`keras_vit.models.model_family`): `TrainConfig.architecture` then takes
  `"resnet"`, `"preact_resnet"` or `"alternet"`.
- `layers/`: their residual, MSA and windowed-attention blocks.
- `authors.py`: the authors' published CIFAR-100 ResNet-50 and ViT-Ti;
  `pth.py`, a `torch.save` reader that never runs a file's code (registered
  as a weights format), and `torch_resnet.py`, the authors' ResNet keys.
- `glyphs.py`: the offline dataset with real high frequencies (registered
  as the dataset `"glyphs"`).
- `window_distance.py`: AlterNet's attention distances.
- `panel.py`: one model's panel of analyses; `claims.py`: the paper's
  claims judged on the panels of several models; `plotting.py`: several
  models side by side.
- `compare.py`, `config.py`, `configs/`: `keras-vit compare` (registered as
  a command) and its `CompareConfig`; `plan.py`, what its analyses will
  cost, measured before they run; `report.py`, what it writes.
- `demo.py`: the trained checkpoints the default comparison analyses
  (`demo_checkpoints/`), and `make_demo.py`, the script that makes them
  (`python -m keras_vit.parkkim.make_demo`; like the command, imported only
  when run).

`import keras_vit` imports this wing, so every name above is registered
before a config, a command or a saved `.keras` file asks for it.

Example:

```python
import keras_vit
from keras_vit import parkkim

model = parkkim.AlterNet("mini", num_classes=10, image_size=32)
source = keras_vit.data.load_source("glyphs", "test")
```
"""

from keras_vit.data.datasets import register_source
from keras_vit.parkkim import authors
from keras_vit.parkkim import claims
from keras_vit.parkkim import cnn
from keras_vit.parkkim import config
from keras_vit.parkkim import configs
from keras_vit.parkkim import demo
from keras_vit.parkkim import glyphs
from keras_vit.parkkim import layers
from keras_vit.parkkim import panel
from keras_vit.parkkim import plan
from keras_vit.parkkim import pth
from keras_vit.parkkim import torch_resnet
from keras_vit.parkkim import window_distance
from keras_vit.parkkim.cnn import ALTERNETS
from keras_vit.parkkim.cnn import PREACT_RESNETS
from keras_vit.parkkim.cnn import RESNETS
from keras_vit.parkkim.cnn import AlterNet
from keras_vit.parkkim.cnn import AlterNet18
from keras_vit.parkkim.cnn import AlterNet50
from keras_vit.parkkim.cnn import CNNLayout
from keras_vit.parkkim.cnn import CNNOptions
from keras_vit.parkkim.cnn import CNNVariant
from keras_vit.parkkim.cnn import PreActResNet
from keras_vit.parkkim.cnn import PreActResNet18
from keras_vit.parkkim.cnn import PreActResNet50
from keras_vit.parkkim.cnn import ResNet
from keras_vit.parkkim.cnn import ResNet18
from keras_vit.parkkim.cnn import ResNet50
from keras_vit.parkkim.cnn import family
from keras_vit.parkkim.window_distance import alternet_attention_distances
from keras_vit.parkkim.window_distance import attention_distance_by_depth
from keras_vit.parkkim.window_distance import window_attention_distance
from keras_vit.recipes import register_command
from keras_vit.recipes.configs.base import register_config_package
from keras_vit.weights.formats import Format
from keras_vit.weights.formats import register_format

register_source("glyphs", glyphs.glyphs)
register_format(
    Format("torch.save", pth.SUFFIXES, lambda head: False, pth.read_state_dict,
           recognizes=pth.is_torch_file)
)  # fmt: skip
register_config_package("keras_vit.parkkim.configs")
register_command(
    "compare",
    "keras_vit.parkkim.compare",
    "Park & Kim's comparison: ViT, ResNets, AlterNet",
)

__all__ = [
    "ALTERNETS",
    "AlterNet",
    "AlterNet18",
    "AlterNet50",
    "CNNLayout",
    "CNNOptions",
    "CNNVariant",
    "PREACT_RESNETS",
    "PreActResNet",
    "PreActResNet18",
    "PreActResNet50",
    "RESNETS",
    "ResNet",
    "ResNet18",
    "ResNet50",
    "alternet_attention_distances",
    "attention_distance_by_depth",
    "authors",
    "claims",
    "cnn",
    "config",
    "configs",
    "demo",
    "family",
    "glyphs",
    "layers",
    "panel",
    "plan",
    "pth",
    "torch_resnet",
    "window_attention_distance",
    "window_distance",
]
