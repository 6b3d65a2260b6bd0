"""Turns the measured cases into tables (text, markdown), targets and a chart."""

from __future__ import annotations

import statistics
from collections import OrderedDict

from flops import forward_flops
from flops import step_flops

LABELS = {
    "keras_vit": "keras_vit",
    "timm": "timm",
    "keras_hub": "keras-hub",
    "data": "data",
}
COLORS = {
    "keras_vit": "#d62728",
    "timm": "#1f77b4",
    "keras_hub": "#7f7f7f",
    "data": "#2ca02c",
}
PEERS = ("timm", "keras_hub")


def derive(rows: list[dict], machine) -> list[dict]:
    """Adds img/s, GFLOP/s, fraction of peak and the ratio to the best peer.

    Each row is a case's fields plus its result; rows of a failed case carry
    `error` and are kept as such.
    """
    for row in rows:
        if "error" in row:
            continue
        row["img_s"] = row["batch"] / row["median_s"]
        row["cpu_s_per_img"] = row["cpu_s"] / row["batch"]
        if row["task"] != "data":
            flops = step_flops(row["task"], row["variant"], row["image_size"])
            row["gflops"] = flops * row["img_s"] / 1e9
            if row["precision"] != "int8":  # no int8 peak is modelled
                peak = machine.peak_gflops(row["precision"])
                row["peak_fraction"] = row["gflops"] / peak
    for members in group(rows).values():
        peers = [r["img_s"] for r in members if r["impl"] in PEERS and "img_s" in r]
        best = max(peers) if peers else None
        for row in members:
            if best and "img_s" in row:
                row["vs_best_peer"] = row["img_s"] / best
    return rows


def scenario_of(row: dict) -> tuple:
    return (
        row["task"],
        row["variant"],
        row["image_size"],
        row["batch"],
        row["precision"],
    )


def scenario_title(row: dict) -> str:
    """What a table measures, ending with the CPU class it was measured on."""
    isa = f", {row['isa']}" if row.get("isa") else ""
    if row["task"] == "data":
        return f"input pipeline @{row['image_size']} batch {row['batch']}{isa}"
    task = "inference" if row["task"] == "infer" else "training step (AdamW)"
    return (
        f"{task} ViT-{row['variant']} @{row['image_size']} batch {row['batch']} "
        f"{row['precision']}{isa}"
    )


def group(rows: list[dict]) -> OrderedDict:
    groups = OrderedDict()
    for row in rows:
        groups.setdefault(scenario_of(row), []).append(row)
    return groups


def mode_label(row: dict) -> str:
    # XLA's kernels ignore an emulated ISA cap (benchmark.py --max-isa).
    uncapped = " (not capped)" if row.get("uncapped") else ""
    return f"{LABELS[row['impl']]} {row['mode']}{uncapped}"


def _cells(row: dict) -> list[str]:
    if "error" in row:
        return [mode_label(row), "failed: " + row["error"][:80], "", "", "", "", "", ""]
    ratio = row.get("vs_best_peer")
    peak = row.get("peak_fraction")
    return [
        mode_label(row),
        f"{row['img_s']:.2f}",
        f"{ratio:.2f}x" if ratio else "",
        f"{100 * peak:.0f}%" if peak is not None else "",
        f"{row['cpu_s_per_img']:.3f}",
        f"{row['first_call_s']:.1f}",
        f"{row['peak_rss_mb']:.0f}",
        f"{row['runtime_rss_mb']:.0f}",
    ]


HEADER = [
    "implementation, mode",
    "img/s",
    "vs best peer",
    "% of peak",
    "CPU s/img",
    "1st call s",
    "peak RSS MB",
    "runtime MB",
]


def text_table(rows: list[dict]) -> str:
    table = [
        (members[0], [_cells(row) for row in members])
        for members in group(rows).values()
    ]
    cells = [HEADER] + [line for _, lines in table for line in lines]
    # A failed case's message spills over the empty cells after it.
    measured = [line for line in cells if not line[1].startswith("failed: ")]
    widths = [max(len(line[i]) for line in measured) + 2 for i in range(len(HEADER))]
    lines = []
    for first, body in table:
        lines += ["", scenario_title(first)]
        for line in [HEADER] + body:
            lines.append(
                "  "
                + "".join(
                    c.ljust(w) for c, w in zip(line, widths, strict=False)
                ).rstrip()
            )
    return "\n".join(lines)


def markdown_table(rows: list[dict]) -> str:
    lines = [
        "| case | " + " | ".join(HEADER) + " |",
        "|" + "---|" * (len(HEADER) + 1),
    ]
    for members in group(rows).values():
        title = scenario_title(members[0])
        for row in members:
            cells = _cells(row)
            if row["impl"] == "keras_vit":
                cells[0] = f"**{cells[0]}**"
                cells[1] = f"**{cells[1]}**"
            lines.append(f"| {title} | " + " | ".join(cells) + " |")
            title = ""
    return "\n".join(lines)


def _best(rows, impl, **where):
    found = [
        r
        for r in rows
        if r["impl"] == impl
        and "img_s" in r
        and not r.get("uncapped")
        and all(r[k] == v for k, v in where.items())
    ]
    return max(found, key=lambda r: r["img_s"]) if found else None


def above(row: dict) -> float:
    """Peak RSS above the imported framework (model, graphs, activations)."""
    return row["peak_rss_mb"] - row["runtime_rss_mb"]


def targets(rows: list[dict]) -> list[tuple[str, str, bool | None]]:
    """The issue's targets, each as (what, measured, met or None if unmeasured)."""
    out = []
    for scenario, members in group(rows).items():
        task, variant, size, batch, precision = scenario
        if task == "data":
            continue
        ours, timm = _best(members, "keras_vit"), _best(members, "timm")
        if not ours or not timm:
            continue
        goal = 1.1 if (task == "infer" and precision == "float32") else 1.0
        ratio = ours["img_s"] / timm["img_s"]
        what = (
            f"{'inference' if task == 'infer' else 'training'} "
            f"{variant}@{size} b{batch} "
            f"{precision}: keras_vit >= {goal}x timm's best mode"
        )
        measured = (
            f"{ratio:.2f}x ({ours['mode']} {ours['img_s']:.2f} vs {timm['mode']} "
            f"{timm['img_s']:.2f} img/s)"
        )
        out.append((what, measured, ratio >= goal))
        if task == "train":
            out += _training_cost_targets(members, variant, size, batch, precision)
        if task == "infer":
            ours_mem = [
                r
                for r in members
                if r["impl"] == "keras_vit"
                and "+xla" not in r["mode"]
                and "img_s" in r
                and not r.get("uncapped")
            ]
            timm_eager = _best(members, "timm", mode="eager")
            if ours_mem and timm_eager:
                lean = min(ours_mem, key=lambda r: r["peak_rss_mb"])
                out.append(
                    (
                        f"memory {variant}@{size} b{batch} {precision}: "
                        "keras_vit peak RSS "
                        "<= timm's",
                        f"{lean['peak_rss_mb']:.0f} ({lean['mode']}) vs "
                        f"{timm_eager['peak_rss_mb']:.0f} MB; above the framework "
                        f"runtime {above(lean):.0f} vs {above(timm_eager):.0f} MB",
                        lean["peak_rss_mb"] <= timm_eager["peak_rss_mb"],
                    )
                )
    out += _int8_targets(rows)
    steps = [r for r in rows if r["impl"] == "keras_vit" and r["task"] == "train"]
    steps = [r for r in steps if "img_s" in r]
    for pipe in (r for r in rows if r["task"] == "data" and "img_s" in r):
        if not steps:
            break
        fastest = max(steps, key=lambda r: r["img_s"])  # the hardest to feed
        ratio = pipe["img_s"] / fastest["img_s"]
        out.append(
            (
                f"input pipeline ({pipe['mode']}) >= 5x the fastest keras_vit training "
                f"step ({fastest['variant']} {fastest['precision']} {fastest['mode']})",
                f"{ratio:.1f}x ({pipe['img_s']:.0f} vs {fastest['img_s']:.2f} img/s)",
                ratio >= 5,
            )
        )
    return out


def _int8_targets(rows):
    """int8 inference >= 1.5x our float32 and >= timm's best mode of any
    precision (same model, size and batch)."""
    out = []
    for ours in rows:
        if ours["impl"] != "keras_vit" or ours["precision"] != "int8":
            continue
        if "img_s" not in ours:
            continue
        where = {k: ours[k] for k in ("task", "variant", "image_size", "batch")}
        name = f"{ours['variant']}@{ours['image_size']} b{ours['batch']}"
        float32 = _best(rows, "keras_vit", precision="float32", mode="predict", **where)
        if float32:
            ratio = ours["img_s"] / float32["img_s"]
            out.append(
                (
                    f"int8 inference {name}: keras_vit {ours['mode']} >= 1.5x "
                    "keras_vit float32",
                    f"{ratio:.2f}x ({ours['img_s']:.2f} vs {float32['img_s']:.2f} "
                    "img/s)",
                    ratio >= 1.5,
                )
            )
        timm = _best(rows, "timm", **where)
        if timm:
            ratio = ours["img_s"] / timm["img_s"]
            out.append(
                (
                    f"int8 inference {name}: keras_vit {ours['mode']} >= timm's "
                    "best mode of any precision",
                    f"{ratio:.2f}x ({ours['img_s']:.2f} vs {timm['precision']} "
                    f"{timm['mode']} {timm['img_s']:.2f} img/s)",
                    ratio >= 1.0,
                )
            )
    return out


# The first training step (compile, then the first train_on_batch) against
# timm's first eager step: at most this many times as long.
FIRST_STEP_GOALS = {"float32": 1.5, "bfloat16": 2.0}


def _training_cost_targets(members, variant, size, batch, precision):
    """Memory above the runtime <= timm's, first step within FIRST_STEP_GOALS
    of timm's (eager)."""
    ours = [
        r
        for r in members
        if r["impl"] == "keras_vit" and r["mode"] == "train" and "img_s" in r
    ]
    timm = _best(members, "timm", mode="eager")
    if not ours or not timm:
        return []
    ours = ours[0]
    name = f"{variant}@{size} b{batch} {precision}"
    first_ratio = ours["first_call_s"] / timm["first_call_s"]
    goal = FIRST_STEP_GOALS.get(precision, 2.0)
    cpu = (
        f"; CPU {ours['first_call_cpu_s']:.1f} vs {timm['first_call_cpu_s']:.1f} s"
        if "first_call_cpu_s" in ours and "first_call_cpu_s" in timm
        else ""
    )
    return [
        (
            f"training memory {name}: keras_vit peak RSS above the runtime <= timm's",
            f"{above(ours):.0f} vs {above(timm):.0f} MB "
            f"({above(ours) / above(timm):.2f}x; total {ours['peak_rss_mb']:.0f} vs "
            f"{timm['peak_rss_mb']:.0f} MB)",
            above(ours) <= above(timm),
        ),
        (
            f"first training step {name}: keras_vit <= {goal}x timm's",
            f"{ours['first_call_s']:.1f} vs {timm['first_call_s']:.1f} s "
            f"({first_ratio:.2f}x{cpu})",
            first_ratio <= goal,
        ),
    ]


def targets_text(rows: list[dict], markdown: bool = False) -> str:
    lines = []
    for what, measured, met in targets(rows):
        verdict = "met" if met else "MISSED"
        lines.append(
            f"- {what}: {measured} -> {verdict}"
            if markdown
            else f"  [{verdict:6}] {what}: {measured}"
        )
    return "\n".join(lines)


def scaling(rows: list[dict]) -> list[dict]:
    """Cost per image at 224, 384 and 512 px (B/16, batch 8, float32) vs FLOPs."""
    out = []
    for impl, mode in (("keras_vit", "predict"), ("timm", "eager")):
        base = None
        for size in (224, 384, 512):
            row = _best(
                rows,
                impl,
                task="infer",
                variant="B/16",
                image_size=size,
                batch=8,
                precision="float32",
                mode=mode,
            )
            if not row:
                continue
            if size == 224:
                base = row
            if not base:
                continue
            out.append(
                {
                    "impl": impl,
                    "image_size": size,
                    "tokens": (size // 16) ** 2 + 1,
                    "flops_ratio": forward_flops("B/16", size)
                    / forward_flops("B/16", 224),
                    "time_ratio": base["img_s"] / row["img_s"],
                    "cpu_ratio": row["cpu_s"] / base["cpu_s"],
                    "img_s": row["img_s"],
                }
            )
    return out


def scaling_markdown(rows: list[dict]) -> str:
    table = [r for r in scaling(rows) if r["image_size"] != 224]
    table = [r for r in scaling(rows) if any(t["impl"] == r["impl"] for t in table)]
    if not table:
        return ""
    lines = [
        "| implementation | image size | tokens | FLOPs vs 224 | time/img vs 224 "
        "| CPU s/img vs 224 | img/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in table:
        lines.append(
            f"| {LABELS[r['impl']]} | {r['image_size']} | {r['tokens']} | "
            f"{r['flops_ratio']:.2f}x | {r['time_ratio']:.2f}x | "
            f"{r['cpu_ratio']:.2f}x | {r['img_s']:.2f} |"
        )
    return "\n".join(lines)


def merge_rounds(rounds: list[list[dict]]) -> list[dict]:
    """One row per case: the median over rounds of each case's median step."""
    merged = []
    for same in zip(*rounds, strict=True):
        ok = [r for r in same if "error" not in r]
        if not ok:
            merged.append(same[0])
            continue
        row = dict(ok[0])
        row["median_s"] = statistics.median(r["median_s"] for r in ok)
        row["cpu_s"] = statistics.median(r["cpu_s"] for r in ok)
        row["peak_rss_mb"] = max(r["peak_rss_mb"] for r in ok)
        for key in ("first_call_s", "first_call_cpu_s"):
            if all(key in r for r in ok):
                row[key] = statistics.median(r[key] for r in ok)
        row["rounds"] = len(ok)
        row["round_img_s"] = [r["batch"] / r["median_s"] for r in ok]
        merged.append(row)
    return merged


def chart(rows: list[dict], path: str, title: str) -> None:
    """One panel per case, one bar per implementation and mode: img/s relative
    to the best peer of that case (absolute img/s written next to each bar)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        [r for r in members if "vs_best_peer" in r] for members in group(rows).values()
    ]
    panels = [members for members in panels if members]
    if not panels:
        return
    sizes = [len(members) for members in panels]
    fig, axes = plt.subplots(
        len(panels),
        1,
        figsize=(9, 0.3 * sum(sizes) + 0.55 * len(panels) + 0.8),
        gridspec_kw={"height_ratios": sizes},
        sharex=True,
        squeeze=False,
    )
    limit = 1.25 * max(r["vs_best_peer"] for members in panels for r in members)
    for ax, members in zip(axes[:, 0], panels, strict=True):
        y = list(range(len(members)))[::-1]
        ax.barh(
            y,
            [r["vs_best_peer"] for r in members],
            color=[COLORS[r["impl"]] for r in members],
        )
        for yi, row in zip(y, members, strict=True):
            ax.text(
                row["vs_best_peer"] + 0.01 * limit,
                yi,
                f"{row['img_s']:.2f} img/s",
                va="center",
                fontsize=7,
            )
        ax.set_yticks(y)
        ax.set_yticklabels([mode_label(r) for r in members], fontsize=7)
        ax.axvline(1.0, color="black", linewidth=0.8, linestyle="--")
        ax.set_title(scenario_title(members[0]), fontsize=8, loc="left")
        ax.set_xlim(0, limit)
    axes[-1, 0].set_xlabel(
        "img/s relative to the best peer (timm or keras-hub) of each case"
    )
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
