"""The verdict shared by every option that must not change the numbers (inner_steps, checkpointing, offload).

Bit-identical runs hold outright. Otherwise the run must differ from the
reference no more than round-off does, and how far round-off goes is measured
where the sweep has round-off twins of the reference (its repeats that started
one ulp per parameter away, ``roundoff_twin``): in a chaotic run two histories
that differ by one ulp agree to 1e-7 for a while and then drift to percents, so
the drift is judged against the twins', epoch by epoch. Without twins the bound
is the assumed ``1e3 · eps · sqrt(T) · travel``, which decides only where the
reference trained (:mod:`cruxlab.report.problem_calibration`): on a problem that
does not, training may amplify round-off beyond that bound, and no twin shows
whether it does.
"""
from __future__ import annotations

from typing import Sequence

from cruxlab.report.numerics import (HISTORY_RULE, ROUNDOFF_ORIGIN, ROUNDOFF_RULE, TWIN_FACTOR, TWIN_HISTORY_RULE,
                                     TWIN_ORIGIN, TWIN_PARAMETER_RULE, TwinComparison, agreement, departures,
                                     history_departure, twin_comparison)
from cruxlab.report.pairing import run_ids
from cruxlab.report.problem_calibration import calibrate, calibrated
from cruxlab.report.run_records import RunRecord, UnreadableArtifact
from cruxlab.report.verdict import FAILS, HOLDS, INCONCLUSIVE, Claim, Threshold, Verdict, cannot_judge, fmt


def same_numbers(name: str, claim: Claim, run: RunRecord, reference: RunRecord | None, option: str,
                 twins: Sequence[RunRecord] = ()) -> Verdict:
    """``run`` (with ``option``) against ``reference`` (without): final parameters and loss/total history
    must agree as closely as ``twins`` (round-off twins of the reference) do, or, without twins, to the
    assumed round-off bound."""
    test = f"final parameters and per-epoch loss/total history with {option} against without"
    if reference is None:
        return claim.verdict(name, test, INCONCLUSIVE,
                             f"the sweep has no run without {option} and the same other options", runs=run_ids(run))
    try:
        a, twin = agreement(run, reference), twin_comparison(run, reference, twins)
        calibration = calibrate(reference, twins)
    except UnreadableArtifact as error:
        found = history_departure(run, reference, twins)
        if not found:
            return cannot_judge(name, claim, test, error, run_ids(run, reference, twins))
        return claim.verdict(name, test, FAILS, f"{option} departs from the reference: {found} (parameters not "
                             f"compared: {error})", runs=run_ids(run, reference, twins))
    evidence = {"updates": a.updates, "travel": a.travel, **a.evidence("")}
    if twin is not None:
        test += ", each held to how far round-off twins of the reference drift from it"
        evidence.update(twin.evidence())
        thresholds = {"history_ratio_to_twins": Threshold(TWIN_FACTOR, TWIN_HISTORY_RULE, TWIN_ORIGIN),
                      "parameter_ratio_to_twins": Threshold(TWIN_FACTOR, TWIN_PARAMETER_RULE, TWIN_ORIGIN)}
    else:
        thresholds = {"parameter_distance": Threshold(a.parameter_bound, ROUNDOFF_RULE, ROUNDOFF_ORIGIN),
                      "history_difference": Threshold(a.history_bound, HISTORY_RULE, ROUNDOFF_ORIGIN)}
    if a.travel == 0:
        verdict, summary = _without_travel(option, run, reference, twins)
    elif a.bit_identical:
        verdict, summary = HOLDS, f"{option} is bit-identical to the reference ({a.updates} updates)"
    elif twin is not None:
        # judged against the twins' own drift, so amplified round-off is the yardstick, not a false departure
        verdict, summary = _against_twins(option, twin, evidence)
    else:
        if a.within_roundoff:
            verdict, summary = HOLDS, (f"{option} agrees with the reference to round-off ({fmt(a.in_eps_units)} in "
                                       f"units of eps·sqrt(T)·travel, bound 1e3)")
        else:
            verdict, summary = FAILS, (f"{option} departs from the reference: parameters {fmt(a.in_eps_units)} in "
                                       f"units of eps·sqrt(T)·travel (bound 1e3), history up to "
                                       f"{fmt(a.history_difference)} relative")
        verdict, summary = calibrated(verdict, summary, calibration)
    evidence.update(calibration.evidence())
    return claim.verdict(name, test, verdict, summary, evidence, thresholds, run_ids(run, reference, twins))


def _without_travel(option: str, run: RunRecord, reference: RunRecord, twins: Sequence[RunRecord]
                    ) -> tuple[str, str]:
    """A reference whose parameters did not move leaves no distance to scale by, but a history or parameters
    that differ far beyond round-off (``ROUNDOFF_ALLOWANCE · eps · sqrt(T)`` relative) still decide."""
    found, _ = departures(run, reference, twins)
    if found:
        return FAILS, f"{option} departs from the reference, whose parameters did not move: " + "; ".join(found)
    return INCONCLUSIVE, "the reference's parameters did not move and the run agrees with it: nothing to compare"


def _against_twins(option: str, twin: TwinComparison, evidence: dict[str, float]) -> tuple[str, str]:
    epochs = len(twin.twin_drift)
    if twin.horizon < epochs:
        course = (f"within {fmt(evidence['max_relative_history_difference_within_horizon'])} over the first "
                  f"{twin.horizon} epochs, where a twin one ulp away stays within 10 eps; after that training "
                  f"amplifies round-off and the twin drifts to {fmt(evidence['twin_max_relative_history_difference'])}")
    else:
        course = (f"within {fmt(evidence['max_relative_history_difference'])} over all {epochs} epochs, where a "
                  f"twin one ulp away stays within 10 eps")
    if twin.within:
        return HOLDS, (f"{option} differs from the reference as round-off does: loss history {course}, and this run "
                       f"at most {fmt(twin.history_ratio)}× as far as the twin (bound {fmt(TWIN_FACTOR)}×); final "
                       f"parameters {fmt(twin.distance)} apart, the twin's {fmt(twin.twin_distance)}")
    found = []
    if twin.history_ratio > TWIN_FACTOR:
        at = twin.worst_epoch
        found.append(f"at epoch {at} its loss differs by {fmt(twin.divergence[at])} relative, "
                     f"{fmt(twin.history_ratio)}× the {fmt(twin.allowance[at])} round-off twins had drifted by then "
                     f"(never counted below eps)"
                     if twin.divergence is not None else "its loss history does not line up with the reference's")
    if twin.parameter_ratio > TWIN_FACTOR:
        found.append(f"its final parameters are {fmt(twin.distance)} from the reference's, the twins' "
                     f"{fmt(twin.twin_distance)} ({fmt(twin.parameter_ratio)}×)")
    return FAILS, f"{option} departs from the reference beyond round-off: {'; '.join(found)} (bound " \
                  f"{fmt(TWIN_FACTOR)}×)"
