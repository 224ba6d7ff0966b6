"""The calibration of the claim checks, small: a dozen generated problems, each judged by some of its families.

The full run (scripts/calibrate.py, out of CI) gives the figures in docs/claims.md; this keeps its promise on a
few cases in every test run: the checks never fail the real code, and catch every planted defect that changed
the numbers beyond what the check allows for (round-off, the sampling error of its draws).
"""
from __future__ import annotations

import numpy as np
import pytest

from cruxlab.measure import calibration as calibrate
from cruxlab.report import FAILS, Verdict
from cruxlab.report.claims.gradient_noise import expected_ratios

CASES = (*range(12), 33)  # 33: a continued mini-batch boundary whose step is the largest of the few around it
EFFECTIVE_BATCH_CASES = (0, 4, 8, 11)  # each case's runs and defects compile their own programs: a few suffice here
NOISE_CASES = (1, 4)  # with 16 draws a run: every draw is a solve() call


@pytest.fixture(scope="module")
def tallies() -> dict[str, "calibrate.Tally"]:
    """Every case judged by the calls family (resume, phases), a few by the accumulation checks."""
    return {**calibrate.run_checks(CASES, ["calls"]), **calibrate.run_checks(EFFECTIVE_BATCH_CASES, ["accumulation"]),
            **calibrate.run_checks(NOISE_CASES, ["noise"], draws=(16,))}


def test_no_check_fails_the_real_code(tallies):
    assert {check: t.false_fails for check, t in tallies.items() if t.false_fails} == {}
    # every check judged the real code on its cases (noise only where some constraint is sampled)
    assert all(t.judged > 0 for t in tallies.values()), {check: t.judged for check, t in tallies.items()}


@pytest.mark.parametrize("check, defects", [
    ("accumulation.effective_batch", set(calibrate.ACCUMULATION_DEFECTS)),
    ("resume.same_as_one_call", set(calibrate.CARRY_DEFECTS)),
    ("phases.resume", set(calibrate.CARRY_DEFECTS)),  # from the parameters' fingerprints, whatever the batch noise
    ("accumulation.noise", {"summed micro-batches"}),  # at 16 draws the others lie within the sampling error
])
def test_every_planted_defect_that_changed_the_numbers_is_caught(tallies, check, defects):
    tally = tallies[check]
    assert {name for name, count in tally.changed.items() if count} == defects  # each changed some case's numbers
    assert {name: misses for name, misses in tally.missed.items() if misses} == {}


def test_a_defect_that_moves_the_runs_only_by_roundoff_is_counted_apart(tallies):
    """Case 11 (one constraint of 90 points, 6×16): the 96 points of an update hold every point, so a point stream
    that stops moving still shows each update all of them; its run differs from the real code's in the last bits
    only (the same sum in another order), which no check may call a departure."""
    case = calibrate.generate(11)
    real = calibrate.accumulation_runs(case)[0]
    frozen = calibrate.frozen_point_stream(case, real)
    assert not np.array_equal(frozen.snapshot("final"), real.snapshot("final"))
    assert not calibrate.beyond_roundoff(frozen, real)
    assert tallies["accumulation.effective_batch"].unchanged["frozen point stream"] >= 1


def test_the_expected_noise_ratios_are_those_the_draws_measure():
    """The exact variance of a batch, from the case's per-point gradients, against 64 draws of it: case 4
    (constraints of 99, 3417 and 4 points, 6×8). A variance estimated from S draws is off by its measured
    standard error; 3 of them bound a chance miss at 3 in 1000."""
    case = calibrate.generate(4, (64,))
    variances = calibrate.item_variances(case)
    for batchsize, accumulation in ((case.batchsize, 1), (case.batchsize, case.accumulation)):
        measured = calibrate.draws_of(case, batchsize, accumulation, case.seed).metrics()
        expected = calibrate.batch_variance(variances, case.sizes, batchsize * accumulation)
        assert abs(measured["gradient_noise/variance"] - expected) < 3 * measured["gradient_noise/standard_error"]
    ratios = calibrate.expected_noise_ratios(case)
    low, high = expected_ratios(case.sizes, case.accumulation, case.batchsize)
    assert low <= ratios["real code"] <= high  # the check's range holds the real code's ratio, whatever the mix
    assert ratios["summed micro-batches"] == pytest.approx(case.accumulation ** 2 * ratios["real code"])


@pytest.mark.parametrize("error, counted", [(0.2, True), (0.25, False)])
def test_a_noise_defect_counts_only_beyond_twice_the_checks_sampling_allowance(error, counted):
    """One constraint of 4000 points, 4×16: the real range is [(1/4)(4000-64)/(4000-16), 1/4] and micro-batches
    that repeat each other give 1, log 4 = 1.386 above it: beyond 6 standard errors of 0.2 (1.2), within 6 of
    0.25 (1.5)."""
    case = calibrate.Case(0, 1, (4000,), 16, 4, 16, (2, 2))
    verdict = Verdict("accumulation.noise[b16_acc4]", "", "", "", FAILS, "", {"log_ratio_standard_error": error})
    assert calibrate.beyond_sampling_error(1.0, case, verdict) is counted


def test_the_noise_check_catches_micro_batches_summed_instead_of_averaged(tallies):
    """Summing N micro-batches multiplies the spread by N² (at least 4), far beyond 16 draws' sampling error."""
    tally = tallies["accumulation.noise"]
    assert tally.changed.get("summed micro-batches", 0) > 0
    assert tally.missed["summed micro-batches"] == []


def test_a_miss_names_the_seed_that_reproduces_it():
    case = calibrate.generate(5)
    assert case == calibrate.generate(5) and case.describe().startswith("seed 5: ")
