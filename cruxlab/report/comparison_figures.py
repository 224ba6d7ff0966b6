"""The figures of a comparison: each variant's loss history on both sides overlaid, and each timing ratio with
both sides' intervals; each side named as the report names it, before first."""
from __future__ import annotations

import math
import textwrap
from pathlib import Path

import numpy as np

from cruxlab.report.changes import TIMING, key_figures
from cruxlab.report.comparison import ComparedSweep, Comparison
from cruxlab.report.document import row_name
from cruxlab.report.drawing import Figure, pyplot, save_figure
from cruxlab.report.run_records import RunRecord

COLUMNS = 3
LEGEND_WIDTH = 40  # characters a line of a legend's label


def legend_label(when: str, side: ComparedSweep) -> str:
    """``before: crux 1a2b3c4`` in a legend, a long name (overrides, a store's path) wrapped to fit beside a panel."""
    return textwrap.fill(f"{when}: {side.role}", LEGEND_WIDTH)


def first_runs(side: ComparedSweep) -> dict[str, RunRecord]:
    """Per variant (``batching=points`` left out), the run of its first repeat: the one its verdicts compare."""
    found: dict[str, RunRecord] = {}
    for record in sorted(side.sweep.records, key=lambda r: (r.repeat, r.run_id)):
        found.setdefault(row_name(record.label), record)
    return found


def histories_figure(comparison: Comparison, out: Path) -> Figure | None:
    """One panel per variant both sides ran: loss/total of its first repeat on each side (None where no
    variant has a history on both)."""
    earlier, later = first_runs(comparison.before), first_runs(comparison.after)
    variants = [v for v in comparison.common_variants
                if "loss/total" in earlier[v].histories and "loss/total" in later[v].histories]
    if not variants:
        return None
    plt = pyplot()
    rows = math.ceil(len(variants) / COLUMNS)
    columns = min(len(variants), COLUMNS)
    fig, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.3 * rows), squeeze=False)
    for ax, variant in zip(axes.flat, variants):
        for when, side, run, style in (("before", comparison.before, earlier[variant], "--"),
                                       ("after", comparison.after, later[variant], "-")):
            loss = np.asarray(run.histories["loss/total"], np.float64)
            ax.semilogy(np.flatnonzero(np.isfinite(loss)), loss[np.isfinite(loss)], style, lw=1.2,
                        label=legend_label(when, side))
        ax.set_title(variant, fontsize=10)
        ax.set_xlabel("epoch")
        ax.set_ylabel("loss/total")
        ax.legend(fontsize=8)
    for ax in list(axes.flat)[len(variants):]:
        ax.set_visible(False)
    file = save_figure(fig, out, "histories")
    return Figure(file, f"loss/total of each variant's first repeat, before ({comparison.before.role}) dashed and "
                        f"after ({comparison.after.role}) solid", comparison.name)


def timing_figure(comparison: Comparison, out: Path) -> Figure | None:
    """Each paired timing's ratio with its 95% interval on both sides, and the bound its verdict holds it to
    (None where no row has a timing on both sides)."""
    timed = []
    for row in comparison.rows:
        if row.before is None or row.after is None:
            continue
        pair = key_figures(row.before).get(TIMING), key_figures(row.after).get(TIMING)
        if None not in pair and all(f.low is not None and f.high is not None for f in pair):
            timed.append((row.id, pair))
    if not timed:
        return None
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 0.9 + 0.7 * len(timed)))
    for i, (id, pair) in enumerate(timed):
        for offset, when, side, figure, color in ((-0.15, "before", comparison.before, pair[0], "C0"),
                                                  (0.15, "after", comparison.after, pair[1], "C1")):
            ax.errorbar([figure.value], [i + offset], xerr=[[figure.value - figure.low], [figure.high - figure.value]],
                        fmt="o", color=color, capsize=3, label=legend_label(when, side) if i == 0 else None)
        if pair[0].bound is not None:
            ax.plot([pair[0].bound] * 2, [i - 0.4, i + 0.4], "k:", lw=1, label="bound" if i == 0 else None)
    ax.set_yticks(range(len(timed)), [id for id, _ in timed], fontsize=8)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("time ratio (candidate / reference), 95% interval")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    file = save_figure(fig, out, "timing")
    return Figure(file, f"each paired timing's ratio and 95% interval, before ({comparison.before.role}, above) and "
                        f"after ({comparison.after.role}, below), with the bound its verdict holds it to (dotted)",
                  comparison.name)


def draw_comparison(comparison: Comparison, out: Path) -> list[Figure]:
    """Every figure of ``comparison`` into ``out``."""
    return [figure for figure in (histories_figure(comparison, out), timing_figure(comparison, out))
            if figure is not None]
