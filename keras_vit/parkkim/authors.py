"""Park & Kim's own trained CIFAR-100 models, in Keras.

"How Do Vision Transformers Work?" (Park & Kim, ICLR 2022) analyses two
models its authors trained on CIFAR-100 and published with their code
(github.com/xxxnell/how-do-vits-work, branch `transformer`, README and
`featuremap_variance.ipynb`):

- `"resnet_50"`: their `models/resnet.py` ResNet-50 with the CIFAR stem,
  `keras_vit.parkkim.cnn.ResNet("50", stem="cifar")`; file
  `resnet_50_cifar100_691cc9a9e4.pth.tar`.
- `"vit_ti"`: timm's `VisionTransformer` at 32 px with patch 2, width 192,
  depth 12, 3 heads and `qkv_bias=False`, `keras_vit.ViT("Ti/2",
  qkv_bias=False)`; file `vit_ti_cifar100_9857b21357.pth.tar`.

`authors_model(name, weights=...)` builds one and loads its file, which
`torch.save` wrote as `{"name", "state_dict", ...}`: the state dict is read
without PyTorch and without running any pickled code
(`keras_vit.parkkim.pth`). Both models take images normalised as the
authors' CIFAR-100 pipeline does (`ops/datasets.py`: `x / 255`, then minus
`CIFAR100_MEAN`, over `CIFAR100_STD`, per channel), not keras_vit's
`[-1, 1]`: pass `[0, 255]` images through `preprocess` (NumPy) or
`preprocessing_layer()` (Keras) first.

Example:

```python
from keras_vit.parkkim import authors

model = authors.authors_model("vit_ti", weights="vit_ti_cifar100_9857b21357.pth.tar")
logits = model(authors.preprocess(images_uint8))  # (B, 100), the authors' logits
```
"""

from __future__ import annotations

import dataclasses
import os
import types

import keras
import numpy as np

from keras_vit.models.vit import ViT
from keras_vit.parkkim.cnn.resnet import ResNet

# The authors' CIFAR-100 statistics: `ops/datasets.py`, `get_cifar100`, and
# `configs/cifar100_*.yaml`.
CIFAR100_MEAN = (0.5071, 0.4867, 0.4408)
CIFAR100_STD = (0.2675, 0.2565, 0.2761)
NUM_CLASSES = 100
IMAGE_SIZE = 32
TAG = "cifar100"
RELEASE_URL = (
    "https://github.com/xxxnell/how-do-vits-work-storage/releases/download/v0.1"
)


@dataclasses.dataclass(frozen=True)
class AuthorsModel:
    """One of the authors' published models.

    Attributes:
        name: The authors' name of the model (`model.name` in their code).
        description: What it is.
        file_name: The published file's name.
        url: Where the authors publish it.
    """

    name: str
    description: str
    file_name: str

    @property
    def url(self) -> str:
        return f"{RELEASE_URL}/{self.file_name}"


AUTHORS_MODELS = types.MappingProxyType(
    {
        "resnet_50": AuthorsModel(
            "resnet_50",
            "post-activation ResNet-50 with the CIFAR stem (their models/resnet.py)",
            "resnet_50_cifar100_691cc9a9e4.pth.tar",
        ),
        "vit_ti": AuthorsModel(
            "vit_ti",
            "ViT-Ti, patch 2 at 32 px, without query/key/value biases (timm "
            "VisionTransformer)",
            "vit_ti_cifar100_9857b21357.pth.tar",
        ),
    }
)


def authors_model(
    name: str,
    *,
    weights: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> keras.Model:
    """Builds one of Park & Kim's CIFAR-100 models, optionally with their weights.

    Args:
        name: `"resnet_50"` or `"vit_ti"` (see `AUTHORS_MODELS`).
        weights: `None` (random initialisation), a path to the authors'
            `.pth.tar` file, or `"cifar100"` to take it from the keras_vit
            cache (`~/.keras/keras_vit/`, or `cache_dir`), downloading it
            from the authors' release when it is not there.
        cache_dir: Root of the download cache for `weights="cifar100"`.

    Returns:
        A functional Keras model taking `(batch, 32, 32, 3)` images
        normalised with `preprocess` and returning 100 logits. The ResNet is
        named `"resnet_50_cifar100"`, the ViT `"vit_ti_cifar100"`; both work
        with `keras_vit.feature_extractor` and `keras_vit.analysis`.

    Raises:
        ValueError: an unknown name.
        keras_vit.weights.CheckpointError: a file that is not the model's
            (every key is checked before anything is assigned), or a
            file that is unreadable or would run code when unpickled.
        keras_vit.weights.WeightsNotFoundError: `weights="cifar100"` when the
            file is neither cached nor downloadable (offline).

    Example:

    ```python
    model = authors_model("resnet_50", weights="resnet_50_cifar100_691cc9a9e4.pth.tar")
    ```
    """
    entry = _entry(name)
    if entry.name == "resnet_50":
        model = ResNet(
            "50",
            num_classes=NUM_CLASSES,
            image_size=IMAGE_SIZE,
            stem="cifar",
            name="resnet_50_cifar100",
        )
    else:
        model = ViT(
            "Ti/2",
            num_classes=NUM_CLASSES,
            image_size=IMAGE_SIZE,
            qkv_bias=False,
            gelu_approximate=False,  # timm's nn.GELU is the exact erf GELU
            name="vit_ti_cifar100",
        )
    if weights is not None:
        # Here, not at the top: the weights package reads the models' layouts.
        from keras_vit.weights.loader import load_weights

        path = weights
        if isinstance(weights, str) and weights == TAG and not os.path.exists(weights):
            path = checkpoint_path(entry.name, cache_dir=cache_dir)
        load_weights(model, path)
    return model


def checkpoint_path(name: str, *, cache_dir: str | os.PathLike | None = None) -> str:
    """The local path of the authors' file for `name`: cached, or downloaded.

    Raises:
        keras_vit.weights.WeightsNotFoundError: the file is not cached and
            cannot be downloaded; the message names the URL and the
            directory to save it in.
    """
    from keras_vit.weights import registry  # (see `authors_model`)

    entry = _entry(name)
    return registry.fetch(
        registry.PretrainedWeights(
            tag=TAG,
            variant=f"Park & Kim {entry.name}",
            file_name=entry.file_name,
            url=entry.url,
            image_size=IMAGE_SIZE,
            num_classes=NUM_CLASSES,
        ),
        cache_dir,
    )


def preprocess(images) -> np.ndarray:
    """`[0, 255]` images -> the authors' normalised inputs, exactly.

    The evaluation transform of the authors' CIFAR-100 pipeline: torchvision's
    `ToTensor` (`x / 255` in float32) and `Normalize(CIFAR100_MEAN,
    CIFAR100_STD)`, per channel on the last axis, in float32 as PyTorch
    computes it. (Their `Resize(32)` and `CenterCrop(32)` leave 32x32 images
    unchanged.)

    Args:
        images: `(..., 3)` array of pixel values in `[0, 255]` (uint8 or
            float).

    Returns:
        A float32 array of the same shape.

    Example:

    >>> preprocess(np.full((1, 32, 32, 3), 255, "uint8"))[0, 0, 0]
    array([1.8426168, 2.0011694, 2.025353 ], dtype=float32)
    """
    x = np.asarray(images, dtype=np.float32) / np.float32(255)
    mean = np.asarray(CIFAR100_MEAN, np.float32)
    std = np.asarray(CIFAR100_STD, np.float32)
    return (x - mean) / std


def preprocessing_layer(name: str = "cifar100_normalization") -> keras.layers.Layer:
    """A Keras layer doing `preprocess` (e.g. in a `tf.data` map or a model).

    `keras.layers.Normalization` with the authors' statistics scaled to
    `[0, 255]` inputs; it agrees with `preprocess` to float32 rounding
    (about 1e-6).

    Example:

    ```python
    dataset = dataset.map(lambda x, y: (authors.preprocessing_layer()(x), y))
    ```
    """
    mean = 255.0 * np.asarray(CIFAR100_MEAN, np.float64)
    std = 255.0 * np.asarray(CIFAR100_STD, np.float64)
    return keras.layers.Normalization(
        axis=-1, mean=mean.tolist(), variance=(std**2).tolist(), name=name
    )


def _entry(name: str) -> AuthorsModel:
    if name not in AUTHORS_MODELS:
        raise ValueError(
            f"Unknown Park & Kim model {name!r}. Known: {sorted(AUTHORS_MODELS)}."
        )
    return AUTHORS_MODELS[name]
