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
  variance of every feature map by depth, for any model family whose layout
  names its feature maps: a ViT, or the CNNs and AlterNet of
  `keras_vit.parkkim` alike (`FeatureMaps`, `model_family`).

Park & Kim's analyses default to the authors' definitions (their code,
xxxnell/how-do-vits-work); alternative definitions are available by name:
`frequency="nyquist"`, `definition="all_values"` / `variance="all_values"`,
`protocol="equal_energy"` (see docs/parkkim.md).

Any classifier works with `hessian_eigenvalues` and `noise_robustness`.
The comparison itself (the CNNs, AlterNet, the claims and their report)
is the `keras_vit.parkkim` wing, which builds on these analyses.

Example:

```python
from keras_vit import analysis

distances = analysis.attention_distances(model, images)  # (depth, heads)
```
"""

from keras_vit.analysis import fewshot
from keras_vit.analysis import plotting
from keras_vit.analysis._maps import FeatureMaps
from keras_vit.analysis._maps import model_family
from keras_vit.analysis._walk import token_layout
from keras_vit.analysis.attention import attention_weights
from keras_vit.analysis.attention import iter_attention_weights
from keras_vit.analysis.depth import depth_statistics
from keras_vit.analysis.depth import map_variance
from keras_vit.analysis.distance import attention_distances
from keras_vit.analysis.distance import mean_attention_distance
from keras_vit.analysis.distance import patch_distances
from keras_vit.analysis.filters import PrincipalComponents
from keras_vit.analysis.filters import components_as_rgb
from keras_vit.analysis.filters import embedding_filters
from keras_vit.analysis.fourier import diagonal_frequencies
from keras_vit.analysis.fourier import feature_map_frequencies
from keras_vit.analysis.fourier import high_frequency_log_amplitude
from keras_vit.analysis.fourier import log_amplitude_spectrum
from keras_vit.analysis.fourier import relative_log_amplitude
from keras_vit.analysis.hessian import hessian_eigenvalues
from keras_vit.analysis.hessian import hessian_spectrum
from keras_vit.analysis.hessian import l2_term
from keras_vit.analysis.landscape import filter_normalized_directions
from keras_vit.analysis.landscape import loss_landscape
from keras_vit.analysis.landscape import read_landscape_csv
from keras_vit.analysis.landscape import write_landscape_csv
from keras_vit.analysis.noise import band_limited_noise
from keras_vit.analysis.noise import frequency_bands
from keras_vit.analysis.noise import noise_robustness
from keras_vit.analysis.noise import sign_band_noise
from keras_vit.analysis.noise import square_annulus_mask
from keras_vit.analysis.position_similarity import position_embedding_similarity
from keras_vit.analysis.position_similarity import similarity_grid
from keras_vit.analysis.rollout import attention_rollout
from keras_vit.analysis.rollout import attention_rollout_maps
from keras_vit.analysis.rollout import output_token_map
from keras_vit.analysis.rollout import overlay
from keras_vit.analysis.rollout import to_image_space

__all__ = [
    "attention_distances",
    "attention_rollout",
    "attention_rollout_maps",
    "attention_weights",
    "band_limited_noise",
    "components_as_rgb",
    "depth_statistics",
    "diagonal_frequencies",
    "embedding_filters",
    "feature_map_frequencies",
    "FeatureMaps",
    "fewshot",
    "filter_normalized_directions",
    "frequency_bands",
    "hessian_eigenvalues",
    "hessian_spectrum",
    "high_frequency_log_amplitude",
    "iter_attention_weights",
    "l2_term",
    "log_amplitude_spectrum",
    "loss_landscape",
    "map_variance",
    "mean_attention_distance",
    "model_family",
    "noise_robustness",
    "output_token_map",
    "overlay",
    "patch_distances",
    "plotting",
    "position_embedding_similarity",
    "PrincipalComponents",
    "read_landscape_csv",
    "relative_log_amplitude",
    "sign_band_noise",
    "similarity_grid",
    "square_annulus_mask",
    "to_image_space",
    "token_layout",
    "write_landscape_csv",
]
