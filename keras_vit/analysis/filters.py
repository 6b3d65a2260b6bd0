"""Principal components of the patch-embedding filters (ViT paper, Fig. 7 left).

The patch embedding `E` maps each flattened `P x P x C` patch to `D`
numbers: it holds `D` filters of `P * P * C` weights. Their principal
components (over the `D` filters, after subtracting the mean filter) are the
directions in patch space the embedding is most sensitive to; drawn as
`P x P` RGB patches they look like basis functions for fine image structure.
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np

from keras_vit._export import export
from keras_vit.analysis._walk import to_numpy
from keras_vit.models.layout import ViTLayout


@export("keras_vit.analysis.PrincipalComponents")
@dataclasses.dataclass(frozen=True)
class PrincipalComponents:
    """Principal components of a patch-embedding kernel.

    Attributes:
        components: `(k, P, P, C)` unit-norm components, largest variance
            first. Signs are fixed so that each component's entry of largest
            magnitude is positive.
        explained_variance: `(k,)` variance of the filters along each one.
        explained_variance_ratio: `(k,)` share of the total variance.
    """

    components: np.ndarray
    explained_variance: np.ndarray
    explained_variance_ratio: np.ndarray


def _kernel(source) -> np.ndarray:
    if isinstance(source, keras.Model):
        source = ViTLayout.of(source).embedding.kernel
    kernel = to_numpy(source).astype("float64")
    if kernel.ndim != 4:
        raise ValueError(
            "Expected a patch-embedding kernel of shape (P, P, C, D). Received: "
            f"shape {kernel.shape}"
        )
    return kernel


@export("keras_vit.analysis.embedding_filters")
def embedding_filters(source, num_components: int = 28) -> PrincipalComponents:
    """The first principal components of the patch-embedding filters.

    Args:
        source: A model built by `keras_vit.ViT` (its `embedding/kernel` is
            read), or a kernel `(P, P, C, D)` (HWIO).
        num_components: How many components. Defaults to 28, as in the
            paper's figure; at most `min(D - 1, P * P * C)` exist (fewer are
            returned when the kernel has fewer).

    Returns:
        A `PrincipalComponents`.

    Example:

    ```python
    pcs = embedding_filters(keras_vit.ViT_B16())
    pcs.components.shape  # (28, 16, 16, 3)
    rgb = components_as_rgb(pcs.components)  # (28, 16, 16, 3) in [0, 1]
    ```
    """
    if int(num_components) < 1:
        raise ValueError(
            f"`num_components` must be >= 1. Received: num_components={num_components}"
        )
    kernel = _kernel(source)
    patch_h, patch_w, channels, dim = kernel.shape
    if dim < 2:
        raise ValueError(f"Need at least 2 filters for a PCA. Received: D={dim}")
    filters = kernel.reshape(-1, dim).T  # (D, P*P*C): one row per filter
    centered = filters - filters.mean(axis=0)
    _, singular, basis = np.linalg.svd(centered, full_matrices=False)
    k = min(int(num_components), dim - 1, basis.shape[0])
    basis = basis[:k]  # (k, P*P*C)
    largest = np.take_along_axis(basis, np.abs(basis).argmax(axis=1)[:, None], axis=1)
    basis = basis * np.sign(largest)
    variance = singular**2 / (dim - 1)
    return PrincipalComponents(
        components=basis.reshape(k, patch_h, patch_w, channels),
        explained_variance=variance[:k],
        explained_variance_ratio=variance[:k] / variance.sum(),
    )


@export("keras_vit.analysis.components_as_rgb")
def components_as_rgb(components) -> np.ndarray:
    """Scales each component to `[0, 1]` for display as an RGB patch.

    Args:
        components: `(k, P, P, C)` with `C` 1 or 3 (a single channel is
            repeated to grey).

    Returns:
        `(k, P, P, 3)` float64 in `[0, 1]` (each component min-max scaled).
    """
    components = np.asarray(components, dtype="float64")
    if components.ndim != 4 or components.shape[-1] not in (1, 3):
        raise ValueError(
            "Only 1- or 3-channel patches can be drawn as RGB (a hybrid model's "
            "embedding sees CNN features, not pixels). Received: shape "
            f"{components.shape}"
        )
    low = components.min(axis=(1, 2, 3), keepdims=True)
    span = components.max(axis=(1, 2, 3), keepdims=True) - low
    scaled = (components - low) / np.where(span > 0, span, 1.0)
    if scaled.shape[-1] == 1:
        scaled = np.repeat(scaled, 3, axis=-1)
    return scaled
