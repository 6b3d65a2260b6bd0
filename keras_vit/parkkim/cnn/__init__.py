"""The convolutional family of Park & Kim's comparison: post- and
pre-activation ResNets and AlterNet, one stem, one layout.

- `options.py`: `CNNOptions`, every option of a network held once (stem,
  pooling, windows, dropout, stochastic depth, head activation);
- `builder.py`: `build_cnn` (pre-activation networks), the stem, the head
  and the argument checks all share;
- `variants.py`: the rows (`RESNETS`, `PREACT_RESNETS`, `ALTERNETS`,
  `CNNVariant`);
- `layout.py`: the layer names and `CNNLayout`;
- `resnet.py`, `preact_resnet.py`, `alternet.py`: the named constructors.

Example:

```python
from keras_vit.parkkim import cnn

model = cnn.ResNet("50", num_classes=100, image_size=32, stem="cifar")
same = cnn.ResNet("50", num_classes=100, image_size=32,
                  options=cnn.CNNOptions(stem="cifar"))
```
"""

from keras_vit.parkkim.cnn.alternet import AlterNet
from keras_vit.parkkim.cnn.alternet import AlterNet18
from keras_vit.parkkim.cnn.alternet import AlterNet50
from keras_vit.parkkim.cnn.builder import build_cnn
from keras_vit.parkkim.cnn.layout import CNNLayout
from keras_vit.parkkim.cnn.options import CNNOptions
from keras_vit.parkkim.cnn.preact_resnet import PreActResNet
from keras_vit.parkkim.cnn.preact_resnet import PreActResNet18
from keras_vit.parkkim.cnn.preact_resnet import PreActResNet50
from keras_vit.parkkim.cnn.resnet import ResNet
from keras_vit.parkkim.cnn.resnet import ResNet18
from keras_vit.parkkim.cnn.resnet import ResNet50
from keras_vit.parkkim.cnn.variants import ALTERNETS
from keras_vit.parkkim.cnn.variants import PREACT_RESNETS
from keras_vit.parkkim.cnn.variants import RESNETS
from keras_vit.parkkim.cnn.variants import CNNVariant

__all__ = [
    "ALTERNETS",
    "AlterNet",
    "AlterNet18",
    "AlterNet50",
    "CNNLayout",
    "CNNOptions",
    "CNNVariant",
    "PREACT_RESNETS",
    "PreActResNet",
    "PreActResNet18",
    "PreActResNet50",
    "RESNETS",
    "ResNet",
    "ResNet18",
    "ResNet50",
    "build_cnn",
]
