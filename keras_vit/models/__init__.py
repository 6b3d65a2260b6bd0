"""ViT models: the variant table, the encoder options, the generic
constructor, named sizes and families, the CNN family, layouts.

Names are imported on first use (`import keras_vit.models.options` loads no
framework).
"""

from keras_vit import _imports

_EXPORTS = {
    "AlterNet": "keras_vit.models.cnn.alternet",
    "AlterNet18": "keras_vit.models.cnn.alternet",
    "AlterNet50": "keras_vit.models.cnn.alternet",
    "ALTERNETS": "keras_vit.models.cnn.variants",
    "BACKBONES": "keras_vit.models.variants",
    "cnn_feature_extractor": "keras_vit.models.features",
    "CNNLayout": "keras_vit.models.cnn.layout",
    "CNNVariant": "keras_vit.models.cnn.variants",
    "custom_spec": "keras_vit.models.variants",
    "DeiT3_B16": "keras_vit.models.families",
    "DeiT3_L16": "keras_vit.models.families",
    "DeiT3_S16": "keras_vit.models.families",
    "DINOv2_B14": "keras_vit.models.families",
    "DINOv2_g14": "keras_vit.models.families",
    "DINOv2_L14": "keras_vit.models.families",
    "DINOv2_S14": "keras_vit.models.families",
    "EncoderOptions": "keras_vit.models.options",
    "FAMILIES": "keras_vit.models.options",
    "Family": "keras_vit.models.options",
    "family_model": "keras_vit.models.families",
    "FAMILY_MODELS": "keras_vit.models.families",
    "feature_extractor": "keras_vit.models.features",
    "layout": "keras_vit.models.layout",
    "LayoutError": "keras_vit.models.layout",
    "ModelLayout": "keras_vit.models.layout",
    "masked_patch": "keras_vit.models.masked_patch",
    "masked_patch_model": "keras_vit.models.masked_patch",
    "ModelSpec": "keras_vit.models.variants",
    "NAMED_MODELS": "keras_vit.models.vit",
    "options": "keras_vit.models.options",
    "OptimizerFirstModel": "keras_vit.models.functional",
    "parse_variant": "keras_vit.models.variants",
    "PREACT_RESNETS": "keras_vit.models.cnn.variants",
    "PreActResNet": "keras_vit.models.cnn.preact_resnet",
    "PreActResNet18": "keras_vit.models.cnn.preact_resnet",
    "PreActResNet50": "keras_vit.models.cnn.preact_resnet",
    "R26_ViT_B32": "keras_vit.models.vit",
    "R26_ViT_S32": "keras_vit.models.vit",
    "R50_ViT_B16": "keras_vit.models.vit",
    "R50_ViT_L32": "keras_vit.models.vit",
    "ResNetSpec": "keras_vit.models.variants",
    "SigLIP_B16": "keras_vit.models.families",
    "SigLIP_So400m14": "keras_vit.models.families",
    "Variant": "keras_vit.models.variants",
    "VARIANTS": "keras_vit.models.variants",
    "ViT": "keras_vit.models.vit",
    "ViT_B16": "keras_vit.models.vit",
    "ViT_B32": "keras_vit.models.vit",
    "ViT_B8": "keras_vit.models.vit",
    "ViT_H14": "keras_vit.models.vit",
    "ViT_L16": "keras_vit.models.vit",
    "ViT_L32": "keras_vit.models.vit",
    "ViT_S16": "keras_vit.models.vit",
    "ViT_S32": "keras_vit.models.vit",
    "ViT_Ti16": "keras_vit.models.vit",
    "ViTLayout": "keras_vit.models.layout",
    "with_image_size": "keras_vit.models.resize",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _imports.lazy_exports(__name__, _EXPORTS)
