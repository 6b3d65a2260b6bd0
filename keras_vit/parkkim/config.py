"""The config of Park & Kim's comparison (`keras-vit compare`): `CompareConfig`.

It extends the trainer's `TrainConfig` (the recipe every model is trained
with) by the models, seeds and analyses of the comparison. The shipped
configs are in `keras_vit.parkkim.configs` (`compare`, `compare_quick`,
`compare_authors`).

Example:

```python
from keras_vit.parkkim.config import CompareConfig
from keras_vit.parkkim.settings import PanelSettings

config = CompareConfig(
    dataset="glyphs",
    models=("vit", "resnet"),
    seeds=1,
    analysis=PanelSettings(hessian_top_k=3, landscape_points=0),
)
```

On the command line the analysis settings are set one by one:
`--set analysis.hessian_top_k=3 --set analysis.landscape_points=0`.
"""

from __future__ import annotations

import dataclasses

from keras_vit.parkkim.cnn.variants import ALTERNETS
from keras_vit.parkkim.settings import PanelSettings
from keras_vit.recipes.configs.base import TrainConfig
from keras_vit.recipes.configs.base import one_of
from keras_vit.recipes.configs.base import positive_or_none

# The CNN families a comparison trains (keras_vit.parkkim.cnn.family).
CNN_FAMILIES = ("resnet", "preact_resnet", "alternet")
# The authors' published CIFAR-100 models `keras-vit compare` can analyse.
AUTHORS_MODELS = ("authors_vit_ti", "authors_resnet_50")

# The role of each model in the paper's claims (keras_vit.parkkim.claims).
ROLES = {
    "vit": "vit",
    "resnet": "resnet",
    "preact_resnet": "preact_resnet",
    "alternet": "alternet",
    "authors_vit_ti": "vit",
    "authors_resnet_50": "resnet",
}
TITLES = {
    "vit": "ViT",
    "resnet": "ResNet",
    "preact_resnet": "PreActResNet",
    "alternet": "AlterNet",
    "authors_vit_ti": "ViT-Ti (authors')",
    "authors_resnet_50": "ResNet-50 (authors')",
}


@dataclasses.dataclass(frozen=True)
class CompareConfig(TrainConfig):
    """Park & Kim's comparison (`keras-vit compare`): several networks trained
    with one recipe over several seeds, then every analysis of the paper with
    the authors' protocols, and a verdict on each claim.

    Every `TrainConfig` field is the training recipe of each run; `variant`
    and `encoder` are the ViT's, `cnn_variant` the row of the CNNs.
    """

    # -- the runs ----------------------------------------------------------
    name: str = "compare"
    # Among "vit", "resnet" (post-activation, the paper's CNN), "preact_resnet"
    # and "alternet" (its partner); or the authors' own trained CIFAR-100
    # models, "authors_vit_ti" and "authors_resnet_50" (no training).
    models: tuple[str, ...] = ("vit", "resnet", "preact_resnet", "alternet")
    seeds: int = 5  # Runs per model, seeds 0 .. seeds - 1.
    cnn_variant: str = "mini"  # The CNNs' row (keras_vit.parkkim.cnn).
    # Epochs of the CNNs' runs; None: `epochs`, as the ViT's (each claim is
    # judged in its own regime: the CNNs' claims on CNNs trained by their
    # own recipe to convergence).
    cnn_epochs: int | None = None
    # Peak learning rate of the CNNs' runs; None: `learning_rate`, as the
    # ViT's.
    cnn_learning_rate: float | None = None
    # Runs per CNN, seeds 0 .. cnn_seeds - 1; None: `seeds`, as the ViT's.
    cnn_seeds: int | None = None
    # The authors' files for "authors_*" models: a path, or "cifar100" to
    # download their published file into the Keras cache once.
    authors_vit_ti: str = "cifar100"
    authors_resnet_50: str = "cifar100"  # The same, for "authors_resnet_50".
    # "demo": a run whose recipe is that of a shipped demo checkpoint
    # (keras_vit.parkkim.demo; the `compare` config's runs) loads it instead
    # of training; "train": every run is trained (`--retrain`).
    checkpoints: str = "train"

    # -- the analyses --------------------------------------------------------
    # Every analysis setting, passed whole to each model's panel (see
    # keras_vit.parkkim.panel.PanelSettings): --set analysis.hessian_top_k=3.
    analysis: PanelSettings = PanelSettings()

    def seeds_of(self, model: str) -> int:
        """How many runs (seeds 0 .. n - 1) `model` has: one for an authors'
        model, `cnn_seeds` for a CNN when set, else `seeds`."""
        if model in AUTHORS_MODELS:
            return 1
        if model != "vit" and self.cnn_seeds is not None:
            return self.cnn_seeds
        return self.seeds

    def _checks(self):
        yield from super()._checks()
        known = ("vit", *CNN_FAMILIES, *AUTHORS_MODELS)
        yield (
            "models",
            (bool(self.models) and set(self.models) <= set(known)
             and len(set(self.models)) == len(self.models))
            or f"must be distinct names among {', '.join(known)}",
        )  # fmt: skip
        yield "seeds", self.seeds >= 1 or "must be at least 1"
        yield (
            "cnn_seeds",
            self.cnn_seeds is None or self.cnn_seeds >= 1 or "must be at least 1",
        )
        yield (
            "cnn_epochs",
            self.cnn_epochs is None or self.cnn_epochs >= 1 or "must be at least 1",
        )
        yield "cnn_learning_rate", positive_or_none(self.cnn_learning_rate)
        yield (
            "cnn_variant",
            self.cnn_variant in ALTERNETS
            or f"must be a row of alternet: {', '.join(ALTERNETS)}",
        )
        yield "checkpoints", one_of(self.checkpoints, ("demo", "train"))
        if not isinstance(self.analysis, PanelSettings):
            yield "analysis", "must be a keras_vit.parkkim.panel.PanelSettings"
            return  # Its fields cannot be read.
        a = self.analysis
        for name in ("images", "hessian_batch_size", "hessian_top_k",
                     "hessian_iterations", "noise_frequencies",
                     "landscape_batches", "batch_size"):  # fmt: skip
            yield f"analysis.{name}", getattr(a, name) >= 1 or "must be positive"
        yield (
            "analysis.hessian_batches",
            a.hessian_batches is None
            or a.hessian_batches >= 1
            or "must be positive, or None for every batch",
        )
        yield (
            "analysis.landscape_points",
            a.landscape_points == 0 or a.landscape_points >= 2
            or "must be 0 (no landscape) or at least 2",
        )  # fmt: skip
        yield "analysis.landscape_seeds", a.landscape_seeds >= 0 or "must be >= 0"
        yield "analysis.hessian_l2", one_of(a.hessian_l2, ("norm", "squared"))
        yield "analysis.noise_epsilon", positive_or_none(a.noise_epsilon)
        yield "analysis.noise_images", positive_or_none(a.noise_images)
