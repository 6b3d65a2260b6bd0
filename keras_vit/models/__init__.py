"""ViT models: the variant table, the encoder options, the generic
constructor, the model zoo's families and their named constructors, layouts,
the registry of model architectures.

Example:

```python
from keras_vit import models

model = models.ViT("test/4", image_size=16, num_classes=3)
models.ViTLayout.of(model).depth  # 2
```
"""

import lazy_loader

from keras_vit._export import moved

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
__getattr__ = moved(
    __getattr__,
    __name__,
    {
        "families": "keras_vit.models.zoo",
        "model_family": "keras_vit.models.architectures",
    },
)
