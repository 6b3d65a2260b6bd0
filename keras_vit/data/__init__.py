"""Input pipelines and the image transforms they share with serving.

- `load_source(dataset, split)`: the embedded `"digits"`, an image folder
  (`"folder:PATH"`) or a TFDS dataset by name, as an `ImageSource`;
  `check_disjoint(a, b)` refuses two sources that share an image.
- `train_dataset(source, ...)` / `eval_dataset(source, ...)`: the `tf.data`
  pipelines (values in `[-1, 1]`), batched with the global batch size; the
  training augmentation is an `Augmentation` (Inception crop, flip, optional
  RandAugment/MixUp/CutMix).
- `RandAugment(num_ops, magnitude)`: stateless RandAugment in TensorFlow
  ops, called per image with a seed (`keras_vit.data.randaugment`).
- `transforms`: `decode_image`, `eval_resize`, `to_model_range`.

Example:

```python
from keras_vit import data

source = data.load_source("digits", "train")
dataset = data.train_dataset(
    source, image_size=32, global_batch_size=64, epochs=1,
    steps_per_epoch=None, seed=0, augmentation=data.Augmentation(flip=False))
```
"""

from keras_vit.data.augment import (
    Augmentation,
    BatchMixer,
    inception_crop,
    train_transform,
)
from keras_vit.data.datasets import (
    ImageSource,
    check_disjoint,
    digits,
    image_folder,
    load_source,
    parse_split,
    tfds_source,
)
from keras_vit.data.pipeline import (
    eval_dataset,
    full_batches,
    per_replica_batch_size,
    train_dataset,
)
from keras_vit.data.randaugment import RANDAUGMENT_OPS, RandAugment
from keras_vit.data.transforms import decode_image, eval_resize, to_model_range

__all__ = [
    "RANDAUGMENT_OPS",
    "Augmentation",
    "BatchMixer",
    "ImageSource",
    "RandAugment",
    "check_disjoint",
    "decode_image",
    "digits",
    "eval_dataset",
    "eval_resize",
    "full_batches",
    "image_folder",
    "inception_crop",
    "load_source",
    "parse_split",
    "per_replica_batch_size",
    "tfds_source",
    "to_model_range",
    "train_dataset",
    "train_transform",
]
