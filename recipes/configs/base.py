"""Moved to `keras_vit.recipes.configs.base`; this module is the same one.

A config file written as `from recipes.configs.base import TrainConfig`
keeps working from a checkout, with a `DeprecationWarning`.
"""

import sys
import warnings

from keras_vit.recipes.configs import base as _base

warnings.warn(
    "recipes.configs.base moved to keras_vit.recipes.configs.base; import "
    "TrainConfig and the other configs from there.",
    DeprecationWarning,
    stacklevel=2,
)
sys.modules[__name__] = _base
