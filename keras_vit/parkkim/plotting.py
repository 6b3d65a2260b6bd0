"""Side-by-side figures of several models (Park & Kim's comparisons).

Each function takes `{model name: results}`, where a model's results are a
list with one entry per seed, and draws the models in one figure: depth is
normalised to `[0, 1]` (input to last block), since the families have
different numbers of layers. Like `keras_vit.analysis.plotting`, every
function returns a `CaptionedFigure` (needs matplotlib).

Example:

```python
figure = plot_depth_comparison({"ViT": [stats_vit], "AlterNet": [stats_alt]})
save_figure(figure, "fourier.png")
```
"""

from __future__ import annotations

import numpy as np

from keras_vit.analysis.plotting import CaptionedFigure
from keras_vit.analysis.plotting import new_figure

_MARKERS = {"input": "D", "msa": "o", "mlp": "s", "conv": "^", "block": "v"}
_KIND_NAMES = {
    "input": "embedding / stem",
    "msa": "after MSA",
    "mlp": "after MLP",
    "conv": "after conv block",
    "block": "after block",
}


def _depth_axis(count: int) -> np.ndarray:
    return np.linspace(0.0, 1.0, count) if count > 1 else np.zeros(1)


def plot_depth_comparison(results: dict, key: str = "delta") -> CaptionedFigure:
    """`Δ log amplitude` (or variance) of the feature maps against depth.

    Args:
        results: `{name: [depth_statistics result per seed]}`.
        key: `"delta"` (Park & Kim Fig. 2) or `"variance"`.
    """
    if key not in ("delta", "variance"):
        raise ValueError(f"`key` must be 'delta' or 'variance'. Received: {key!r}")
    first = next(iter(results.values()))[0]
    what = (
        "Δ log amplitude at the highest frequency (log amplitude of the "
        "feature map's 2-D FFT relative to frequency 0, at the frequency "
        + (
            "π"
            if first.get("frequency") == "nyquist"
            else "(n/2 − 1)/n · 2π of Park & Kim's notebook"
        )
        + "; lower = smoother)"
        if key == "delta"
        else (
            "feature-map variance ("
            + (
                "per image, over positions and channels"
                if first.get("variance_definition") == "all_values"
                else "per channel over positions, then averaged: Park & Kim's"
            )
            + "; log scale)"
        )
    )
    caption = (
        f"{what} at each depth, mean over seeds (bars: min to max), depth "
        "normalised from the embedding/stem (0) to the last block (1). Marker "
        "= the layer just applied; Park & Kim find MSAs lower both quantities "
        "and convolutions/MLPs raise them."
    )
    figure = new_figure(6.0, 3.4, caption)
    ax = figure.subplots()
    seen = set()
    for colour, (name, runs) in enumerate(results.items()):
        values = np.array([np.asarray(run[key], dtype="float64") for run in runs])
        kinds = list(runs[0]["kinds"])
        depth = _depth_axis(values.shape[1])
        mean = values.mean(axis=0)
        ax.plot(depth, mean, color=f"C{colour}", lw=1.2, label=name)
        ax.vlines(
            depth, values.min(axis=0), values.max(axis=0), color=f"C{colour}", lw=0.8
        )
        for kind, marker in _MARKERS.items():
            chosen = [i for i, k in enumerate(kinds) if k == kind]
            if chosen:
                label = _KIND_NAMES[kind] if kind not in seen else None
                seen.add(kind)
                ax.scatter(
                    depth[chosen],
                    mean[chosen],
                    marker=marker,
                    s=22,
                    color=f"C{colour}",
                    edgecolors="k",
                    linewidths=0.4,
                    zorder=3,
                )
                if label:  # a black marker in the legend per kind
                    ax.scatter(
                        [], [], marker=marker, color="w", edgecolors="k", label=label
                    )
    if key == "variance":
        ax.set_yscale("log")
    ax.set_xlabel("normalised depth")
    ax.set_ylabel("Δ log amplitude" if key == "delta" else "variance")
    ax.legend(fontsize=6.5, ncol=2)
    return CaptionedFigure(figure, caption)


def _kde(values: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """Gaussian kernel density with Scott's bandwidth."""
    spread = values.std() if len(values) > 1 else 0.0
    width = max(spread * len(values) ** (-1 / 5), 1e-3 * max(abs(grid).max(), 1e-9))
    z = (grid[:, None] - values[None, :]) / width
    return np.exp(-0.5 * z**2).sum(axis=1) / (len(values) * width * np.sqrt(2 * np.pi))


_HESSIAN_PROTOCOLS = {
    "authors": "the authors' protocol: the training loss (label smoothing) "
    "with the L2 term on augmented training batches",
    "clean": "clean training images with hard labels and no L2 (the setting "
    "the authors' README calls incorrect; for comparison)",
}


def plot_hessian_density(results: dict, protocol: str = "authors") -> CaptionedFigure:
    """Density of the top Hessian eigenvalues over batches (Fig. 1c / 4).

    Args:
        results: `{name: [(batches, top_k) eigenvalues per seed]}`.
        protocol: `"authors"` or `"clean"`, for the caption.
    """
    if protocol not in _HESSIAN_PROTOCOLS:
        raise ValueError(f"`protocol` must be one of {sorted(_HESSIAN_PROTOCOLS)}.")
    pooled = {
        name: np.concatenate([np.ravel(r) for r in runs])
        for name, runs in results.items()
    }
    everything = np.concatenate(list(pooled.values()))
    low, high = min(everything.min(), 0.0), everything.max()
    margin = 0.1 * (high - low or 1.0)
    grid = np.linspace(low - margin, high + margin, 400)
    caption = (
        "Hessian max-eigenvalue spectrum (Park & Kim 2022, Fig. 1c/4): the "
        "largest-magnitude eigenvalues of the loss's Hessian on separate "
        f"mini-batches, {_HESSIAN_PROTOCOLS[protocol]}, pooled over seeds, as "
        "a kernel density (ticks: the values). Park & Kim find ViT's near "
        "zero, ResNet's large and positive; negative values mean "
        "non-convexity. "
        + "; ".join(
            f"{name}: median {np.median(values):.3g}" for name, values in pooled.items()
        )
    )
    figure = new_figure(6.0, 3.2, caption)
    ax = figure.subplots()
    for colour, (name, values) in enumerate(pooled.items()):
        ax.plot(grid, _kde(values, grid), color=f"C{colour}", label=name)
        ax.plot(values, np.zeros_like(values), "|", color=f"C{colour}", markersize=10)
    ax.axvline(0, color="k", lw=0.6)
    ax.set_xlabel("Hessian eigenvalue")
    ax.set_ylabel("density")
    ax.legend(fontsize=7)
    return CaptionedFigure(figure, caption)


def plot_noise_comparison(results: dict) -> CaptionedFigure:
    """Accuracy drop against the noise frequency, per model (Fig. 2b).

    Args:
        results: `{name: [noise_robustness result per seed]}`, all of one
            protocol.
    """
    first = next(iter(results.values()))[0]
    authors = first.get("protocol", "equal_energy") == "authors"
    if authors:
        centres = np.asarray(first["frequencies"]) / np.pi
        rms = np.asarray(first["noise_rms"])
        caption = (
            "Robustness to frequency-band noise (Park & Kim 2022, Fig. 2b), "
            f"the authors' protocol: sign noise ±{first['epsilon']:.3g} per "
            f"value in a square annulus of half-width {first['width']:.2g} rad "
            "around each frequency, not renormalised (its RMS grows from "
            f"{rms[0]:.3g} at 0 to {rms[-1]:.3g} at π); accuracy drop, mean over "
            "seeds (bars: min to max). Park & Kim find ViTs hurt by "
            "low-frequency noise and robust to high-frequency noise, ResNets "
            "the other way round."
        )
    else:
        centres = np.asarray(first["bands"]).mean(axis=1)
        caption = (
            "Robustness to frequency-band noise, the equal-energy variant: "
            f"Gaussian noise of L2 norm {first['norm']:.3g} per image, "
            "restricted to a band of radial frequencies; accuracy drop, mean "
            "over seeds (bars: min to max). Park & Kim (Fig. 2b) find ViTs "
            "hurt by low-frequency noise, ResNets by high-frequency noise."
        )
    figure = new_figure(6.0, 3.2, caption)
    ax = figure.subplots()
    for colour, (name, runs) in enumerate(results.items()):
        drops = 100 * np.array([np.asarray(r["accuracy_drop"]) for r in runs])
        ax.errorbar(
            centres,
            drops.mean(axis=0),
            yerr=[drops.mean(axis=0) - drops.min(0), drops.max(0) - drops.mean(0)],
            color=f"C{colour}",
            marker="o",
            ms=3,
            capsize=2,
            label=name,
        )
    ax.axhline(0, color="k", lw=0.6)
    ax.set_xlabel("noise frequency (× π)")
    ax.set_ylabel("accuracy drop (points)")
    ax.legend(fontsize=7)
    return CaptionedFigure(figure, caption)


def plot_distance_comparison(results: dict) -> CaptionedFigure:
    """Mean attention distance of each attention block's heads, per model.

    Args:
        results: `{name: [attention_distance_by_depth result per seed]}`;
            models without attention (empty lists) are left out.
    """
    caption = (
        "Mean attention distance (ViT paper Fig. 7 right; for AlterNet within "
        "its attention windows), in pixels of the input, for each head (dots, "
        "all seeds) of each attention block; lines: head mean, averaged over "
        "seeds. x: the block's normalised position among the model's "
        "attention blocks."
    )
    figure = new_figure(6.0, 3.2, caption)
    ax = figure.subplots()
    for colour, (name, runs) in enumerate(results.items()):
        if not runs or not runs[0]["distances"]:
            continue
        depth = _depth_axis(len(runs[0]["distances"]))
        means = []
        for run in runs:
            for x, heads in zip(depth, run["distances"], strict=True):
                ax.scatter(
                    np.full(len(heads), x), heads, s=8, color=f"C{colour}", alpha=0.5
                )
            means.append([np.mean(h) for h in run["distances"]])
        ax.plot(
            depth, np.mean(means, axis=0), color=f"C{colour}", marker="o", label=name
        )
    ax.set_xlabel("normalised attention-block depth")
    ax.set_ylabel("mean attention distance (px)")
    if ax.get_legend_handles_labels()[1]:
        ax.legend(fontsize=7)
    else:
        ax.text(0.5, 0.5, "no attention blocks", ha="center", transform=ax.transAxes)
    return CaptionedFigure(figure, caption)
