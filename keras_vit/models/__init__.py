"""ViT models: the variant table, the generic constructor and named sizes."""

from keras_vit.models import layout
from keras_vit.models.alternet import AlterNet
from keras_vit.models.alternet import AlterNet18
from keras_vit.models.alternet import AlterNet50
from keras_vit.models.cnn import cnn_feature_extractor
from keras_vit.models.cnn_layout import CNNLayout
from keras_vit.models.cnn_variants import ALTERNETS
from keras_vit.models.cnn_variants import PREACT_RESNETS
from keras_vit.models.cnn_variants import CNNVariant
from keras_vit.models.families import FAMILY_MODELS
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
from keras_vit.models.layout import LayoutError
from keras_vit.models.layout import ViTLayout
from keras_vit.models.preact_resnet import PreActResNet
from keras_vit.models.preact_resnet import PreActResNet18
from keras_vit.models.preact_resnet import PreActResNet50
from keras_vit.models.resize import with_image_size
from keras_vit.models.variants import BACKBONES
from keras_vit.models.variants import FAMILIES
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
    "ALTERNETS",
    "AlterNet",
    "AlterNet18",
    "AlterNet50",
    "CNNLayout",
    "CNNVariant",
    "cnn_feature_extractor",
    "custom_spec",
    "PREACT_RESNETS",
    "PreActResNet",
    "PreActResNet18",
    "PreActResNet50",
    "BACKBONES",
    "DeiT3_B16",
    "DeiT3_L16",
    "DeiT3_S16",
    "DINOv2_B14",
    "DINOv2_g14",
    "DINOv2_L14",
    "DINOv2_S14",
    "FAMILIES",
    "FAMILY_MODELS",
    "family_model",
    "SigLIP_B16",
    "SigLIP_So400m14",
    "feature_extractor",
    "layout",
    "LayoutError",
    "ModelSpec",
    "NAMED_MODELS",
    "parse_variant",
    "R26_ViT_B32",
    "R26_ViT_S32",
    "R50_ViT_B16",
    "R50_ViT_L32",
    "ResNetSpec",
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
