"""The model API, which `import keras_vit` imports.

TensorFlow first, without its start-up notes (`keras_vit._tensorflow`),
then the layers and models (the zoo's families included), the weights,
`from_pretrained` / `save_pretrained` / `push_to_hub`, `predict` and the
resampling functions; and every Keras class keras_vit defines that a saved
`.keras` file can name (the layers, the models' own classes, the training
schedule and optimizer wrappers), registered with Keras, so that
`keras.saving.load_model` reads keras_vit's files after `import keras_vit`.

The recipes, the analyses, the exports, training and data pipelines, the
interop and the Park & Kim wing are not imported here: each loads when it is
used. A `keras-vit` command imports this module once its arguments are read
(`keras_vit.recipes.cli.ArgumentParser`), so `--help` needs no TensorFlow.

Example:

```python
import keras_vit._model_api  # what `import keras_vit` imports
```
"""

# First: TensorFlow, imported without its start-up notes.
from keras_vit import _tensorflow  # noqa: F401  isort: skip

from keras_vit import inference  # noqa: F401
from keras_vit import pretrained  # noqa: F401
from keras_vit import resample  # noqa: F401
from keras_vit.layers import attention  # noqa: F401  (each: registers a class)
from keras_vit.layers import class_token  # noqa: F401
from keras_vit.layers import drop_path  # noqa: F401
from keras_vit.layers import layer_norm  # noqa: F401
from keras_vit.layers import layer_scale  # noqa: F401
from keras_vit.layers import map_head  # noqa: F401
from keras_vit.layers import padding  # noqa: F401
from keras_vit.layers import patch_embedding  # noqa: F401
from keras_vit.layers import pooling  # noqa: F401
from keras_vit.layers import position_embedding  # noqa: F401
from keras_vit.layers import register_tokens  # noqa: F401
from keras_vit.layers import rotary  # noqa: F401
from keras_vit.layers import std_conv  # noqa: F401
from keras_vit.layers import token_grid  # noqa: F401
from keras_vit.layers import transformer_block  # noqa: F401
from keras_vit.models import functional  # noqa: F401
from keras_vit.models import masked_patch  # noqa: F401
from keras_vit.models import vit  # noqa: F401
from keras_vit.models import zoo  # noqa: F401
from keras_vit.training import optimizers  # noqa: F401
from keras_vit.training import schedules  # noqa: F401
from keras_vit.weights import loader  # noqa: F401
