"""The numbers behind verdicts: round-off bounds, distances between paired runs, timing spreads.

Two kinds of threshold, and nothing else: *round-off* (two runs that do the same
arithmetic in a different order may differ by float32 rounding compounded over
the updates, and no more) and *run-to-run spread* (a timing difference counts
only when it is larger than what repeating the same run shows).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from crux.report.records import RunRecord

EPS = float(np.finfo(np.float32).eps)  # 2**-23: relative spacing of float32
ROUNDOFF_ALLOWANCE = 1e3
ROUNDOFF_RULE = "1e3 · eps · sqrt(T) · travel"
ROUNDOFF_ORIGIN = (
    "float32 round-off: summing the same terms in another order changes each update by a few eps (eps = 2^-23) "
    "relative; over T updates these errors add like a random walk (sqrt T), measured against how far the run went "
    "(the parameters' travel |final - initial|; for the loss history, the total variation of log loss/total). "
    "The factor 1e3 allows for training amplifying tiny differences (Adam divides by a second-moment estimate that "
    "is tiny for some parameters; an unstable step size magnifies them). Each verdict reports where its runs sit "
    "on the eps·sqrt(T)·travel scale, so the margin on both sides of the bound is visible")
STEP_TIME = "median_step_seconds"  # steady-state time per update: compile excluded, median over sync windows
HISTORY_RULE = "1e3 · eps · sqrt(T) · TV(log loss/total), against the max relative difference over epochs"
SPREAD_ORIGIN = ("run-to-run spread: a difference counts only when the ranges [min, max] over the repeats of the two "
                 "settings do not overlap (with 3 repeats each, equal settings do so by chance 1 time in 10)")


def roundoff_bound(travel: float, updates: int) -> float:
    """Largest parameter distance that float32 round-off explains after ``updates`` updates covering ``travel``."""
    return ROUNDOFF_ALLOWANCE * EPS * math.sqrt(max(updates, 1)) * travel


def history_bound(updates: int, loss_travel: float) -> float:
    """Largest relative per-epoch loss difference that round-off explains, ``loss_travel`` being the total
    variation of the reference's log loss (how far its loss went, oscillations included)."""
    return ROUNDOFF_ALLOWANCE * EPS * math.sqrt(max(updates, 1)) * loss_travel


def loss_travel(history: np.ndarray) -> float:
    """Total variation of ``log(history)`` over the epochs that have a value."""
    values = np.asarray(history, np.float64)
    values = values[np.isfinite(values)]
    return float(np.sum(np.abs(np.diff(np.log(np.maximum(values, np.finfo(np.float64).tiny))))))


def history_difference(run: np.ndarray, reference: np.ndarray) -> float:
    """Max over epochs of ``|run - reference| / |reference|``; inf when lengths or NaN positions differ.

    NaN marks a constraint no update evaluated (substeps), so both runs must
    have it in the same epochs.
    """
    run, reference = np.asarray(run, np.float64), np.asarray(reference, np.float64)
    if run.shape != reference.shape:
        return math.inf
    missing = np.isnan(run)
    if not np.array_equal(missing, np.isnan(reference)):
        return math.inf
    run, reference = run[~missing], reference[~missing]
    if run.size == 0:
        return 0.0
    scale = np.maximum(np.abs(reference), np.finfo(np.float64).tiny)
    return float(np.max(np.abs(run - reference) / scale))


@dataclass(frozen=True)
class Agreement:
    """How far a run ended from a reference run that should follow the same trajectory.

    ``distance`` is the L2 distance of the final parameters, ``travel`` the
    reference's ``|final - initial|``, ``updates`` the reference's update count,
    ``history_difference`` the largest relative difference of loss/total over
    the epochs and ``loss_travel`` the total variation of the reference's log loss.
    """

    distance: float
    travel: float
    updates: int
    history_difference: float
    loss_travel: float
    bit_identical: bool

    @property
    def parameter_bound(self) -> float:
        return roundoff_bound(self.travel, self.updates)

    @property
    def history_bound(self) -> float:
        return history_bound(self.updates, self.loss_travel)

    @property
    def within_roundoff(self) -> bool:
        return self.distance <= self.parameter_bound and self.history_difference <= self.history_bound

    @property
    def in_eps_units(self) -> float:
        """``distance / (eps · sqrt(T) · travel)``: where the run sits on the round-off scale."""
        unit = EPS * math.sqrt(max(self.updates, 1)) * self.travel
        return self.distance / unit if unit > 0 else math.inf

    def evidence(self, prefix: str) -> dict[str, float]:
        return {f"{prefix}parameter_distance": self.distance,
                f"{prefix}loss_travel": self.loss_travel,
                f"{prefix}distance_in_eps_sqrtT_travel": self.in_eps_units,
                f"{prefix}max_relative_history_difference": self.history_difference,
                f"{prefix}bit_identical": float(self.bit_identical)}


def agreement(run: RunRecord, reference: RunRecord) -> Agreement:
    """Compare final parameters and ``loss/total`` histories of ``run`` against ``reference``."""
    final, ref_final = run.snapshot("final"), reference.snapshot("final")
    travel = float(np.linalg.norm(ref_final - reference.snapshot("initial")))
    distance = float(np.linalg.norm(final - ref_final)) if final.shape == ref_final.shape else math.inf
    losses = reference.histories["loss/total"]
    history = history_difference(run.histories["loss/total"], losses)
    identical = bool(final.shape == ref_final.shape and np.array_equal(final, ref_final) and history == 0.0)
    return Agreement(distance, travel, reference.updates, history, loss_travel(losses), identical)


@dataclass(frozen=True)
class Spread:
    """A timing over the repeats of one setting: its median and range."""

    values: tuple[float, ...]

    @property
    def median(self) -> float:
        return float(np.median(self.values)) if self.values else math.nan

    @property
    def low(self) -> float:
        return min(self.values) if self.values else math.nan

    @property
    def high(self) -> float:
        return max(self.values) if self.values else math.nan

    @property
    def measured(self) -> bool:
        """A spread needs at least two repeats."""
        return len(self.values) >= 2


def spread(records: Sequence[RunRecord], metric: str) -> Spread:
    """``metric`` over the repeats in ``records`` (runs that did not report it are left out)."""
    values = [float(r.metrics[metric]) for r in records if metric in r.metrics and math.isfinite(r.metrics[metric])]
    return Spread(tuple(sorted(values)))


def compare_times(candidate: Spread, reference: Spread) -> str:
    """``faster`` / ``slower`` when the repeat ranges do not overlap, ``within noise`` when they do,
    ``unmeasured`` when either side has fewer than two repeats."""
    if not (candidate.measured and reference.measured):
        return "unmeasured"
    if candidate.high < reference.low:
        return "faster"
    if candidate.low > reference.high:
        return "slower"
    return "within noise"


def ratio_range(numerator: Spread, denominator: Spread) -> tuple[float, float]:
    """The range of ``numerator / denominator`` the repeats allow: ``(low/high, high/low)``."""
    return numerator.low / denominator.high, numerator.high / denominator.low
