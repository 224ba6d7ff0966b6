"""Claims 2 and 3: fusing K steps (inner_steps=K) changes no number, and is it faster on this device?

Identity is judged against K=1 with the same other options, on final
parameters and per-epoch histories, for every batch setting the sweep ran: on
mini-batches the K updates of a fused call each draw their own points, so only
there can a fused call that drew the wrong ones be told apart from K=1.
Speed is judged on the steady-state time per update (median over a run's
synchronisation windows), with the repeats' spread as the noise, per device:
the quoted page measured it slower on a CPU, and expects it to pay off where
dispatch latency dominates.
"""
from __future__ import annotations

from crux.report.claims.equivalence import same_numbers
from crux.report.numerics import SPREAD_ORIGIN, STEP_TIME, Spread, compare_times, spread
from crux.report.pairing import Pair, paired_settings, reference_and_twins, run_ids
from crux.report.records import RunRecord, UnreadableArtifact, describe
from crux.report.verdict import (FAILS, HOLDS, INCONCLUSIVE, Claim, Threshold, Verdict, cannot_judge, fmt,
                                 not_in_sweep)

IDENTICAL = Claim("inner_steps=N runs N gradient steps inside a single jax.lax.fori_loop [...] "
                  "Numerically identical [...] Fusing is a dispatch change, not a numerical one",
                  "inner-steps-identical")
FASTER = Claim("inner_steps=N runs N gradient steps inside a single jax.lax.fori_loop, so Python dispatches once per "
               "N steps instead of once per step. [...] The argument exists for the case where dispatch latency "
               "dominates a small kernel, which is far likelier on a GPU than in this test — measure on your own "
               "problem", "inner-steps-faster")


def fused_pairs(records: list[RunRecord]) -> list[Pair]:
    """``(repeats at K, repeats at K=1)`` for every fused setting, by batch setting and then K."""
    pairs = paired_settings(records, lambda o: o.inner_steps > 1, inner_steps=1)
    return sorted(pairs, key=lambda pair: (pair[0][0].group, batches(pair[0][0]), pair[0][0].options.inner_steps))


def batches(record: RunRecord) -> str:
    """The run's options apart from K, as ``describe`` names them: ``full``, ``b8_acc4``, ..."""
    return describe(record.options.but(inner_steps=1))


def setting(record: RunRecord) -> str:
    """What the verdicts on a fused run are named after: ``K=10`` on the full batch, ``b8_acc4 K=10`` otherwise."""
    return describe(record.options).removeprefix("full ")


def check_inner_steps(records: list[RunRecord]) -> list[Verdict]:
    """Per fused setting (batch setting and K): one verdict on numerical identity, one on speed."""
    pairs = fused_pairs(records)
    if not pairs:
        return [not_in_sweep("inner_steps.identical", IDENTICAL, "runs with inner_steps > 1", "fused",
                             run_ids(records))]
    verdicts = []
    for fused, reference in pairs:
        partner, twins = reference_and_twins(reference, fused[0])
        verdicts.append(same_numbers(f"inner_steps.identical[{setting(fused[0])}]", IDENTICAL, fused[0],
                                     partner, f"inner_steps={fused[0].options.inner_steps}", twins))
        verdicts.append(_faster(fused, reference))
    return verdicts


def _faster(fused: list[RunRecord], reference: list[RunRecord]) -> Verdict:
    k = fused[0].options.inner_steps
    name = f"inner_steps.faster[{setting(fused[0])}]"
    try:
        device = fused[0].device
    except UnreadableArtifact as error:
        return cannot_judge(name, FASTER, f"time per update of inner_steps={k} against inner_steps=1 on the device "
                            f"the runs recorded", error, run_ids(fused, reference))
    test = (f"steady-state time per update ({STEP_TIME}) of inner_steps={k} against inner_steps=1 on {device}: "
            f"median and [min, max] over repeats; compile time reported separately (the slowest repeat's, as later "
            f"repeats may hit the persistent compilation cache)")
    mine, base = spread(fused, STEP_TIME), spread(reference, STEP_TIME)
    # The slowest compile is the cold one: later repeats may hit the persistent compilation cache.
    evidence = {"K": k, **_timing("K", mine), **_timing("K1", base),
                "compile_seconds_max_K": spread(fused, "compile_seconds").high,
                "compile_seconds_max_K1": spread(reference, "compile_seconds").high}
    outcome = compare_times(mine, base)
    ratio = base.median / mine.median if mine.values and base.values else float("nan")
    evidence["speedup_median"] = ratio
    thresholds = {"faster_if_max_below": Threshold(base.low, "max over K repeats < min over K=1 repeats",
                                                   SPREAD_ORIGIN),
                  "slower_if_min_above": Threshold(base.high, "min over K repeats > max over K=1 repeats",
                                                   SPREAD_ORIGIN)}
    timing = (f"{fmt(mine.median * 1e3)} ms vs {fmt(base.median * 1e3)} ms per update, "
              f"{len(mine.values)} vs {len(base.values)} repeats; compile {fmt(evidence['compile_seconds_max_K'])} s "
              f"vs {fmt(evidence['compile_seconds_max_K1'])} s")
    verdict, summary = {
        "faster": (HOLDS, f"faster on {device} by {fmt(ratio)}× ({timing})"),
        "slower": (FAILS, f"slower on {device} by {fmt(1 / ratio)}× ({timing})"),
        "within noise": (INCONCLUSIVE, f"within noise on {device} ({timing})"),
        "unmeasured": (INCONCLUSIVE, f"needs at least 2 repeats of each K to measure the noise ({timing})"),
    }[outcome]
    return FASTER.verdict(name, test, verdict, summary, evidence, thresholds, run_ids(fused, reference))


def _timing(side: str, s: Spread) -> dict[str, float]:
    return {f"step_seconds_median_{side}": s.median, f"step_seconds_min_{side}": s.low,
            f"step_seconds_max_{side}": s.high, f"repeats_{side}": len(s.values)}
