"""The version of keras_vit, as `keras_vit.__version__` and in exports.

Example:

```python
from keras_vit.version import __version__
```
"""

from keras_vit._export import export

__version__ = "0.1.0"
export("keras_vit.__version__").constant(__name__, "__version__")
