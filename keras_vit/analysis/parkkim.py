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

How `claims` decides:

- a claim about one model is tested on each of its seeds; a claim that
  compares two models on every pair of their runs (each seed of one against
  each seed of the other), so unequal seed counts need no pairing rule;
- the noise claim is the paper's comparison, not a trend within a model:
  the authors' noise is not renormalised (its RMS grows about tenfold from
  low to high frequencies), so "high-frequency noise hurts more than
  low-frequency noise" mostly measures energy; a ViT's (high − low)
  accuracy drop against a ResNet's, under the same noise, does not. A
  difference within the binomial standard error of the test images is
  "not distinguishable";
- the feature-map variance is tested where the authors plot it (the ViT's
  MSA and MLP blocks, the ResNet's blocks), and AlterNet's as a row of its
  own;
- the Hessian claims show each model's training loss (and flag losses more
  than 25 % apart: the paper compares models at matched loss), the L2
  term's largest curvature (and when it is the eigenvalues' size), the
  clean-data column when measured, and eigenvalues whose power iteration
  hit its cap;
- a verdict says when it rests on one seed, or on unequal seed counts.

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
        equal_energy_noise: Also run the equal-energy alternative.
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
        A dict: `"accuracy"` (on `images`), `"images"` (their number: the
        binomial error of the noise claim), `"depth"` (`depth_statistics`),
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
        "images": len(images),
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
TITLES = {VIT: "ViT", RESNET: "ResNet", PREACT: "PreActResNet", ALTERNET: "AlterNet"}
UNEQUAL_LOSS = 0.25  # Relative difference of training losses that is flagged.
L2_DOMINATES = 2.0  # A median top eigenvalue within this factor of the L2 term's.


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a claim's measure found in a set of panels.

    Attributes:
        holds: One entry per comparison: `True` where the claim holds,
            `False` where it does not, `None` where the two sides cannot be
            told apart (within the binomial standard error of the test set).
        unit: What one comparison is: `"seeds"` (the runs of one model),
            `"runs"` (the runs of several models, each on its own) or
            `"pairs"` (a run of one model against a run of another: every
            seed of the first against every seed of the second).
        evidence: The numbers the verdict rests on.
        undefined: Why a number the claim needs is undefined (the claim is
            then not testable), or `""`.
        notes: Qualifiers the verdict text carries (e.g. unequal training
            losses).
    """

    holds: list
    unit: str
    evidence: str
    undefined: str = ""
    notes: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim of the paper and how a set of panels tests it.

    Attributes:
        key: A short name.
        text: The claim, as the paper makes it.
        figure: Where the paper shows it.
        models: The model roles it needs.
        measure: `{role: [panel per seed]} -> Outcome`.
        optional: Model roles it also tests when they were run.
    """

    key: str
    text: str
    figure: str
    models: tuple[str, ...]
    measure: Callable
    optional: tuple[str, ...] = ()


def _number(value) -> float:
    """A float; `None` (a non-finite number read back from JSON) as NaN."""
    return float("nan") if value is None else float(value)


def _finite(*groups) -> bool:
    return all(np.isfinite(np.asarray(g, dtype="float64")).all() for g in groups)


def _undefined(named: dict) -> str:
    """`"<name> is undefined; ..."` for each list of numbers that is not finite."""
    return "; ".join(
        f"{name} is undefined" for name, v in named.items() if not _finite(v)
    )


def _eigenvalues(panel, column: str = "hessian") -> np.ndarray | None:
    spectrum = panel.get(column)
    if not spectrum:
        return None
    # A panel read back from JSON holds `None` where a number was not finite.
    values = np.asarray(spectrum["eigenvalues"], dtype="float64")
    return values if values.ndim == 2 and values.size else None


def _median_abs_top(panel, column: str = "hessian") -> float:
    """Median over batches of the largest-magnitude eigenvalue's magnitude."""
    values = _eigenvalues(panel, column)
    if values is None or not np.isfinite(values).all():
        return float("nan")
    return float(np.median(np.abs(values[:, 0])))


def _negative_share(panel) -> float:
    values = _eigenvalues(panel)
    if values is None or not np.isfinite(values).all():
        return float("nan")
    return float((values < 0).mean())


def _training_loss(panel) -> float:
    """The data term of the training loss on the Hessian's augmented batches
    (the training loss without the L2 term), averaged over their images."""
    spectrum = panel["hessian"]
    data = np.asarray(spectrum.get("data_loss", []), dtype="float64")
    sizes = np.asarray(spectrum.get("batch_sizes", []), dtype="float64")
    if not data.size or data.shape != sizes.shape or not sizes.sum() > 0:
        return float("nan")
    return float((data * sizes).sum() / sizes.sum())


def _l2_curvature(panel) -> float:
    return _number(panel["hessian"].get("l2_max_curvature"))


def _unconverged(panel) -> tuple[int, int] | None:
    """`(eigenvalues that did not converge, eigenvalues)`, when recorded."""
    flags = panel["hessian"].get("converged")
    if flags is None:
        return None
    flags = np.asarray(flags, dtype=bool)
    return int((~flags).sum()), int(flags.size)


def _changes(panel, key: str, kinds: tuple[str, ...], same_size: bool = False):
    """Changes of a depth statistic at the points of the given kinds (of the
    log for the variance), from the point before each."""
    depth = panel["depth"]
    values = np.asarray(depth[key], dtype="float64")
    if key == "variance":
        with np.errstate(divide="ignore", invalid="ignore"):
            values = np.log(values)
    sizes = np.asarray(depth["sizes"])
    out = []
    for i in range(1, len(values)):
        if depth["kinds"][i] not in kinds:
            continue
        if same_size and tuple(sizes[i]) != tuple(sizes[i - 1]):
            continue
        out.append(values[i] - values[i - 1])
    return np.asarray(out, dtype="float64")


def _mean_change(panel, key, kinds, same_size=False) -> float:
    changes = _changes(panel, key, kinds, same_size)
    return float(changes.mean()) if changes.size else float("nan")


def _share(panels, key, kinds, sign) -> str:
    """`"k of n"`: the points of these kinds whose change has this sign."""
    changes = np.concatenate([_changes(p, key, kinds) for p in panels])
    return f"{int((np.sign(changes) == sign).sum())} of {changes.size}"


def _noise_bands(panel) -> dict:
    """Accuracy drop, accuracy and noise RMS averaged over the lowest and the
    highest third of the noise bands.

    The bands are the authors' square annuli (`analysis.noise`), every one
    that carried noise: a band whose RMS is 0 (an annulus too thin for the
    image, e.g. f = 0 at 16 px) is left out. As in the authors' Fig. 2b the
    lowest bands contain frequency 0: at 32 px the f = 0 annulus is the
    square k in [-1, 0] on each axis (the constant and the lowest frequency)
    and the f = 0.1π one k in [-2, 1]; both hold the DC term.
    """
    noise = panel["noise"]
    frequencies = np.asarray(noise["frequencies"], dtype="float64")
    drops = np.asarray(noise["accuracy_drop"], dtype="float64")
    accuracy = noise.get("accuracy")
    if accuracy is None:  # under noise: clean accuracy minus the drop
        accuracy = _number(noise.get("clean_accuracy", panel.get("accuracy"))) - drops
    accuracy = np.asarray(accuracy, dtype="float64")
    rms = noise.get("noise_rms")
    rms = np.ones_like(drops) if rms is None else np.asarray(rms, dtype="float64")
    order = np.argsort(frequencies)
    order = order[~(rms[order] == 0)]  # a band whose RMS is NaN is kept
    result = {}
    third = max(1, order.size // 3)
    for where, chosen in (("low", order[:third]), ("high", order[-third:])):
        if order.size < 2:
            chosen = order[:0]
        result[where] = float(drops[chosen].mean()) if chosen.size else np.nan
        result[f"{where}_accuracy"] = (
            float(accuracy[chosen].mean()) if chosen.size else np.nan
        )
        result[f"{where}_rms"] = float(rms[chosen].mean()) if chosen.size else np.nan
    return result


def _spread(values) -> str:
    values = np.asarray(values, dtype="float64")
    if values.size == 1:
        return f"{values[0]:.3g}"
    return f"{values.mean():.3g} ± {values.std(ddof=1):.2g}"


def _pairs(runs: dict, first: str, second: str) -> list[tuple]:
    """Every run of `first` with every run of `second`."""
    return [(a, b) for a in runs[first] for b in runs[second]]


def _hessian_context(runs) -> tuple[list[str], list[str]]:
    """`(evidence, notes)` both Hessian claims carry: the training losses
    of the two models and the eigenvalues whose iteration did not converge."""
    losses = {role: [_training_loss(p) for p in runs[role]] for role in (VIT, RESNET)}
    parts = [
        "training loss on the Hessian's batches (data term, no L2): ViT "
        f"{_spread(losses[VIT])}, ResNet {_spread(losses[RESNET])}"
    ]
    notes = []
    means = [float(np.mean(v)) for v in losses.values()]
    if _finite(means) and min(means) > 0:
        if (max(means) - min(means)) / min(means) > UNEQUAL_LOSS:
            notes.append(
                f"at unequal training loss (ViT {means[0]:.3g}, ResNet "
                f"{means[1]:.3g}; more than {UNEQUAL_LOSS:.0%} apart)"
            )
    counts = {}
    for role in (VIT, RESNET):
        found = [c for c in map(_unconverged, runs[role]) if c is not None]
        if found and sum(c[0] for c in found):
            counts[role] = (sum(c[0] for c in found), sum(c[1] for c in found))
    if counts:
        parts.append(
            "not converged at the iteration cap: "
            + ", ".join(f"{TITLES[r]} {k} of {n}" for r, (k, n) in counts.items())
            + " eigenvalues"
        )
    return parts, notes


def _hessian_flatter(runs):
    top = {role: [_median_abs_top(p) for p in runs[role]] for role in (VIT, RESNET)}
    l2 = {role: [_l2_curvature(p) for p in runs[role]] for role in (VIT, RESNET)}
    parts = [
        f"median |top eigenvalue|: ViT {_spread(top[VIT])}, ResNet "
        f"{_spread(top[RESNET])}"
    ]
    if _finite(l2[VIT], l2[RESNET]):
        parts.append(
            f"the L2 term's largest curvature: ViT {_spread(l2[VIT])}, ResNet "
            f"{_spread(l2[RESNET])}"
        )
        for role in (VIT, RESNET):
            pairs = zip(top[role], l2[role], strict=True)
            near = [t <= L2_DOMINATES * c for t, c in pairs if c > 0]
            if any(near):
                parts.append(
                    f"the L2 term dominates the {TITLES[role]}'s top eigenvalues "
                    f"(median within {L2_DOMINATES:g}x of its curvature in "
                    f"{sum(near)} of {len(top[role])} runs)"
                )
    panels = runs[VIT] + runs[RESNET]
    if all(p.get("hessian_clean") for p in panels):
        clean = {r: [_median_abs_top(p, "hessian_clean") for p in runs[r]]
                 for r in (VIT, RESNET)}  # fmt: skip
        parts.append(
            f"clean data, hard labels, no L2: ViT {_spread(clean[VIT])}, ResNet "
            f"{_spread(clean[RESNET])}"
        )
    extra, notes = _hessian_context(runs)
    return Outcome(
        [v < r for v in top[VIT] for r in top[RESNET]],
        "pairs",
        "; ".join(parts + extra),
        _undefined({"the ViT's median top eigenvalue": top[VIT],
                    "the ResNet's median top eigenvalue": top[RESNET]}),
        tuple(notes),
    )  # fmt: skip


def _hessian_negative(runs):
    share = {role: [_negative_share(p) for p in runs[role]] for role in (VIT, RESNET)}
    parts = [
        f"share of negative eigenvalues: ViT {_spread(share[VIT])}, ResNet "
        f"{_spread(share[RESNET])}"
    ]
    extra, notes = _hessian_context(runs)
    return Outcome(
        [v > r for v in share[VIT] for r in share[RESNET]],
        "pairs",
        "; ".join(parts + extra),
        _undefined({"the ViT's share of negative eigenvalues": share[VIT],
                    "the ResNet's share of negative eigenvalues": share[RESNET]}),
        tuple(notes),
    )  # fmt: skip


def _msa_low_pass(runs):
    holds, parts, named = [], [], {}
    roles = [role for role in (VIT, ALTERNET) if runs.get(role)]  # see CLAIMS
    for role in roles:
        changes = [_mean_change(p, "delta", ("msa",)) for p in runs[role]]
        holds += [c < 0 for c in changes]
        parts.append(f"{TITLES[role]} MSA {_spread(changes)}")
        named[f"the {TITLES[role]}'s mean MSA change"] = changes
    return Outcome(
        holds,
        "runs" if len(roles) > 1 else "seeds",
        "mean change of Δ log amplitude: " + "; ".join(parts),
        _undefined(named),
    )


def _conv_high_pass(runs):
    changes = [_mean_change(p, "delta", ("conv",)) for p in runs[RESNET]]
    same = [_mean_change(p, "delta", ("conv",), same_size=True) for p in runs[RESNET]]
    text = (
        f"mean change of Δ log amplitude at ResNet blocks {_spread(changes)} "
        f"(blocks that keep the resolution: {_spread(same)})"
    )
    return Outcome(
        [c > 0 for c in changes],
        "seeds",
        text,
        _undefined({"the ResNet's mean block change": changes}),
    )


def _variance_split(runs, role, raiser, labels, owner):
    """The variance claim of a model with MSA blocks: per seed, the mean
    MSA change is < 0 and the mean change at the `raiser` points > 0.

    Args:
        raiser: `(kind, name)` of the points that should raise the variance:
            `("mlp", "MLP")` or `("conv", "conv")`.
        labels: How the evidence names the MSA and the raiser points.
        owner: The model's possessive in the undefined-number reasons.
    """
    kind, name = raiser
    panels = runs[role]
    msa = [_mean_change(p, "variance", ("msa",)) for p in panels]
    other = [_mean_change(p, "variance", (kind,)) for p in panels]
    text = (
        f"{TITLES[role]}, mean change of log variance: {labels[0]} "
        f"{_spread(msa)}, {labels[1]} {_spread(other)}; MSA blocks that lower "
        f"it: {_share(panels, 'variance', ('msa',), -1)}, {name} blocks that "
        f"raise it: {_share(panels, 'variance', (kind,), 1)}"
    )
    return Outcome(
        [m < 0 < o for m, o in zip(msa, other, strict=True)],
        "seeds",
        text,
        _undefined({f"{owner} mean MSA change": msa,
                    f"{owner} mean {name} change": other}),
    )  # fmt: skip


def _vit_variance(runs):
    return _variance_split(runs, VIT, ("mlp", "MLP"), ("MSA", "MLP"), "the ViT's")


def _conv_variance(runs):
    panels = runs[RESNET]
    conv = [_mean_change(p, "variance", ("conv",)) for p in panels]
    same = [_mean_change(p, "variance", ("conv",), same_size=True) for p in panels]
    text = (
        f"ResNet, mean change of log variance at its blocks {_spread(conv)} "
        f"(blocks that keep the resolution: {_spread(same)}); blocks that "
        f"raise it: {_share(panels, 'variance', ('conv',), 1)}"
    )
    return Outcome(
        [c > 0 for c in conv],
        "seeds",
        text,
        _undefined({"the ResNet's mean block change": conv}),
    )


def _alternet_variance(runs):
    labels = ("MSA blocks", "conv blocks")
    return _variance_split(runs, ALTERNET, ("conv", "conv"), labels, "AlterNet's")


def _binomial_se(accuracies, images) -> float:
    """Standard error of a sum of ± accuracies, each on `images` images,
    taken as independent binomial estimates: `sqrt(sum p (1 - p) / n)`."""
    p = np.asarray(accuracies, dtype="float64")
    return float(np.sqrt((p * (1 - p)).sum() / images))


def _noise(runs):
    bands = {role: [_noise_bands(p) for p in runs[role]] for role in (VIT, RESNET)}
    images = {role: [p.get("images") for p in runs[role]] for role in (VIT, RESNET)}
    known = all(n for role in images for n in images[role])
    holds, differences, errors = [], [], []
    for (v, nv), (r, nr) in [
        (a, b)
        for a in zip(bands[VIT], images[VIT], strict=True)
        for b in zip(bands[RESNET], images[RESNET], strict=True)
    ]:
        # (high - low) drop = accuracy under low minus under high noise: the
        # clean accuracy cancels; four noisy accuracies remain.
        difference = (v["high"] - v["low"]) - (r["high"] - r["low"])
        error = float("nan")
        if known:
            error = np.sqrt(
                _binomial_se([v["low_accuracy"], v["high_accuracy"]], nv) ** 2
                + _binomial_se([r["low_accuracy"], r["high_accuracy"]], nr) ** 2
            )
        differences.append(difference)
        errors.append(error)
        holds.append(
            True if difference < -error else False if difference > error else None
        )

    def column(role, key):
        return _spread([b[key] for b in bands[role]])

    def gap(role):
        return _spread([b["high"] - b["low"] for b in bands[role]])

    counts = sorted({n for role in images for n in images[role] if n})
    text = (
        "accuracy drop under low / high-frequency noise (lowest / highest third "
        f"of the bands): ViT {column(VIT, 'low')} / {column(VIT, 'high')}, "
        f"ResNet {column(RESNET, 'low')} / {column(RESNET, 'high')}; high − "
        f"low: ViT {gap(VIT)}, ResNet {gap(RESNET)}; ViT − ResNet "
        f"{_spread(differences)}, binomial SE {_spread(errors)}"
        + (f" (n = {', '.join(map(str, counts))} test images)" if counts else "")
        + f"; noise RMS low / high: ViT {column(VIT, 'low_rms')} / "
        f"{column(VIT, 'high_rms')}, ResNet {column(RESNET, 'low_rms')} / "
        f"{column(RESNET, 'high_rms')}"
    )
    undefined = _undefined({"the ViT − ResNet difference": differences})
    if not known:
        undefined = "; ".join(
            filter(None, [undefined, "the number of test images is not recorded"])
        )
    return Outcome(holds, "pairs", text, undefined)


def _accuracy(panel) -> float:
    """The whole test split's accuracy when known, else the panel's images'."""
    value = panel.get("test_accuracy")
    return _number(panel["accuracy"] if value is None else value)


def _alternet_accuracy(runs):
    alternet = [_accuracy(a) for a in runs[ALTERNET]]
    preact = [_accuracy(p) for p in runs[PREACT]]
    text = (
        f"test accuracy: AlterNet {_spread(alternet)}, PreActResNet {_spread(preact)}"
    )
    return Outcome(
        [a > p for a in alternet for p in preact],
        "pairs",
        text,
        _undefined({"AlterNet's accuracy": alternet, "PreActResNet's": preact}),
    )


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
        optional=(ALTERNET,),
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
        "MSAs reduce the feature-map variance and MLPs increase it (ViT)",
        "Fig. 9",
        (VIT,),
        _vit_variance,
    ),
    Claim(
        "conv_variance",
        "Convolutions increase the feature-map variance (ResNet)",
        "Fig. 9",
        (RESNET,),
        _conv_variance,
    ),
    Claim(
        "alternet_variance",
        "In AlterNet, MSA blocks lower the feature-map variance that conv blocks raise",
        "Fig. 9, Sec. 4",
        (ALTERNET,),
        _alternet_variance,
    ),
    Claim(
        "noise_frequency",
        "ViTs are robust to high-frequency noise, ResNets vulnerable to it: "
        "from low- to high-frequency noise, a ViT's accuracy drop grows less "
        "than a ResNet's",
        "Fig. 2b",
        (VIT, RESNET),
        _noise,
    ),
    Claim(
        "alternet_accuracy",
        "AlterNet outperforms its CNN baseline in small-data regimes",
        "Fig. 11",
        (ALTERNET, PREACT),
        _alternet_accuracy,
    ),
)


def _runs_note(outcome: Outcome, counts: dict) -> str:
    """What the number of runs allows to say, or `""`."""
    sizes = list(counts.values())
    if all(n == 1 for n in sizes):
        return "one seed" if len(sizes) == 1 else "one seed per model"
    if outcome.unit == "pairs" and len(set(sizes)) > 1:
        (a, n), (b, m) = counts.items()
        return (
            f"{n} run{'s' * (n > 1)} of {TITLES[a]} against {m} of {TITLES[b]}: "
            f"{n * m} pairs"
        )
    return ""


def _verdict(outcome: Outcome, counts: dict) -> tuple[str, str]:
    """`(outcome, verdict text)`; see `claims`."""
    if outcome.undefined:
        return "not testable", f"not testable ({outcome.undefined})"
    holds = outcome.holds
    total = len(holds)
    if not total:
        return "not testable", "not testable (nothing to compare)"
    held = sum(h is True for h in holds)
    unclear = sum(h is None for h in holds)
    if held == total:
        word, text = "reproduced", "reproduced"
    elif unclear == total:
        word = "not distinguishable"
        text = "not distinguishable (within the binomial standard error)"
    elif held == 0:
        word = "not reproduced"
        text = word + (
            f" ({unclear} of {total} {outcome.unit} not distinguishable)"
            if unclear
            else ""
        )
    else:
        word = "mixed"
        text = f"mixed ({held} of {total} {outcome.unit}" + (
            f"; {unclear} not distinguishable)" if unclear else ")"
        )
    notes = [_runs_note(outcome, counts), *outcome.notes]
    return word, "; ".join([text, *filter(None, notes)])


def claims(runs: dict, images: int | None = None) -> list[dict]:
    """A verdict on each claim of the paper from panels of several models.

    A claim about one model is tested on each of its seeds. A claim that
    compares two models is tested on every pair: each seed of the first
    against each seed of the second (`n x m` pairs; one run of the authors'
    model against five seeds gives five pairs).

    Args:
        runs: `{model role: [model_panel result per seed]}`, roles among
            `"vit"`, `"resnet"` (post-activation), `"preact_resnet"` and
            `"alternet"`.
        images: The number of test images the panels were measured on,
            for panels that do not record it (`"images"`, absent from panels
            made before it was recorded). The noise claim needs it.

    Returns:
        One dict per claim of `CLAIMS`: `"key"`, `"claim"`, `"figure"`,
        `"outcome"`: `"reproduced"` (it holds for every seed or pair),
        `"not reproduced"` (for none), `"mixed"`, `"not distinguishable"`
        (every difference within the binomial standard error; the noise
        claim) or `"not testable"` (a model it needs was not run, or a
        number it needs is undefined); `"verdict"`: the outcome as text,
        e.g. `"mixed (3 of 25 pairs)"`, with what limits it (`"one seed per
        model"`, unequal seed counts, unequal training losses);
        `"holds"` (per seed or pair: `True`, `False` or `None` for not
        distinguishable), `"unit"` (`"seeds"`, `"runs"` or `"pairs"`) and
        `"evidence"` (the numbers it rests on).
    """
    if images is not None:
        runs = {
            role: [p if p.get("images") else {**p, "images": int(images)} for p in ps]
            for role, ps in runs.items()
        }
    rows = []
    for claim in CLAIMS:
        row = {"key": claim.key, "claim": claim.text, "figure": claim.figure}
        missing = [role for role in claim.models if not runs.get(role)]
        if missing:
            rows.append({**row, "outcome": "not testable", "verdict": "not testable",
                         "holds": [], "unit": "",
                         "evidence": f"needs {', '.join(missing)}"})  # fmt: skip
            continue
        outcome = claim.measure(runs)
        roles = [*claim.models, *(r for r in claim.optional if runs.get(r))]
        counts = {role: len(runs[role]) for role in roles}
        word, verdict = _verdict(outcome, counts)
        holds = [None if h is None else bool(h) for h in outcome.holds]
        rows.append({**row, "outcome": word, "verdict": verdict, "holds": holds,
                     "unit": outcome.unit, "evidence": outcome.evidence})  # fmt: skip
    return rows
