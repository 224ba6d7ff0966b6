"""The matmul-precision claim: at the device's default precision a PINN trains as accurately as at full float32,
and faster.

Each setting at ``precision=default`` is paired with the same setting at ``precision=highest``; repeats after the
first are round-off twins (every initial parameter one ulp away), so the spread of the full-float32 repeats'
errors is what round-off alone does to the trained solution: the yardstick for "as accurate". Where the two
settings computed the same numbers (a CPU multiplies float32 matrices in float32 whatever it is asked), neither
verdict can tell anything, and each says so.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from cruxlab.bands import UNCLAIMED_BAND
from cruxlab.report import drawing
from cruxlab.report.numerics import TIMING_ORIGIN, TIMING_RULE, paired_timing
from cruxlab.report.pairing import Pair, paired_settings, run_ids
from cruxlab.report.problem_calibration import not_trained
from cruxlab.report.run_records import RunRecord
from cruxlab.report.verdict import FAILS, HOLDS, INCONCLUSIVE, Claim, Threshold, Verdict, fmt, not_in_sweep

ACCURATE = Claim("at the device's default matmul precision a PINN trains to a solution as accurate as at full "
                 "float32", "precision-accuracy")
FASTER = Claim("at the device's default matmul precision a PINN trains faster than at full float32",
               "precision-faster")
SPREAD_ORIGIN = ("the spread of the full-float32 repeats' errors (largest over smallest): the repeats after the "
                 "first start one ulp per parameter away, so this is what round-off alone does to the trained "
                 "error, the finest difference in accuracy these runs can tell")
ERROR_PREFIX = "error/"


def check_precision(records: list[RunRecord]) -> list[Verdict]:
    """Per setting run at ``precision=default``: accuracy against ``precision=highest``, and the time ratio."""
    pairs = precision_pairs(records)
    if not pairs:
        return [not_in_sweep("precision.accuracy", ACCURATE, "a run with solver.precision=default",
                             "precision=default", run_ids(records))]
    verdicts = []
    for fast, full in pairs:
        label = fast[0].label
        same = _same_numbers(fast, full)
        verdicts.append(_accuracy(label, fast, full, same))
        verdicts.append(_time(label, fast, full, same))
    return verdicts


def precision_pairs(records: list[RunRecord]) -> list[Pair]:
    """``(repeats at precision=default, repeats of the same setting at precision=highest)`` per setting."""
    return paired_settings(records, lambda o: o.precision == "default", precision="highest")


def _same_numbers(fast: list[RunRecord], full: list[RunRecord]) -> str | None:
    """Where every pair of runs that started alike has the same loss history to the bit: a sentence saying the
    settings computed the same numbers, on which backend; else None."""
    compared = 0
    for run in fast:
        partner = next((r for r in full if r.roundoff_twin == run.roundoff_twin), None)
        if partner is None or "loss/total" not in run.histories or "loss/total" not in partner.histories:
            continue
        if not np.array_equal(np.asarray(run.histories["loss/total"]), np.asarray(partner.histories["loss/total"]),
                              equal_nan=True):
            return None
        compared += 1
    if not compared:
        return None
    backend = fast[0].environment.get("backend", "this backend")
    return (f"both precisions computed the same loss history to the bit on {backend} ({compared} pair(s)): it "
            f"multiplies float32 matrices alike at either setting, so it cannot show the claim either way")


def relative_errors(runs: list[RunRecord]) -> dict[int, dict[str, float]]:
    """Per repeat's round-off twin number, the relative L2 error of each field."""
    return {r.roundoff_twin: {k[len(ERROR_PREFIX):]: float(v) for k, v in r.metrics.items()
                              if k.startswith(ERROR_PREFIX)} for r in runs}


def _accuracy(label: str, fast: list[RunRecord], full: list[RunRecord], same: str | None) -> Verdict:
    name = f"precision.accuracy[{label}]"
    test = ("relative L2 error against the exact solution at precision=default over that at precision=highest, "
            "per repeat started alike; held to the spread of the highest-precision repeats' errors")
    runs = run_ids(fast, full)
    if same:
        return ACCURATE.verdict(name, test, INCONCLUSIVE, same, runs=runs)
    untrained = [reason for reason in map(not_trained, full) if reason]
    if untrained:  # errors that training did not reduce are alike at any precision: no accuracy to compare
        return ACCURATE.verdict(name, test, INCONCLUSIVE, f"{untrained[0]} (at precision=highest), so its error says "
                                f"nothing about accuracy; train until the loss falls (a larger solver.epochs, another "
                                f"schedule.value)", runs=runs)
    fast_errors, full_errors = relative_errors(fast), relative_errors(full)
    fields = sorted({f for errors in full_errors.values() for f in errors})
    common = [t for t in fast_errors if t in full_errors]
    if not fields or not common:
        return ACCURATE.verdict(name, test, INCONCLUSIVE, "needs the error/<field> metrics of runs at both "
                                "precisions that started alike", runs=runs)
    ratios = np.array([fast_errors[t][f] / full_errors[t][f] for t in common for f in fields])
    full_values = np.array([errors[f] for errors in full_errors.values() for f in fields])
    spread = float(full_values.max() / full_values.min()) if len(full_values) > 1 else 1.0
    median, low = float(np.median(ratios)), float(ratios.min())
    if median <= spread:
        verdict, finding = HOLDS, f"as accurate: {fmt(median)}× the full-float32 error (median of {len(ratios)})"
    elif low > spread:
        verdict, finding = FAILS, (f"{fmt(median)}× the full-float32 error (median of {len(ratios)}, every one "
                                   f"above the repeats' spread {fmt(spread)}×)")
    else:
        verdict, finding = INCONCLUSIVE, (f"{fmt(median)}× the full-float32 error, but repeats range "
                                          f"{fmt(low)}–{fmt(float(ratios.max()))}× around the spread {fmt(spread)}×")
    errors_default = float(np.median([fast_errors[t][f] for t in common for f in fields]))
    errors_highest = float(np.median(full_values))
    evidence = {"error_ratio_median": median, "error_ratio_min": low, "error_ratio_max": float(ratios.max()),
                "error_default_median": errors_default, "error_highest_median": errors_highest,
                "highest_repeats_spread": spread}
    thresholds = {"error_ratio_median": Threshold(spread, "median ratio <= spread of the full-float32 repeats",
                                                  SPREAD_ORIGIN)}
    summary = (f"{finding}; median error {fmt(errors_default)} at default against {fmt(errors_highest)} at "
               f"highest")
    return ACCURATE.verdict(name, test, verdict, summary, evidence, thresholds, runs)


def _time(label: str, fast: list[RunRecord], full: list[RunRecord], same: str | None) -> Verdict:
    name = f"precision.faster[{label}]"
    runs = run_ids(fast, full)
    timing = paired_timing(fast)
    if same:
        return FASTER.verdict(name, "paired timing of precision=default against precision=highest", INCONCLUSIVE,
                              same, timing.evidence() if timing else {}, runs=runs)
    if timing is None:
        return FASTER.verdict(name, "paired timing of precision=default against precision=highest", INCONCLUSIVE,
                              "no run at precision=default timed itself against precision=highest: set "
                              "timing.against={precision: highest} (sweeps/precision.yaml does)", runs=runs)
    test = (f"seconds per epoch at precision=default over precision=highest, timed in one process in alternating "
            f"chunks ({timing.clock}) on {timing.device}: the ratio's 95% interval against 1")
    verdict = timing.judge(UNCLAIMED_BAND)
    summary = {HOLDS: f"faster: {timing.described()}", FAILS: f"not faster: {timing.described()}",
               INCONCLUSIVE: timing.undecided("1")}[verdict]
    thresholds = {"time_ratio": Threshold(1.0, "95% interval below 1", TIMING_RULE + "; " + TIMING_ORIGIN)}
    return FASTER.verdict(name, test, verdict, summary + timing.warning(verdict), timing.evidence(), thresholds, runs)


def precision_figures(records: list[RunRecord], out: Path) -> list[drawing.Figure]:
    """Per setting: the total loss of each repeat at both precisions, and each repeat's error at both."""
    plt = drawing.pyplot()
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
            drawing.bar_panel(ax_error, labels, values, "relative L2 error", log=True, colors=colors)
        file = drawing.save_figure(fig, out, f"precision_{name}")
        figures.append(drawing.Figure(file, f"{name}: total loss of each repeat at the device's default precision "
                                            f"(red) and at full float32 (blue), and each repeat's relative L2 error "
                                            f"against the exact solution", "precision"))
    return figures
