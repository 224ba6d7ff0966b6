"""A batch of N·B split into N parts must train as one batch of N·B, not as plain B.

Two options promise this: N accumulated micro-batches (``accumulation_steps``) and
N devices (``devices``). crux draws the parts' points as those of one batch of
N·B, so the split run follows that batch to round-off (only the order of the
gradient's sum changes), while plain B follows another trajectory. A split run
that follows plain B took one part's points N times, or one device's alone.

The round-off bound decides only on a problem it holds on, which the sweep measures on the whole batch's own
repeats (:mod:`cruxlab.report.problem_calibration`): its round-off twins must stay within the bound and its loss
must fall. Where they do not, the verdict is ``inconclusive`` with the reason and the override that makes it
decide, unless the split run departs from the whole batch further than the twins do (``fails`` on any problem).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from cruxlab.report.numerics import (HISTORY_RULE, ROUNDOFF_ALLOWANCE, ROUNDOFF_ORIGIN, ROUNDOFF_RULE, Agreement,
                                     agreement, history_departure, unmoved)
from cruxlab.report.problem_calibration import beyond_twins, calibrate, calibrated
from cruxlab.report.run_records import RunRecord, UnreadableArtifact
from cruxlab.report.verdict import FAILS, HOLDS, INCONCLUSIVE, Claim, Threshold, Verdict, cannot_judge, fmt


@dataclass(frozen=True)
class SplitBatch:
    """The runs one such verdict compares, and how the report names them.

    ``split_name`` takes a verb in the singular (``4×8``, ``2×8 on 2 devices``); ``whole_name`` and
    ``plain_name`` complete "follows ..." (``one batch of 32``, ``batch 8``); ``whole_run`` and ``plain_run``
    say which setting the sweep lacks when a run is missing; ``degenerate`` what a split run that follows
    plain B did; ``whole_key`` prefixes the evidence against the whole batch (``plain`` is ``vs_plain_B_``);
    ``twins`` are round-off twins of ``whole`` (its repeats that started one ulp away), which calibrate the bound.
    """

    split: RunRecord
    whole: RunRecord | None
    plain: RunRecord | None
    parts: int
    parts_key: str
    split_name: str
    whole_name: str
    whole_run: str
    plain_name: str
    plain_run: str
    degenerate: str
    whole_key: str
    twins: Sequence[RunRecord] = ()


def split_batch_verdict(claim: Claim, name: str, test: str, s: SplitBatch, runs: tuple[str, ...]) -> Verdict:
    """``holds`` where the split run follows the whole batch to round-off and plain B does not; ``fails``
    where it departs from the whole batch (by its history alone if its parameters cannot be read)."""
    if s.whole is None:
        missing = " and ".join([s.whole_run] + ([s.plain_run] if s.plain is None else []))
        return claim.verdict(name, test, INCONCLUSIVE, f"the sweep has no run with {missing} to compare with",
                             runs=runs)
    # Both partners measured against the split run, so one bound serves both comparisons.
    try:
        whole = agreement(s.whole, s.split)
        plain = agreement(s.plain, s.split) if s.plain is not None else None
        calibration = calibrate(s.whole, s.twins)
        departs = beyond_twins(s.split, s.whole, s.twins)
    except UnreadableArtifact as error:
        # the histories alone: held to how far the whole batch's twins drift where the sweep has them
        found = history_departure(s.split, s.whole, s.twins) if s.twins else history_departure(s.whole, s.split)
        if not found:
            return cannot_judge(name, claim, test, error, runs)
        return claim.verdict(name, test, FAILS, f"{s.split_name} departs from {s.whole_name}: {found} "
                                                f"(parameters not compared: {error})", runs=runs)
    b = int(s.split.options.batchsize)
    evidence = {s.parts_key: s.parts, "B": b, "updates": whole.updates, "travel": whole.travel,
                **whole.evidence(s.whole_key), **(plain.evidence("vs_plain_B_") if plain is not None else {}),
                **calibration.evidence()}
    thresholds = {"parameter_distance": Threshold(whole.parameter_bound, ROUNDOFF_RULE, ROUNDOFF_ORIGIN),
                  "history_difference": Threshold(whole.history_bound, HISTORY_RULE, ROUNDOFF_ORIGIN)}
    verdict, summary = _judge(s, whole, plain)
    # a split run within round-off of plain B (while not of the whole batch) does plain B's arithmetic: no
    # amplified round-off makes two different trajectories agree that closely
    follows_plain = plain is not None and plain.within_roundoff and not whole.within_roundoff
    verdict, summary = calibrated(verdict, summary, calibration, departs, decisive_anyway=follows_plain)
    return claim.verdict(name, test, verdict, summary, evidence, thresholds, runs)


def _judge(s: SplitBatch, whole: Agreement, plain: Agreement | None) -> tuple[str, str]:
    split, full = s.split_name, s.whole_name
    if whole.travel == 0:
        return unmoved(s.whole, s.split, f"{split} did not move the parameters and departs from {full}")
    position = (f"distance in units of eps·sqrt(T)·travel: vs {full} {fmt(whole.in_eps_units)}"
                + (f", vs {s.plain_name} {fmt(plain.in_eps_units)}" if plain is not None else "")
                + f", round-off bound {fmt(ROUNDOFF_ALLOWANCE)}")
    if plain is None:
        if whole.within_roundoff:
            return INCONCLUSIVE, (f"{split} follows {full} to round-off, but the sweep has no run with "
                                  f"{s.plain_run} to show the two differ; {position}")
        return FAILS, f"{split} does not follow {full}; {position}"
    if whole.within_roundoff and not plain.within_roundoff:
        return HOLDS, f"{split} follows {full} to round-off and not {s.plain_name}; {position}"
    if whole.within_roundoff:
        return INCONCLUSIVE, (f"{split}, {full} and {s.plain_name} follow one trajectory: every batch holds all "
                              f"points (N_c <= B?), so this sweep cannot tell them apart; {position}")
    if plain.within_roundoff:
        return FAILS, f"degenerate: {s.degenerate} — {split} follows {s.plain_name}, not {full}; {position}"
    return FAILS, f"{split} follows neither {full} nor {s.plain_name}; {position}"
