"""The numbers behind verdicts: round-off bounds, distances between paired runs, timing intervals.

Two kinds of threshold, and nothing else: *round-off* (two runs that do the same
arithmetic in a different order may differ by float32 rounding compounded over
the updates, and no more) and *the confidence interval of a paired timing* (a
time ratio counts as in or out of a claim's band only when its whole 95%
interval is: :class:`PairedTiming`).

How far training compounds round-off is measured where the sweep has round-off
twins (the reference run started one ulp away, :class:`TwinComparison`): a
chaotic run carries an eps-sized difference to percents within a few hundred
updates, a calm one keeps it near eps, and no bound fixed in advance fits both.
Without twins the bound is the assumed ``1e3 · eps · sqrt(T) · travel``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from crux.timing.interval import OUTSIDE, WITHIN, Band, RatioInterval, ratio_interval
from crux.timing.machine import WALL_TIME
from crux.timing.pairs import FIRST_LOOK
from cruxlab.report.run_records import RunRecord, UnreadableArtifact
from cruxlab.report.verdict import FAILS, HOLDS, INCONCLUSIVE, fmt
from cruxlab.store.contract import TIMING_CLOCK, TIMING_CPU, TIMING_DEVICE

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
TWIN_FACTOR = 10.0
TWIN_HISTORY_RULE = f"d(t) ≤ {TWIN_FACTOR:g} · max(eps, largest d_twin up to epoch t), at every epoch t"
TWIN_PARAMETER_RULE = f"|θ - θ_ref| ≤ {TWIN_FACTOR:g} · max(eps · |θ_ref|, largest |θ_twin - θ_ref|)"
TWIN_ORIGIN = (
    "measured in this sweep: a round-off twin is the reference run again with every initial parameter moved one ulp "
    "up or down at random (config roundoff_twin; the sweep's repeats after the first), a difference of the kind "
    "float32 round-off makes. "
    "d_twin(t), the relative loss/total difference of the twin from the reference, is how far this training has "
    "carried an eps-sized difference by epoch t: a calm run keeps it near eps, a chaotic one (Adam at the edge of "
    "stability) lets it grow to percents. The run under test differs from the reference by round-off too if it "
    "drifts no further than that; the factor 10 allows for two eps-sized differences growing at the same rate from "
    "seeds of different size and direction, and eps (the float32 resolution of a loss value) is the least "
    "difference ever required")
STEP_TIME = "median_step_seconds"  # steady-state time per update: compile excluded, median over sync windows
HISTORY_RULE = "1e3 · eps · sqrt(T) · TV(log loss/total), against the max relative difference over epochs"



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


def relative_differences(run: np.ndarray, reference: np.ndarray) -> np.ndarray | None:
    """``|run - reference| / |reference|`` per epoch, compared at the epochs both recorded (0 at the others);
    None when the lengths differ or no epoch has both.

    NaN marks an epoch whose value was not recorded: a constraint no update
    evaluated (substeps), or a library that reports one loss per fused call.
    """
    run, reference = np.asarray(run, np.float64), np.asarray(reference, np.float64)
    if run.shape != reference.shape:
        return None
    missing = np.isnan(run) | np.isnan(reference)
    if missing.all() and missing.size:
        return None
    scale = np.maximum(np.abs(reference), np.finfo(np.float64).tiny)
    return np.where(missing, 0.0, np.abs(run - reference) / np.where(missing, 1.0, scale))


def history_difference(run: np.ndarray, reference: np.ndarray) -> float:
    """Max over epochs of ``|run - reference| / |reference|``; inf when the histories do not line up."""
    differences = relative_differences(run, reference)
    return math.inf if differences is None else float(np.max(differences, initial=0.0))


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
class TwinComparison:
    """A run against a reference, held to how far round-off twins of the reference drift from it.

    ``divergence[t]`` is the run's relative loss/total difference from the
    reference at epoch t (None when the histories cannot be lined up),
    ``twin_drift[t]`` the largest any twin's reached by epoch t; ``distance``
    and ``twin_distance`` are the final-parameter distances from the reference
    of the run and of the farthest twin, ``parameter_floor`` is eps·|θ_ref|
    (every parameter one ulp away).
    """

    divergence: np.ndarray | None
    twin_drift: np.ndarray
    distance: float
    twin_distance: float
    parameter_floor: float
    twins: int

    @property
    def allowance(self) -> np.ndarray:
        """Per epoch, the drift round-off explains: the twins' so far, never below eps (a loss value's resolution)."""
        return np.maximum(self.twin_drift, EPS)

    @property
    def history_ratio(self) -> float:
        """Max over epochs of ``divergence / allowance``: how many times further than a twin the run drifted."""
        if self.divergence is None:
            return math.inf
        return float(np.max(self.divergence / self.allowance, initial=0.0))

    @property
    def worst_epoch(self) -> int:
        return int(np.argmax(self.divergence / self.allowance)) if self.divergence is not None else 0

    @property
    def parameter_ratio(self) -> float:
        return self.distance / max(self.twin_distance, self.parameter_floor)

    @property
    def parameter_bound(self) -> float:
        return TWIN_FACTOR * max(self.twin_distance, self.parameter_floor)

    @property
    def within(self) -> bool:
        return self.history_ratio <= TWIN_FACTOR and self.distance <= self.parameter_bound

    @property
    def horizon(self) -> int:
        """Epochs before the twins first drift beyond ``TWIN_FACTOR · eps``: how long this training keeps an
        eps-sized difference at float32 resolution (the whole run if it never does)."""
        beyond = np.flatnonzero(self.twin_drift > TWIN_FACTOR * EPS)
        return int(beyond[0]) if beyond.size else len(self.twin_drift)

    def evidence(self) -> dict[str, float]:
        early = self.divergence[:self.horizon] if self.divergence is not None else np.array([math.inf])
        return {"twins": self.twins, "twin_parameter_distance": self.twin_distance,
                "twin_max_relative_history_difference": float(np.max(self.twin_drift, initial=0.0)),
                "twin_float32_horizon_epochs": self.horizon,
                "max_relative_history_difference_within_horizon": float(np.max(early, initial=0.0)),
                "history_ratio_to_twins": self.history_ratio, "worst_epoch": self.worst_epoch,
                "parameter_ratio_to_twins": self.parameter_ratio}


def _lined_up_twins(reference: RunRecord, twins: Sequence[RunRecord]) -> list[tuple[RunRecord, np.ndarray]]:
    """``(twin, its relative loss/total difference from reference per epoch)`` for every twin that lines up."""
    losses = reference.histories["loss/total"]
    return [(twin, drift) for twin in twins
            if (drift := relative_differences(twin.histories["loss/total"], losses)) is not None]


def _twin_drift(lined_up: list[tuple[RunRecord, np.ndarray]]) -> np.ndarray:
    """Per epoch, the largest relative difference any twin reached by then (a drift that falls back, as a twin's
    loss crosses the reference's, still shows how far round-off went)."""
    return np.maximum.accumulate(np.max([drift for _, drift in lined_up], axis=0))


def twin_comparison(run: RunRecord, reference: RunRecord, twins: Sequence[RunRecord]) -> TwinComparison | None:
    """``run`` against ``reference``, with ``twins`` (round-off twins of the reference) as the measure of
    round-off; None when no twin lines up with the reference."""
    losses = reference.histories["loss/total"]
    lined_up = _lined_up_twins(reference, twins)
    if not lined_up:
        return None
    twin_drift = _twin_drift(lined_up)
    final = reference.snapshot("final")
    twin_distance = max(float(np.linalg.norm(twin.snapshot("final") - final)) for twin, _ in lined_up)
    mine = run.snapshot("final")
    distance = float(np.linalg.norm(mine - final)) if mine.shape == final.shape else math.inf
    return TwinComparison(relative_differences(run.histories["loss/total"], losses), twin_drift, distance,
                          twin_distance, EPS * float(np.linalg.norm(final)), len(lined_up))


def roundoff_floor(updates: int) -> float:
    """``1e3 · eps · sqrt(T)``: the relative difference round-off explains after T updates when there is no
    travel to scale by (a reference that did not move, a loss that did not change)."""
    return ROUNDOFF_ALLOWANCE * EPS * math.sqrt(max(updates, 1))


def history_departure(run: RunRecord, reference: RunRecord, twins: Sequence[RunRecord] = ()) -> str:
    """How ``run``'s loss/total history departs from ``reference``'s beyond round-off, in words ('' where it does
    not). Histories alone, so it decides where the parameters cannot be read or did not move: held to
    ``TWIN_FACTOR`` times the drift of the round-off ``twins`` where they line up, else to the assumed
    ``1e3 · eps · sqrt(T)`` times the log loss's total variation, never below ``1e3 · eps · sqrt(T)``."""
    losses = reference.histories["loss/total"]
    differences = relative_differences(run.histories["loss/total"], losses)
    if differences is None:
        return f"the loss histories do not line up ({len(run.histories['loss/total'])} and {len(losses)} epochs)"
    worst = float(np.max(differences, initial=0.0))
    lined_up = _lined_up_twins(reference, twins)
    if lined_up:
        drift = _twin_drift(lined_up)
        ratio = float(np.max(differences / np.maximum(drift, EPS), initial=0.0))
        return (f"the loss history differs by up to {fmt(worst)} relative, {fmt(ratio)}× as far as round-off "
                f"twins drift (bound {fmt(TWIN_FACTOR)}×)") if ratio > TWIN_FACTOR else ""
    bound = max(history_bound(reference.updates, loss_travel(losses)), roundoff_floor(reference.updates))
    return (f"the loss history differs by up to {fmt(worst)} relative (round-off allows {fmt(bound)})"
            if worst > bound else "")


def parameter_departure(run: RunRecord, reference: RunRecord) -> str:
    """How ``run``'s final parameters depart from those of a ``reference`` that did not move, in words ('' where
    they do not): further than ``1e3 · eps · sqrt(T)`` of their size. Raises :class:`UnreadableArtifact`."""
    final, ref_final = run.snapshot("final"), reference.snapshot("final")
    if final.shape != ref_final.shape:
        return f"the final parameters have {final.size} and {ref_final.size} values"
    size, distance = float(np.linalg.norm(ref_final)), float(np.linalg.norm(final - ref_final))
    if distance > roundoff_floor(reference.updates) * size:
        return (f"the final parameters are {fmt(distance / size)} of their size apart" if size > 0
                else f"the final parameters are {fmt(distance)} apart, the reference's all 0")
    return ""


def departures(run: RunRecord, reference: RunRecord, twins: Sequence[RunRecord] = ()) -> tuple[list[str], str]:
    """What tells ``run`` apart from ``reference`` far beyond round-off, from whatever evidence can be read, with
    no travel needed (for a reference that did not move, or parameters that cannot be read): the findings, and
    the unreadable artifact that left the parameters uncompared ('' where none)."""
    found = [history_departure(run, reference, twins)]
    try:
        found.append(parameter_departure(run, reference))
        missing = ""
    except UnreadableArtifact as error:
        missing = str(error)
    return [f for f in found if f], missing


def unmoved(run: RunRecord, reference: RunRecord, departs: str) -> tuple[str, str]:
    """The verdict on ``run`` against a ``reference`` whose parameters did not move: ``fails`` where
    :func:`departures` finds a decisive difference (``departs`` says what that means), else ``inconclusive``."""
    found, _ = departures(run, reference)
    if found:
        return FAILS, f"{departs}: " + "; ".join(found)
    return INCONCLUSIVE, "the parameters did not move, so no trajectory can be told apart"


def parameter_bound(run: RunRecord, reference: RunRecord, twins: Sequence[RunRecord]) -> float:
    """The final-parameter distance from ``reference`` that round-off explains for ``run``: measured by the
    ``twins`` where they line up, else assumed (:func:`roundoff_bound`)."""
    twin = twin_comparison(run, reference, twins)
    return twin.parameter_bound if twin is not None else agreement(run, reference).parameter_bound


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
    def relative_range(self) -> float:
        """``(max - min) / min``: how much repeating the same setting changed it."""
        return (self.high - self.low) / self.low if self.values and self.low > 0 else math.inf

    @property
    def measured(self) -> bool:
        """A spread needs at least two repeats."""
        return len(self.values) >= 2


def spread(records: Sequence[RunRecord], metric: str) -> Spread:
    """``metric`` over the repeats in ``records`` (runs that did not report it are left out)."""
    values = [float(r.metrics[metric]) for r in records if metric in r.metrics and math.isfinite(r.metrics[metric])]
    return Spread(tuple(sorted(values)))


def ratio_range(numerator: Spread, denominator: Spread) -> tuple[float, float]:
    """The range of ``numerator / denominator`` the repeats allow: ``(low/high, high/low)``."""
    return numerator.low / denominator.high, numerator.high / denominator.low


TIMING = "timing/"  # the metrics of a paired timing (cruxlab/runtime/paired_timing.py)
TIMING_RULE = ("the median over pairs of chunks of (candidate / reference seconds per epoch), its 95% interval a "
               "percentile bootstrap (2000 resamples, seed 0) over the builds each run timed and the pairs of each, "
               "so that it holds how much the ratio moved between builds and runs: holds when the interval lies "
               "within the band, fails when it lies wholly outside, inconclusive otherwise")
TIMING_ORIGIN = ("both settings run in one process in alternating chunks (A B, B A, ...), so a load on the machine "
                 "that drifts hits both sides of a pair alike and cancels in the pair's ratio; on a CPU a chunk's "
                 "time is the process's CPU time, which the other processes sharing the cores do not stretch; "
                 "each job rotated its pairs through timing.builds builds of both settings and kept adding pairs, "
                 "looking after 8, 16, 32, ... per build, until its interval was in or out of the band or its "
                 "budget (timing.budget_seconds) was spent; fewer than 8 pairs per build, the runs' together, decide "
                 "nothing (docs/claims.md#timing-rule)")


@dataclass(frozen=True)
class PairedTiming:
    """The pooled paired timings of the runs that timed one setting against its reference.

    ``candidate`` and ``reference`` hold seconds per epoch of each chunk (pair
    i is their i-th values), ``load`` the 1-minute load average after each
    pair, ``run_of_pair`` the number of the run that timed it, ``build_of_pair``
    the build of that run it ran on; ``budget`` and
    ``spent`` sum the runs' budgets and seconds; ``chunk_epochs`` lists each
    run's chunk length; ``clock`` says what the seconds are (crux.timing.machine's
    ``CPU_TIME`` or ``WALL_TIME``).
    """

    candidate: np.ndarray
    reference: np.ndarray
    load: np.ndarray
    run_of_pair: np.ndarray
    build_of_pair: np.ndarray
    chunk_epochs: tuple[int, ...]
    budget: float
    spent: float
    cores: int
    cpu: str
    device: str
    runs: tuple[str, ...]
    clock: str = WALL_TIME

    @property
    def interval(self) -> RatioInterval:
        return ratio_interval(self.candidate, self.reference, groups=self.run_of_pair * self.builds_per_run
                              + self.build_of_pair)

    @property
    def builds_per_run(self) -> int:
        return int(self.build_of_pair.max()) + 1 if self.build_of_pair.size else 1

    @property
    def chunks(self) -> int:
        """Timed chunks, both sides counted."""
        return 2 * len(self.candidate)

    @property
    def load_median(self) -> float:
        finite = self.load[np.isfinite(self.load)]
        return float(np.median(finite)) if finite.size else math.nan

    @property
    def busy(self) -> bool:
        """More runnable processes than cores, in the median over the pairs: the timing shared the machine."""
        return self.load_median > self.cores

    @property
    def too_few(self) -> bool:
        """Fewer pairs than a timing's first look (``FIRST_LOOK`` per build), the runs' together: budgets ended
        the timings before a bootstrap interval of their median means anything."""
        return len(self.candidate) < FIRST_LOOK * self.builds_per_run

    def judge(self, band: Band) -> str:
        """``holds`` / ``fails`` / ``inconclusive`` by where the interval lies against ``band`` (inconclusive on
        too few pairs)."""
        if self.too_few:
            return INCONCLUSIVE
        return {WITHIN: HOLDS, OUTSIDE: FAILS}.get(band.place(self.interval), INCONCLUSIVE)

    def described(self) -> str:
        """``ratio 1.31 (95% interval 1.27–1.34, 48 chunks of 32 epochs, 3 runs of 4 builds)``."""
        interval = self.interval
        epochs = "/".join(str(e) for e in sorted(set(self.chunk_epochs)))
        return (f"ratio {fmt(interval.estimate)} ({round(interval.confidence * 100)}% interval "
                f"{fmt(interval.low)}–{fmt(interval.high)}, {self.chunks} chunks of {epochs} epochs, "
                f"{len(self.runs)} run{'s' * (len(self.runs) != 1)}"
                f"{f' of {self.builds_per_run} builds' if self.builds_per_run > 1 else ''})")

    def undecided(self, straddled: str) -> str:
        """Why an inconclusive timing decided nothing: too few pairs (whatever the interval), or an interval that
        takes in ``straddled`` (``"a speed-up and none"``); the ratio described either way."""
        if self.too_few:
            return f"undecided: too few pairs to judge ({self.described()})"
        return f"undecided: {self.described()} takes in {straddled}"

    def warning(self, verdict: str) -> str:
        """On too few pairs, a sentence saying so; on a busy machine, one saying that the budget did not decide, or
        that the ratio it decided on was measured under contention, which moves it; else empty."""
        if self.too_few:
            return (f"; warning: the timing budgets allowed {len(self.candidate)} pairs in all, fewer than the "
                    f"{FIRST_LOOK} per build a verdict needs: raise timing.budget_seconds")
        if not self.busy:
            return ""
        busy = f"the machine was busy (median load average {fmt(self.load_median)} on {self.cores} cores)"
        if verdict != INCONCLUSIVE:
            return (f"; note: {busy}, and contention for the cores and caches moves the ratio itself (the pairs "
                    f"cancel a drifting load, not what it does to each setting): a quieter machine may give "
                    f"another ratio")
        return (f"; warning: {busy} and {fmt(self.spent)} s of timing did not decide: rerun on a quieter machine "
                f"or raise timing.budget_seconds or timing.builds")

    def evidence(self) -> dict[str, float]:
        interval = self.interval
        return {"time_ratio": interval.estimate, "time_ratio_low": interval.low, "time_ratio_high": interval.high,
                "timed_chunks": self.chunks, "timed_pairs": len(self.candidate), "timing_runs": len(self.runs),
                "timing_builds_per_run": self.builds_per_run,
                "timing_seconds": self.spent, "timing_budget_seconds": self.budget,
                "load_average_median": self.load_median, "load_average_max": float(np.nanmax(self.load)),
                "cores": self.cores}


def paired_timing(records: Sequence[RunRecord]) -> PairedTiming | None:
    """The paired timings that ``records`` logged, pooled; None when none of them timed anything."""
    timed = [r for r in records if f"{TIMING}candidate_seconds" in r.histories]
    if not timed:
        return None
    series = {key: np.concatenate([np.asarray(r.histories[f"{TIMING}{key}"], np.float64) for r in timed])
              for key in ("candidate_seconds", "reference_seconds", "load1")}
    build_of_pair = np.concatenate([np.asarray(r.histories.get(f"{TIMING}build", np.zeros(len(r.histories[
        f"{TIMING}candidate_seconds"]))), np.int64) for r in timed])
    total = lambda key: float(sum(r.metrics.get(f"{TIMING}{key}", math.nan) for r in timed))
    run_of_pair = np.concatenate([np.full(len(r.histories[f"{TIMING}candidate_seconds"]), n)
                                  for n, r in enumerate(timed)])
    return PairedTiming(series["candidate_seconds"], series["reference_seconds"], series["load1"], run_of_pair,
                        build_of_pair,
                        tuple(int(r.metrics.get(f"{TIMING}chunk_epochs", 0)) for r in timed),
                        total("budget_seconds"), total("spent_seconds"),
                        int(min(r.metrics.get(f"{TIMING}cores", 1) for r in timed)),
                        timed[0].tags.get(TIMING_CPU, "an unrecorded CPU"),
                        timed[0].tags.get(TIMING_DEVICE, "an unrecorded device"),
                        tuple(r.run_id for r in timed), timed[0].tags.get(TIMING_CLOCK, WALL_TIME))
