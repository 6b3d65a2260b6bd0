"""The model zoo: one file per ViT family, registered where it is defined.

Each family's file names it, its options, input contract, constructors,
checkpoints and timm architectures (`zoo.families()` lists them; the table
of docs/models.md shows them).

A new family is one new file here (its `Family` and constructors), imported
with the others below; `registry` says what a family declares. Its constructors
are public at `keras_vit.models.<name>` (and, per `Family.exported`, at
`keras_vit.<name>`), listed in the generated `__init__.pyi` stubs.

Example:

```python
from keras_vit.models import zoo

[f.name for f in zoo.families()][:3]  # ['aimv2', 'clip', 'deit']
model = zoo.named("deit3").build("test/4", image_size=16, num_classes=3)
```
"""

import importlib
import pkgutil

import lazy_loader

# Every module here but the machinery is a family file: importing it
# registers its families (in file-name order).
for _module in pkgutil.iter_modules(__path__):
    if _module.name not in ("registry", "timm_catalog"):
        importlib.import_module(f"{__name__}.{_module.name}")

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
