"""ViT models: the variant table, the encoder options, the generic
constructor, named sizes and families, layouts, the model-family registry.

Example:

```python
from keras_vit import models

model = models.ViT("test/4", image_size=16, num_classes=3)
models.ViTLayout.of(model).depth  # 2
```
"""

from keras_vit.models import layout
from keras_vit.models import masked_patch
from keras_vit.models import options
from keras_vit.models.families import DeiT3_B16
from keras_vit.models.families import DeiT3_L16
from keras_vit.models.families import DeiT3_S16
from keras_vit.models.families import DINOv2_B14
from keras_vit.models.families import DINOv2_g14
from keras_vit.models.families import DINOv2_L14
from keras_vit.models.families import DINOv2_S14
from keras_vit.models.families import SigLIP_B16
from keras_vit.models.families import SigLIP_So400m14
from keras_vit.models.families import family_model
from keras_vit.models.features import feature_extractor
from keras_vit.models.functional import OptimizerFirstModel
from keras_vit.models.layout import LayoutError
from keras_vit.models.layout import ModelLayout
from keras_vit.models.layout import ViTLayout
from keras_vit.models.masked_patch import masked_patch_model
from keras_vit.models.options import FAMILIES
from keras_vit.models.options import FAMILY_MODELS
from keras_vit.models.options import EncoderOptions
from keras_vit.models.options import Family
from keras_vit.models.preprocessing import IMAGENET_MEAN
from keras_vit.models.preprocessing import IMAGENET_STD
from keras_vit.models.preprocessing import INCEPTION_MEAN
from keras_vit.models.preprocessing import INCEPTION_STD
from keras_vit.models.preprocessing import Preprocessing
from keras_vit.models.preprocessing import preprocessing_of
from keras_vit.models.resize import with_image_size
from keras_vit.models.variants import BACKBONES
from keras_vit.models.variants import VARIANTS
from keras_vit.models.variants import ModelSpec
from keras_vit.models.variants import ResNetSpec
from keras_vit.models.variants import Variant
from keras_vit.models.variants import custom_spec
from keras_vit.models.variants import parse_variant
from keras_vit.models.vit import NAMED_MODELS
from keras_vit.models.vit import R26_ViT_B32
from keras_vit.models.vit import R26_ViT_S32
from keras_vit.models.vit import R50_ViT_B16
from keras_vit.models.vit import R50_ViT_L32
from keras_vit.models.vit import ViT
from keras_vit.models.vit import ViT_B8
from keras_vit.models.vit import ViT_B16
from keras_vit.models.vit import ViT_B32
from keras_vit.models.vit import ViT_H14
from keras_vit.models.vit import ViT_L16
from keras_vit.models.vit import ViT_L32
from keras_vit.models.vit import ViT_S16
from keras_vit.models.vit import ViT_S32
from keras_vit.models.vit import ViT_Ti16

__all__ = [
    "BACKBONES",
    "custom_spec",
    "DeiT3_B16",
    "DeiT3_L16",
    "DeiT3_S16",
    "DINOv2_B14",
    "DINOv2_g14",
    "DINOv2_L14",
    "DINOv2_S14",
    "EncoderOptions",
    "FAMILIES",
    "Family",
    "family_model",
    "FAMILY_MODELS",
    "feature_extractor",
    "layout",
    "LayoutError",
    "masked_patch",
    "masked_patch_model",
    "ModelLayout",
    "ModelSpec",
    "NAMED_MODELS",
    "OptimizerFirstModel",
    "options",
    "parse_variant",
    "Preprocessing",
    "preprocessing_of",
    "IMAGENET_MEAN",
    "IMAGENET_STD",
    "INCEPTION_MEAN",
    "INCEPTION_STD",
    "R26_ViT_B32",
    "R26_ViT_S32",
    "R50_ViT_B16",
    "R50_ViT_L32",
    "ResNetSpec",
    "SigLIP_B16",
    "SigLIP_So400m14",
    "Variant",
    "VARIANTS",
    "ViT",
    "ViT_B16",
    "ViT_B32",
    "ViT_B8",
    "ViT_H14",
    "ViT_L16",
    "ViT_L32",
    "ViT_S16",
    "ViT_S32",
    "ViT_Ti16",
    "ViTLayout",
    "with_image_size",
]
