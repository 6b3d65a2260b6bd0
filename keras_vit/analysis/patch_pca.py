"""The first three principal components of patch features, drawn as RGB.

Self-supervised ViTs (DINO, DINOv2, DINOv3) give each patch a feature
vector whose principal directions follow object parts: projected on the
first three principal components, mapped to red, green and blue, the patch
grid of a photo becomes a picture of its parts, the figure of the DINO
papers. `feature_pca` computes it for any keras_vit ViT at any image size:
the patch tokens of the last block (after the final norm, as the papers
take them), the prefix tokens (class, registers) left out, one principal
component analysis over the patches of every image given, and each
component scaled to `[0, 1]` (its 1st to 99th percentile). With
`foreground`, the patches whose first component falls below a threshold
(the background, for DINO features) are set to black and the components
recomputed on the others, as the DINOv2 paper's figures do.

Example:

```python
model = keras_vit.models.DINOv3_S16(weights="dinov3_lvd1689m")
rgb = keras_vit.analysis.feature_pca(model, images)  # (B, h, w, 3) in [0, 1]
```
"""

from __future__ import annotations

import dataclasses

import keras
import numpy as np

from keras_vit._export import export
from keras_vit.analysis._walk import to_numpy
from keras_vit.models.features import feature_extractor


@export("keras_vit.analysis.FeaturePCA")
@dataclasses.dataclass(frozen=True)
class FeaturePCA:
    """Patch features projected on their first three principal components.

    Attributes:
        rgb: `(B, h, w, 3)` in `[0, 1]`: the components as red, green, blue.
        components: `(3, D)` the principal directions, unit norm.
        explained_variance_ratio: `(3,)` the features' variance they hold.
        mask: `(B, h, w)` the patches kept (all, without `foreground`).
    """

    rgb: np.ndarray
    components: np.ndarray
    explained_variance_ratio: np.ndarray
    mask: np.ndarray


def patch_features(model: keras.Model, images) -> np.ndarray:
    """The last block's patch features `(B, h, w, D)`, normalised by the
    final norm, prefix tokens left out (any image size a dynamic model takes;
    a fixed-size model's own)."""
    extractor = feature_extractor(
        model, blocks=[-1], include_pooled=False, include_tokens=False,
        spatial=True, norm=True,
    )  # fmt: skip
    outputs = extractor(np.asarray(images, dtype="float32"))
    return to_numpy(next(iter(outputs.values())))  # (B, h, w, D)


@export("keras_vit.analysis.feature_pca")
def feature_pca(
    model: keras.Model,
    images,
    *,
    foreground: float | None = None,
    details: bool = False,
):
    """The first three principal components of `images`' patch features.

    Args:
        model: A ViT (`keras_vit.ViT`, a zoo model, a loaded `.keras`).
        images: `(B, H, W, C)` inputs as the model takes them (normalised
            by its contract: `keras_vit.predict`'s preprocessing, or
            `model.preprocessing`), any size a dynamic model takes.
        foreground: Keep the patches whose first component is at least this
            (on its `[0, 1]` scale) and recompute the components on them;
            the others are black. `None` (default) keeps every patch.
        details: Return a `FeaturePCA` instead of the `rgb` array.

    Returns:
        `(B, h, w, 3)` in `[0, 1]`, or a `FeaturePCA`.

    Raises:
        ValueError: fewer than three patches, or `foreground` out of [0, 1].

    Example:

    ```python
    rgb = keras_vit.analysis.feature_pca(model, images, foreground=0.5)
    ```
    """
    if foreground is not None and not 0.0 <= float(foreground) <= 1.0:
        raise ValueError(f"`foreground` must be in [0, 1]. Received: {foreground}")
    features = patch_features(model, images).astype(np.float64)  # (B, h, w, D)
    batch, height, width, dim = features.shape
    flat = features.reshape(-1, dim)  # (B*h*w, D)
    if len(flat) < 3:
        raise ValueError(f"feature_pca needs at least 3 patches; got {len(flat)}.")
    mask = np.ones(len(flat), dtype=bool)
    projected, components, ratio = _project(flat, mask)
    if foreground is not None:
        mask = _scaled(projected[:, 0], mask) >= float(foreground)
        if mask.sum() >= 3:
            projected, components, ratio = _project(flat, mask)
    rgb = np.stack([_scaled(projected[:, i], mask) for i in range(3)], axis=-1)
    rgb[~mask] = 0.0
    rgb = rgb.reshape(batch, height, width, 3).astype(np.float32)
    result = FeaturePCA(
        rgb=rgb,
        components=components.astype(np.float32),
        explained_variance_ratio=ratio.astype(np.float32),
        mask=mask.reshape(batch, height, width),
    )
    return result if details else result.rgb


def _project(flat: np.ndarray, mask: np.ndarray):
    """Every row projected on the first three principal directions of the
    rows in `mask` (signs fixed: each direction's largest entry positive)."""
    kept = flat[mask]
    mean = kept.mean(axis=0)
    _, singular, vectors = np.linalg.svd(kept - mean, full_matrices=False)
    components = vectors[:3]  # (3, D)
    signs = np.sign(components[np.arange(3), np.abs(components).argmax(axis=1)])
    components = components * signs[:, None]
    variance = singular**2
    ratio = variance[:3] / max(variance.sum(), 1e-30)
    return (flat - mean) @ components.T, components, ratio  # (N, 3)


def _scaled(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """`values` mapped to `[0, 1]` by the 1st and 99th percentile of those
    in `mask` (clipped)."""
    low, high = np.percentile(values[mask], [1, 99])
    return np.clip((values - low) / max(high - low, 1e-12), 0.0, 1.0)
