"""What one model's panel of analyses computes: `PanelSettings`.

Held apart from the panel itself (`keras_vit.parkkim.panel`, which imports
Keras) so that the comparison's configs (`keras_vit.parkkim.config`) and
`keras-vit compare --help` read it without TensorFlow;
`keras_vit.parkkim.panel.PanelSettings` is the same class.

Example:

```python
from keras_vit.parkkim.settings import PanelSettings

quick = PanelSettings(hessian_top_k=3, landscape_points=0)
```
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class PanelSettings:
    """What `model_panel` computes and how much.

    `images`, `hessian_batch_size` and `landscape_seeds` size what the
    caller passes (`keras-vit compare`: the test images, the batches of the
    training stream, the seeds given `landscape=True`).

    Attributes:
        images: Test images of the Fourier, variance and distance
            analyses (the first ones of the test split).
        noise_images: Test images of the noise analysis (the noise
            claim's n); `None` for the whole test split. Every model is
            measured on the same images, so the noise claim's error is
            paired, image by image.
        hessian_batches: Augmented training batches whose Hessians are
            taken; `None` for every batch of the stream (the authors').
        hessian_batch_size: Images per Hessian (and landscape) batch.
        hessian_top_k: Eigenvalues per batch (the authors': 5).
        hessian_iterations: Power iterations per eigenvalue, at most (the
            authors' PyHessian: 100).
        hessian_l2: The Hessian's L2 term: `"squared"` (default; `wd / 2
            * sum ||W||²`, the coupled weight decay PyHessian's
            `weight_decay` adds, which shifts every eigenvalue by `wd`) or
            `"norm"` (`wd * sum ||W||`, the authors' `ops/norm.py`, whose
            curvature `wd / ||W||` lets one tensor of round-off norm and zero
            loss gradient set the top eigenvalue; docs/parkkim.md).
        clean_hessian: Also take the clean-data column (hard labels, no L2).
        noise_epsilon: Sign-noise amplitude in the model's input units; `None`
            for 0.31, in `[-1, 1]` units the strength of the authors' 0.7 on
            their normalised inputs (`keras-vit compare` gives their own
            models 0.7).
        noise_frequencies: Annulus centres from 0 to π.
        equal_energy_noise: Also run the equal-energy alternative.
        landscape_points: Grid points per axis of the loss landscape, from
            -1 to 1 (the authors' published grid: 21); 0 for none.
        landscape_batches: Augmented training batches the landscape's loss
            is averaged over, at every grid point.
        landscape_seeds: Seeds whose landscape is drawn (seeds 0 to
            landscape_seeds - 1).
        batch_size: Images per forward pass.
    """

    images: int = 512
    noise_images: int | None = None
    hessian_batches: int | None = 2
    hessian_batch_size: int = 32
    hessian_top_k: int = 5
    hessian_iterations: int = 20
    hessian_l2: str = "squared"
    clean_hessian: bool = True
    noise_epsilon: float | None = None
    noise_frequencies: int = 11
    equal_energy_noise: bool = False
    landscape_points: int = 11
    landscape_batches: int = 2
    landscape_seeds: int = 1
    batch_size: int = 64
