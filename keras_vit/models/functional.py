"""The model class of keras_vit's functional models: a first step traced once.

Example:

```python
model = keras_vit.ViT("Ti/16", image_size=32, num_classes=10)
isinstance(model, OptimizerFirstModel)  # True: a functional keras.Model
```
"""

from __future__ import annotations

import json
import types
from collections.abc import Mapping

import keras

from keras_vit._export import export
from keras_vit.models.preprocessing import as_preprocessing


@export("keras_vit.models.OptimizerFirstModel")
@keras.saving.register_keras_serializable(package="keras_vit")
class OptimizerFirstModel(keras.Model):
    """A functional model whose first training step is traced once.

    Under TensorFlow's default distribution strategy Keras 3 creates the
    optimizer's variables inside the traced training step, and TensorFlow
    traces a function that creates variables twice (see `build_optimizer`).
    This model creates them just before its training function is made (the
    first `fit` or `train_on_batch` after `compile`), from the trainable
    variables of that moment, in the model's strategy scope: what Keras does
    itself under an explicit strategy. `keras_vit.ViT` returns one, so a
    plain `model.compile(...)` then `fit` needs no extra call. Everything
    else is `keras.Model`'s (a functional model, saved and loaded as such).

    Example:

    ```python
    model = keras_vit.ViT("Ti/16", image_size=32, num_classes=10)
    model.compile(optimizer="adamw", loss="sparse_categorical_crossentropy")
    model.fit(images, labels)  # the first step is traced once
    ```
    """

    def make_train_function(self, force=False):
        optimizer = getattr(self, "optimizer", None)
        if (
            keras.backend.backend() == "tensorflow"
            and optimizer is not None
            and not optimizer.built
            and self.built
        ):
            with self.distribute_strategy.scope():
                optimizer.build(self.trainable_variables)
        return super().make_train_function(force)

    @property
    def preprocessing(self):
        """The `keras_vit.Preprocessing` the model's inputs are prepared with."""
        return getattr(self, "_preprocessing", None) or as_preprocessing(None)

    @preprocessing.setter
    def preprocessing(self, value):
        # Set before Keras tracks attributes would wrap it; a plain value.
        object.__setattr__(self, "_preprocessing", as_preprocessing(value))

    @property
    def class_names(self) -> tuple[str, ...] | None:
        """One name per class of the head, or `None` when not known."""
        return getattr(self, "_class_names", None)

    @class_names.setter
    def class_names(self, names):
        if names is not None:
            if isinstance(names, str):
                raise TypeError("`class_names` must be a sequence of strings.")
            names = tuple(str(n) for n in names)
        object.__setattr__(self, "_class_names", names)

    @property
    def pretrained_cfg(self) -> Mapping | None:
        """The checkpoint the weights came from, in timm's `pretrained_cfg`
        vocabulary (`hf_hub_id`, `tag`, `license`, `input_size`,
        `test_input_size`, `pool_size`, `mean`, `std`, ...), read-only; `None`
        for a model not loaded from a named checkpoint. Kept by `.keras`
        files and `keras_vit.save_pretrained` (see
        `keras_vit.weights.pretrained_cfg`)."""
        return getattr(self, "_pretrained_cfg", None)

    @pretrained_cfg.setter
    def pretrained_cfg(self, cfg):
        if cfg is not None:
            if not isinstance(cfg, Mapping):
                raise TypeError(
                    f"`pretrained_cfg` must be a mapping; got {type(cfg).__name__}."
                )
            cfg = types.MappingProxyType(json.loads(json.dumps(dict(cfg))))
        object.__setattr__(self, "_pretrained_cfg", cfg)

    def get_config(self):
        config = super().get_config()
        config["preprocessing"] = self.preprocessing.get_config()
        if self.class_names is not None:
            config["class_names"] = list(self.class_names)
        if self.pretrained_cfg is not None:
            config["pretrained_cfg"] = json.loads(json.dumps(dict(self.pretrained_cfg)))
        return config

    @classmethod
    def from_config(cls, config, custom_objects=None):
        config = dict(config)
        preprocessing = config.pop("preprocessing", None)
        class_names = config.pop("class_names", None)
        pretrained_cfg = config.pop("pretrained_cfg", None)
        model = super().from_config(config, custom_objects=custom_objects)
        model.preprocessing = preprocessing
        model.class_names = class_names
        model.pretrained_cfg = pretrained_cfg
        return model
