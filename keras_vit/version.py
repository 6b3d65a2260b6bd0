"""The version of keras_vit, as `keras_vit.__version__` and in exports.

Example:

```python
from keras_vit.version import __version__
```
"""

__version__ = "0.1.0"
