"""Input pipelines and the image transforms they share with serving.

- `load_source(dataset, split)`: the embedded `"digits"`, an image folder
  (`"folder:PATH"`) or a TFDS dataset by name, as an `ImageSource`;
  `check_disjoint(a, b)` refuses two sources that share an image (a file,
  a link to it or a byte-identical copy) or disagree on their classes.
- `train_dataset(source, ...)` / `eval_dataset(source, ...)`: the `tf.data`
  pipelines (values in `[-1, 1]`), batched with the global batch size; the
  training augmentation is an `Augmentation` (Inception crop, flip, optional
  RandAugment/MixUp/CutMix).
- `RandAugment(num_ops, magnitude)`: stateless RandAugment in TensorFlow
  ops, called per image with a seed (`keras_vit.data.randaugment`).
- `transforms`: `decode_image`, `resize_and_crop`, `normalize` and
  `prepare_image` (by a model's input contract), `eval_resize` and
  `to_model_range` (the paper's).

Example:

```python
from keras_vit import data

source = data.load_source("digits", "train")
dataset = data.train_dataset(
    source, image_size=32, global_batch_size=64, epochs=1,
    steps_per_epoch=None, seed=0, augmentation=data.Augmentation(flip=False))
```
"""

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
