"""keras_vit: the Vision Transformer in Keras 3.

`import keras_vit` imports the model API (TensorFlow included): the layers,
the models and the model zoo, the weights, `from_pretrained`,
`save_pretrained`, `push_to_hub`, `predict` and the resampling functions;
every class a saved `.keras` file of keras_vit can name is then registered
with Keras, so `keras.saving.load_model` works after `import keras_vit`,
whichever of Keras and keras_vit is imported first. TensorFlow's start-up
notes are hidden (`keras_vit._tensorflow`; `KERAS_VIT_VERBOSE=1` shows
them).

Every other public name and subpackage (`keras_vit.recipes`,
`keras_vit.analysis`, `keras_vit.export`, `keras_vit.training`,
`keras_vit.data`, `keras_vit.parkkim`, ...) is an attribute that is imported
when it is first used. The public names are listed in `__init__.pyi`,
generated from where each is defined (`keras_vit._export`).

Example:

```python
import keras_vit

model = keras_vit.ViT_L16(num_classes=100)
dinov2 = keras_vit.models.DINOv2_S14()
```
"""

import lazy_loader

from keras_vit import plugins

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)

# The `keras-vit` command imports the model API itself, once a command's
# arguments are read: `keras-vit --help`, `keras-vit <command> --help` and a
# bad argument then answer without TensorFlow.
if not plugins.in_command():
    from keras_vit import _model_api  # noqa: F401
