"""The verdict shared by every option that must not change the numbers (inner_steps, checkpointing, offload)."""
from __future__ import annotations

from crux.report.numerics import HISTORY_RULE, ROUNDOFF_ORIGIN, ROUNDOFF_RULE, agreement
from crux.report.pairing import run_ids
from crux.report.records import RunRecord
from crux.report.verdict import FAILS, HOLDS, INCONCLUSIVE, Threshold, Verdict, fmt


def same_numbers(name: str, claim: str, source: str, run: RunRecord, reference: RunRecord | None,
                 option: str) -> Verdict:
    """``run`` (with ``option``) against ``reference`` (without): final parameters and loss/total history
    must agree to float32 round-off."""
    test = f"final parameters and per-epoch loss/total history with {option} against without"
    if reference is None:
        return Verdict(name, claim, source, test, INCONCLUSIVE,
                       f"the sweep has no run without {option} and the same other options", runs=run_ids(run))
    a = agreement(run, reference)
    thresholds = {"parameter_distance": Threshold(a.parameter_bound, ROUNDOFF_RULE, ROUNDOFF_ORIGIN),
                  "history_difference": Threshold(a.history_bound, HISTORY_RULE, ROUNDOFF_ORIGIN)}
    evidence = {"updates": a.updates, "travel": a.travel, **a.evidence("")}
    if a.travel == 0:
        verdict, summary = INCONCLUSIVE, "the reference's parameters did not move: nothing to compare"
    elif a.bit_identical:
        verdict, summary = HOLDS, f"{option} is bit-identical to the reference ({a.updates} updates)"
    elif a.within_roundoff:
        verdict, summary = HOLDS, (f"{option} agrees with the reference to round-off ({fmt(a.in_eps_units)} in "
                                   f"units of eps·sqrt(T)·travel, bound 1e3)")
    else:
        verdict, summary = FAILS, (f"{option} departs from the reference: parameters {fmt(a.in_eps_units)} in units "
                                   f"of eps·sqrt(T)·travel (bound 1e3), history up to "
                                   f"{fmt(a.history_difference)} relative")
    return Verdict(name, claim, source, test, verdict, summary, evidence, thresholds, run_ids(run, reference))
