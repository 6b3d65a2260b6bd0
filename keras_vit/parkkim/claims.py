"""Park & Kim's claims, judged on the panels of several models and seeds.

"How Do Vision Transformers Work?" (Park & Kim, ICLR 2022) argues from a
handful of analyses, which `keras_vit.parkkim.panel.model_panel` measures
on one model. `claims` turns the panels of several models and seeds into a
verdict per claim of the paper, with the numbers it rests on.

The engine is a table. `CLAIMS` holds one `Claim` row per claim of the
paper: the model roles it needs and its tests, each a `Quantity` measured
on one run's panel and the `Relation` it must satisfy:

| quantity | read from the panel |
|---|---|
| `TOP_EIGENVALUE` | median over batches of the Hessian's largest \\|eigenvalue\\| |
| `SMALLEST` | median over batches of the smallest eigenvalue (Lanczos) |
| `SMALLEST_RATIO` | its ratio to the top one |
| `NEGATIVE_SHARE` | share of negatives among the top-k |
| `MSA_DELTA` | mean change of Δ log amplitude at MSA blocks |
| `CONV_DELTA_SAME` | the same at conv blocks that keep the resolution |
| `CONV_DELTA_DOWN` | the same at conv blocks that down-sample |
| `MSA_VARIANCE`, ... | mean change of log variance, the first step apart |
| `INPUT_STEP` | that first step, out of the embedding or stem |
| `NOISE_GAP` | (high − low)-frequency noise accuracy drop, paired per-image SE |
| `ACCURACY` | test accuracy |

`LOWERS` / `RAISES` test each run (the change is < 0 / > 0); `SMALLER`,
`LARGER` and `SMALLER_BEYOND_ERROR` test every pair of runs of the claim's
two models (each seed of one against each seed of the other, so unequal
seed counts need no pairing rule).

**Regime.** A verdict is only given where the paper's regime holds, and
every verdict states it; otherwise the claim reads "not testable here
(<why, with the numbers>)", never "reproduced" or "not reproduced":

- (a) every model a claim involves is trained: each run's test accuracy
  is above `accuracy_threshold(classes, images)`, the larger of
  `CHANCE_FACTOR` (2) x chance, `1 / classes` (capped halfway from chance
  to 1, so that two classes need 75 %), and chance plus `CHANCE_SIGMAS`
  (3) binomial standard errors of chance accuracy on the panel's `images`
  test images. The first asks for a margin of learning, not only
  significance: on 10,000 images the binomial alone would call 10.9 % of
  10 classes trained, a model whose loss still sits at ln 10 and whose
  feature maps and Hessian are its initialisation's. The second keeps luck
  on a small test set out (32 images and 10 classes need 25.9 %). `images`
  (the analysis images, drawn from the test split) is at most the test
  split's size, so that error is an upper bound; without it only the
  first holds. An optional model (AlterNet in the low-pass claim) that is
  not trained is left out of the claim, with the reason.
- (b) a claim that compares a ViT with a CNN (`Claim.matched_loss`) is
  tested at matched training loss, as the paper compares them: the two
  models' training losses (the data term of the loss at the Hessian's
  augmented batches, no L2, averaged over images and then over seeds: what
  the panels record) are within `UNEQUAL_LOSS` (25 %) of each other, the
  larger at most 1.25 x the smaller (so the ViT's at most 1.25 x the
  CNN's, and the other way round). A panel without that loss makes the
  claim not testable here: matched loss cannot be checked.
- (c) a claim about CNNs alone or about accuracy (`Claim.converged`) is
  tested on models trained to convergence by their own recipe: each run's
  last epoch lowered its training loss by at most `STILL_FALLING` (2 %) of
  the epoch before, and warm-up is under `WARMUP_DOMINATES` (half) of its
  schedule's steps (`panel["training"]`, from the run's `metrics.csv` or
  the demo checkpoint's record). A run without that history is not
  testable; the authors' published models (`{"published": True}`) ran
  their own 300-epoch schedule.

The authors' published models (`compare_authors`) were not trained here:
no training run records their loss or accuracy. Their panels carry the
test accuracy measured on the whole test split, judged by the same
threshold, and the training loss that `model_panel` measures on the
augmented training batches, as for every model; so the same two rules
apply to them unchanged.

How `claims` decides, in the regime:

- a claim about one model is tested on each of its seeds; a claim that
  compares two models on every pair of their runs;
- the noise claim is the paper's comparison, not a trend within a model:
  the authors' noise is not renormalised (its RMS grows about tenfold from
  low to high frequencies), so "high-frequency noise hurts more than
  low-frequency noise" mostly measures energy; a ViT's (high − low)
  accuracy drop against a ResNet's, under the same noise, does not. Both
  are measured on the same test images, so the error of their difference
  is paired, image by image (`_paired_noise_error`); accuracies on the
  same images are not independent, and the binomial error of two
  independent estimates (left where the panels cannot be paired) is about
  twice as large. A difference within it is "not distinguishable";
- the feature-map variance is tested where the authors plot it (the ViT's
  MSA and MLP blocks, the ResNet's blocks), and AlterNet's as a row of its
  own, from the first block's output on: the step out of the embedding or
  stem (a change of representation, larger than any block's) is reported
  apart;
- convolutions are judged high-pass on the blocks that keep the
  resolution: a down-sampling block's highest frequency is half the old
  one's in absolute terms, so its Δ log amplitude rises from subsampling
  alone; those blocks are reported apart;
- the non-convexity claim compares each model's most negative eigenvalue,
  measured directly; the top-k by magnitude show a negative one only when
  it outweighs the positive side, which depends on the other model's
  scale;
- the Hessian claims show the L2 term's largest curvature (and when it is
  the eigenvalues' size, `L2_DOMINATES`), the clean-data column when
  measured, and eigenvalues whose power iteration hit its cap;
- a verdict names its statistic and says when it rests on one seed, or on
  unequal seed counts.

Example:

```python
from keras_vit.parkkim.claims import claims

rows = claims({"vit": [panel_vit], "resnet": [panel_resnet]})
rows[0]["verdict"]
# 'reproduced; one seed per model; statistic: median |top eigenvalue|, ViT
#  smaller than ResNet, every pair of runs; regime: trained (test accuracy
#  ViT 81%, ResNet 92%; chance 1% with 100 classes), at matched training
#  loss (ViT 0.61, ResNet 0.55)'
```
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

# The model roles the claims compare (names of `keras_vit.parkkim.compare`'s models).
VIT, RESNET, PREACT, ALTERNET = "vit", "resnet", "preact_resnet", "alternet"
TITLES = {VIT: "ViT", RESNET: "ResNet", PREACT: "PreActResNet", ALTERNET: "AlterNet"}
CNNS = (RESNET, PREACT)  # The convolutional networks a ViT is compared with.

# -- the regime: which models a verdict may rest on ---------------------------
CHANCE_FACTOR = 2.0  # Trained: test accuracy above this multiple of chance,
CHANCE_SIGMAS = 3.0  # and above chance by this many binomial standard errors.
UNEQUAL_LOSS = 0.25  # A ViT and a CNN compared: losses at most 25 % apart.
L2_DOMINATES = 2.0  # A median top eigenvalue within this factor of the L2 term's.
STILL_FALLING = 0.02  # Converged: the last epoch lowered the loss by at most 2 %,
WARMUP_DOMINATES = 0.5  # and warm-up is under half of the schedule's steps.


# -- what one run's panel measures ---------------------------------------------
@dataclasses.dataclass(frozen=True)
class Quantity:
    """A number measured on one run's panel (`model_panel`'s dict).

    Attributes:
        label: How the evidence names it, e.g. `"median |top eigenvalue|"`.
        noun: How a reason names it for one model, in `"the ViT's <noun>
            is undefined"`.
        read: `panel -> float`; NaN where the panel does not define it.
        error: `panel -> float`, its binomial standard error (NaN where the
            number of test images is not recorded), or `None` (exact).
        blocks: `(panel -> (k,) changes at each block, name)` for a mean
            change over blocks, whose evidence counts the blocks, or `None`.
        paired_error: `(panel, panel) -> float`, the standard error of the
            difference of two runs' values measured on the same test images
            (per image, paired), NaN where the panels cannot be paired; or
            `None`. Where it is defined it replaces `error`.
    """

    label: str
    noun: str
    read: Callable
    error: Callable | None = None
    blocks: tuple | None = None
    paired_error: Callable | None = None


def _number(value) -> float:
    """A float; `None` (a non-finite number read back from JSON) as NaN."""
    return float("nan") if value is None else float(value)


def _eigenvalues(panel, column: str = "hessian") -> np.ndarray | None:
    """The `(batches, top_k)` eigenvalues of a Hessian column, or `None`."""
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


def _median_smallest(panel, relative: bool = False) -> float:
    """Median over batches of the smallest eigenvalue (measured directly,
    `hessian_spectrum(smallest=True)`), or of its ratio to the batch's
    largest-magnitude eigenvalue; NaN for a panel that did not measure it."""
    spectrum = panel.get("hessian") or {}
    smallest = spectrum.get("smallest")
    if smallest is None:
        return float("nan")
    smallest = np.asarray(smallest, dtype="float64")  # (batches,)
    if relative:
        values = _eigenvalues(panel)
        if values is None or len(values) != len(smallest):
            return float("nan")
        smallest = smallest / np.abs(values[:, 0])
    return float(np.median(smallest)) if np.isfinite(smallest).all() else np.nan


def _negative_share(panel) -> float:
    """The share of the Hessian's eigenvalues (every batch, top-k) below 0."""
    values = _eigenvalues(panel)
    if values is None or not np.isfinite(values).all():
        return float("nan")
    return float((values < 0).mean())


def _changes(
    panel, statistic: str, kind: str, resolution: str = "all", after_input=False
):
    """`(k,)` changes of a depth statistic at the `kind` points (of the log
    for the variance), each from the point before it.

    `resolution`: `"all"`; `"same"` keeps the points whose feature map has
    the size of the one before; `"down"` those whose map is smaller (a
    stride-2 block, whose highest frequency is half the old one's in
    absolute terms). `after_input` leaves out the first step, from the
    embedding or the stem (`"input"`), which `_input_step` reports apart.
    """
    depth = panel["depth"]
    values = np.asarray(depth[statistic], dtype="float64")  # (points,)
    if statistic == "variance":
        with np.errstate(divide="ignore", invalid="ignore"):
            values = np.log(values)
    sizes = np.asarray(depth["sizes"])  # (points, 2)
    kinds = depth["kinds"]
    out = []
    for i in range(1, len(values)):
        if kinds[i] != kind or (after_input and kinds[i - 1] == "input"):
            continue
        same = tuple(sizes[i]) == tuple(sizes[i - 1])
        if (resolution == "same" and not same) or (resolution == "down" and same):
            continue
        out.append(values[i] - values[i - 1])
    return np.asarray(out, dtype="float64")


def _mean_change(panel, **where):
    changes = _changes(panel, **where)
    return float(changes.mean()) if changes.size else float("nan")


_WHERE = {  # resolution: (how a label says it, how a count of blocks says it)
    "all": ("", ""),
    "same": (" that keep the resolution", "same-resolution "),
    "down": (
        " that down-sample (read at the new grid's highest frequency)",
        "down-sampling ",
    ),
}


def _depth_change(statistic: str, kind: str, name: str, resolution="all",
                  after_input=False):  # fmt: skip
    """The `Quantity` of the mean change of a depth statistic at `kind`."""
    what = {"delta": "Δ log amplitude", "variance": "log variance"}[statistic]
    where, short = _WHERE[resolution]
    where = f"{name} blocks{where}" + (
        ", the first step (from the embedding or stem) apart" * after_input
    )
    chosen = dict(
        statistic=statistic, kind=kind, resolution=resolution, after_input=after_input
    )
    return Quantity(
        f"mean change of {what} at {where}",
        f"mean change of {what} at {name} blocks",
        functools.partial(_mean_change, **chosen),
        blocks=(functools.partial(_changes, **chosen), short + name),
    )


def _input_step(panel) -> float:
    """The change of log variance from the embedding (or stem) to the first
    block: a change of representation, not a block's effect on it."""
    depth = panel["depth"]
    if len(depth["kinds"]) < 2 or depth["kinds"][0] != "input":
        return float("nan")
    with np.errstate(divide="ignore", invalid="ignore"):
        first, second = np.log(np.asarray(depth["variance"][:2], dtype="float64"))
    return float(second - first)


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
    frequencies = np.asarray(noise["frequencies"], dtype="float64")  # (bands,)
    drops = np.asarray(noise["accuracy_drop"], dtype="float64")  # (bands,)
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
        for key, values in (("", drops), ("_accuracy", accuracy), ("_rms", rms)):
            mean = float(values[chosen].mean()) if chosen.size else np.nan
            result[where + key] = mean
        result[where + "_bands"] = chosen
    return result


def _per_image_gap(panel) -> np.ndarray | None:
    """`(N,)` each test image's (high − low) accuracy drop: its correctness
    under the lowest third of the bands minus under the highest third
    (`noise["correct"]`, `(bands, N)`), or `None` where not recorded."""
    correct = panel["noise"].get("correct")
    bands = _noise_bands(panel)
    if correct is None or not bands["low_bands"].size:
        return None
    correct = np.asarray(correct, dtype="float64")  # (bands, N)
    low = correct[bands["low_bands"]].mean(axis=0)
    high = correct[bands["high_bands"]].mean(axis=0)
    return low - high


def _paired_noise_error(first, second) -> float:
    """The paired standard error of two runs' noise gaps: the spread of the
    per-image differences of their gaps over `sqrt(N)`. Accuracies measured
    on the same images are not independent; treating them so overstates the
    error. NaN unless both panels recorded per-image results on the same
    images (`noise["inputs"]`, a digest of the images and labels)."""
    a, b = _per_image_gap(first), _per_image_gap(second)
    digest = first["noise"].get("inputs")
    same = digest is not None and digest == second["noise"].get("inputs")
    if a is None or b is None or not same or a.shape != b.shape or a.size < 2:
        return float("nan")
    difference = a - b  # (N,)
    return float(difference.std(ddof=1) / np.sqrt(difference.size))


def _binomial_se(accuracies, images) -> float:
    """Standard error of a sum of ± accuracies, each on `images` images,
    taken as independent binomial estimates: `sqrt(sum p (1 - p) / n)`."""
    p = np.asarray(accuracies, dtype="float64")
    return float(np.sqrt((p * (1 - p)).sum() / images))


def _noise_gap(panel) -> float:
    """(high − low)-frequency accuracy drop: accuracy under low minus under
    high noise (the clean accuracy cancels)."""
    bands = _noise_bands(panel)
    return bands["high"] - bands["low"]


def _noise_gap_error(panel) -> float:
    """The binomial SE of `_noise_gap`: two noisy accuracies on the noise's
    images, taken as independent (what is left where runs cannot be paired)."""
    bands = _noise_bands(panel)
    images = panel["noise"].get("images") or panel.get("images")
    if not images:
        return float("nan")
    return _binomial_se([bands["low_accuracy"], bands["high_accuracy"]], images)


def _accuracy(panel) -> float:
    """The whole test split's accuracy when known, else the panel's images'."""
    value = panel.get("test_accuracy")
    return _number(panel.get("accuracy") if value is None else value)


TOP_EIGENVALUE = Quantity(
    "median |top eigenvalue|", "median top eigenvalue", _median_abs_top
)
NEGATIVE_SHARE = Quantity(
    "share of negative eigenvalues", "share of negative eigenvalues", _negative_share
)
SMALLEST = Quantity(
    "median smallest eigenvalue (Lanczos)",
    "median smallest eigenvalue",
    lambda panel: _median_smallest(panel),
)
SMALLEST_RATIO = Quantity(
    "median smallest / |top| eigenvalue",
    "median smallest / top eigenvalue",
    lambda panel: _median_smallest(panel, relative=True),
)
MSA_DELTA = _depth_change("delta", "msa", "MSA")
CONV_DELTA = _depth_change("delta", "conv", "conv")
CONV_DELTA_SAME = _depth_change("delta", "conv", "conv", resolution="same")
CONV_DELTA_DOWN = _depth_change("delta", "conv", "conv", resolution="down")
MSA_VARIANCE = _depth_change("variance", "msa", "MSA", after_input=True)
MLP_VARIANCE = _depth_change("variance", "mlp", "MLP")
CONV_VARIANCE = _depth_change("variance", "conv", "conv", after_input=True)
CONV_VARIANCE_SAME = _depth_change(
    "variance", "conv", "conv", resolution="same", after_input=True
)
INPUT_STEP = Quantity(
    "the first step's change of log variance (from the embedding or stem)",
    "first step's change of log variance",
    _input_step,
)
NOISE_GAP = Quantity(
    "high − low accuracy drop",
    "(high − low) noise accuracy drop",
    _noise_gap,
    error=_noise_gap_error,
    paired_error=lambda first, second: _paired_noise_error(first, second),
)
ACCURACY = Quantity("test accuracy", "test accuracy", _accuracy)


# -- how a quantity must come out ------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Relation:
    """What a claim asks of a quantity.

    Attributes:
        verb: How the evidence says it, of one block: `"lower"`, `"raise"`
            (per run), or of a pair: `"smaller"`, `"larger"`.
        pairwise: `False`: `test(value)` on each run of each model;
            `True`: `test(first, second, error)` on every pair of a run of
            the claim's first model and one of its second, `error` the
            standard error of `first − second` (0 for exact quantities).
        test: Returns `True` (holds), `False`, or `None` (the two sides
            cannot be told apart).
    """

    verb: str
    pairwise: bool
    test: Callable
    sign: str = ""  # How a statistic names a per-run test: "below 0".


def _beyond_error(first, second, error):
    """`first < second` by more than `error`; `None` within it."""
    difference = first - second
    return True if difference < -error else False if difference > error else None


LOWERS = Relation("lower", False, lambda change: change < 0, "below 0")
RAISES = Relation("raise", False, lambda change: change > 0, "above 0")
SMALLER = Relation("smaller", True, lambda first, second, error: first < second)
LARGER = Relation("larger", True, lambda first, second, error: first > second)
SMALLER_BEYOND_ERROR = Relation("smaller", True, _beyond_error)


# -- the claims ------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Claim:
    """One claim of the paper and how a set of panels tests it.

    Attributes:
        key: A short name.
        text: The claim, as the paper makes it.
        figure: Where the paper shows it.
        roles: The model roles it needs; a pairwise relation compares the
            first with the second.
        tests: `(Quantity, Relation)` pairs; per run (or pair) the claim
            holds where every one holds.
        shown: Quantities the evidence shows beside the tested ones.
        context: `(runs, roles) -> [evidence parts]`, more numbers for the
            evidence (e.g. the L2 term's curvature).
        optional: Model roles it also tests when they were run (and are
            trained).
        converged: Whether rule (c) of the regime applies: every model it
            involves trained to convergence by its own recipe (the CNN-only
            claims and the accuracy claim).
    """

    key: str
    text: str
    figure: str
    roles: tuple[str, ...]
    tests: tuple[tuple[Quantity, Relation], ...]
    shown: tuple[Quantity, ...] = ()
    context: tuple[Callable, ...] = ()
    optional: tuple[str, ...] = ()
    converged: bool = False

    @property
    def pairwise(self) -> bool:
        return any(relation.pairwise for _, relation in self.tests)

    @property
    def statistic(self) -> str:
        """What the verdict tests, e.g. `"median |top eigenvalue|, ViT
        smaller than ResNet, every pair of runs"`."""
        parts = []
        for quantity, relation in self.tests:
            if relation.pairwise:
                first, second = (TITLES[r] for r in self.roles[:2])
                parts.append(
                    f"{quantity.label}, {first} {relation.verb} than {second}, "
                    "every pair of runs"
                )
            else:
                parts.append(f"{quantity.label}, {relation.sign} in each run")
        return "; ".join(parts)

    @property
    def matched_loss(self) -> bool:
        """Whether it compares a ViT with a CNN: rule (b) of the regime."""
        return VIT in self.roles and any(role in CNNS for role in self.roles)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a claim's tests found in a set of panels.

    Attributes:
        holds: One entry per comparison: `True` where the claim holds,
            `False` where it does not, `None` where the two sides cannot be
            told apart (within the binomial standard error of the test set).
        unit: What one comparison is: `"seeds"` (the runs of one model),
            `"runs"` (the runs of several models, each on its own) or
            `"pairs"` (a run of one model against a run of another).
        evidence: The numbers the verdict rests on.
        undefined: Why a number the claim needs is undefined (the claim is
            then not testable), or `""`.
    """

    holds: list
    unit: str
    evidence: str
    undefined: str = ""


def _spread(values) -> str:
    """`"mean ± sd"` of several values, the value itself for one."""
    values = np.asarray(values, dtype="float64")
    if values.size == 1:
        return f"{values[0]:.3g}"
    return f"{values.mean():.3g} ± {values.std(ddof=1):.2g}"


def _finite(*groups) -> bool:
    return all(np.isfinite(np.asarray(g, dtype="float64")).all() for g in groups)


def _by_role(read: Callable, runs: dict, roles) -> dict:
    """`{role: [read(panel) per run]}`."""
    return {role: [read(panel) for panel in runs[role]] for role in roles}


def _per_model(label: str, values: dict) -> str:
    """`"<label>: ViT 5, ResNet 20"`."""
    return f"{label}: " + ", ".join(
        f"{TITLES[role]} {_spread(v)}" for role, v in values.items()
    )


def _measure(claim: Claim, runs: dict, roles: tuple) -> Outcome:
    """Tests a claim on the runs of its `roles`; see `claims`."""
    values = {q: _by_role(q.read, runs, roles) for q, _ in claim.tests}
    undefined = [
        f"the {TITLES[role]}'s {q.noun} is undefined"
        for q in values
        for role, v in values[q].items()
        if not _finite(v)
    ]
    parts = [_per_model(q.label, values[q]) for q in values]
    parts += [_per_model(q.label, _by_role(q.read, runs, roles)) for q in claim.shown]
    if claim.pairwise:
        holds, extra, missing = _pairs(claim, runs, roles, values)
        undefined += missing
        unit = "pairs"
    else:
        holds, extra = _each_run(claim, runs, roles, values)
        unit = "runs" if len(roles) > 1 else "seeds"
    parts += extra
    for context in claim.context:
        parts += context(runs, roles)
    if claim.matched_loss:  # The numbers of the regime's rule (b).
        parts += _loss_evidence(runs, claim.roles)
    return Outcome(holds, unit, "; ".join(parts), "; ".join(undefined))


def _each_run(claim, runs, roles, values) -> tuple[list, list]:
    """`(holds per run, evidence)`: every test of the claim on each run,
    with the share of blocks that go the claim's way."""
    holds = []
    for role in roles:
        per_test = [
            [relation.test(v) for v in values[q][role]] for q, relation in claim.tests
        ]
        holds += [all(found) for found in zip(*per_test, strict=True)]
    parts = []
    for q, relation in claim.tests:
        if q.blocks is None:
            continue
        changes, name = q.blocks
        counts = []
        for role in roles:
            found = np.concatenate([changes(p) for p in runs[role]])
            k = int(sum(bool(relation.test(c)) for c in found))
            counts.append(f"{TITLES[role]} {k} of {found.size}")
        parts.append(f"{name} blocks that {relation.verb} it: " + ", ".join(counts))
    return holds, parts


def _pairs(claim, runs, roles, values) -> tuple[list, list, list]:
    """`(holds per pair, evidence, undefined)`: the claim's pairwise test on
    every run of its first role against every run of its second."""
    ((quantity, relation),) = claim.tests
    first, second = roles[:2]
    if quantity.error is None:  # exact quantities
        holds = [
            relation.test(a, b, 0.0)
            for a in values[quantity][first]
            for b in values[quantity][second]
        ]
        return holds, [], []
    errors = _by_role(quantity.error, runs, (first, second))
    pairs, paired = [], []  # (first's value, second's, SE of their difference)
    for i, pa in enumerate(runs[first]):
        for j, pb in enumerate(runs[second]):
            a, b = values[quantity][first][i], values[quantity][second][j]
            error = np.nan
            if quantity.paired_error is not None:
                error = quantity.paired_error(pa, pb)
            paired.append(bool(np.isfinite(error)))
            if not paired[-1]:
                error = float(np.sqrt(errors[first][i] ** 2 + errors[second][j] ** 2))
            pairs.append((a, b, error))
    holds = [relation.test(a, b, e) for a, b, e in pairs]
    counts = sorted(
        {(p.get("noise") or {}).get("images") or p.get("images")
         for r in (first, second) for p in runs[r]} - {None}
    )  # fmt: skip
    kind = (
        "paired per-image SE" if all(paired)
        else "binomial SE (unpaired)" if not any(paired)
        else f"SE paired in {sum(paired)} of {len(paired)} pairs"
    )  # fmt: skip
    text = (
        f"{TITLES[first]} − {TITLES[second]} {_spread([a - b for a, b, _ in pairs])}, "
        f"{kind} {_spread([e for _, _, e in pairs])}"
        + (f" (n = {', '.join(map(str, counts))} test images)" if counts else "")
    )
    missing = [] if _finite([e for _, _, e in pairs]) else [
        "the number of test images is not recorded"
    ]  # fmt: skip
    return holds, [text], missing


# -- the evidence a claim adds ------------------------------------------------------
def _training_loss(panel) -> float:
    """The data term of the training loss on the Hessian's augmented batches
    (the training loss without the L2 term), averaged over their images."""
    spectrum = panel.get("hessian") or {}
    data = np.asarray(spectrum.get("data_loss", []), dtype="float64")  # (batches,)
    sizes = np.asarray(spectrum.get("batch_sizes", []), dtype="float64")
    if not data.size or data.shape != sizes.shape or not sizes.sum() > 0:
        return float("nan")
    return float((data * sizes).sum() / sizes.sum())


def _loss_evidence(runs, roles) -> list[str]:
    losses = _by_role(_training_loss, runs, roles)
    return [
        _per_model("training loss on the Hessian's batches (data term, no L2)", losses)
    ]


def _l2_evidence(runs, roles) -> list[str]:
    """The L2 term's largest curvature, and where it is the eigenvalues' size."""
    l2 = _by_role(lambda p: _number(p["hessian"].get("l2_max_curvature")), runs, roles)
    if not _finite(*l2.values()):
        return []
    parts = [_per_model("the L2 term's largest curvature", l2)]
    top = _by_role(_median_abs_top, runs, roles)
    for role in roles:
        pairs = zip(top[role], l2[role], strict=True)
        near = [t <= L2_DOMINATES * c for t, c in pairs if c > 0]
        if any(near):
            parts.append(
                f"the L2 term dominates the {TITLES[role]}'s top eigenvalues "
                f"(median within {L2_DOMINATES:g}x of its curvature in "
                f"{sum(near)} of {len(top[role])} runs)"
            )
    return parts


def _clean_evidence(runs, roles) -> list[str]:
    """The clean-data column (hard labels, no L2), when every run has it."""
    if not all(p.get("hessian_clean") for role in roles for p in runs[role]):
        return []
    clean = _by_role(lambda p: _median_abs_top(p, "hessian_clean"), runs, roles)
    return [_per_model("clean data, hard labels, no L2", clean)]


def _unconverged(panel) -> tuple[int, int] | None:
    """`(eigenvalues that did not converge, eigenvalues)`, when recorded."""
    flags = panel["hessian"].get("converged")
    if flags is None:
        return None
    flags = np.asarray(flags, dtype=bool)  # (batches, top_k)
    return int((~flags).sum()), int(flags.size)


def _convergence_evidence(runs, roles) -> list[str]:
    """The eigenvalues whose power iteration stopped at its cap."""
    counts = {}
    for role in roles:
        found = [c for c in map(_unconverged, runs[role]) if c is not None]
        if found and sum(c[0] for c in found):
            counts[role] = (sum(c[0] for c in found), sum(c[1] for c in found))
    if not counts:
        return []
    return [
        "not converged at the iteration cap: "
        + ", ".join(f"{TITLES[r]} {k} of {n}" for r, (k, n) in counts.items())
        + " eigenvalues"
    ]


def _smallest_evidence(runs, roles) -> list[str]:
    """How many smallest eigenvalues met the Lanczos residual tolerance."""
    counts = []
    for role in roles:
        flags = [
            np.asarray(p["hessian"].get("smallest_converged", []), dtype=bool)
            for p in runs[role]
        ]
        total = sum(f.size for f in flags)
        if total:
            counts.append(
                f"{TITLES[role]} {sum(int(f.sum()) for f in flags)} of {total}"
            )
    if not counts:
        return []
    return ["smallest eigenvalues within the residual tolerance: " + ", ".join(counts)]


def _noise_evidence(runs, roles) -> list[str]:
    """The accuracy drops and the noise RMS of the lowest and highest bands."""
    bands = _by_role(_noise_bands, runs, roles)

    def per_model(low, high):
        return ", ".join(
            f"{TITLES[r]} {_spread([b[low] for b in bands[r]])} / "
            f"{_spread([b[high] for b in bands[r]])}"
            for r in roles
        )

    return [
        "accuracy drop under low / high-frequency noise (lowest / highest third "
        f"of the bands): {per_model('low', 'high')}",
        f"noise RMS low / high: {per_model('low_rms', 'high_rms')}",
    ]


CLAIMS = (
    Claim(
        "hessian_flatter",
        "MSAs flatten the loss landscape: a ViT's Hessian eigenvalues are "
        "smaller in magnitude than a ResNet's",
        "Fig. 1c, 4",
        (VIT, RESNET),
        ((TOP_EIGENVALUE, SMALLER),),
        context=(_l2_evidence, _clean_evidence, _convergence_evidence),
    ),
    Claim(
        "hessian_negative",
        "ViTs have negative Hessian eigenvalues (non-convex losses) in "
        "small-data regimes, more than ResNets",
        "Fig. 1c, 4",
        (VIT, RESNET),
        ((SMALLEST, SMALLER),),
        shown=(SMALLEST_RATIO, NEGATIVE_SHARE),
        context=(_smallest_evidence, _convergence_evidence),
    ),
    Claim(
        "msa_low_pass",
        "MSAs are low-pass filters: they lower the high-frequency amplitude "
        "of the feature maps",
        "Fig. 2a, 8",
        (VIT,),
        ((MSA_DELTA, LOWERS),),
        optional=(ALTERNET,),
    ),
    Claim(
        "conv_high_pass",
        "Convolutions are high-pass filters: ResNet blocks raise the "
        "high-frequency amplitude",
        "Fig. 2a, 8",
        (RESNET,),
        ((CONV_DELTA_SAME, RAISES),),
        shown=(CONV_DELTA_DOWN,),
        converged=True,
    ),
    Claim(
        "msa_variance",
        "MSAs reduce the feature-map variance and MLPs increase it (ViT)",
        "Fig. 9",
        (VIT,),
        ((MSA_VARIANCE, LOWERS), (MLP_VARIANCE, RAISES)),
        shown=(INPUT_STEP,),
    ),
    Claim(
        "conv_variance",
        "Convolutions increase the feature-map variance (ResNet)",
        "Fig. 9",
        (RESNET,),
        ((CONV_VARIANCE, RAISES),),
        shown=(CONV_VARIANCE_SAME, INPUT_STEP),
        converged=True,
    ),
    Claim(
        "alternet_variance",
        "In AlterNet, MSA blocks lower the feature-map variance that conv blocks raise",
        "Fig. 9, Sec. 4",
        (ALTERNET,),
        ((MSA_VARIANCE, LOWERS), (CONV_VARIANCE, RAISES)),
        shown=(INPUT_STEP,),
        converged=True,
    ),
    Claim(
        "noise_frequency",
        "ViTs are robust to high-frequency noise, ResNets vulnerable to it: "
        "from low- to high-frequency noise, a ViT's accuracy drop grows less "
        "than a ResNet's",
        "Fig. 2b",
        (VIT, RESNET),
        ((NOISE_GAP, SMALLER_BEYOND_ERROR),),
        context=(_noise_evidence,),
    ),
    Claim(
        "alternet_accuracy",
        "AlterNet outperforms its CNN baseline in small-data regimes",
        "Fig. 11",
        (ALTERNET, PREACT),
        ((ACCURACY, LARGER),),
        converged=True,
    ),
)


# -- the regime -------------------------------------------------------------------
def accuracy_threshold(classes: int, images: int | None = None) -> float:
    """The test accuracy above which a model counts as trained.

    The larger of `CHANCE_FACTOR` x chance (chance = `1 / classes`; at most
    halfway from chance to 1, for two classes) and chance plus
    `CHANCE_SIGMAS` binomial standard errors of chance accuracy on
    `images` test images (left out when `images` is `None`).

    Example:

    >>> round(accuracy_threshold(10), 3), round(accuracy_threshold(10, 32), 3)
    (0.2, 0.259)
    """
    chance = 1.0 / classes
    threshold = min(CHANCE_FACTOR * chance, (1.0 + chance) / 2)
    if images:
        error = np.sqrt(chance * (1.0 - chance) / images)
        threshold = max(threshold, chance + CHANCE_SIGMAS * float(error))
    return float(threshold)


def _percent(values) -> str:
    return _spread(100 * np.asarray(values, dtype="float64")) + "%"


def _untrained(role: str, panels: list) -> str:
    """Why the runs of `role` are not all trained (rule (a)), or `""`."""
    title = TITLES[role]
    accuracy = [_accuracy(p) for p in panels]
    classes = [p.get("classes") for p in panels]
    if not all(classes):
        return (
            f"the {title}'s number of classes is not recorded, so its chance "
            "accuracy is unknown"
        )
    if not _finite(accuracy):
        return f"the {title}'s test accuracy is not recorded"
    limits = [
        accuracy_threshold(c, p.get("images"))
        for c, p in zip(classes, panels, strict=True)
    ]
    below = [a <= t for a, t in zip(accuracy, limits, strict=True)]
    if not any(below):
        return ""
    limit = max(t for t, b in zip(limits, below, strict=True) if b)
    which = "" if len(panels) == 1 else f"{sum(below)} of {len(panels)} runs "
    return (
        f"the {title} is not trained: test accuracy {_percent(accuracy)}, "
        f"{which}not above {100 * limit:.3g}% (chance {_chance(classes)})"
    )


def _chance(classes) -> str:
    """`"10% with 10 classes"` (each distinct number of classes)."""
    known = sorted({c for c in classes if c})
    return ", ".join(f"{100 / c:.3g}% with {c} classes" for c in known) or "unknown"


def _loss_mismatch(runs: dict, roles: tuple) -> tuple[str, str]:
    """`(why the losses are not matched (rule (b)) or "", the losses as
    text)` for the ViT and the CNN of `roles`."""
    pair = [VIT, next(r for r in roles if r in CNNS)]
    means = [float(np.mean([_training_loss(p) for p in runs[r]])) for r in pair]
    text = f"{TITLES[pair[0]]} {means[0]:.3g}, {TITLES[pair[1]]} {means[1]:.3g}"
    missing = [TITLES[r] for r, m in zip(pair, means, strict=True) if np.isnan(m)]
    if missing:
        return (
            f"the {' and the '.join(missing)}'s training loss is not recorded, "
            "so matched loss cannot be checked",
            text,
        )
    if max(means) > (1.0 + UNEQUAL_LOSS) * min(means):
        return (
            f"unequal training loss: {text}, more than {UNEQUAL_LOSS:.0%} apart "
            "(the paper compares models at matched loss)",
            text,
        )
    return "", text


def _last_fall(panel) -> float:
    """How much the last epoch lowered the training loss, as a fraction of
    the epoch before's (`panel["training"]["epoch_losses"]`); NaN when fewer
    than two epochs are recorded."""
    losses = (panel.get("training") or {}).get("epoch_losses") or []
    if len(losses) < 2:
        return float("nan")
    before, last = float(losses[-2]), float(losses[-1])
    return (before - last) / before if before > 0 else float("nan")


def _still_learning(role: str, panels: list) -> str:
    """Why the runs of `role` have not converged (rule (c)), or `""`.

    A model trained by the authors and published (`training["published"]`)
    ran their schedule; one trained here must have its history recorded.
    """
    title = TITLES[role]
    histories = [p.get("training") or {} for p in panels]
    if all(h.get("published") for h in histories):
        return ""
    if not all(h.get("epoch_losses") and h.get("steps") for h in histories):
        return (
            f"the {title}'s training history is not recorded, so its "
            "convergence cannot be checked"
        )
    reasons = []
    warmups = [h.get("warmup_steps", 0) / h["steps"] for h in histories]
    if max(warmups) >= WARMUP_DOMINATES:
        worst = max(histories, key=lambda h: h.get("warmup_steps", 0) / h["steps"])
        reasons.append(
            f"warm-up dominates the {title}'s schedule ({worst['warmup_steps']} of "
            f"{worst['steps']} steps)"
        )
    falls = [_last_fall(p) for p in panels]
    falling = [not f <= STILL_FALLING for f in falls]  # NaN: one epoch, falling
    if any(falling):
        which = "" if len(panels) == 1 else f" in {sum(falling)} of {len(panels)} runs"
        known = [f for f, b in zip(falls, falling, strict=True) if b and f == f]
        reasons.append(
            f"the {title}'s training loss still falls{which}: its last epoch "
            f"lowered it by {_percent(known)} (more than {STILL_FALLING:.0%})"
            if known
            else f"the {title} trained one epoch: whether its loss still falls "
            "is not known"
        )
    return "; ".join(reasons)


def _convergence_text(role: str, panels: list) -> str:
    """`"ResNet 0.4% ± 0.2%"` (the last epoch's loss fall) for the regime."""
    if all((p.get("training") or {}).get("published") for p in panels):
        return f"{TITLES[role]} published by the authors"
    return f"{TITLES[role]} {_percent([_last_fall(p) for p in panels])}"


@dataclasses.dataclass(frozen=True)
class _Regime:
    roles: tuple  # The roles tested: the claim's, and its trained optional ones.
    reasons: tuple  # Why the claim is not testable here; empty if it is.
    text: str  # The regime it was tested in.
    left_out: tuple  # Optional roles left out, with why.


def _regime(claim: Claim, runs: dict) -> _Regime:
    """Whether the claim's models are trained and, for a ViT against a CNN,
    at matched loss; see the module's docstring."""
    reasons = tuple(filter(None, (_untrained(r, runs[r]) for r in claim.roles)))
    roles, left_out = list(claim.roles), []
    for role in (r for r in claim.optional if runs.get(r)):
        why = _untrained(role, runs[role])
        if why:
            left_out.append(f"{TITLES[role]} left out: {why}")
        else:
            roles.append(role)
    loss = ""
    if claim.matched_loss:
        mismatch, loss = _loss_mismatch(runs, claim.roles)
        reasons += (mismatch,) if mismatch else ()
    converged = ""
    if claim.converged:
        reasons += tuple(filter(None, (_still_learning(r, runs[r]) for r in roles)))
        converged = ", ".join(_convergence_text(r, runs[r]) for r in roles)
    accuracy = ", ".join(
        f"{TITLES[r]} {_percent([_accuracy(p) for p in runs[r]])}" for r in roles
    )
    classes = [p.get("classes") for r in roles for p in runs[r]]
    text = (
        f"trained (test accuracy {accuracy}; chance {_chance(classes)})"
        + (f", at matched training loss ({loss})" if loss else "")
        + (f", converged (last epoch's loss fall: {converged})" if converged else "")
    )
    return _Regime(tuple(roles), reasons, text, tuple(left_out))


# -- the verdict --------------------------------------------------------------------
def _runs_note(unit: str, counts: dict) -> str:
    """What the number of runs allows to say, or `""`."""
    sizes = list(counts.values())
    if all(n == 1 for n in sizes):
        return "one seed" if len(sizes) == 1 else "one seed per model"
    if unit == "pairs" and len(set(sizes)) > 1:
        (a, n), (b, m) = list(counts.items())[:2]
        return (
            f"{n} run{'s' * (n > 1)} of {TITLES[a]} against {m} of {TITLES[b]}: "
            f"{n * m} pairs"
        )
    return ""


def _outcome_text(holds: list, unit: str) -> tuple[str, str]:
    """`(outcome, its text)` from the holds of every seed or pair."""
    total = len(holds)
    held = sum(h is True for h in holds)
    unclear = sum(h is None for h in holds)
    if not total:
        return "not testable", "not testable (nothing to compare)"
    if held == total:
        return "reproduced", "reproduced"
    if unclear == total:
        return (
            "not distinguishable",
            "not distinguishable (every difference within its standard error)",
        )
    if held == 0:
        more = f" ({unclear} of {total} {unit} not distinguishable)" if unclear else ""
        return "not reproduced", "not reproduced" + more
    more = f"; {unclear} not distinguishable" if unclear else ""
    return "mixed", f"mixed ({held} of {total} {unit}{more})"


def _verdict(claim: Claim, runs: dict) -> dict:
    """One row of `claims` for a claim whose models were all run."""
    regime = _regime(claim, runs)
    outcome = _measure(claim, runs, regime.roles)
    row = {"unit": outcome.unit, "evidence": outcome.evidence}
    if regime.reasons:
        why = "; ".join(regime.reasons)
        return {**row, "outcome": "not testable", "holds": [], "regime": why,
                "verdict": f"not testable here ({why})"}  # fmt: skip
    regime_text = "regime: " + regime.text
    if outcome.undefined:
        word, text = "not testable", f"not testable ({outcome.undefined})"
        notes = [regime_text]
    else:
        word, text = _outcome_text(outcome.holds, outcome.unit)
        counts = {role: len(runs[role]) for role in regime.roles}
        notes = [
            _runs_note(outcome.unit, counts),
            *regime.left_out,
            "statistic: " + claim.statistic,
            regime_text,
        ]
    holds = [None if h is None else bool(h) for h in outcome.holds]
    return {**row, "outcome": word, "holds": holds, "regime": regime.text,
            "verdict": "; ".join([text, *filter(None, notes)])}  # fmt: skip


def claims(
    runs: dict, images: int | None = None, classes: int | None = None
) -> list[dict]:
    """A verdict on each claim of the paper from panels of several models.

    A claim is tested only in the paper's regime (the module's docstring):
    its models trained (`accuracy_threshold`) and, for a ViT against a CNN,
    their training losses within `UNEQUAL_LOSS` of each other; otherwise it
    is "not testable here" with the numbers. A claim about one model is
    tested on each of its seeds; a claim that compares two models on every
    pair: each seed of the first against each seed of the second (`n x m`
    pairs; one run of the authors' model against five seeds gives five).

    Args:
        runs: `{model role: [model_panel result per seed]}`, roles among
            `"vit"`, `"resnet"` (post-activation), `"preact_resnet"` and
            `"alternet"`.
        images: The number of test images the panels were measured on,
            for panels that do not record it (`"images"`). The noise claim
            and the chance threshold need it.
        classes: The number of classes, for panels that do not record it
            (`"classes"`, absent from panels made before it was recorded).
            The regime needs it: chance accuracy is `1 / classes`.

    Returns:
        One dict per claim of `CLAIMS`: `"key"`, `"claim"`, `"figure"`,
        `"outcome"`: `"reproduced"` (it holds for every seed or pair),
        `"not reproduced"` (for none), `"mixed"`, `"not distinguishable"`
        (every difference within the binomial standard error; the noise
        claim) or `"not testable"` (a model it needs was not run, is not
        trained, is compared at unequal loss, or a number it needs is
        undefined); `"verdict"`: the outcome as text, e.g. `"mixed (3 of 25
        pairs); regime: trained (...)"` or `"not testable here (the ViT is
        not trained: test accuracy 10.2%, ...)"`, with what limits it (one
        seed, unequal seed counts); `"regime"`: the regime it was tested in,
        or why it is not testable here; `"holds"` (per seed or pair:
        `True`, `False` or `None` for not distinguishable; empty when not
        testable here), `"unit"` (`"seeds"`, `"runs"` or `"pairs"`) and
        `"evidence"` (the numbers it rests on).

    Example:

    ```python
    rows = claims({"vit": vit_panels, "resnet": resnet_panels}, classes=10)
    {row["key"]: row["verdict"] for row in rows}
    ```
    """
    filled = {"images": images, "classes": classes}
    runs = {
        role: [
            {**p, **{k: int(v) for k, v in filled.items() if v and not p.get(k)}}
            for p in panels
        ]
        for role, panels in runs.items()
    }
    rows = []
    for claim in CLAIMS:
        row = {"key": claim.key, "claim": claim.text, "figure": claim.figure}
        missing = [role for role in claim.roles if not runs.get(role)]
        if missing:
            rows.append({**row, "outcome": "not testable", "verdict": "not testable",
                         "holds": [], "unit": "", "regime": "",
                         "evidence": f"needs {', '.join(missing)}"})  # fmt: skip
            continue
        rows.append({**row, **_verdict(claim, runs)})
    return rows
