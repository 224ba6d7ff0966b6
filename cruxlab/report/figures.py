"""The report's figures: one PNG per compared setting, drawn from the same pairings the checks use."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from cruxlab.report.claims.accumulation import accumulation_sets
from cruxlab.report.claims.checkpoint import checkpoint_pairs
from cruxlab.report.claims.devices import device_sets
from cruxlab.report.claims.fusion import batches, fused_pairs
from cruxlab.report.claims.matmul_precision import precision_pairs, relative_errors
from cruxlab.report.claims.offload import offload_pairs
from cruxlab.report.claims.phases import expected_lr, phase_bounds, phased_runs
from cruxlab.report.claims.resume import resumed_pairs
from cruxlab.report.claims.substeps import reached_models, substep_runs
from cruxlab.report.numerics import (STEP_TIME, TWIN_FACTOR, agreement, parameter_bound, relative_differences,
                                     twin_comparison)
from cruxlab.report.pairing import first, reference_and_twins
from cruxlab.report.run_records import RunRecord, UnreadableArtifact
from cruxlab.report.verdict import fmt


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


def _bars(ax, labels: Sequence[str], values: Sequence[float], ylabel: str, log: bool = False,
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


def accumulation_figures(records: list[RunRecord], out: Path) -> list[Figure]:
    figures = []
    for s in accumulation_sets(records):
        n, b = s.n, s.b
        figures.append(_one_batch_figure([(f"{n}×{b}", s.accumulated), (f"{n * b}", s.big_batch), (f"{b}", s.plain)],
                                         out, f"accumulation_{s.accumulated.label}", "accumulation",
                                         f"{n}×{b} against one batch of {n * b} and plain {b}"))
    return figures


def devices_figures(records: list[RunRecord], out: Path) -> list[Figure]:
    figures = []
    for s in device_sets(records):
        d, b = s.d, s.b
        figures.append(_one_batch_figure([(f"{d} devices × {b}", s.split[0]), (f"{d * b}", first(s.big_batch)),
                                          (f"{b}", s.plain)], out, f"devices_{s.split[0].label}", "devices",
                                         f"{d} devices × {b} against one device's batch of {d * b} and plain {b}"))
    return figures


def _one_batch_figure(runs: list[tuple[str, RunRecord | None]], out: Path, name: str, claim: str,
                      what: str) -> Figure:
    """Loss curves, final-parameter distances and compiled memory of a run that should train one big batch
    (``runs[0]``) beside that batch (``runs[1]``) and the small batch it is made of (``runs[2]``)."""
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
        _bars(ax_dist, [f"|{mine_label} − {big_label}|", f"|{mine_label} − {plain_label}|", "round-off bound",
                        "travel"],
              [big.distance, plain.distance, big.parameter_bound, big.travel], "L2 distance of final parameters",
              log=True)
        ax_dist.set_title("parameter differences")
    memory = [r.metrics.get("memory/temp_bytes", np.nan) if r is not None else np.nan for _, r in runs]
    _bars(ax_mem, [f"batch {label}" for label, _ in runs], memory, "compiled temp bytes")
    ax_mem.set_title("memory of the update")
    return Figure(save_figure(fig, out, name), f"{what}: loss curves, distances of the final parameters (log scale, zero "
                                         f"not drawn), compiled temporary memory", claim)


def inner_steps_figures(records: list[RunRecord], out: Path) -> list[Figure]:
    """One figure per batch setting: K=1 and each fused K of it."""
    by_batches: dict[tuple[str, str], list] = {}
    for pair in fused_pairs(records):
        by_batches.setdefault((pair[0][0].group, batches(pair[0][0])), []).append(pair)
    return [_inner_steps_figure(name, pairs, out) for (_, name), pairs in by_batches.items()]


def _inner_steps_figure(name: str, pairs: list, out: Path) -> Figure:
    plt = pyplot()
    fig, (ax_time, ax_compile, ax_dist) = plt.subplots(1, 3, figsize=(14, 4))
    reference = pairs[0][1]
    columns = [("K=1", reference)] + [(f"K={runs[0].options.inner_steps}", runs) for runs, _ in pairs]
    for i, (label, runs) in enumerate(columns):
        times = [r.metrics[STEP_TIME] * 1e3 for r in runs if STEP_TIME in r.metrics]
        compiles = [r.metrics["compile_seconds"] for r in runs if "compile_seconds" in r.metrics]
        ax_time.plot([i] * len(times), times, "o", color="C0", alpha=0.6)
        if times:
            ax_time.plot([i - 0.2, i + 0.2], [np.median(times)] * 2, "k-")
        ax_compile.plot([i] * len(compiles), compiles, "o", color="C1", alpha=0.6)
    for ax, ylabel, title in ((ax_time, "ms per update", "steady-state step time (repeats, median bar)"),
                              (ax_compile, "seconds", "compile time (repeats may hit the compilation cache)")):
        ax.set_xticks(range(len(columns)), [label for label, _ in columns])
        ax.set_ylabel(ylabel)
        ax.set_title(title, fontsize=10)
    distances, bounds = [], []
    for runs, ref in pairs:
        partner, twins = reference_and_twins(ref, runs[0])
        if partner is not None:
            distances.append(agreement(runs[0], partner).distance)
            bounds.append(parameter_bound(runs[0], partner, twins))
    _bars(ax_dist, [label for label, _ in columns[1:1 + len(distances)]], distances,
          "|θ_K − θ_1| (final parameters)", log=True)
    for i, bound in enumerate(bounds):
        ax_dist.plot([i - 0.4, i + 0.4], [bound] * 2, "r--", lw=1)
    ax_dist.set_title("distance to K=1 (red: round-off bound; 0 not drawn)", fontsize=10)
    file = save_figure(fig, out, f"inner_steps_{name}")
    return Figure(file, f"inner_steps, {name}, on {pairs[0][0][0].device}: time per update over repeats, compile "
                        f"time, and the final-parameter distance to K=1 against its round-off bound", "inner_steps")


def checkpoint_figures(records: list[RunRecord], out: Path) -> list[Figure]:
    return _paired_figures(checkpoint_pairs(records), out, "checkpoint", "memory/temp_bytes",
                           ("checkpointed", "plain"), "compiled temp bytes")


def offload_figures(records: list[RunRecord], out: Path) -> list[Figure]:
    return _paired_figures(offload_pairs(records), out, "offload", "memory/argument_bytes",
                           ("offloaded", "on device"), "device-resident argument bytes")


def _paired_figures(pairs, out: Path, claim: str, memory_key: str, names: tuple[str, str], ylabel: str
                    ) -> list[Figure]:
    plt = pyplot()
    figures = []
    for on, off in pairs:
        fig, (ax_mem, ax_time, ax_drift) = plt.subplots(1, 3, figsize=(14, 4))
        partner = first(off)
        _bars(ax_mem, list(names), [on[0].metrics.get(memory_key, np.nan),
                                    partner.metrics.get(memory_key, np.nan) if partner else np.nan], ylabel)
        for i, runs in enumerate((on, off)):
            times = [r.metrics[STEP_TIME] * 1e3 for r in runs if STEP_TIME in r.metrics]
            ax_time.plot([i] * len(times), times, "o", alpha=0.6)
        ax_time.set_xticks([0, 1], list(names))
        ax_time.set_ylabel("ms per update (repeats)")
        reference, twins = reference_and_twins(off, on[0])
        if reference is not None:
            _drift(ax_drift, on[0], reference, twins, names)
        file = save_figure(fig, out, f"{claim}_{on[0].label}")
        figures.append(Figure(file, f"{claim} ({on[0].label}): {ylabel}, time per update over repeats, on "
                                    f"{on[0].device}, and how far the loss history drifts from the {names[1]} run's, "
                                    f"against round-off twins of it", claim))
    return figures


def _drift(ax, run: RunRecord, reference: RunRecord, twins: Sequence[RunRecord], names: tuple[str, str]) -> None:
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
        ax.semilogy(TWIN_FACTOR * twin.allowance, "r--", lw=1, label=f"bound: {fmt(TWIN_FACTOR)}× max(twins, eps)")
    else:
        ax.axhline(agreement(run, reference).history_bound, color="r", ls="--", lw=1, label="assumed round-off bound")
    ax.set_xlabel("epoch")
    ax.set_ylabel("|ΔL| / L (loss/total)")
    ax.legend(fontsize=7)
    identical = drift is not None and not drift.any()
    ax.set_title("loss histories bit-identical" if identical else "drift from the reference", fontsize=10)


def substeps_figures(records: list[RunRecord], out: Path) -> list[Figure]:
    runs = [r for r in substep_runs(records) if r.reach is not None]
    if not runs:
        return []
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(max(6, 2.5 * len(runs)), 4))
    models = sorted({m for r in runs for m in r.models()})
    width = 0.8 / len(models)
    for j, model in enumerate(models):
        values = [float(np.linalg.norm(r.snapshot("final", model) - r.snapshot("initial", model))) for r in runs]
        positions = np.arange(len(runs)) + j * width
        ax.bar(positions, values, width, label=model)
        for x, v, r in zip(positions, values, runs):
            mark = "reached" if model in reached_models(r) else "unreached"
            ax.annotate(f"{v:.3g}\n{mark}", (x, v), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(np.arange(len(runs)) + 0.4 - width / 2, [r.label for r in runs], fontsize=8)
    ax.set_ylabel("|final − initial| per model")
    ax.legend()
    file = save_figure(fig, out, "substeps")
    return [Figure(file, "distance each model travelled per substeps run; an unreached model must stay at exactly 0",
                   "substeps")]


def phases_figures(records: list[RunRecord], out: Path) -> list[Figure]:
    plt = pyplot()
    figures = []
    for run in phased_runs(records):
        fig, (ax_loss, ax_lr) = plt.subplots(1, 2, figsize=(11, 4))
        ax_loss.semilogy(run.histories["loss/total"], lw=1)
        ax_loss.set_ylabel("loss/total")
        expected = expected_lr(run)
        for key in sorted(k for k in run.histories if k.startswith("lr/")):
            ax_lr.semilogy(run.histories[key], lw=1.5, label=f"recorded {key}")
        if expected is not None:
            ax_lr.semilogy(expected, "k--", lw=1, label="configured")
        ax_lr.set_ylabel("learning rate")
        ax_lr.legend(fontsize=8)
        for ax in (ax_loss, ax_lr):
            ax.set_xlabel("epoch")
            for start, _ in phase_bounds(run)[1:]:
                ax.axvline(start, color="grey", ls="--", lw=0.8)
        file = save_figure(fig, out, f"phases_{run.label}")
        figures.append(Figure(file, f"{run.label}: loss and learning rate with phase boundaries (dashed grey); "
                                    f"the configured learning rate dashed black", "phases"))
    return figures


def resume_figures(records: list[RunRecord], out: Path) -> list[Figure]:
    """Per resumed run: its loss drift from the one-call run, and both learning rates, with the calls marked."""
    plt = pyplot()
    figures = []
    for run, partners in resumed_pairs(records):
        reference, twins = reference_and_twins(partners, run)
        if reference is None:
            continue
        fig, (ax_drift, ax_lr) = plt.subplots(1, 2, figsize=(11, 4))
        _drift(ax_drift, run, reference, twins, ("calls", "one call"))
        for key in sorted(k for k in run.histories if k.startswith("lr/")):
            ax_lr.semilogy(reference.histories.get(key, []), "k-", lw=2.5, alpha=0.4, label=f"{key}, one call")
            ax_lr.semilogy(run.histories[key], lw=1, label=f"{key}, calls")
        ax_lr.set_xlabel("epoch")
        ax_lr.set_ylabel("learning rate")
        ax_lr.legend(fontsize=8)
        for ax in (ax_drift, ax_lr):
            for start, _ in phase_bounds(run)[1:]:
                ax.axvline(start, color="grey", ls="--", lw=0.8)
        file = save_figure(fig, out, f"resume_{run.label}")
        figures.append(Figure(file, f"{run.label}: how far the loss of the run trained in several calls drifts from "
                                    f"the run trained in one (none drawn when bit-identical), and the learning rates; "
                                    f"the calls' first epochs dashed grey", "resume"))
    return figures


def precision_figures(records: list[RunRecord], out: Path) -> list[Figure]:
    """Per setting: the total loss of each repeat at both precisions, and each repeat's error at both."""
    plt = pyplot()
    figures = []
    for fast, full in precision_pairs(records):
        name = fast[0].label
        fig, (ax_loss, ax_error) = plt.subplots(1, 2, figsize=(10, 3.6))
        for color, runs, precision in (("C3", fast, "default"), ("C0", full, "highest")):
            for n, run in enumerate(runs):
                loss = np.asarray(run.histories.get("loss/total", []), np.float64)
                ax_loss.semilogy(loss, color=color, lw=0.8, alpha=0.8, label=f"precision={precision}" if not n else None)
        ax_loss.set_xlabel("epoch")
        ax_loss.set_ylabel("total loss")
        ax_loss.legend(fontsize=8)
        errors = [(f"{precision} r{twin}", error, color)
                  for color, runs, precision in (("C3", fast, "default"), ("C0", full, "highest"))
                  for twin, fields in sorted(relative_errors(runs).items()) for error in fields.values()]
        if errors:  # each bar in its precision's colour, as the lines beside it
            labels, values, colors = zip(*errors)
            _bars(ax_error, labels, values, "relative L2 error", log=True, colors=colors)
        file = save_figure(fig, out, f"precision_{name}")
        figures.append(Figure(file, f"{name}: total loss of each repeat at the device's default precision (red) and at "
                                    f"full float32 (blue), and each repeat's relative L2 error against the exact "
                                    f"solution", "precision"))
    return figures


FIGURES: dict[str, Callable[[list[RunRecord], Path], list[Figure]]] = {
    "accumulation": accumulation_figures,
    "inner_steps": inner_steps_figures,
    "checkpoint": checkpoint_figures,
    "offload": offload_figures,
    "substeps": substeps_figures,
    "phases": phases_figures,
    "resume": resume_figures,
    "devices": devices_figures,
    "precision": precision_figures,
    "capacity": lambda records, out: [],  # judged from scripts/capacity.py's sizes: no training history to draw
}


def draw(claims: Sequence[str], records: list[RunRecord], out: Path) -> list[Figure]:
    """Every figure of ``claims`` into ``out``; none for a claim whose figures need an artifact that could not
    be read (its verdicts say which)."""
    figures = []
    for claim in claims:
        try:
            figures += FIGURES[claim](records, out)
        except UnreadableArtifact:
            pyplot().close("all")
    return figures
