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
- `hessian_spectrum`, `hessian_eigenvalues`: top Hessian eigenvalues per
  batch, with the authors' protocol (training loss on augmented batches,
  L2 term) and the loss beside them (Park & Kim; uses TensorFlow).
- `noise_robustness`, `sign_band_noise`, `band_limited_noise`: accuracy
  under frequency-band noise (Park & Kim, Fig. 2b).
- `loss_landscape`, `filter_normalized_directions`, `write_landscape_csv`,
  `read_landscape_csv`: the loss on a 2-D grid of filter-normalised
  directions, as the authors' CSV (Park & Kim, Fig. 1a).
- `depth_statistics`, `map_variance`: Fourier `Δ log amplitude` and
  variance of every feature map by depth, for a ViT, a ResNet, a PreActResNet or an
  AlterNet alike (`FeatureMaps`, `model_family`).

Park & Kim's analyses default to the authors' definitions (their code,
xxxnell/how-do-vits-work); alternative definitions are available by name:
`frequency="nyquist"`, `definition="all_values"` / `variance="all_values"`,
`protocol="equal_energy"` (see docs/parkkim.md).
- `attention_distance_by_depth`, `alternet_attention_distances`,
  `window_attention_distance`: mean attention distance of a ViT's blocks or
  an AlterNet's windowed MSA blocks, in input pixels.

Any classifier works with `hessian_eigenvalues` and `noise_robustness`;
`keras_vit.analysis.plotting_compare` draws several models side by side
(`python -m recipes.compare`).

Example:

```python
from keras_vit import analysis

distances = analysis.attention_distances(model, images)  # (depth, heads)
```
"""

from keras_vit import _imports

_EXPORTS = {
    "alternet_attention_distances": "keras_vit.analysis.window_distance",
    "attention_distance_by_depth": "keras_vit.analysis.window_distance",
    "attention_distances": "keras_vit.analysis.distance",
    "attention_rollout": "keras_vit.analysis.rollout",
    "attention_rollout_maps": "keras_vit.analysis.rollout",
    "attention_weights": "keras_vit.analysis.attention",
    "band_limited_noise": "keras_vit.analysis.noise",
    "components_as_rgb": "keras_vit.analysis.filters",
    "depth_statistics": "keras_vit.analysis.depth",
    "diagonal_frequencies": "keras_vit.analysis.fourier",
    "embedding_filters": "keras_vit.analysis.filters",
    "feature_map_frequencies": "keras_vit.analysis.fourier",
    "FeatureMaps": "keras_vit.analysis._maps",
    "filter_normalized_directions": "keras_vit.analysis.landscape",
    "frequency_bands": "keras_vit.analysis.noise",
    "hessian_eigenvalues": "keras_vit.analysis.hessian",
    "hessian_spectrum": "keras_vit.analysis.hessian",
    "high_frequency_log_amplitude": "keras_vit.analysis.fourier",
    "iter_attention_weights": "keras_vit.analysis.attention",
    "l2_term": "keras_vit.analysis.hessian",
    "log_amplitude_spectrum": "keras_vit.analysis.fourier",
    "loss_landscape": "keras_vit.analysis.landscape",
    "map_variance": "keras_vit.analysis.depth",
    "mean_attention_distance": "keras_vit.analysis.distance",
    "model_family": "keras_vit.analysis._maps",
    "noise_robustness": "keras_vit.analysis.noise",
    "output_token_map": "keras_vit.analysis.rollout",
    "overlay": "keras_vit.analysis.rollout",
    "patch_distances": "keras_vit.analysis.distance",
    "position_embedding_similarity": "keras_vit.analysis.position_similarity",
    "PrincipalComponents": "keras_vit.analysis.filters",
    "read_landscape_csv": "keras_vit.analysis.landscape",
    "relative_log_amplitude": "keras_vit.analysis.fourier",
    "sign_band_noise": "keras_vit.analysis.noise",
    "similarity_grid": "keras_vit.analysis.position_similarity",
    "square_annulus_mask": "keras_vit.analysis.noise",
    "to_image_space": "keras_vit.analysis.rollout",
    "token_layout": "keras_vit.analysis._walk",
    "window_attention_distance": "keras_vit.analysis.window_distance",
    "write_landscape_csv": "keras_vit.analysis.landscape",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = _imports.lazy_exports(__name__, _EXPORTS)
