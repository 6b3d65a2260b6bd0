"""keras_vit: the Vision Transformer in Keras 3.

`import keras_vit` is fast: each name below is imported on first use, and
the classes a saved `.keras` file names are registered as soon as Keras is
loaded (`keras_vit._imports`), so `keras.saving.load_model` works after
`import keras_vit` in either import order.

Example:

```python
import keras_vit

model = keras_vit.ViT_L16(num_classes=100)
```
"""

from keras_vit import _imports

_imports.install()

__version__ = "0.1.0"

# Public name -> the module that defines it (a subpackage or module is
# exported as itself).
_EXPORTS = {
    "AlterNet": "keras_vit.models",
    "AlterNet18": "keras_vit.models",
    "AlterNet50": "keras_vit.models",
    "ALTERNETS": "keras_vit.models",
    "analysis": "keras_vit.analysis",
    "atomic": "keras_vit.atomic",
    "BACKBONES": "keras_vit.models",
    "cnn_feature_extractor": "keras_vit.models",
    "DeiT3_B16": "keras_vit.models",
    "DeiT3_L16": "keras_vit.models",
    "DeiT3_S16": "keras_vit.models",
    "DINOv2_B14": "keras_vit.models",
    "DINOv2_g14": "keras_vit.models",
    "DINOv2_L14": "keras_vit.models",
    "DINOv2_S14": "keras_vit.models",
    "EncoderOptions": "keras_vit.models",
    "FAMILIES": "keras_vit.models",
    "family_model": "keras_vit.models",
    "FAMILY_MODELS": "keras_vit.models",
    "feature_extractor": "keras_vit.models",
    "finetune": "keras_vit.finetune",
    "imagenet": "keras_vit.imagenet",
    "interop": "keras_vit.interop",
    "layers": "keras_vit.layers",
    "load_weights": "keras_vit.weights",
    "NAMED_MODELS": "keras_vit.models",
    "parse_variant": "keras_vit.models",
    "PREACT_RESNETS": "keras_vit.models",
    "PreActResNet": "keras_vit.models",
    "PreActResNet18": "keras_vit.models",
    "PreActResNet50": "keras_vit.models",
    "R26_ViT_B32": "keras_vit.models",
    "R26_ViT_S32": "keras_vit.models",
    "R50_ViT_B16": "keras_vit.models",
    "R50_ViT_L32": "keras_vit.models",
    "resample_patch_embedding": "keras_vit.resample",
    "resample_position_embedding": "keras_vit.resample",
    "ResNetSpec": "keras_vit.models",
    "SigLIP_B16": "keras_vit.models",
    "SigLIP_So400m14": "keras_vit.models",
    "VARIANTS": "keras_vit.models",
    "ViT": "keras_vit.models",
    "ViT_B16": "keras_vit.models",
    "ViT_B32": "keras_vit.models",
    "ViT_B8": "keras_vit.models",
    "ViT_H14": "keras_vit.models",
    "ViT_L16": "keras_vit.models",
    "ViT_L32": "keras_vit.models",
    "ViT_S16": "keras_vit.models",
    "ViT_S32": "keras_vit.models",
    "ViT_Ti16": "keras_vit.models",
    "ViTLayout": "keras_vit.models",
    "weights": "keras_vit.weights",
    "with_image_size": "keras_vit.models",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _imports.lazy_exports(__name__, _EXPORTS)
