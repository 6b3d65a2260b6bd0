"""Park & Kim's panel for one trained model, and the paper's claims it tests.

"How Do Vision Transformers Work?" (Park & Kim, ICLR 2022) makes its case
with a handful of analyses, each run here with the authors' protocol (read
from their code, xxxnell/how-do-vits-work @ 9571ff1; see each function):

- `depth_statistics`: `Δ log amplitude` of the feature maps' Fourier
  transform at the authors' highest frequency, and their per-channel spatial
  variance, after every block (Fig. 2a, 8, 9);
- `hessian_spectrum`: the top-5 Hessian eigenvalues of the training loss on
  augmented batches with the L2 term (Fig. 1c, 4), and the same on clean
  batches with hard labels and no L2, the protocol their README calls
  incorrect, as a labelled second column;
- `noise_robustness`: accuracy under sign noise in a square frequency
  annulus, not renormalised, from 0 to π, with the noise RMS per band
  (Fig. 2b);
- `loss_landscape`: NLL + L2 on a 2-D grid of filter-normalised directions
  (Fig. 1a), for the first seeds;
- mean attention distance of every attention block.

`model_panel` runs them on one model; `claims` turns the panels of several
models and seeds into a verdict per claim of the paper, with the numbers it
rests on. `recipes.compare` trains the models and calls both.

Example:

```python
panel = model_panel(model, images, labels, augmented, clean, loss=loss,
                    weight_decay=0.05, settings=PanelSettings())
rows = claims({"vit": [panel_vit], "resnet": [panel_resnet]})
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from collections.abc import Iterable

import keras
import numpy as np

from keras_vit.analysis.depth import depth_statistics
from keras_vit.analysis.hessian import hessian_spectrum
from keras_vit.analysis.landscape import loss_landscape
from keras_vit.analysis.noise import authors_frequencies
from keras_vit.analysis.noise import noise_robustness
from keras_vit.analysis.window_distance import attention_distance_by_depth

# The model roles the claims compare (names of `recipes.compare`'s models).
VIT, RESNET, PREACT, ALTERNET = "vit", "resnet", "preact_resnet", "alternet"


@dataclasses.dataclass(frozen=True)
class PanelSettings:
    """What `model_panel` computes and how much.

    Attributes:
        hessian_batches: Augmented training batches whose Hessians are
            taken; `None` for every batch of the stream (the authors').
        hessian_top_k: Eigenvalues per batch (the authors': 5).
        hessian_iterations: Power iterations per eigenvalue (at most).
        hessian_l2: `"norm"` (the authors' `ops/norm.py`) or `"squared"`.
        clean_hessian: Also take the clean-data column (hard labels, no L2).
        noise_epsilon: Sign-noise amplitude in the model's input units (the
            authors' 0.7 is on ImageNet-normalised inputs; about 0.31 in
            `[-1, 1]` units for the same relative strength).
        noise_frequencies: Annulus centres from 0 to π.
        equal_energy_noise: Also run the previous, equal-energy protocol.
        landscape_points: Grid points per axis of the loss landscape, from
            -1 to 1 (the authors' published grid: 21); 0 for none.
        landscape_batches: Augmented training batches the landscape's loss
            is averaged over.
        batch_size: Images per forward pass.
    """

    hessian_batches: int | None = 2
    hessian_top_k: int = 5
    hessian_iterations: int = 20
    hessian_l2: str = "norm"
    clean_hessian: bool = True
    noise_epsilon: float = 0.31
    noise_frequencies: int = 11
    equal_energy_noise: bool = False
    landscape_points: int = 0
    landscape_batches: int = 4
    batch_size: int = 64


def model_panel(
    model: keras.Model,
    images: np.ndarray,
    labels: np.ndarray,
    augmented: Iterable,
    clean: Iterable | None,
    *,
    loss: Callable,
    weight_decay: float,
    settings: PanelSettings = PanelSettings(),
    landscape: bool = False,
    seed: int = 0,
) -> dict:
    """Every analysis of the panel on one trained model.

    Args:
        model: A keras_vit ViT, ResNet, PreActResNet or AlterNet classifier.
        images: Test images `(N, H, W, C)` in the model's input range.
        labels: Their integer classes `(N,)`.
        augmented: Batches `(images, targets)` of the training stream, with
            its augmentation (crops, MixUp/CutMix): the authors' Hessian and
            landscape data. Read once per analysis, so pass a re-iterable
            (a `tf.data.Dataset` or a list).
        clean: Clean training batches `(images, one-hot labels)` for the
            clean-data Hessian column, or `None`.
        loss: The training loss (e.g. cross-entropy with label smoothing).
        weight_decay: The training's weight decay (the L2 term's factor).
        settings: A `PanelSettings`.
        landscape: Whether to compute the loss landscape for this model.
        seed: Seeds the power iterations, the noise and the directions.

    Returns:
        A dict: `"accuracy"` (on `images`), `"depth"` (`depth_statistics`),
        `"hessian"` and `"hessian_clean"` (`hessian_spectrum`, the second
        `None` without `clean`), `"noise"` (and `"noise_equal_energy"`)
        (`noise_robustness`), `"distances"` (`attention_distance_by_depth`)
        and `"landscape"` (`loss_landscape`, or `None`).
    """
    s = settings
    logits = model.predict(images, batch_size=s.batch_size, verbose=0)
    accuracy = float((np.asarray(logits).argmax(-1) == labels).mean())
    result = {
        "accuracy": accuracy,
        "depth": depth_statistics(model, images, batch_size=s.batch_size),
        "hessian": hessian_spectrum(
            model,
            augmented,
            loss=loss,
            weight_decay=weight_decay,
            l2=s.hessian_l2,
            top_k=s.hessian_top_k,
            num_batches=s.hessian_batches,
            max_iterations=s.hessian_iterations,
            seed=seed,
            verbose=0,
        ),
        "hessian_clean": None,
        "noise": noise_robustness(
            model,
            images,
            labels,
            protocol="authors",
            epsilon=s.noise_epsilon,
            frequencies=authors_frequencies(s.noise_frequencies),
            seed=seed,
            batch_size=s.batch_size,
            verbose=0,
        ),
        "noise_equal_energy": None,
        "distances": attention_distance_by_depth(
            model, images, batch_size=s.batch_size
        ),
        "landscape": None,
    }
    if clean is not None and s.clean_hessian:
        result["hessian_clean"] = hessian_spectrum(
            model,
            clean,
            loss=keras.losses.CategoricalCrossentropy(from_logits=True),
            top_k=s.hessian_top_k,
            num_batches=s.hessian_batches,
            max_iterations=s.hessian_iterations,
            seed=seed,
            verbose=0,
        )
    if s.equal_energy_noise:
        result["noise_equal_energy"] = noise_robustness(
            model,
            images,
            labels,
            protocol="equal_energy",
            bands=5,
            norm=0.25 * float(np.sqrt(np.prod(images.shape[1:]))),
            seed=seed,
            batch_size=s.batch_size,
            verbose=0,
        )
    if landscape and s.landscape_points:
        points = (-1.0, 1.0, int(s.landscape_points))
        result["landscape"] = loss_landscape(
            model,
            _take(augmented, s.landscape_batches),
            loss=loss,
            weight_decay=weight_decay,
            x=points,
            y=points,
            seed=seed,
            verbose=0,
        )
    return result


def _take(batches: Iterable, count: int) -> list:
    taken = []
    for batch in batches:
        if len(taken) == count:
            break
        taken.append(tuple(np.asarray(part) for part in batch))
    return taken


# -- the claims ---------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim of the paper and how a set of panels tests it.

    Attributes:
        key: A short name.
        text: The claim, as the paper makes it.
        figure: Where the paper shows it.
        models: The model roles it needs.
        measure: `{role: [panel per seed]} -> (values per seed, text)`: for
            each seed, whether the claim holds, and the numbers shown.
    """

    key: str
    text: str
    figure: str
    models: tuple[str, ...]
    measure: Callable


def _median_abs_top(panel, column="hessian") -> float:
    spectrum = panel[column]
    if spectrum is None:
        return float("nan")
    return float(np.median(np.abs(np.asarray(spectrum["eigenvalues"])[:, 0])))


def _negative_share(panel) -> float:
    values = np.asarray(panel["hessian"]["eigenvalues"])
    return float((values < 0).mean())


def _changes(panel, key: str, kinds: tuple[str, ...], same_size: bool = False):
    """Changes of a depth statistic at the points of the given kinds."""
    depth = panel["depth"]
    values = np.asarray(depth[key], dtype="float64")
    if key == "variance":
        values = np.log(values)
    sizes = np.asarray(depth["sizes"])
    out = []
    for i in range(1, len(values)):
        if depth["kinds"][i] not in kinds:
            continue
        if same_size and tuple(sizes[i]) != tuple(sizes[i - 1]):
            continue
        out.append(values[i] - values[i - 1])
    return np.asarray(out)


def _mean_change(panel, key, kinds, same_size=False) -> float:
    changes = _changes(panel, key, kinds, same_size)
    return float(changes.mean()) if changes.size else float("nan")


def _noise_drop(panel, where: str) -> float:
    """Mean accuracy drop over the lowest or highest third of the non-zero
    noise frequencies (f = 0 is a constant shift, no frequency band)."""
    noise = panel["noise"]
    drops = np.asarray(noise["accuracy_drop"], dtype="float64")
    order = np.argsort(noise["frequencies"])
    order = order[np.asarray(noise["frequencies"])[order] > 0]
    if not order.size:
        return float("nan")
    third = max(1, order.size // 3)
    chosen = order[:third] if where == "low" else order[-third:]
    return float(drops[chosen].mean())


def _spread(values) -> str:
    values = np.asarray(values, dtype="float64")
    if values.size == 1:
        return f"{values[0]:.3g}"
    return f"{values.mean():.3g} ± {values.std(ddof=1):.2g}"


def _per_seed(runs: dict, *roles):
    return list(zip(*(runs[role] for role in roles), strict=False))


def _hessian_flatter(runs):
    pairs = _per_seed(runs, VIT, RESNET)
    vit = [_median_abs_top(v) for v, _ in pairs]
    resnet = [_median_abs_top(r) for _, r in pairs]
    clean_vit = [_median_abs_top(v, "hessian_clean") for v, _ in pairs]
    clean_resnet = [_median_abs_top(r, "hessian_clean") for _, r in pairs]
    text = (
        f"median |top eigenvalue|: ViT {_spread(vit)}, ResNet {_spread(resnet)} "
        f"(clean data, no L2: ViT {_spread(clean_vit)}, ResNet "
        f"{_spread(clean_resnet)})"
    )
    return [v < r for v, r in zip(vit, resnet, strict=True)], text


def _hessian_negative(runs):
    pairs = _per_seed(runs, VIT, RESNET)
    vit = [_negative_share(v) for v, _ in pairs]
    resnet = [_negative_share(r) for _, r in pairs]
    text = (
        f"share of negative eigenvalues: ViT {_spread(vit)}, ResNet {_spread(resnet)}"
    )
    return [v > r for v, r in zip(vit, resnet, strict=True)], text


def _msa_low_pass(runs):
    holds, parts = [], []
    for role in (VIT, ALTERNET):
        if role not in runs:
            continue
        changes = [_mean_change(p, "delta", ("msa",)) for p in runs[role]]
        holds.append([c < 0 for c in changes])
        parts.append(f"{role} MSA {_spread(changes)}")
    seeds = [all(h) for h in zip(*holds, strict=False)]
    return seeds, "mean Δ log amplitude change: " + "; ".join(parts)


def _conv_high_pass(runs):
    role = RESNET
    changes = [_mean_change(p, "delta", ("conv",)) for p in runs[role]]
    same = [_mean_change(p, "delta", ("conv",), same_size=True) for p in runs[role]]
    text = (
        f"mean Δ log amplitude change at ResNet blocks {_spread(changes)} "
        f"(blocks that keep the resolution: {_spread(same)})"
    )
    return [c > 0 for c in changes], text


def _msa_variance(runs):
    role = ALTERNET
    msa = [_mean_change(p, "variance", ("msa",)) for p in runs[role]]
    conv = [_mean_change(p, "variance", ("conv",)) for p in runs[role]]
    text = (
        f"AlterNet, mean change of log variance: MSA {_spread(msa)}, conv "
        f"{_spread(conv)}"
    )
    return [m < c for m, c in zip(msa, conv, strict=True)], text


def _noise(role, high_hurts):
    def measure(runs):
        low = [_noise_drop(p, "low") for p in runs[role]]
        high = [_noise_drop(p, "high") for p in runs[role]]
        text = (
            f"{role} accuracy drop: low frequencies {_spread(low)}, high "
            f"{_spread(high)}"
        )
        if high_hurts:
            return [h > lo for lo, h in zip(low, high, strict=True)], text
        return [lo > h for lo, h in zip(low, high, strict=True)], text

    return measure


def _accuracy(panel) -> float:
    """The whole test split's accuracy when known, else the panel's images'."""
    value = panel.get("test_accuracy")
    return panel["accuracy"] if value is None else value


def _alternet_accuracy(runs):
    pairs = _per_seed(runs, ALTERNET, PREACT)
    alternet = [_accuracy(a) for a, _ in pairs]
    preact = [_accuracy(p) for _, p in pairs]
    text = (
        f"test accuracy: AlterNet {_spread(alternet)}, PreActResNet {_spread(preact)}"
    )
    return [a > p for a, p in zip(alternet, preact, strict=True)], text


CLAIMS = (
    Claim(
        "hessian_flatter",
        "MSAs flatten the loss landscape: a ViT's Hessian eigenvalues are "
        "smaller in magnitude than a ResNet's",
        "Fig. 1c, 4",
        (VIT, RESNET),
        _hessian_flatter,
    ),
    Claim(
        "hessian_negative",
        "ViTs have negative Hessian eigenvalues (non-convex losses) in "
        "small-data regimes, more than ResNets",
        "Fig. 1c, 4",
        (VIT, RESNET),
        _hessian_negative,
    ),
    Claim(
        "msa_low_pass",
        "MSAs are low-pass filters: they lower the high-frequency amplitude "
        "of the feature maps",
        "Fig. 2a, 8",
        (VIT,),
        _msa_low_pass,
    ),
    Claim(
        "conv_high_pass",
        "Convolutions are high-pass filters: ResNet blocks raise the "
        "high-frequency amplitude",
        "Fig. 2a, 8",
        (RESNET,),
        _conv_high_pass,
    ),
    Claim(
        "msa_variance",
        "MSAs reduce the feature-map variance, convolutions increase it",
        "Fig. 9",
        (ALTERNET,),
        _msa_variance,
    ),
    Claim(
        "vit_noise",
        "ViTs are robust to high-frequency noise and vulnerable to low-frequency noise",
        "Fig. 2b",
        (VIT,),
        _noise(VIT, high_hurts=False),
    ),
    Claim(
        "resnet_noise",
        "ResNets are vulnerable to high-frequency noise",
        "Fig. 2b",
        (RESNET,),
        _noise(RESNET, high_hurts=True),
    ),
    Claim(
        "alternet_accuracy",
        "AlterNet outperforms its CNN baseline in small-data regimes",
        "Fig. 11",
        (ALTERNET, PREACT),
        _alternet_accuracy,
    ),
)


def claims(runs: dict) -> list[dict]:
    """A verdict on each claim of the paper from panels of several models.

    Args:
        runs: `{model role: [model_panel result per seed]}`, roles among
            `"vit"`, `"resnet"` (post-activation), `"preact_resnet"` and
            `"alternet"`.

    Returns:
        One dict per claim of `CLAIMS`: `"key"`, `"claim"`, `"figure"`,
        `"verdict"` (`"reproduced"` when it holds for every seed, `"not
        reproduced"` when for none, `"mixed (k of n seeds)"` otherwise, or
        `"not testable"` when a model it needs was not run or a measure is
        undefined), `"holds"` (per seed) and `"evidence"` (the numbers it
        rests on).
    """
    rows = []
    for claim in CLAIMS:
        row = {"key": claim.key, "claim": claim.text, "figure": claim.figure}
        if not all(runs.get(role) for role in claim.models):
            missing = ", ".join(r for r in claim.models if not runs.get(r))
            rows.append({**row, "verdict": "not testable", "holds": [],
                         "evidence": f"needs {missing}"})  # fmt: skip
            continue
        holds, evidence = claim.measure(runs)
        holds = [bool(h) for h in holds]
        if "nan" in evidence:
            verdict = "not testable (a measure is undefined here)"
        elif all(holds):
            verdict = "reproduced"
        elif not any(holds):
            verdict = "not reproduced"
        else:
            verdict = f"mixed ({sum(holds)} of {len(holds)} seeds)"
        rows.append({**row, "verdict": verdict, "holds": holds, "evidence": evidence})
    return rows
