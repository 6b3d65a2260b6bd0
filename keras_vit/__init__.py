"""keras_vit: the Vision Transformer in Keras 3.

Example:

```python
import keras_vit

model = keras_vit.ViT_L16(num_classes=100)
```
"""

from keras_vit import _moved
from keras_vit import fewshot
from keras_vit import finetune
from keras_vit import hardware
from keras_vit import imagenet
from keras_vit import interop
from keras_vit import layers
from keras_vit import masked_patch
from keras_vit import weights
from keras_vit.models import ALTERNETS
from keras_vit.models import BACKBONES
from keras_vit.models import FAMILY_MODELS
from keras_vit.models import NAMED_MODELS
from keras_vit.models import PREACT_RESNETS
from keras_vit.models import VARIANTS
from keras_vit.models import AlterNet
from keras_vit.models import AlterNet18
from keras_vit.models import AlterNet50
from keras_vit.models import DeiT3_B16
from keras_vit.models import DeiT3_L16
from keras_vit.models import DeiT3_S16
from keras_vit.models import DINOv2_B14
from keras_vit.models import DINOv2_g14
from keras_vit.models import DINOv2_L14
from keras_vit.models import DINOv2_S14
from keras_vit.models import PreActResNet
from keras_vit.models import PreActResNet18
from keras_vit.models import PreActResNet50
from keras_vit.models import R26_ViT_B32
from keras_vit.models import R26_ViT_S32
from keras_vit.models import R50_ViT_B16
from keras_vit.models import R50_ViT_L32
from keras_vit.models import ResNetSpec
from keras_vit.models import SigLIP_B16
from keras_vit.models import SigLIP_So400m14
from keras_vit.models import ViT
from keras_vit.models import ViT_B8
from keras_vit.models import ViT_B16
from keras_vit.models import ViT_B32
from keras_vit.models import ViT_H14
from keras_vit.models import ViT_L16
from keras_vit.models import ViT_L32
from keras_vit.models import ViT_S16
from keras_vit.models import ViT_S32
from keras_vit.models import ViT_Ti16
from keras_vit.models import ViTLayout
from keras_vit.models import cnn_feature_extractor
from keras_vit.models import family_model
from keras_vit.models import feature_extractor
from keras_vit.models import parse_variant
from keras_vit.models import with_image_size
from keras_vit.resample import resample_patch_embedding
from keras_vit.resample import resample_position_embedding

_moved.install()

__version__ = "0.1.0"

__all__ = [
    "AlterNet",
    "AlterNet18",
    "AlterNet50",
    "ALTERNETS",
    "BACKBONES",
    "cnn_feature_extractor",
    "DeiT3_B16",
    "DeiT3_L16",
    "DeiT3_S16",
    "DINOv2_B14",
    "DINOv2_g14",
    "DINOv2_L14",
    "DINOv2_S14",
    "family_model",
    "FAMILY_MODELS",
    "feature_extractor",
    "fewshot",
    "finetune",
    "hardware",
    "imagenet",
    "interop",
    "layers",
    "masked_patch",
    "NAMED_MODELS",
    "parse_variant",
    "PREACT_RESNETS",
    "PreActResNet",
    "PreActResNet18",
    "PreActResNet50",
    "R26_ViT_B32",
    "R26_ViT_S32",
    "R50_ViT_B16",
    "R50_ViT_L32",
    "resample_patch_embedding",
    "resample_position_embedding",
    "ResNetSpec",
    "SigLIP_B16",
    "SigLIP_So400m14",
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
    "weights",
    "with_image_size",
]
