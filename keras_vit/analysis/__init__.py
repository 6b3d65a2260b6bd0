"""Inspecting a trained ViT: the paper's figures and Park & Kim's analyses.

Every function takes arrays or a model and returns NumPy arrays; drawing is
kept apart in `keras_vit.analysis.plotting` (needs matplotlib, the `[viz]`
extra). `python -m recipes.analyze` writes all figures at once.

- `attention_weights`, `iter_attention_weights`: attention maps of selected
  blocks.
- `attention_rollout`, `attention_rollout_maps`, `to_image_space`,
  `overlay`: attention rollout (ViT paper, Appendix D).
- `mean_attention_distance`, `attention_distances`: mean attention distance
  per head, in pixels (Fig. 7 right).
- `position_embedding_similarity`, `similarity_grid`: Fig. 7 centre.
- `embedding_filters`, `components_as_rgb`: Fig. 7 left.
- `feature_map_frequencies`, `high_frequency_log_amplitude`: Fourier
  analysis of feature maps (Park & Kim).
- `hessian_eigenvalues`: top Hessian eigenvalues (Park & Kim; uses
  TensorFlow).
- `noise_robustness`, `band_limited_noise`: accuracy under frequency-band
  noise (Park & Kim).

Example:

```python
from keras_vit import analysis

distances = analysis.attention_distances(model, images)  # (depth, heads)
```
"""

from keras_vit.analysis._walk import token_layout
from keras_vit.analysis.attention import attention_weights, iter_attention_weights
from keras_vit.analysis.distance import (
    attention_distances,
    mean_attention_distance,
    patch_distances,
)
from keras_vit.analysis.filters import (
    PrincipalComponents,
    components_as_rgb,
    embedding_filters,
)
from keras_vit.analysis.fourier import (
    feature_map_frequencies,
    high_frequency_log_amplitude,
    log_amplitude_spectrum,
    relative_log_amplitude,
)
from keras_vit.analysis.hessian import hessian_eigenvalues
from keras_vit.analysis.noise import (
    band_limited_noise,
    frequency_bands,
    noise_robustness,
)
from keras_vit.analysis.position_similarity import (
    position_embedding_similarity,
    similarity_grid,
)
from keras_vit.analysis.rollout import (
    attention_rollout,
    attention_rollout_maps,
    output_token_map,
    overlay,
    to_image_space,
)

__all__ = [
    "PrincipalComponents",
    "attention_distances",
    "attention_rollout",
    "attention_rollout_maps",
    "attention_weights",
    "band_limited_noise",
    "components_as_rgb",
    "embedding_filters",
    "feature_map_frequencies",
    "frequency_bands",
    "hessian_eigenvalues",
    "high_frequency_log_amplitude",
    "iter_attention_weights",
    "log_amplitude_spectrum",
    "mean_attention_distance",
    "noise_robustness",
    "output_token_map",
    "overlay",
    "patch_distances",
    "position_embedding_similarity",
    "relative_log_amplitude",
    "similarity_grid",
    "to_image_space",
    "token_layout",
]
