"""Input pipelines and the image transforms they share with serving.

- `load_source(dataset, split)`: the embedded `"digits"`, an image folder
  (`"folder:PATH"`) or a TFDS dataset by name, as an `ImageSource`.
- `train_dataset(source, ...)` / `eval_dataset(source, ...)`: the `tf.data`
  pipelines (Inception crop, flip, optional RandAugment/MixUp/CutMix; values
  in `[-1, 1]`), batched with the global batch size.
- `transforms`: `decode_image`, `eval_resize`, `to_model_range`.

Example:

```python
from keras_vit import data

source = data.load_source("digits", "train")
dataset = data.train_dataset(source, image_size=32, global_batch_size=64,
                             epochs=1, flip=False)
```
"""

from keras_vit.data.augment import BatchMixer
from keras_vit.data.augment import inception_crop
from keras_vit.data.augment import train_transform
from keras_vit.data.datasets import ImageSource
from keras_vit.data.datasets import digits
from keras_vit.data.datasets import image_folder
from keras_vit.data.datasets import load_source
from keras_vit.data.datasets import parse_split
from keras_vit.data.datasets import tfds_source
from keras_vit.data.pipeline import eval_dataset
from keras_vit.data.pipeline import per_replica_batch_size
from keras_vit.data.pipeline import steps_per_epoch
from keras_vit.data.pipeline import train_dataset
from keras_vit.data.transforms import decode_image
from keras_vit.data.transforms import eval_resize
from keras_vit.data.transforms import to_model_range
