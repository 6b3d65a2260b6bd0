"""The recipes: training, pre-training, Park & Kim's comparison, analysis,
export, conversion, few-shot evaluation, prediction and validation, as
commands.

Installed, they are one console script, `keras-vit <command>` (or `python
-m keras_vit.recipes <command>`); from a checkout, `python -m
recipes.<command>` runs the same code. Each command's module has a `main`
and a `run` to call from Python (import it: `import keras_vit` imports
`cli`, `configs` and `termination` here, not the commands, which
`keras-vit` and `python -m` run as scripts):

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

from keras_vit.recipes import cli
from keras_vit.recipes import configs
from keras_vit.recipes import termination

# The commands of `keras-vit`: `name -> (module, one-line summary)`. Built
# in: the modules of this package; a wing adds its own with
# `register_command` (`keras_vit.parkkim` adds `compare`).
COMMANDS = {
    "train": (
        "keras_vit.recipes.train",
        "train or fine-tune a ViT (or another registered model family)",
    ),
    "pretrain_masked": (
        "keras_vit.recipes.pretrain_masked",
        "masked patch prediction pre-training (paper §4.6)",
    ),
    "analyze": (
        "keras_vit.recipes.analyze",
        "the papers' figures for one model",
    ),
    "export": (
        "keras_vit.recipes.export",
        "a SavedModel for TF Serving (and LiteRT, ONNX)",
    ),
    "convert": (
        "keras_vit.recipes.convert",
        "an original checkpoint to a .keras file",
    ),
    "fewshot": (
        "keras_vit.recipes.fewshot",
        "few-shot linear evaluation",
    ),
    "predict": (
        "keras_vit.recipes.predict",
        "classify image files: the top-k classes of each",
    ),
    "validate": (
        "keras_vit.recipes.validate",
        "a classifier's top-1/top-5 accuracy and loss on a dataset",
    ),
}


def register_command(name: str, module: str, summary: str) -> None:
    """Adds `keras-vit <name>`, run by `module.main(argv)`.

    Example:

    ```python
    register_command("compare", "keras_vit.parkkim.compare", "Park & Kim's comparison")
    ```
    """
    COMMANDS[name] = (module, summary)


__all__ = ["COMMANDS", "cli", "configs", "register_command", "termination"]
