"""The recipes: training, pre-training, Park & Kim's comparison, analysis,
export, conversion, few-shot evaluation, prediction and validation, as
commands.

Installed, they are one console script, `keras-vit <command>` (or `python
-m keras_vit.recipes <command>`); from a checkout, `python -m
recipes.<command>` runs the same code. Each command's module has a `main`
and a `run` to call from Python (`keras_vit.recipes.train.run`; each module
is imported when it is first used). `commands.COMMANDS` lists them:

| command | module | what it does |
|---|---|---|
| `train` | `keras_vit.recipes.train` | train or fine-tune a ViT (or a CNN) |
| `pretrain_masked` | `...pretrain_masked` | masked patch prediction (§4.6) |
| `compare` | `keras_vit.parkkim.compare` | Park & Kim's comparison (a wing) |
| `analyze` | `...analyze` | the papers' figures for one model |
| `export` | `...export` | a SavedModel for TF Serving (LiteRT, ONNX) |
| `convert` | `...convert` | an original checkpoint to a `.keras` file |
| `fewshot` | `...fewshot` | few-shot linear evaluation |
| `predict` | `...predict` | classify image files: top-k per image |
| `validate` | `...validate` | a classifier's accuracy on a dataset (timm's validate) |

Configs live in `keras_vit.recipes.configs` (`TrainConfig`, ...); a config
file of your own (`--config my_config.py`) imports them from there.

Example:

```python
import keras_vit

config = keras_vit.recipes.configs.base.load_config("digits")
config.epochs  # the digits recipe's epochs
```
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
