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
  variance of every feature map by depth, for a ViT or any model whose
  layout names its feature maps (`FeatureMaps`; e.g. the convolutional
  networks of `keras_vit.parkkim`).
- `batch_slices`, `attention_distance_sums`: the pieces the analyses are
  made of, for a plug-in's own (a windowed attention's distances).

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

import lazy_loader

from keras_vit._export import moved

__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
__getattr__ = moved(
    __getattr__,
    __name__,
    {"model_family": "keras_vit.models.architectures.architecture_of"},
)
