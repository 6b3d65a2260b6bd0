"""The commands of `keras-vit`: `name -> (module, one-line summary)`.

Read without importing any command, so that `keras-vit --help` lists them
at once; `keras-vit <name>` imports the module and runs its `main(argv)`.

Example:

```python
from keras_vit.recipes.commands import COMMANDS

module, summary = COMMANDS["train"]  # ('keras_vit.recipes.train', '...')
```
"""

from keras_vit._export import export

# Built in: the modules of this package. An installed plug-in adds its own
# through an entry point (`keras_vit.plugins.commands`), a program with
# `register_command`.
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
export("keras_vit.recipes.COMMANDS").constant(__name__, "COMMANDS")


@export("keras_vit.recipes.register_command")
def register_command(name: str, module: str, summary: str) -> None:
    """Adds `keras-vit <name>`, run by `module.main(argv)`.

    Example:

    ```python
    register_command("compare", "keras_vit.parkkim.compare", "Park & Kim's comparison")
    ```
    """
    COMMANDS[name] = (module, summary)
