"""Moved: `after` and `tied_zero` live in `keras_vit.layers.custom_grads`.

This module answers its old import path with the same functions and a
`DeprecationWarning`; it goes in a later release.
"""

from __future__ import annotations

import warnings

from keras_vit.layers.custom_grads import after
from keras_vit.layers.custom_grads import tied_zero

__all__ = ["after", "tied_zero"]

warnings.warn(
    "keras_vit.layers.recompute moved to keras_vit.layers.custom_grads; import "
    "`after` and `tied_zero` from there (the old name will be removed in a "
    "later release).",
    DeprecationWarning,
    stacklevel=2,
)
