"""The report of Park & Kim's comparison: its tables, figures and records.

`write` turns the panels of `keras-vit compare` (`keras_vit.parkkim.panel`,
one per model and seed) into the verdicts (`keras_vit.parkkim.claims`) and
writes, in the run directory: `claims.md` (the verdict on each claim),
`table.md` (the numbers per model, mean ± sd over seeds), `results.json`
(everything, strict JSON), the figures (`fourier.png`, `variance.png`,
`hessian.png`, `hessian_clean.png` when measured, `noise.png`,
`distance.png`, `landscape_<model>.png`) and `tensorboard/comparison`.

Example:

```python
from keras_vit.parkkim import report

summary = report.write(config, {"vit": [panel, ...], "resnet": [...]},
                       "runs/compare", seconds=1800.0, images=512)
summary["claims"][0]["verdict"]
```
"""

from __future__ import annotations

import dataclasses
import math
import os

from keras_vit.parkkim.config import AUTHORS_MODELS
from keras_vit.parkkim.config import ROLES
from keras_vit.parkkim.config import TITLES
from keras_vit.parkkim.config import CompareConfig


def write(config: CompareConfig, panels: dict, out: str, seconds: float, images: int):
    from keras_vit.parkkim import claims as verdicts

    # One model per role (`check_roles`).
    roles = {ROLES[name]: runs for name, runs in panels.items()}
    claims = verdicts.claims(roles, images=images)
    rows = [_row(name, runs) for name, runs in panels.items()]
    claims_md = _claims_markdown(claims, config)
    table_md = _table_markdown(rows, config, seconds)
    figures = _figures(panels, out)
    summary = {
        "claims": claims,
        "rows": rows,
        "settings": to_json(dataclasses.asdict(config)),
        "seconds": seconds,
        "panels": panels,
    }
    from keras_vit import atomic

    atomic.write_text(os.path.join(out, "claims.md"), claims_md)
    atomic.write_text(os.path.join(out, "table.md"), table_md)
    atomic.write_json(os.path.join(out, "results.json"), finite(summary))
    _tensorboard(os.path.join(out, "tensorboard"), claims_md + "\n" + table_md, figures)
    _say(config, "\n" + claims_md + "\n" + table_md)
    return summary


def _row(name: str, runs: list) -> dict:
    import numpy as np

    def stat(values):
        values = np.asarray([v for v in values if v is not None], "float64")
        if not values.size:
            return None
        sd = float(values.std(ddof=1)) if values.size > 1 else 0.0
        return [float(values.mean()), sd, float(values.min()), float(values.max())]

    top = [np.abs(np.asarray(r["hessian"]["eigenvalues"])[:, 0]) for r in runs]
    clean = [
        np.abs(np.asarray(r["hessian_clean"]["eigenvalues"])[:, 0])
        for r in runs
        if r.get("hessian_clean")
    ]
    return {
        "model": name,
        "parameters": runs[0]["parameters"],
        "seeds": len(runs),
        "test_accuracy": stat(r["test_accuracy"] for r in runs),
        "hessian_median": stat(np.median(t) for t in top),
        "hessian_clean_median": stat(np.median(c) for c in clean) if clean else None,
        "hessian_loss": stat(r["hessian"]["mean_loss"] for r in runs),
        "l2_max_curvature": stat(r["hessian"]["l2_max_curvature"] for r in runs),
        "hessian_data_loss": stat(np.mean(r["hessian"]["data_loss"]) for r in runs),
        "negative_share": stat(
            (np.asarray(r["hessian"]["eigenvalues"]) < 0).mean() for r in runs
        ),
        "hessian_smallest": stat(
            np.median(r["hessian"]["smallest"])
            for r in runs
            if r["hessian"].get("smallest") is not None
        ),
        "train_seconds": stat(r["train_seconds"] for r in runs),
    }


def _fmt(stat, scale=1.0, digits=3):
    if stat is None:
        return "–"
    mean, sd = stat[0] * scale, stat[1] * scale
    if sd > 1e-9 * abs(mean):  # not a spread of round-off
        return f"{mean:.{digits}g} ± {sd:.2g}"
    return f"{mean:.{digits}g}"


def _claims_markdown(claims: list, config: CompareConfig) -> str:
    lines = [
        "| claim (Park & Kim 2022) | figure | here | verdict |",
        "|---|---|---|---|",
    ]
    for row in claims:
        cells = [row["claim"], row["figure"], row["evidence"], f"**{row['verdict']}**"]
        # A "|" of the text ("median |top eigenvalue|") would end its cell.
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    authors = any(name in AUTHORS_MODELS for name in config.models)
    note = (
        f"\nDataset {config.dataset} at {config.image_size} px; "
        + ", ".join(
            f"{TITLES[ROLES.get(m, m)]} {config.seeds_of(m)} seed(s)"
            for m in config.models
            if m not in AUTHORS_MODELS
        )
        + (" (one run of each of the authors' models)" if authors else "")
        + ". A claim about one model is reproduced when it holds for every seed, "
        "one that compares two models when it holds for every pair of their "
        'runs (each seed of one against each seed of the other); "mixed (k '
        'of n ...)" counts them. The noise claim calls a difference within '
        "its standard error not distinguishable (paired image by image when "
        "the models saw the same test images). Each verdict names its "
        "statistic and its regime. Protocols: the authors' "
        "(keras_vit.parkkim.claims).\n"
    )
    return "\n".join(lines) + "\n" + note


def _table_markdown(rows: list, config: CompareConfig, seconds: float) -> str:
    lines = [
        "| model | parameters | test accuracy % | Hessian median top eigenvalue "
        "(training loss; clean, no L2) | median smallest eigenvalue | L2 term's "
        "largest curvature | loss at the Hessian batches (data) | negative "
        "among the top eigenvalues | training time |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        lines.append(
            f"| {TITLES[row['model']]} | {row['parameters']:,} | "
            f"{_fmt(row['test_accuracy'], 100, 4)} | "
            f"{_fmt(row['hessian_median'])}; {_fmt(row['hessian_clean_median'])} | "
            f"{_fmt(row.get('hessian_smallest'))} | "
            f"{_fmt(row['l2_max_curvature'])} | "
            f"{_fmt(row['hessian_loss'])} ({_fmt(row['hessian_data_loss'])}) | "
            f"{_fmt(row['negative_share'], 100)} % | "
            f"{_fmt(row['train_seconds'])} s |"
        )
    l2 = {
        "squared": "weight decay / 2 × the sum of the weights' squared norms, "
        "the coupled weight decay of PyHessian's weight_decay: it adds the "
        "weight decay to every eigenvalue",
        "norm": "weight decay × the sum of the weights' norms, the authors' "
        "ops/norm.py: it adds up to its largest curvature to an eigenvalue; a "
        "median near it is the L2 term's",
    }[config.analysis.hessian_l2]
    return (
        "\n".join(lines) + f"\n\nMean ± sd over seeds. The L2 term ({l2}). "
        f"Whole command: {seconds / 60:.1f} min.\n"
    )


def _figures(panels: dict, out: str) -> dict:
    from keras_vit import atomic
    from keras_vit.analysis import plotting
    from keras_vit.parkkim import plotting as pc

    titled = {TITLES[name]: runs for name, runs in panels.items()}
    figures = {
        "fourier": pc.plot_depth_comparison(
            {k: [r["depth"] for r in v] for k, v in titled.items()}, "delta"
        ),
        "variance": pc.plot_depth_comparison(
            {k: [r["depth"] for r in v] for k, v in titled.items()}, "variance"
        ),
        "hessian": pc.plot_hessian_density(
            {k: [r["hessian"]["eigenvalues"] for r in v] for k, v in titled.items()},
            protocol="authors",
        ),
        "noise": pc.plot_noise_comparison(
            {k: [r["noise"] for r in v] for k, v in titled.items()}
        ),
        "distance": pc.plot_distance_comparison(
            {k: [r["distances"] for r in v] for k, v in titled.items()}
        ),
    }
    clean = {
        k: [r["hessian_clean"]["eigenvalues"] for r in v]
        for k, v in titled.items()
        if all(r.get("hessian_clean") for r in v)
    }
    if clean:
        figures["hessian_clean"] = pc.plot_hessian_density(clean, protocol="clean")
    for name, runs in panels.items():
        if runs[0].get("landscape") is not None:
            figures[f"landscape_{name}"] = plotting.plot_loss_landscape(
                _landscape_arrays(runs[0]["landscape"]), title=TITLES[name]
            )
    for stem, figure in figures.items():
        path = os.path.join(out, f"{stem}.png")
        atomic.atomic_write(path, lambda p, f=figure: plotting.save_figure(f, p))
    return figures


def _landscape_arrays(landscape: dict) -> dict:
    import numpy as np

    return {
        k: np.asarray(v) if isinstance(v, list) else v for k, v in landscape.items()
    }


def _tensorboard(log_dir: str, text: str, figures: dict) -> None:
    import numpy as np
    import tensorflow as tf

    from keras_vit.analysis.plotting import figure_to_array

    writer = tf.summary.create_file_writer(os.path.join(log_dir, "comparison"))
    with writer.as_default():
        tf.summary.text("tables", text, step=0)
        for stem, figure in figures.items():
            image = figure_to_array(figure)[None].astype(np.uint8)
            tf.summary.image(stem, image, step=0, description=figure.caption)
    writer.flush()


def _say(config: CompareConfig, message: str) -> None:
    if config.verbose:
        print(message, flush=True)  # noqa: T201


def to_json(value):
    """`value` with NumPy arrays and scalars as JSON lists and numbers."""
    import numpy as np

    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(v) for v in value]
    if isinstance(value, np.ndarray):
        return to_json(value.tolist())
    if isinstance(value, np.generic):
        return value.item()
    return value


def finite(value):
    """`value` with every non-finite float as `None` (strict JSON)."""
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [finite(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
