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

from keras_vit.data.augment import Augmentation
from keras_vit.data.augment import BatchMixer
from keras_vit.data.augment import inception_crop
from keras_vit.data.augment import train_transform
from keras_vit.data.datasets import DatasetError
from keras_vit.data.datasets import ImageSource
from keras_vit.data.datasets import check_disjoint
from keras_vit.data.datasets import digits
from keras_vit.data.datasets import image_folder
from keras_vit.data.datasets import load_source
from keras_vit.data.datasets import parse_split
from keras_vit.data.datasets import tfds_source
from keras_vit.data.pipeline import eval_dataset
from keras_vit.data.pipeline import full_batches
from keras_vit.data.pipeline import per_replica_batch_size
from keras_vit.data.pipeline import train_dataset
from keras_vit.data.randaugment import RANDAUGMENT_OPS
from keras_vit.data.randaugment import RandAugment
from keras_vit.data.transforms import decode_image
from keras_vit.data.transforms import eval_resize
from keras_vit.data.transforms import normalize
from keras_vit.data.transforms import prepare_image
from keras_vit.data.transforms import resize_and_crop
from keras_vit.data.transforms import to_model_range

__all__ = [
    "Augmentation",
    "BatchMixer",
    "DatasetError",
    "ImageSource",
    "RANDAUGMENT_OPS",
    "RandAugment",
    "check_disjoint",
    "decode_image",
    "digits",
    "eval_dataset",
    "eval_resize",
    "normalize",
    "prepare_image",
    "resize_and_crop",
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
