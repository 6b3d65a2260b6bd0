"""The recipes: training, pre-training, Park & Kim's comparison, analysis,
export, conversion and few-shot evaluation, as commands.

Installed, they are one console script, `keras-vit <command>` (or `python
-m keras_vit.recipes <command>`); from a checkout, `python -m
recipes.<command>` runs the same code. Each command's module has a `main`
and a `run` to call from Python:

| command | module | what it does |
|---|---|---|
| `train` | `keras_vit.recipes.train` | train or fine-tune a ViT (or a CNN) |
| `pretrain_masked` | `...pretrain_masked` | masked patch prediction (§4.6) |
| `compare` | `...compare` | Park & Kim's comparison and claims |
| `analyze` | `...analyze` | the papers' figures for one model |
| `export` | `...export` | a SavedModel for TF Serving (LiteRT, ONNX) |
| `convert` | `...convert` | an original checkpoint to a `.keras` file |
| `fewshot` | `...fewshot` | few-shot linear evaluation |

Configs live in `keras_vit.recipes.configs` (`TrainConfig`, ...); a config
file of your own (`--config my_config.py`) imports them from there.
"""

# Importing the package loads nothing else: `--help` answers at once.
COMMANDS = (
    "train",
    "pretrain_masked",
    "compare",
    "analyze",
    "export",
    "convert",
    "fewshot",
)
