"""Claim 1, black box: accumulating N micro-batches of B shrinks the sampling noise of the gradient like a batch of
N·B, whatever library draws the batches.

The accumulation check proper needs to know which points each micro-batch sees
(crux's point stream); this one needs only what any library does with a batch
option. Each job of the accumulation sweep measures, from the same initial
parameters, the gradient of many first updates, each drawing its own mini-batches
(``gradient_draws``; the pipeline logs their spread as ``gradient_noise/*``). For
mini-batches drawn without replacement from N items (points, or a library's
samples) with per-item variance sigma², one batch of B has gradient variance
(sigma²/B)·(N - B)/(N - 1). Relative to plain B:

- N micro-batches drawn independently: 1/N;
- N micro-batches holding N·B distinct items (crux's stream, one batch of N·B): (1/N)·(N_items - N·B)/(N_items - B);
- N micro-batches that reuse the same points: 1, no reduction at all.

With several constraints, each drawn on its own, the total variance is the sum of
theirs, and each shrinks by its own factor: the second value, with its own N_items
(0 where N·B covers all of them; a constraint with no more items than B has no
noise in either and drops out). The total's ratio is a mix of those factors,
weighted by the constraints' shares of the noise, which the sweep does not measure:
it lies between the least of them and 1/N. The measured ratio must lie in that
range within its sampling error, and below 1 beyond it. When no setting shows any spread beyond round-off, every draw
gives the same gradient: the batch option changes nothing, which is a finding
about the option ("no effect"), not a pass.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Mapping, Sequence

import numpy as np

from cruxlab.backends.gradient_draws import ITEMS
from cruxlab.report.claims.accumulation import EFFECTIVE_BATCH
from cruxlab.report.numerics import EPS, ROUNDOFF_ALLOWANCE
from cruxlab.report.pairing import first, repeats, run_ids, settings
from cruxlab.report.run_records import RunRecord, UnreadableArtifact
from cruxlab.report.verdict import (FAILS, HOLDS, INCONCLUSIVE, NO_EFFECT, Threshold, Verdict, cannot_judge, fmt,
                                    not_in_sweep)

PREFIX = "gradient_noise/"
STANDARD_ERRORS = 3.0
EXPECTED_ORIGIN = (
    "draws without replacement: the mean gradient of B of N items has variance (sigma^2/B)(N - B)/(N - 1), sigma^2 "
    "the items' variance; averaging A independent micro-batches of B divides it by A (ratio 1/A to plain B); A "
    "micro-batches that together hold A·B distinct items, as one batch of A·B does, give (1/A)(N - A·B)/(N - B). "
    "Either is an effective batch of A·B; micro-batches that reuse the same items give 1. Constraints drawn on their "
    "own add their variances, each shrunk by its own factor (its own N; 0 where A·B >= N; none where B >= N), so "
    "the total's ratio is a weighted mean of the constraints' factors with unmeasured weights: between the least "
    "of them and 1/A")
SAMPLING_ORIGIN = (
    "sampling error: each variance is estimated from S draws to within its standard error (the standard deviation of "
    "the per-draw terms over sqrt S); the log of the ratio of two independent estimates has standard error "
    "sqrt((se_a/V_a)^2 + (se_b/V_b)^2); a ratio counts as different from a value only beyond 3 standard errors "
    "(3 in 1000 by chance under normal tails)")
FLOOR_ORIGIN = (
    "float32 round-off: a gradient (or a step of learning rate 1, read back as a parameter difference) is resolved to "
    "about eps·(|theta_0| + |g|); the factor 1e3 is the allowance of every round-off bound in these reports. A spread "
    "below it is no sampling noise at all")


@dataclass(frozen=True)
class GradientSpread:
    """The measured gradient spread of one run: variance, its standard error, and what bounds it from below.

    ``sizes`` maps each constraint to its number of items; runs that logged only the largest (``population``)
    have none, and are judged as if that constraint were the only one.
    """

    variance: float
    standard_error: float
    population: int
    floor: float
    sizes: Mapping[str, int]

    @staticmethod
    def measured(record: RunRecord) -> bool:
        """Whether the run measured its gradient spread (``gradient_draws``)."""
        return f"{PREFIX}variance" in record.metrics

    @staticmethod
    def of(record: RunRecord, floor_needed: bool = True) -> "Spread | None":
        """The run's spread (None where it measured none). Its round-off floor reads the initial parameters:
        where ``params.npz`` cannot be read, :class:`UnreadableArtifact` is raised, or, if not ``floor_needed``,
        the floor is unknown (infinite: the spread never counts as noise)."""
        metrics = record.metrics
        if not GradientSpread.measured(record):
            return None
        try:
            size = float(np.linalg.norm(record.snapshot("initial")))
        except UnreadableArtifact:
            if floor_needed:
                raise
            size = math.inf
        resolution = EPS * (size + metrics[f"{PREFIX}mean_norm"])
        sizes = {key[len(ITEMS):]: int(value) for key, value in sorted(metrics.items()) if key.startswith(ITEMS)}
        return GradientSpread(metrics[f"{PREFIX}variance"], metrics[f"{PREFIX}standard_error"],
                              int(metrics[f"{PREFIX}population"]), (ROUNDOFF_ALLOWANCE * resolution) ** 2, sizes)

    @property
    def populations(self) -> tuple[int, ...]:
        """Every constraint's number of items (the largest alone where the run logged no others)."""
        return tuple(self.sizes.values()) or (self.population,)

    @property
    def noisy(self) -> bool:
        return self.variance > self.floor

    @property
    def relative_error(self) -> float:
        return self.standard_error / self.variance if self.variance > 0 else math.inf


def check_gradient_noise(records: list[RunRecord]) -> list[Verdict]:
    """Per accumulated setting whose runs measured their gradient spread: one verdict on the noise reduction."""
    verdicts = []
    for (group, options), runs in settings(records, lambda o: o.accumulation_steps > 1 and o.batchsize).items():
        accumulated = first(runs)
        if not GradientSpread.measured(accumulated):
            continue
        plain = first(repeats(records, group, replace(options, accumulation_steps=1)))
        big = first(repeats(records, group, replace(options, batchsize=options.batchsize * options.accumulation_steps,
                                                         accumulation_steps=1)))
        verdicts.append(_noise(accumulated, plain, big))
    if not verdicts:
        return [not_in_sweep("accumulation.noise", EFFECTIVE_BATCH, "an accumulated run with gradient_draws > 0",
                             "accumulated run that measured its gradient spread", run_ids(records))]
    return verdicts


def distinct_items_ratio(items: int, a: int, b: int) -> float:
    """The variance of A micro-batches of B holding A·B distinct of ``items`` (one batch of A·B) over plain B:
    (1/A)(N - A·B)/(N - B), 0 where A·B items are all of them. Only for ``items > b`` (else plain B has no noise)."""
    return max(items - a * b, 0) / (a * (items - b))


def expected_ratios(sizes: Sequence[int], a: int, b: int) -> tuple[float, float]:
    """The range of the variance of A micro-batches of B over plain B, for constraints of ``sizes`` items drawn
    each on its own: (the least constraint's :func:`distinct_items_ratio`, 1/A for A independent micro-batches).
    Constraints with no more than B items have no noise in either and drop out; 0 for the first when none is left."""
    sampled = [distinct_items_ratio(n, a, b) for n in sizes if n > b]
    return (min(sampled) if sampled else 0.0), 1.0 / a


def _noise(accumulated: RunRecord, plain: RunRecord | None, big: RunRecord | None) -> Verdict:
    a, b = accumulated.options.accumulation_steps, int(accumulated.options.batchsize)
    name = f"accumulation.noise[{accumulated.label}]"
    test = (f"spread of the first update's gradient over many draws from the same parameters (gradient_draws): "
            f"{a}×{b} against plain batch {b}, whose ratio must lie between the least of the constraints' values for "
            f"{a}·{b} distinct items and the value for {a} independent micro-batches, and below 1, within "
            f"{STANDARD_ERRORS:g} standard errors")
    runs = run_ids(accumulated, plain, big)
    try:  # the round-off floors read the initial parameters
        mine, reference = GradientSpread.of(accumulated), GradientSpread.of(plain) if plain is not None else None
    except UnreadableArtifact as error:
        return cannot_judge(name, EFFECTIVE_BATCH, test, error, runs)
    big_spread = GradientSpread.of(big, floor_needed=False) if big is not None else None  # evidence beside the verdict
    if reference is None:
        return _verdict(name, test, INCONCLUSIVE, f"the sweep has no run with batchsize={b} (accumulation_steps=1) "
                                                  f"that measured its gradient spread", runs=runs)
    low, high = expected_ratios(mine.populations, a, b)
    ratio = mine.variance / reference.variance if reference.variance > 0 else math.inf
    error = math.hypot(mine.relative_error, reference.relative_error)
    evidence = {"A": a, "B": b, "items": mine.population, "variance_AxB": mine.variance,
                "standard_error_AxB": mine.standard_error, "variance_B": reference.variance,
                "standard_error_B": reference.standard_error, "ratio_AxB_to_B": ratio,
                "log_ratio_standard_error": error, "expected_ratio_distinct_items": low,
                "expected_ratio_independent_micro_batches": high, "roundoff_floor": reference.floor}
    for constraint, items in mine.sizes.items():
        evidence[f"items/{constraint}"] = items
        if items > b:
            evidence[f"expected_ratio_distinct_items/{constraint}"] = distinct_items_ratio(items, a, b)
    if big_spread is not None:
        evidence.update({"variance_AB": big_spread.variance, "ratio_AB_to_B": big_spread.variance / reference.variance
                         if reference.variance > 0 else math.inf})
    thresholds = {"ratio_AxB_to_B": Threshold(high, f"log ratio within {STANDARD_ERRORS:g} standard errors of "
                                              f"[log {fmt(low)}, log {fmt(high)}] and below 0 by more than "
                                              f"{STANDARD_ERRORS:g}", f"{EXPECTED_ORIGIN}. {SAMPLING_ORIGIN}"),
                  "roundoff_floor": Threshold(reference.floor, "variance > (1e3·eps·(|theta_0| + |g|))^2",
                                              FLOOR_ORIGIN)}
    verdict, summary = _judge(mine, reference, big_spread, ratio, error, low, high, a, b)
    return _verdict(name, test, verdict, summary, evidence, thresholds, runs)


def _verdict(name: str, test: str, verdict: str, summary: str, evidence: dict[str, float] | None = None,
             thresholds: dict[str, Threshold] | None = None, runs: tuple[str, ...] = ()) -> Verdict:
    """A verdict on the effective-batch claim, quoted from its source."""
    return EFFECTIVE_BATCH.verdict(name, test, verdict, summary, evidence, thresholds, runs)


def _judge(mine: GradientSpread, reference: GradientSpread, big: GradientSpread | None, ratio: float, error: float,
           low: float, high: float, a: int, b: int) -> tuple[str, str]:
    if not any(s.noisy for s in (mine, reference, big) if s is not None):
        return NO_EFFECT, (f"the batch option changes nothing here: every draw of batch {b}, of {a}×{b}"
                           + (f" and of {a * b}" if big is not None else "") +
                           f" gives the same gradient (spread {fmt(reference.variance)}, round-off floor "
                           f"{fmt(reference.floor)}), so mini-batches carry no sampling noise to average away")
    if not reference.noisy:
        return FAILS, (f"plain batch {b} shows no sampling noise (spread {fmt(reference.variance)}) but {a}×{b} "
                       f"does ({fmt(mine.variance)}): accumulating adds noise")
    log_ratio, margin = math.log(ratio) if ratio > 0 else -math.inf, STANDARD_ERRORS * error
    within = log_ratio - margin <= math.log(high) and (low == 0 or log_ratio + margin >= math.log(low))
    reduced = log_ratio + margin < 0
    position = (f"spread of {a}×{b} is {fmt(ratio)}× that of batch {b} (log standard error {fmt(error)}); "
                f"expected {fmt(low)} ({a}·{b} distinct items{_least(mine, a, b)}) to {fmt(high)} "
                f"({a} independent micro-batches)")
    if big is not None:
        position += f"; one batch of {a * b}: {fmt(big.variance / reference.variance)}×"
    if within and reduced:
        return HOLDS, f"{a}×{b} averages away noise like a batch of {a * b}: {position}"
    if within:
        return INCONCLUSIVE, (f"consistent with an effective batch of {a * b} and with none: more draws needed; "
                              f"{position}")
    if ratio > high:
        return FAILS, (f"{a}×{b} averages away less noise than {a} micro-batches would "
                       f"({'none: micro-batches that reuse the same points?' if not reduced else 'too little'}); "
                       f"{position}")
    return FAILS, f"{a}×{b} has less noise than {a}·{b} distinct items allow; {position}"


def _least(spread: GradientSpread, a: int, b: int) -> str:
    """Where several constraints are sampled: which one's factor sets the lower end of the range."""
    sampled = {name: n for name, n in spread.sizes.items() if n > b}
    if len(sampled) < 2:
        return ""
    name = min(sampled, key=lambda c: distinct_items_ratio(sampled[c], a, b))
    return f" of constraint {name}'s {sampled[name]}, the least of {len(sampled)} sampled constraints"
