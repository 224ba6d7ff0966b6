"""The calibration of the claim checks, small: a dozen generated problems, each judged by some of its families.

The full run (scripts/calibrate.py, out of CI) gives the figures in docs/claims.md; this keeps its promise on a
few cases in every test run: the checks never fail the real code, and catch every planted defect that changed
the numbers where the check is meant to decide on its own.
"""
from __future__ import annotations

import pytest

from scripts_path import calibrate

CASES = (*range(12), 33)  # 33: a continued mini-batch boundary whose step is the largest of the few around it
EFFECTIVE_BATCH_CASES = (0, 4, 8)  # each case's runs and defects compile their own programs: a few suffice here
NOISE_CASES = (1, 4)  # with 16 draws a run: every draw is a solve() call


@pytest.fixture(scope="module")
def tallies() -> dict[str, "calibrate.Tally"]:
    """Every case judged by the calls family (resume, phases), a few by the accumulation checks."""
    return {**calibrate.run(CASES, ["calls"]), **calibrate.run(EFFECTIVE_BATCH_CASES, ["accumulation"]),
            **calibrate.run(NOISE_CASES, ["noise"], draws=(16,))}


def test_no_check_fails_the_real_code(tallies):
    assert {check: t.false_fails for check, t in tallies.items() if t.false_fails} == {}
    # every check judged the real code on its cases (noise only where some constraint is sampled)
    assert all(t.judged > 0 for t in tallies.values()), {check: t.judged for check, t in tallies.items()}


@pytest.mark.parametrize("check, defects", [
    ("accumulation.effective_batch", set(calibrate.ACCUMULATION_DEFECTS)),
    ("resume.same_as_one_call", set(calibrate.CARRY_DEFECTS)),
])
def test_every_planted_defect_that_changed_the_numbers_is_caught(tallies, check, defects):
    tally = tallies[check]
    assert set(tally.changed) == defects  # each defect changed the numbers of some case: it was planted
    assert {name: misses for name, misses in tally.missed.items() if misses} == {}


def test_phases_resume_catches_parameters_not_carried_where_the_loss_moved_beyond_the_batch_noise(tallies):
    """phases.resume compares losses at a boundary; where a few mini-batch updates move the loss less than one
    batch's loss differs from another's it cannot tell a restart (docs/claims.md, calibration), so only some."""
    tally = tallies["phases.resume"]
    for name in calibrate.CARRY_DEFECTS:
        assert len(tally.missed[name]) < tally.changed[name]


def test_the_noise_check_catches_micro_batches_summed_instead_of_averaged(tallies):
    """Summing N micro-batches multiplies the spread by N² (at least 4), far beyond 16 draws' sampling error."""
    tally = tallies["accumulation.noise"]
    assert tally.changed.get("summed micro-batches", 0) > 0
    assert tally.missed["summed micro-batches"] == []


def test_a_miss_names_the_seed_that_reproduces_it():
    case = calibrate.generate(5)
    assert case == calibrate.generate(5) and case.describe().startswith("seed 5: ")
