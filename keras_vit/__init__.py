"""keras_vit: the Vision Transformer in Keras 3.

`import keras_vit` imports the whole library (TensorFlow included): every
name below and every subpackage (`keras_vit.models`, `keras_vit.weights`,
`keras_vit.export`, `keras_vit.training`, `keras_vit.data`,
`keras_vit.analysis`, ...) is an attribute, and every class a saved
`.keras` file can name is registered with Keras, so `keras.saving.load_model`
works after `import keras_vit`, whichever of Keras and keras_vit is imported
first. TensorFlow's start-up notes are hidden (`keras_vit._tensorflow`;
`KERAS_VIT_VERBOSE=1` shows them).

Example:

```python
import keras_vit

model = keras_vit.ViT_L16(num_classes=100)
dinov2 = keras_vit.models.DINOv2_S14()
```
"""

# First: TensorFlow, imported without its start-up notes.
from keras_vit import _tensorflow  # noqa: F401  isort: skip

from keras_vit import analysis
from keras_vit import atomic
from keras_vit import data
from keras_vit import export
from keras_vit import finetune
from keras_vit import imagenet
from keras_vit import interop
from keras_vit import layers
from keras_vit import models
from keras_vit import parkkim
from keras_vit import recipes
from keras_vit import resample
from keras_vit import training
from keras_vit import weights
from keras_vit.inference import predict
from keras_vit.models import BACKBONES
from keras_vit.models import FAMILIES
from keras_vit.models import FAMILY_MODELS
from keras_vit.models import NAMED_MODELS
from keras_vit.models import VARIANTS
from keras_vit.models import DeiT3_B16
from keras_vit.models import DeiT3_L16
from keras_vit.models import DeiT3_S16
from keras_vit.models import DINOv2_B14
from keras_vit.models import DINOv2_g14
from keras_vit.models import DINOv2_L14
from keras_vit.models import DINOv2_S14
from keras_vit.models import EncoderOptions
from keras_vit.models import Preprocessing
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
from keras_vit.models import family_model
from keras_vit.models import feature_extractor
from keras_vit.models import parse_variant
from keras_vit.models import with_image_size
from keras_vit.parkkim import ALTERNETS
from keras_vit.parkkim import PREACT_RESNETS
from keras_vit.parkkim import AlterNet
from keras_vit.parkkim import AlterNet18
from keras_vit.parkkim import AlterNet50
from keras_vit.parkkim import PreActResNet
from keras_vit.parkkim import PreActResNet18
from keras_vit.parkkim import PreActResNet50
from keras_vit.pretrained import from_pretrained
from keras_vit.pretrained import push_to_hub
from keras_vit.pretrained import save_pretrained
from keras_vit.resample import resample_patch_embedding
from keras_vit.resample import resample_position_embedding
from keras_vit.version import __version__ as __version__
from keras_vit.weights import load_weights

__all__ = [
    "AlterNet",
    "AlterNet18",
    "AlterNet50",
    "ALTERNETS",
    "analysis",
    "atomic",
    "BACKBONES",
    "data",
    "DeiT3_B16",
    "DeiT3_L16",
    "DeiT3_S16",
    "DINOv2_B14",
    "DINOv2_g14",
    "DINOv2_L14",
    "DINOv2_S14",
    "EncoderOptions",
    "export",
    "FAMILIES",
    "family_model",
    "FAMILY_MODELS",
    "feature_extractor",
    "finetune",
    "from_pretrained",
    "imagenet",
    "interop",
    "layers",
    "load_weights",
    "models",
    "parkkim",
    "NAMED_MODELS",
    "parse_variant",
    "predict",
    "PREACT_RESNETS",
    "PreActResNet",
    "PreActResNet18",
    "PreActResNet50",
    "Preprocessing",
    "push_to_hub",
    "R26_ViT_B32",
    "R26_ViT_S32",
    "R50_ViT_B16",
    "R50_ViT_L32",
    "recipes",
    "resample",
    "resample_patch_embedding",
    "resample_position_embedding",
    "save_pretrained",
    "ResNetSpec",
    "SigLIP_B16",
    "SigLIP_So400m14",
    "training",
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
