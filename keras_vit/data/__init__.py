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

from keras_vit import _imports

_EXPORTS = {
    "Augmentation": "keras_vit.data.augment",
    "BatchMixer": "keras_vit.data.augment",
    "check_disjoint": "keras_vit.data.datasets",
    "DatasetError": "keras_vit.data.datasets",
    "decode_image": "keras_vit.data.transforms",
    "digits": "keras_vit.data.datasets",
    "eval_dataset": "keras_vit.data.pipeline",
    "eval_resize": "keras_vit.data.transforms",
    "full_batches": "keras_vit.data.pipeline",
    "image_folder": "keras_vit.data.datasets",
    "ImageSource": "keras_vit.data.datasets",
    "inception_crop": "keras_vit.data.augment",
    "load_source": "keras_vit.data.datasets",
    "parse_split": "keras_vit.data.datasets",
    "per_replica_batch_size": "keras_vit.data.pipeline",
    "RandAugment": "keras_vit.data.randaugment",
    "RANDAUGMENT_OPS": "keras_vit.data.randaugment",
    "tfds_source": "keras_vit.data.datasets",
    "to_model_range": "keras_vit.data.transforms",
    "train_dataset": "keras_vit.data.pipeline",
    "train_transform": "keras_vit.data.augment",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _imports.lazy_exports(__name__, _EXPORTS)
