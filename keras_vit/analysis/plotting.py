"""Matplotlib figures for the analyses, each with a caption.

Needs matplotlib (`pip install matplotlib`). Figures are built on
`matplotlib.figure.Figure` with the Agg canvas: no pyplot state, no display.
Every `plot_*` function returns a `CaptionedFigure`: the figure, with its
caption drawn under the plot, and the caption text (for TensorBoard or a
document).

Example:

```python
from keras_vit.analysis import attention_distances, plotting

result = plotting.plot_attention_distance(attention_distances(model, images))
plotting.save_figure(result, "distance.png")
```
"""

from __future__ import annotations

import textwrap
from typing import NamedTuple

import numpy as np

from keras_vit import atomic
from keras_vit.analysis.filters import PrincipalComponents
from keras_vit.analysis.filters import components_as_rgb
from keras_vit.analysis.position_similarity import similarity_grid

_CHARS_PER_INCH = 13  # caption characters per inch of figure width
_LINE_INCHES = 0.17


class CaptionedFigure(NamedTuple):
    """A figure and its caption.

    Attributes:
        figure: A `matplotlib.figure.Figure` (caption drawn at the bottom).
        caption: The caption text.
    """

    figure: object
    caption: str


def _matplotlib():
    try:
        import matplotlib  # noqa: F401
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(
            "keras_vit.analysis.plotting needs matplotlib: pip install matplotlib"
        ) from None
    return Figure, FigureCanvasAgg


def new_figure(width: float, height: float, caption: str, axis_labels: bool = True):
    """A figure of `width x height` inches of plot, plus room for the caption.

    The figure every `plot_*` function draws on: a
    `matplotlib.figure.Figure` on the Agg canvas (no pyplot state), its
    caption wrapped to the width and drawn under the plot, and its subplot
    area placed above the caption. Add axes with `figure.add_subplot` and
    return `CaptionedFigure(figure, caption)`.

    Args:
        width: Width of the plot, in inches.
        height: Height of the plot, in inches, without the caption.
        caption: The caption text.
        axis_labels: Leave room for tick and axis labels under the plot;
            image grids without axes need none. Defaults to `True`.

    Example:

    ```python
    figure = plotting.new_figure(4.6, 3.0, "Loss by epoch.")
    axes = figure.add_subplot(1, 1, 1)
    axes.plot([1.0, 0.5, 0.3])
    plotting.save_figure(plotting.CaptionedFigure(figure, "Loss by epoch."), "loss.png")
    ```
    """
    figure_class, canvas_class = _matplotlib()
    lines = textwrap.wrap(caption, max(40, int(width * _CHARS_PER_INCH)))
    caption_height = _LINE_INCHES * len(lines) + 0.15
    total = height + caption_height
    figure = figure_class(figsize=(width, total), dpi=100)
    canvas_class(figure)
    figure.text(
        0.5,
        0.06 / total,
        "\n".join(lines),
        ha="center",
        va="bottom",
        fontsize=7.5,
        linespacing=1.25,
    )
    bottom = (caption_height + (0.45 if axis_labels else 0.05)) / total
    left = 0.7 / width if axis_labels else 0.02
    figure.subplots_adjust(
        bottom=bottom, top=1 - 0.3 / total, left=left, right=1 - 0.2 / width
    )
    return figure


def save_figure(result: CaptionedFigure, path: str, dpi: int = 100) -> str:
    """Writes a `CaptionedFigure` as a PNG with its caption as metadata.

    The file is written whole or not at all (a temporary file renamed over
    `path`): a failure leaves an earlier file as it was.

    Returns:
        `path`.
    """

    def write(partial):
        result.figure.savefig(
            partial, dpi=dpi, format="png", metadata={"Description": result.caption}
        )

    return atomic.atomic_write(str(path), write)


def figure_to_array(result: CaptionedFigure, dpi: int = 100) -> np.ndarray:
    """Renders a figure to an RGB `uint8` array `(height, width, 3)`."""
    figure = result.figure
    figure.set_dpi(dpi)
    figure.canvas.draw()
    return np.asarray(figure.canvas.buffer_rgba())[..., :3].copy()


def plot_attention_heads(
    image,
    scores,
    grid_size: tuple[int, int],
    num_prefix_tokens: int = 1,
    block_index: int | None = None,
    value_range: tuple[float, float] = (-1.0, 1.0),
) -> CaptionedFigure:
    """The attention of the class token (or mean patch query) per head.

    Args:
        image: `(height, width, channels)` in `value_range`.
        scores: One image's attention of one block, `(heads, N, N)`.
        grid_size: The patch grid `(h, w)`.
        num_prefix_tokens: Tokens before the patches.
        block_index: Shown in the title and caption.
        value_range: Range of `image`.
    """
    scores = np.asarray(scores)
    if scores.ndim != 3:
        raise ValueError(f"Expected scores (heads, N, N). Received: {scores.shape}")
    heads = scores.shape[0]
    if num_prefix_tokens:
        rows = scores[:, 0, num_prefix_tokens:]  # (H, P)
        query = "the class token"
    else:
        rows = scores[:, :, :].mean(axis=1)
        query = "the mean patch query"
    maps = rows.reshape(heads, *grid_size)
    where = "" if block_index is None else f" of block {block_index}"
    caption = (
        f"Attention weights{where}: for each of the {heads} heads, how much "
        f"{query} attends to each patch (brighter = more). Left: the input."
    )
    figure = new_figure(1.6 * (heads + 1), 1.7, caption, axis_labels=False)
    axes = figure.subplots(1, heads + 1)
    low, high = value_range
    shown = np.clip((np.asarray(image, "float32") - low) / (high - low), 0, 1)
    axes[0].imshow(shown.squeeze(), cmap="gray" if shown.shape[-1] == 1 else None)
    axes[0].set_title("input", fontsize=8)
    for head in range(heads):
        axes[head + 1].imshow(maps[head], cmap="inferno")
        axes[head + 1].set_title(f"head {head}", fontsize=8)
    for ax in axes:
        ax.set_axis_off()
    return CaptionedFigure(figure, caption)


def plot_rollout(images, overlays, titles: list[str] | None = None) -> CaptionedFigure:
    """Inputs (top row) and their attention-rollout overlays (bottom row).

    Args:
        images: `(batch, height, width, 3)` `uint8` RGB (e.g. `overlay` with
            `alpha=0`) or floats in `[0, 1]`.
        overlays: `(batch, height, width, 3)` from `keras_vit.analysis.overlay`.
        titles: Optional title per column (e.g. the predicted class).
    """
    images, overlays = np.asarray(images), np.asarray(overlays)
    if images.shape != overlays.shape or images.ndim != 4:
        raise ValueError(
            f"images {images.shape} and overlays {overlays.shape} must both be "
            "(batch, height, width, 3)."
        )
    count = len(images)
    caption = (
        "Attention rollout (ViT paper, Appendix D): the class token's attention "
        "propagated through all blocks (heads averaged, 0.5(A+I) for the "
        "residual, rows renormalised), resized to the image. Top: input; "
        "bottom: rollout over the input (bright = attended)."
    )
    figure = new_figure(1.3 * count + 0.2, 2.6, caption, axis_labels=False)
    axes = figure.subplots(2, count, squeeze=False)
    for column in range(count):
        axes[0, column].imshow(images[column])
        axes[1, column].imshow(overlays[column])
        if titles:
            axes[0, column].set_title(titles[column], fontsize=8)
        axes[0, column].set_axis_off()
        axes[1, column].set_axis_off()
    return CaptionedFigure(figure, caption)


def plot_attention_distance(
    distances, blocks: list[int] | None = None
) -> CaptionedFigure:
    """Mean attention distance per head against depth (ViT paper, Fig. 7 right).

    Args:
        distances: `(blocks, heads)` in pixels, from `attention_distances`.
        blocks: The block index of each row. Defaults to `0, 1, ...`.
    """
    distances = np.asarray(distances)
    if distances.ndim != 2:
        raise ValueError(f"Expected (blocks, heads). Received: {distances.shape}")
    blocks = list(range(len(distances))) if blocks is None else list(blocks)
    first, last = distances[0].mean(), distances[-1].mean()
    caption = (
        "Mean attention distance (ViT paper, Fig. 7 right): for each head (one "
        "dot) of each block, the pixel distance between a query patch and the "
        "patches it attends to, weighted by attention; class token excluded. "
        f"Head mean: {first:.1f} px in block {blocks[0]}, {last:.1f} px in "
        f"block {blocks[-1]}."
    )
    figure = new_figure(4.6, 3.0, caption)
    ax = figure.subplots()
    for row, block in zip(distances, blocks, strict=True):
        ax.scatter(np.full(len(row), block), row, s=14, alpha=0.8)
    ax.set_xlabel("block (network depth)")
    ax.set_ylabel("mean attention distance (px)")
    ax.set_ylim(0, 1.1 * distances.max())
    ax.set_xlim(blocks[0] - 0.5, blocks[-1] + 0.5)
    ax.set_xticks(blocks)
    return CaptionedFigure(figure, caption)


def plot_position_similarity(similarity) -> CaptionedFigure:
    """The grid of grids of position-embedding similarity (Fig. 7 centre).

    Args:
        similarity: `(h, w, h, w)` from `position_embedding_similarity`.
    """
    grid = similarity_grid(similarity, pad=1)
    grid_h, grid_w = np.asarray(similarity).shape[:2]
    caption = (
        "Position-embedding similarity (ViT paper, Fig. 7 centre): tile (i, j) "
        f"shows the cosine similarity of the embedding of patch (i, j) of the "
        f"{grid_h}x{grid_w} grid with every other patch's; near patches and "
        "patches in the same row or column are similar when the 1-D table "
        "has learned the 2-D layout."
    )
    figure = new_figure(4.8, 3.8, caption)
    figure.subplots_adjust(right=0.8)  # room for the colour bar and its label
    ax = figure.subplots()
    shown = ax.imshow(grid, cmap="viridis", vmin=-1, vmax=1)
    ax.set_xticks([i * (grid_w + 1) + grid_w / 2 - 0.5 for i in range(grid_w)])
    ax.set_xticklabels(range(1, grid_w + 1), fontsize=6)
    ax.set_yticks([i * (grid_h + 1) + grid_h / 2 - 0.5 for i in range(grid_h)])
    ax.set_yticklabels(range(1, grid_h + 1), fontsize=6)
    ax.set_xlabel("input patch column")
    ax.set_ylabel("input patch row")
    figure.colorbar(shown, ax=ax, fraction=0.046, pad=0.04, label="cosine similarity")
    return CaptionedFigure(figure, caption)


def plot_embedding_filters(
    components: PrincipalComponents, columns: int = 7
) -> CaptionedFigure:
    """The principal components of the patch embedding (Fig. 7 left).

    Args:
        components: From `embedding_filters`.
        columns: Patches per row. Defaults to 7 (4 rows for 28).
    """
    rgb = components_as_rgb(components.components)
    count = len(rgb)
    rows = -(-count // columns)
    share = float(components.explained_variance_ratio.sum())
    caption = (
        f"RGB embedding filters (ViT paper, Fig. 7 left): the first {count} "
        "principal components of the patch-embedding filters, each scaled to "
        f"[0, 1], largest variance first; together they explain {share:.0%} "
        "of the filters' variance."
    )
    figure = new_figure(
        max(0.55 * columns + 0.4, 4.0), 0.55 * rows + 0.2, caption, axis_labels=False
    )
    axes = figure.subplots(rows, columns, squeeze=False)
    for index, ax in enumerate(axes.flat):
        if index < count:
            ax.imshow(rgb[index], interpolation="nearest")
        ax.set_axis_off()
    return CaptionedFigure(figure, caption)


def plot_fourier(result: dict) -> CaptionedFigure:
    """Relative log amplitude of the feature maps' Fourier transforms.

    Left: the amplitude along the spectrum's diagonal at each depth. Right:
    its last entry (`Δ log amplitude`) against depth, after each attention
    (MSA) and MLP residual.

    Args:
        result: From `feature_map_frequencies`.
    """
    labels, delta = list(result["labels"]), np.asarray(result["delta"])
    profiles = np.asarray(result["profiles"])
    if "frequencies" in result:  # the vertical axis's frequency, × π
        frequencies = np.asarray(result["frequencies"])[:, 0]
    else:
        frequencies = np.linspace(0, 1, profiles.shape[1])
    last = f"{frequencies[-1]:.3g}π"
    definition = (
        "the highest positive frequency, as Park & Kim's notebook"
        if result.get("frequency", "authors") == "authors"
        else "the Nyquist frequency"
    )
    caption = (
        "Fourier analysis of feature maps (Park & Kim 2022, Fig. 2a and 8): log "
        "amplitude of the 2-D FFT of each depth's patch-token map, relative to "
        "frequency 0, averaged over channels and images, along the spectrum's "
        f"diagonal. Left: 0 to {last}, dark = shallow. Right: the value at "
        f"{last} ({definition}); Park & Kim find attention (MSA) lowers it "
        "(low-pass) and MLPs raise it."
    )
    figure = new_figure(7.5, 3.0, caption)
    left, right = figure.subplots(1, 2)
    figure.subplots_adjust(wspace=0.35)
    colours = _colormap("plasma")(np.linspace(0, 0.9, len(profiles)))
    for profile, colour in zip(profiles, colours, strict=True):
        left.plot(frequencies, profile, color=colour, lw=1.2)
    left.set_xlabel("frequency (× π)")
    left.set_ylabel("Δ log amplitude")
    depth = np.arange(len(delta))
    right.plot(depth, delta, color="0.6", lw=1, zorder=1)
    for kind, marker, name in (("msa", "o", "after MSA"), ("mlp", "s", "after MLP")):
        chosen = [i for i, label in enumerate(labels) if label.startswith(kind)]
        if chosen:
            right.scatter(
                chosen, delta[chosen], marker=marker, s=22, label=name, zorder=2
            )
    others = [
        i for i, label in enumerate(labels) if not label.startswith(("msa", "mlp"))
    ]
    right.scatter(
        others, delta[others], marker="D", s=22, color="k", label="other", zorder=2
    )
    right.set_xticks(depth)
    right.set_xticklabels(labels, rotation=90, fontsize=6)
    right.set_ylabel(f"Δ log amplitude at {last}")
    right.legend(fontsize=7)
    return CaptionedFigure(figure, caption)


def plot_hessian_spectrum(eigenvalues) -> CaptionedFigure:
    """The distribution of the top Hessian eigenvalues over batches.

    Args:
        eigenvalues: `(batches, top_k)` (or `(top_k,)`) from
            `hessian_eigenvalues`, or the dict of `hessian_spectrum` (its
            mean loss and L2 setting then join the caption).
    """
    spectrum = eigenvalues if isinstance(eigenvalues, dict) else None
    if spectrum is not None:
        eigenvalues = spectrum["eigenvalues"]
    eigenvalues = np.atleast_2d(np.asarray(eigenvalues, dtype="float64"))
    batches, top_k = eigenvalues.shape
    negative = int((eigenvalues < 0).sum())
    loss = ""
    if spectrum is not None:
        loss = (
            f" Mean loss on those batches {spectrum['mean_loss']:.4g}, with an "
            f"L2 term ({spectrum['l2_form']}) of weight decay "
            f"{spectrum['weight_decay']:.3g}."
        )
    caption = (
        "Hessian max-eigenvalue spectrum (Park & Kim 2022, Fig. 1c): the top "
        f"{top_k} eigenvalues (largest magnitude, power iteration on Hessian-"
        f"vector products) of the training loss on each of {batches} batches. "
        f"Largest: {eigenvalues[:, 0].max():.3g}; {negative} negative "
        f"(non-convexity). Near-zero values mean a flat loss landscape.{loss}"
    )
    figure = new_figure(4.6, 3.0, caption)
    ax = figure.subplots()
    ax.hist(
        eigenvalues.reshape(-1), bins=max(10, min(40, eigenvalues.size)), color="C0"
    )
    ax.axvline(0, color="k", lw=0.8)
    ax.set_xlabel("Hessian eigenvalue")
    ax.set_ylabel("count")
    return CaptionedFigure(figure, caption)


def plot_noise_robustness(result: dict) -> CaptionedFigure:
    """Accuracy drop against the frequency of added noise (Fig. 2b).

    Args:
        result: From `noise_robustness`, either protocol. With the authors'
            protocol the noise RMS of each band is drawn too (right axis).
    """
    drop = np.asarray(result["accuracy_drop"]) * 100
    authors = result.get("protocol") == "authors"
    clean = f"clean: {result['clean_accuracy']:.1%}"
    if authors:
        centres = np.asarray(result["frequencies"]) / np.pi
        rms = np.asarray(result["noise_rms"])
        caption = (
            "Robustness to frequency-band noise (Park & Kim 2022, Fig. 2b): drop "
            f"in accuracy ({clean}) when sign noise ±{result['epsilon']:.3g} "
            f"filtered to a square annulus of half-width {result['width']:.3g} "
            "rad around each frequency, not renormalised (the authors' "
            f"protocol), is added; its RMS (right axis, line) grows from "
            f"{rms[0]:.3g} to {rms[-1]:.3g}. Park & Kim find ViTs hurt more by "
            "low-frequency noise, ResNets by high-frequency noise."
        )
    else:
        bands = np.asarray(result["bands"])
        centres = bands.mean(axis=1)
        caption = (
            "Robustness to frequency-band noise (Park & Kim 2022, Fig. 2b, "
            f"equal-energy variant): drop in accuracy ({clean}) when Gaussian "
            f"noise of L2 norm {result['norm']:.3g} per image, restricted to a "
            "band of radial frequencies, is added. Park & Kim find ViTs hurt "
            "more by low-frequency noise."
        )
    figure = new_figure(4.6, 3.0, caption)
    ax = figure.subplots()
    if authors:
        ax.plot(centres, drop, marker="o", ms=3, color="C3")
        twin = ax.twinx()
        twin.plot(centres, rms, color="0.5", lw=0.8, ls="--")
        twin.set_ylabel("noise RMS", fontsize=7)
    else:
        widths = (bands[:, 1] - bands[:, 0]) * 0.9
        ax.bar(centres, drop, width=widths, color="C3")
    ax.axhline(0, color="k", lw=0.8)
    ax.set_xlabel("noise frequency (× π)")
    ax.set_ylabel("accuracy drop (percentage points)")
    return CaptionedFigure(figure, caption)


def plot_loss_landscape(result: dict, title: str | None = None) -> CaptionedFigure:
    """The loss landscape as a surface and as contours (Park & Kim, Fig. 1a).

    Args:
        result: From `keras_vit.analysis.loss_landscape`.
        title: The model's name, put before the caption.
    """
    xs, ys = np.asarray(result["x"]), np.asarray(result["y"])
    loss = np.asarray(result["loss"], dtype="float64")
    finite = np.isfinite(loss)
    if not finite.any():
        raise ValueError("The landscape holds no finite loss.")
    relative = loss - loss[finite].min()
    centre = np.unravel_index(
        np.argmin(np.abs(xs) + np.abs(ys)), xs.shape
    )  # the trained weights, (0, 0) on a grid through it
    decay = result.get("weight_decay", 0.0)
    term = f"NLL + {decay:.3g} · L2" if decay else "NLL"
    caption = (
        (f"{title}. " if title else "")
        + "Loss landscape (Park & Kim 2022, Fig. 1a; Li et al. 2018): the "
        f"training loss ({term}, L2 = sum of the weights' norms) on the "
        "augmented training set, with the weights moved along two random "
        "filter-normalised directions; relative to its minimum "
        f"({loss[finite].min():.4g}). At the trained weights: loss "
        f"{loss[centre]:.4g}, accuracy {result['accuracy'][centre]:.1%}. A "
        "flatter bowl is a flatter landscape."
    )
    figure = new_figure(7.5, 3.4, caption)
    surface = figure.add_subplot(1, 2, 1, projection="3d")
    colours = _colormap("plasma")(
        (relative - np.nanmin(relative)) / max(np.nanmax(relative), 1e-12)
    )
    surface.plot_surface(xs, ys, relative, facecolors=colours, shade=False)
    surface.view_init(elev=15, azim=15)
    surface.set_xlabel("x", fontsize=7)
    surface.set_ylabel("y", fontsize=7)
    surface.tick_params(labelsize=6)
    contour = figure.add_subplot(1, 2, 2)
    filled = contour.contourf(xs, ys, relative, levels=20, cmap="plasma")
    contour.plot([xs[centre]], [ys[centre]], "w+", ms=8)
    figure.colorbar(filled, ax=contour, label="loss − minimum")
    contour.set_xlabel("x (direction 1)")
    contour.set_ylabel("y (direction 2)")
    contour.set_aspect("equal")
    return CaptionedFigure(figure, caption)


def _colormap(name: str):
    from matplotlib import colormaps

    return colormaps[name]
