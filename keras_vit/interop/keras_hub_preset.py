"""A keras_vit model as a keras-hub preset folder: `save_keras_hub_preset`.

keras-hub's `from_preset(folder)` reads `config.json` and picks its loader
by the keys there (`keras_hub/src/utils/preset_utils.py`,
`get_preset_loader`): `registered_name` for its own presets, `model_type`
for transformers, `architecture` for timm. A `save_pretrained` folder is a
timm folder, and keras-hub's timm loader converts CNNs only (ResNet,
CSPNet, DenseNet, MobileNet, VGG, EfficientNet, HGNetV2), so keras-hub
refuses it: "KerasHub has no converter for timm models with architecture
...". One `config.json` cannot be read both ways, so a keras-hub preset is
another folder, written here from the keras-hub model `to_keras_hub` makes.

The folder holds what keras-hub's own `save_to_preset` writes
(`config.json`, `model.weights.h5`, `metadata.json`; a classifier's
`task.json`, `task.weights.h5` and `preprocessor.json`) plus the model's
input contract as keras-hub's image converter (`image_converter.json`):
`model.preprocessing`'s mean and std as the converter's `scale` and
`offset`, its resize filter, antialiasing and crop mode (`"center"` is
`crop_to_aspect_ratio=True`), at the model's image size.

Example:

```python
model = keras_vit.from_pretrained("my-vit")  # a save_pretrained folder
keras_vit.interop.save_keras_hub_preset(model, "my-vit-keras-hub")
task = keras_hub.models.ImageClassifier.from_preset("my-vit-keras-hub")
```
"""

from __future__ import annotations

import os
import pathlib
import shutil

import keras

from keras_vit import atomic
from keras_vit import paths
from keras_vit._export import export
from keras_vit.interop.keras_hub import _keras_hub
from keras_vit.interop.keras_hub import to_keras_hub
from keras_vit.models.preprocessing import preprocessing_of

# `to_keras_hub`'s `backbone` -> the name of keras-hub's image converter.
_CONVERTERS = {
    "vit": "ViTImageConverter",
    "dinov2": "DINOV2ImageConverter",
    "dinov3": "DINOV3ImageConverter",
}


@export("keras_vit.interop.save_keras_hub_preset")
def save_keras_hub_preset(
    model: keras.Model,
    folder: str | os.PathLike,
    *,
    backbone: str = "vit",
    image_size=None,
    overwrite: bool = False,
) -> str:
    """Writes `model` as a keras-hub preset folder, with its preprocessing.

    The model is converted by `to_keras_hub(model, backbone, image_size)`
    (what it refuses, this refuses) and saved with keras-hub's
    `save_to_preset`, so that `keras_hub.models.Backbone.from_preset(folder)`
    (and, for a classifier, `keras_hub.models.ImageClassifier.from_preset`)
    loads it, and `keras_vit.from_pretrained(folder)` reads it back. The
    model's input contract becomes keras-hub's image converter (a
    classifier's preprocessor holds it too): mean, std, resize filter,
    antialiasing and crop mode. keras-hub's converter resizes the whole
    image (or its central crop of the target's aspect ratio) to the model's
    size: timm's `crop_pct` (`crop_fraction < 1`) has no counterpart there
    and is not kept, as keras-hub's own timm loader drops it too; nor are
    class names, which keras-hub's classifiers do not store.

    The folder is written whole or not at all (a hidden staging folder
    renamed into place, as `keras_vit.save_pretrained`).

    Args:
        model: A keras_vit model `to_keras_hub` converts.
        folder: A local folder; must not exist unless `overwrite`.
        backbone: `"vit"`, `"dinov2"` or `"dinov3"`, as `to_keras_hub`.
        image_size: `backbone="dinov3"` only, as `to_keras_hub`.
        overwrite: Replace an existing folder (all of it: no file of the
            old preset is left).

    Returns:
        The folder's path.

    Raises:
        ImportError: keras-hub is not installed.
        FileExistsError: `folder` exists and `overwrite` is `False`.
        ValueError: a feature the keras-hub architecture lacks, or a URL
            (keras-hub saves presets to local folders).

    Example:

    ```python
    model = keras_vit.ViT("test/8", image_size=32, num_classes=3)
    keras_vit.interop.save_keras_hub_preset(model, "tiny-preset")
    task = keras_hub.models.ImageClassifier.from_preset("tiny-preset")
    ```
    """
    keras_hub = _keras_hub()
    folder = os.fspath(folder)
    if paths.is_url(folder):
        raise ValueError(
            f"{folder!r} is a URL; keras-hub saves presets to local folders."
        )
    target = pathlib.Path(os.path.abspath(folder))
    if os.path.lexists(target) and not overwrite:
        raise FileExistsError(f"{folder!r} exists; pass overwrite=True to replace it.")
    hub_model = to_keras_hub(model, backbone=backbone, image_size=image_size)
    converter = image_converter(model, hub_model, backbone)
    is_task = isinstance(hub_model, keras_hub.models.ImageClassifier)
    if is_task:
        hub_model.preprocessor = keras_hub.models.ViTImageClassifierPreprocessor(
            image_converter=converter
        )
    with atomic.new_folders_removed_on_error(target.parent):
        staging = atomic.staging_dir(target)
        try:
            hub_model.save_to_preset(str(staging))
            if not is_task:  # a task's preprocessor wrote it already
                converter.save_to_preset(str(staging))
            atomic.finish(staging)
            atomic.move_into_place(staging, target, overwrite)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return folder


def image_converter(model: keras.Model, hub_model, backbone: str = "vit"):
    """keras-hub's image converter of `model.preprocessing`, at the image
    size of `hub_model` (a keras-hub backbone or classifier).

    Example:

    ```python
    converter = image_converter(model, keras_vit.interop.to_keras_hub(model))
    ```
    """
    keras_hub = _keras_hub()
    prep = preprocessing_of(model)
    is_task = isinstance(hub_model, keras_hub.models.ImageClassifier)
    hub_backbone = hub_model.backbone if is_task else hub_model
    height, width = (int(s) for s in hub_backbone.image_shape[:2])
    converter_cls = getattr(keras_hub.layers, _CONVERTERS[backbone])
    return converter_cls(
        image_size=(height, width),
        scale=list(prep.scale),  # pixels / 255 / std
        offset=list(prep.offset),  # -mean / std
        crop_to_aspect_ratio=prep.crop_mode == "center",
        interpolation=prep.interpolation,
        antialias=bool(prep.antialias),
    )
