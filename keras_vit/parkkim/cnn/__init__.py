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

import lazy_loader

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
