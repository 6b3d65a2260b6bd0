"""The model zoo: one file per ViT family, registered where it is defined.

| family | file | constructors |
|---|---|---|
| the paper's ViT, AugReg | `vit.py` | `ViT_Ti16` ... `ViT_H14` |
| ResNet+ViT hybrids | `hybrid.py` | `R26_ViT_S32`, `R50_ViT_B16`, ... |
| DeiT, DeiT (distilled) | `deit.py` | `DeiT_S16`, `DeiTDistilled_S16`, ... |
| DeiT III | `deit3.py` | `DeiT3_S16`, `DeiT3_B16`, `DeiT3_L16` |
| DINOv2 with registers | `dinov2.py` | `DINOv2_S14` ... `DINOv2_g14` |
| SigLIP, SigLIP 2 | `siglip.py` | `SigLIP_B16`, `SigLIP_So400m14` |
| FlexiViT | `flexivit.py` | `FlexiViT_S`, `FlexiViT_B`, `FlexiViT_L` |
| DINOv3 | `dinov3.py` | `DINOv3_S16` ... `DINOv3_7B16` |
| EVA-02, EVA-02-CLIP | `eva02.py` | `EVA02_Ti14` ... `EVA02_CLIP_L14` |
| Perception Encoder | `pe.py` | `PE_Core_B16`, `PE_Lang_L14`, `PE_Spatial_B16`, ... |
| RoPE-ViT | `rope_vit.py` | `RoPEViT_B16`, `RoPEViTMixed_B16`, ... |
| CLIP image towers | `clip.py` | `CLIP_B32`, `CLIP_B16`, `CLIP_L14`, `CLIP_H14` |
| AIMv2 | `aimv2.py` | `AIMv2_L14`, `AIMv2_H14`, `AIMv2_1B14`, `AIMv2_3B14` |

A new family is one new file here (its `Family` and constructors) and one
import line below; `registry` says what a family declares. Its constructors
are public at `keras_vit.models.<name>` (and, per `Family.exported`, at
`keras_vit.<name>`), listed in the generated `__init__.pyi` stubs.

Example:

```python
from keras_vit.models import zoo

[f.name for f in zoo.families()][:3]  # ['aimv2', 'clip', 'deit']
model = zoo.named("deit3").build("test/4", image_size=16, num_classes=3)
```
"""

import lazy_loader

from keras_vit.models.zoo import aimv2  # noqa: F401  registers its families
from keras_vit.models.zoo import clip  # noqa: F401
from keras_vit.models.zoo import deit  # noqa: F401
from keras_vit.models.zoo import deit3  # noqa: F401
from keras_vit.models.zoo import dinov2  # noqa: F401
from keras_vit.models.zoo import dinov3  # noqa: F401
from keras_vit.models.zoo import eva02  # noqa: F401
from keras_vit.models.zoo import flexivit  # noqa: F401
from keras_vit.models.zoo import hybrid  # noqa: F401
from keras_vit.models.zoo import pe  # noqa: F401
from keras_vit.models.zoo import rope_vit  # noqa: F401
from keras_vit.models.zoo import siglip  # noqa: F401
from keras_vit.models.zoo import vit  # noqa: F401

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
