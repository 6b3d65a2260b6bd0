"""The model class of keras_vit's functional models: a first step traced once.

Example:

```python
model = keras_vit.ViT("Ti/16", image_size=32, num_classes=10)
isinstance(model, OptimizerFirstModel)  # True: a functional keras.Model
```
"""

from __future__ import annotations

import keras


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
