"""The report's figures, what they are made of: a PNG written into the report folder with its caption, and the
panels that several claims' figures share (bars, parameter distances against their round-off bounds, the paired
timing a speed verdict judges, a loss drift against round-off twins). Each claim's own figures live in its module
of :mod:`cruxlab.report.claims`, beside its check, and are drawn from the same pairings the check uses.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from crux.timing.interval import Band
from cruxlab.report.numerics import (STEP_TIME, TWIN_FACTOR, agreement, paired_timing, relative_differences,
                                     twin_comparison)
from cruxlab.report.pairing import first, reference_and_twins
from cruxlab.report.run_records import RunRecord
from cruxlab.report.verdict import fmt


LABEL_BOX = {"facecolor": "white", "alpha": 0.8, "edgecolor": "none", "pad": 1}
"""Behind a label written over data: the label stays readable."""


@dataclass(frozen=True)
class Figure:
    """A PNG written into the report folder, with the caption the report prints under it."""

    file: str
    caption: str
    claim: str


def pyplot():
    """matplotlib's pyplot on the Agg backend (no display needed), imported only when a figure is drawn."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def save_figure(fig, out: Path, name: str) -> str:
    """Write ``fig`` into ``out`` as ``<name>.png`` (the name made safe for a file) and close it; its file name."""
    file = re.sub(r"[^A-Za-z0-9_.=-]+", "_", name) + ".png"
    fig.tight_layout()
    # No software/version metadata: the same runs give the same bytes on any machine.
    fig.savefig(out / file, dpi=100, metadata={"Software": None})
    pyplot().close(fig)
    return file


def bar_panel(ax, labels: Sequence[str], values: Sequence[float], ylabel: str, log: bool = False,
              colors: Sequence[str] | None = None) -> None:
    shown = [v if v > 0 or not log else np.nan for v in values]
    ax.bar(range(len(values)), shown, color=list(colors or ["C0", "C1", "C2", "C3", "C4"][:len(values)]))
    ax.set_xticks(range(len(values)), labels, fontsize=8)
    if log:
        ax.set_yscale("log")
    for i, v in enumerate(values):
        ax.annotate(f"{v:.3g}", (i, shown[i] if np.isfinite(shown[i]) else 0), ha="center", va="bottom",
                    fontsize=8)
    ax.set_ylabel(ylabel)


def distance_panel(ax, labels: Sequence[str], distances: Sequence[float], bounds: Sequence[float | None],
                   identical: Sequence[bool], ylabel: str, travel: float | None = None) -> None:
    """Final-parameter distances as points on a log axis, each with its value; each one's round-off bound as a red
    segment labelled with its value; a bit-identical pair written ``bit for bit`` where its point would be (a log
    axis has no 0), a distance of exactly 0 otherwise ``0``; the reference's travel, where given, as a grey line
    for scale."""
    shown = [v for v in (*distances, *(b for b in bounds if b), travel or 0) if v > 0 and np.isfinite(v)]
    low, high = (min(shown) / 30, max(shown) * 30) if shown else (1e-8, 1.0)
    ax.set_yscale("log")
    ax.set_ylim(low, high)
    for i, (distance, bound, same) in enumerate(zip(distances, bounds, identical)):
        if bound:
            ax.plot([i - 0.35, i + 0.35], [bound] * 2, "r--", lw=1.2)
            ax.annotate(f"round-off bound {fmt(bound)}", (i, bound), xytext=(0, 3), textcoords="offset points",
                        ha="center", va="bottom", fontsize=7, color="r")
        if distance > 0 and np.isfinite(distance):
            ax.plot([i], [distance], "o", color=f"C{i}", ms=7)
            ax.annotate(fmt(distance), (i, distance), xytext=(6, 0), textcoords="offset points", va="center",
                        fontsize=8)
        else:
            ax.text(i, low * 3, "bit for bit" if same else fmt(distance), ha="center", va="bottom", fontsize=9,
                    fontweight="bold", bbox=LABEL_BOX)
    if travel:
        ax.axhline(travel, color="grey", ls=":", lw=1)
        ax.annotate(f"travel |θ_end − θ_start| {fmt(travel)}", (len(distances) - 0.5, travel), xytext=(0, 3),
                    textcoords="offset points", ha="right", va="bottom", fontsize=7, color="grey")
    ax.set_xlim(-0.6, len(distances) - 0.4)
    ax.set_xticks(range(len(distances)), labels, fontsize=8)
    ax.set_ylabel(ylabel)


def one_batch_figure(runs: list[tuple[str, RunRecord | None]], out: Path, name: str, claim: str,
                     what: str, twins: Sequence[RunRecord] = ()) -> Figure:
    """Loss curves, final-parameter distances and compiled memory of a run that should train one big batch
    (``runs[0]``) beside that batch (``runs[1]``) and the small batch it is made of (``runs[2]``); with the
    farthest of the big batch's round-off ``twins`` from it, which shows whether the bound can decide on this
    problem."""
    plt = pyplot()
    (mine_label, mine), (big_label, big_run), (plain_label, plain_run) = runs
    fig, (ax_loss, ax_dist, ax_mem) = plt.subplots(1, 3, figsize=(14, 4))
    for (label, run), style in zip(runs, ("-", "--", ":")):
        if run is not None:
            ax_loss.semilogy(run.histories["loss/total"], style, lw=1.2, label=f"batch {label}")
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("loss/total")
    ax_loss.legend(fontsize=8)
    ax_loss.set_title("loss curves overlaid")
    if big_run is not None and plain_run is not None:
        big, plain = agreement(big_run, mine), agreement(plain_run, mine)
        labels = [f"|{mine_label} − {big_label}|", f"|{mine_label} − {plain_label}|"]
        compared = [(big.distance, big.parameter_bound, big.bit_identical), (plain.distance, None, plain.bit_identical)]
        twin = max((agreement(t, big_run) for t in twins if len(t.histories["loss/total"]) == len(
            big_run.histories["loss/total"])), key=lambda a: a.distance, default=None)
        if twin is not None:
            labels.append(f"|twin − {big_label}|")
            compared.append((twin.distance, twin.parameter_bound, twin.bit_identical))
        distances, bounds, identical = zip(*compared)
        distance_panel(ax_dist, labels, distances, bounds, identical, "L2 distance of final parameters", big.travel)
        ax_dist.set_title("parameter differences")
    memory = [r.metrics.get("memory/temp_bytes", np.nan) if r is not None else np.nan for _, r in runs]
    bar_panel(ax_mem, [f"batch {label}" for label, _ in runs], memory, "compiled temp bytes")
    ax_mem.set_title("memory of the update")
    return Figure(save_figure(fig, out, name), f"{what}: loss curves, distances of the final parameters (and of the "
                                         f"farthest round-off twin of {big_label}, where the sweep has one) against "
                                         f"the round-off bound (red) and the travel of one batch of {big_label} "
                                         f"(grey), compiled temporary memory", claim)


def paired_ratio_panel(ax, settings: Sequence[tuple[str, Sequence[RunRecord]]], band: Band, reference: str) -> None:
    """Per setting, each pair of timed chunks' ratio (candidate over ``reference``, as dots), their median with its
    95% interval (black, with its values), and the band the verdict places that interval in (red, shaded): what
    the timing verdicts judge. A log axis where the ratios span a decade."""
    drawn = []
    for i, (label, runs) in enumerate(settings):
        timing = paired_timing(runs)
        if timing is None:
            ax.annotate("not timed", (i, 0.5), xycoords=("data", "axes fraction"), ha="center", fontsize=8)
            continue
        ratios = timing.candidate / timing.reference
        ax.plot(i + np.linspace(-0.2, 0.2, len(ratios)), ratios, ".", color="C0", alpha=0.35, ms=4)
        interval = timing.interval
        ax.errorbar([i], [interval.estimate], yerr=[[interval.estimate - interval.low],
                                                    [interval.high - interval.estimate]],
                    fmt="o", color="k", capsize=5, ms=5)
        ax.annotate(f"{fmt(interval.estimate)}\n({fmt(interval.low)}–{fmt(interval.high)})", (i, interval.high),
                    xytext=(8, 0), textcoords="offset points", fontsize=7, va="bottom", bbox=LABEL_BOX)
        drawn += [float(ratios.min()), float(ratios.max())]
    if drawn and max(drawn) >= 10 * min(drawn) > 0:
        ax.set_yscale("log")
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.axhspan(band.low, band.high, color="r", alpha=0.07, lw=0)
    for edge in (band.low, band.high):
        if edge > 0:
            ax.axhline(edge, color="r", ls="--", lw=1)
    ax.annotate(f"the verdict's band [{fmt(band.low)}, {fmt(band.high)})", (1, band.high),
                xycoords=("axes fraction", "data"), xytext=(-2, -2), textcoords="offset points", ha="right",
                va="top", fontsize=7, color="r", bbox=LABEL_BOX)
    ax.set_xlim(-0.6, len(settings) - 0.4)
    ax.set_xticks(range(len(settings)), [label for label, _ in settings])
    ax.set_ylabel(f"time ratio to {reference}, paired chunks")
    ax.set_title("paired timing: each pair, median, 95% interval", fontsize=10)


def paired_figures(pairs, out: Path, claim: str, memory_key: str, names: tuple[str, str], ylabel: str,
                   band: Band | None = None) -> list[Figure]:
    """Per paired setting: its memory, its time (the paired timing its verdict judges against ``band`` where the
    runs timed one, else each repeat's own time per update), and its loss drift from the reference."""
    plt = pyplot()
    figures = []
    for on, off in pairs:
        fig, (ax_mem, ax_time, ax_drift) = plt.subplots(1, 3, figsize=(14, 4))
        partner = first(off)
        bar_panel(ax_mem, list(names), [on[0].metrics.get(memory_key, np.nan),
                                        partner.metrics.get(memory_key, np.nan) if partner else np.nan], ylabel)
        if band is not None and paired_timing(on) is not None:
            paired_ratio_panel(ax_time, [(names[0], on)], band, names[1])
        else:
            for i, runs in enumerate((on, off)):
                times = [r.metrics[STEP_TIME] * 1e3 for r in runs if STEP_TIME in r.metrics]
                ax_time.plot([i] * len(times), times, "o", alpha=0.6)
            ax_time.set_xticks([0, 1], list(names))
            ax_time.set_ylabel("ms per update (each repeat, its own job)")
        reference, twins = reference_and_twins(off, on[0])
        if reference is not None:
            drift_panel(ax_drift, on[0], reference, twins, names)
        file = save_figure(fig, out, f"{claim}_{on[0].label}")
        figures.append(Figure(file, f"{claim} ({on[0].label}): {ylabel}, time (the paired timing its verdict judges, "
                                    f"where the runs timed one), on "
                                    f"{on[0].device}, and how far the loss history drifts from the {names[1]} run's, "
                                    f"against round-off twins of it", claim))
    return figures


def drift_panel(ax, run: RunRecord, reference: RunRecord, twins: Sequence[RunRecord], names: tuple[str, str]) -> None:
    """Relative loss/total difference per epoch of ``run`` from ``reference``, and of the round-off twins with the
    bound the same-numbers verdict holds it to (zeros are not drawn on the log scale)."""
    losses = reference.histories["loss/total"]
    drift = relative_differences(run.histories["loss/total"], losses)
    if drift is not None:
        ax.semilogy(np.where(drift > 0, drift, np.nan), lw=1, label=f"{names[0]} vs {names[1]}")
    twin = twin_comparison(run, reference, twins)
    if twin is not None:
        ax.semilogy(np.where(twin.twin_drift > 0, twin.twin_drift, np.nan), "k-", lw=1,
                    label="round-off twins (running max)")
        bound = TWIN_FACTOR * twin.allowance
        ax.semilogy(bound, "r--", lw=1, label=f"bound: {fmt(TWIN_FACTOR)}× max(twins, eps), {fmt(bound[-1])} at "
                                              f"the end")
    else:
        bound = agreement(run, reference).history_bound
        ax.axhline(bound, color="r", ls="--", lw=1, label=f"assumed round-off bound {fmt(bound)}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("|ΔL| / L (loss/total)")
    ax.legend(fontsize=7)
    identical = drift is not None and not drift.any()
    if identical:  # nothing to draw on a log axis: say so where the line would be
        ax.text(0.5, 0.5, f"bit for bit:\nevery epoch's loss of {names[0]}\nequals {names[1]}'s", ha="center",
                va="center", transform=ax.transAxes, fontsize=10, fontweight="bold", bbox=LABEL_BOX)
    ax.set_title("loss histories bit-identical" if identical else "drift from the reference", fontsize=10)
