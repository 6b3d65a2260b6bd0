"""Park & Kim's "How Do Vision Transformers Work?" (ICLR 2022), as one wing.

Everything the comparison of the paper needs beyond a ViT lives here, on
top of the core (`keras_vit.models`, `.layers`, `.weights`, `.data`,
`.analysis`, `.recipes`), which imports nothing from it:

- `cnn/`: the post-activation ResNet of the authors' code, a
  pre-activation ResNet and AlterNet, with their rows and layout, and
  `cnn/family.py`, which registers them as model architectures
  (`keras_vit.models.architectures`): `TrainConfig.architecture` then
  takes `"resnet"`, `"preact_resnet"` or `"alternet"`.
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
- `compare.py`, `config.py`, `configs/`: `keras-vit compare` and its
  `CompareConfig`; `plan.py`, what its analyses will cost, measured before
  they run; `report.py`, what it writes.
- `demo.py`: the trained checkpoints the default comparison analyses
  (`demo_checkpoints/`), and `make_demo.py`, the script that makes them
  (`python -m keras_vit.parkkim.make_demo`; like the command, imported only
  when run).

The wing is a plug-in (`keras_vit.plugins`): `import keras_vit` does not
import it. Its entry points name `plugin.py`, which registers the
architectures, the dataset, the weights format, the configs and the Keras
classes when the core first meets one of their names, and `commands.py`,
which declares `keras-vit compare`. Importing this package registers the
wing too (it imports `plugin.py`), so that `keras.saving.load_model` reads
a saved CNN after `import keras_vit.parkkim`; only inside the `keras-vit`
command, which answers `--help` without TensorFlow, does it wait for a
command or a lookup to need it. The names below load when first used.

Example:

```python
import keras_vit
from keras_vit import parkkim

model = parkkim.AlterNet("mini", num_classes=10, image_size=32)
source = keras_vit.data.load_source("glyphs", "test")
```
"""

import lazy_loader

from keras_vit import plugins

# The wing's public names, each loaded from its module when first used.
__getattr__, __dir__, __all__ = lazy_loader.attach(
    __name__,
    submodules=[
        "authors",
        "claims",
        "cnn",
        "commands",
        "config",
        "configs",
        "demo",
        "glyphs",
        "layers",
        "panel",
        "plan",
        "plugin",
        "pth",
        "torch_resnet",
        "window_distance",
    ],
    submod_attrs={
        "cnn": [
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
        ],
        "plugin": ["family"],  # `cnn/family.py`, the registered architectures
        "window_distance": [
            "alternet_attention_distances",
            "attention_distance_by_depth",
            "window_attention_distance",
        ],
    },
)

if not plugins.in_command():
    from keras_vit.parkkim import plugin  # noqa: F401  registers the wing
