"""Trajectory verdicts calibrated on the problem: the reference must train and its round-off twins must stay within
the round-off bound, or the verdict says inconclusive, why, and the override that decides; and no broken option can
hide behind that (the calibration reads the reference and its twins only, and a departure beyond the twins fails).

Two kinds of evidence: records written by hand, which put each case exactly where it should be, and real solves of
a problem on which the accumulation sweep's SGD at 1e-3 is chaotic (tests/chaotic_problem.py), judged before and
after the fix the verdict names, with the planted accumulation defects."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import jax
import numpy as np
import optax
import pytest

import crux
from crux.batching import PointStream
from crux.engine import Primitives
from crux.roundoff import roundoff_twin
from crux.solver import Machinery
from cruxlab.report import FAILS, HOLDS, INCONCLUSIVE, RunRecord, SolveOptions, record_from_solve
from cruxlab.report import main as report_main
from cruxlab.report.claims import check_accumulation, check_inner_steps
from cruxlab.report.problem_calibration import TRAINED_FRACTION, calibrate, end_loss
from chaotic_problem import biharmonic_square
from crux_testing import poisson as small_poisson

TESTS = Path(__file__).resolve().parent
EPOCHS = 10
ACC, BIG, PLAIN = dict(batchsize=4, accumulation_steps=4), dict(batchsize=16), dict(batchsize=4)


def run(run_id: str, final: float = 1.0, end: float = 0.5, twin: int = 0, **options) -> RunRecord:
    """EPOCHS epochs whose three parameters go from 0 to ``final`` and whose loss goes from 1 to ``end``."""
    return RunRecord(run_id, SolveOptions(epochs=EPOCHS, **options), {"loss/total": np.linspace(1.0, end, EPOCHS)},
                     {}, {"initial/u/0": np.zeros(3), "final/u/0": np.full(3, final)}, roundoff_twin=twin,
                     params={"schedule.value": "0.001"})


def effective_batch(*runs: RunRecord):
    (verdict,) = [v for v in check_accumulation(list(runs)) if v.id.startswith("accumulation.effective_batch")]
    return verdict


CHAOTIC_TWIN = dict(final=1.5, end=0.8)  # a twin that ends half the travel away: far beyond 1e3·eps·sqrt(T)·travel


def test_a_problem_that_amplifies_round_off_makes_the_effective_batch_inconclusive_with_the_fix():
    """4×4 ends 0.2 of the travel from one batch of 16, which the bound calls a departure, but a twin of one batch
    of 16 ends 0.5 away: on this problem round-off alone parts runs that far."""
    verdict = effective_batch(run("acc", final=1.2, **ACC), run("big", **BIG), run("plain", final=2.0, **PLAIN),
                              run("twin", twin=1, **CHAOTIC_TWIN, **BIG))
    assert verdict.verdict == INCONCLUSIVE, verdict.summary
    assert "the problem amplifies round-off" in verdict.summary
    assert "schedule.value=1e-05" in verdict.summary  # the override, in the user's terms
    assert "the round-off bound alone found: 4×4 follows neither" in verdict.summary
    assert verdict.evidence["twin_distance_in_eps_sqrtT_travel"] > 1e3


def test_a_departure_beyond_the_twins_fails_on_a_problem_that_amplifies_round_off():
    """Summed micro-batches on such a problem: 4×4 ends 30 times as far as the twin, its loss 30 times as far."""
    verdict = effective_batch(run("acc", final=16.0, end=0.5 + 30 * 0.3, **ACC), run("big", **BIG),
                              run("plain", final=2.0, **PLAIN), run("twin", twin=1, **CHAOTIC_TWIN, **BIG))
    assert verdict.verdict == FAILS, verdict.summary
    assert "as far from the reference as round-off twins do" in verdict.summary


def test_a_split_run_on_plain_batches_arithmetic_fails_on_a_problem_that_amplifies_round_off():
    """One micro-batch's points kept: 4×4 is plain batch 4 to the bit, which no amplified round-off explains."""
    verdict = effective_batch(run("acc", final=2.0, **ACC), run("big", **BIG), run("plain", final=2.0, **PLAIN),
                              run("twin", twin=1, **CHAOTIC_TWIN, **BIG))
    assert verdict.verdict == FAILS, verdict.summary
    assert "degenerate" in verdict.summary


def test_unreadable_parameters_leave_the_histories_held_to_the_twins_drift():
    """4×4's params.npz is unreadable and its loss history parts from one batch of 16 by 20%, far beyond the
    assumed bound but within what the twin drifted (60%): the history alone cannot call that a departure."""
    unreadable = {"params.npz": "BadZipFile: File is not a zip file"}
    acc = replace(run("acc", end=0.6, **ACC), unreadable=unreadable)
    verdict = effective_batch(acc, run("big", **BIG), run("plain", final=2.0, **PLAIN),
                              run("twin", twin=1, **CHAOTIC_TWIN, **BIG))
    assert verdict.verdict == INCONCLUSIVE, verdict.summary
    far = replace(run("acc", end=20.0, **ACC), unreadable=unreadable)
    assert effective_batch(far, run("big", **BIG), run("plain", final=2.0, **PLAIN),
                           run("twin", twin=1, **CHAOTIC_TWIN, **BIG)).verdict == FAILS


@pytest.mark.parametrize("twins, outcome", [((), INCONCLUSIVE), ((run("twin", twin=1, end=1.0, **BIG),), FAILS)])
def test_a_reference_that_did_not_train_decides_only_where_twins_show_the_bound_holds(twins, outcome):
    """The loss of one batch of 16 stays where it started: with no twin the bound is unproven on this problem
    (inconclusive, saying so); with a twin that stayed within it, a departure beyond it still fails."""
    flat = dict(end=1.0)
    verdict = effective_batch(run("acc", final=1.2, **flat, **ACC), run("big", **flat, **BIG),
                              run("plain", final=2.0, **flat, **PLAIN), *twins)
    assert verdict.verdict == outcome, verdict.summary
    if outcome == INCONCLUSIVE:
        assert "the reference did not train" in verdict.summary and "roundoff_twin" in verdict.summary


def test_a_reference_that_did_not_train_holds_only_where_twins_prove_the_bound():
    """4×4 on one batch of 16's trajectory, plain batch 4 elsewhere, the loss flat: a twin within the bound proves
    it on this problem and the verdict holds, saying the loss did not fall; without a twin nothing does."""
    flat = dict(end=1.0)
    runs = [run("acc", **flat, **ACC), run("big", **flat, **BIG), run("plain", final=2.0, **flat, **PLAIN)]
    verdict = effective_batch(*runs, run("twin", twin=1, **flat, **BIG))
    assert verdict.verdict == HOLDS, verdict.summary
    assert "note: the reference did not train" in verdict.summary
    alone = effective_batch(*runs)
    assert alone.verdict == INCONCLUSIVE and "4×4 follows one batch of 16 to round-off" in alone.summary


def test_a_broken_split_run_cannot_make_the_problem_look_unjudgeable():
    """The calibration reads one batch of 16 and its twins only: a 4×4 whose loss blew up and whose parameters
    went far is judged as the bound says, on a problem that trains and keeps round-off bounded."""
    verdict = effective_batch(run("acc", final=5.0, end=1e30, **ACC), run("big", **BIG),
                              run("plain", final=2.0, **PLAIN), run("twin", twin=1, **BIG))
    assert verdict.verdict == FAILS, verdict.summary
    assert verdict.evidence["reference_trained"] == 1.0 and verdict.evidence["calibration_twins"] == 1


def test_the_end_loss_is_the_median_of_the_last_tenth_and_training_is_a_stated_fraction():
    history = np.r_[np.full(90, 10.0), np.full(9, 8.0), 100.0]  # one noisy last epoch does not decide
    assert end_loss(history) == 8.0 and math.isnan(end_loss(np.r_[history, np.nan]))
    reference = RunRecord("r", SolveOptions(epochs=100), {"loss/total": history}, {}, {})
    assert calibrate(reference, []).trained is (8.0 <= TRAINED_FRACTION * 10.0)


def test_epochs_a_library_logged_no_loss_for_are_skipped_but_a_run_that_ends_on_nan_did_not_train():
    """jNO logs one loss per fused call (NaN for the other epochs): its run trained if its logged losses fell;
    a NaN at the last epoch is the loss it ended with."""
    logged = np.full(100, np.nan)
    logged[9::10] = np.geomspace(10.0, 0.1, 10)  # one loss per call of 10, falling a hundredfold
    reference = RunRecord("jno", SolveOptions(epochs=100, inner_steps=10), {"loss/total": logged}, {}, {})
    found = calibrate(reference, [])
    assert found.trained and found.first_loss == 10.0 and found.end_loss == 0.1
    diverged = np.r_[logged[:-1], np.nan]
    assert not calibrate(replace(reference, histories={"loss/total": diverged}), []).trained


def test_fused_steps_on_a_reference_that_did_not_train_are_not_failed_without_twins():
    """The same rule for the same-numbers claims: K=5 beyond the assumed bound of a K=1 run whose loss never fell,
    with no twin to show the bound holds there, is inconclusive, not a departure."""
    reference = run("k1", end=1.0)
    fused = run("k5", final=1.2, end=1.0, inner_steps=5)
    verdict = next(v for v in check_inner_steps([reference, fused]) if v.id.startswith("inner_steps.identical"))
    assert verdict.verdict == INCONCLUSIVE, verdict.summary
    assert "did not train" in verdict.summary


# -- real solves of a problem on which SGD at 1e-3 is chaotic ------------------------------------------------------
EPOCHS_CHAOS = 100
N, B = 4, 8
N_INTERIOR = 256  # points of laplace_u: an update takes 32 of them, so a frozen stream shows


def solve(run_id: str, lr, twin: int = 0, machinery: Machinery = Machinery(), **options) -> RunRecord:
    problem = biharmonic_square(N_INTERIOR, 32, 1.0, (8, 8), "tanh", 0)
    for model in problem.models.values():
        model.params = roundoff_twin(model.params, twin)
        model.optimizer(optax.sgd).scale(lr)
    solver = problem.solver()
    solver.machinery = machinery
    initial = jax.tree.map(np.array, solver.params)
    stats = solver.solve(EPOCHS_CHAOS, **options)
    record = record_from_solve(run_id, solver, initial, stats, SolveOptions(epochs=EPOCHS_CHAOS, **options),
                               roundoff_twin=twin)
    return replace(record, params={"schedule.value": f"{float(lr(0)):g}"})


def chaotic_sweep(lr) -> list[RunRecord]:
    """N×B, one batch of N·B, plain B and a twin of one batch of N·B: what the accumulation sweep judges."""
    return [solve("acc", lr, batchsize=B, accumulation_steps=N), solve("big", lr, batchsize=N * B),
            solve("plain", lr, batchsize=B), solve("big twin", lr, twin=1, batchsize=N * B)]


@pytest.fixture(scope="module")
def fixed() -> list[RunRecord]:
    """The chaotic problem at the learning rate its verdict names."""
    return chaotic_sweep(crux.lrs(1e-5))


def test_the_chaotic_problem_is_inconclusive_at_the_sweeps_rate_and_holds_at_the_rate_it_names(fixed):
    verdict = effective_batch(*chaotic_sweep(crux.lrs(1e-3)))
    assert verdict.verdict == INCONCLUSIVE, verdict.summary
    assert "the problem amplifies round-off" in verdict.summary and "schedule.value=1e-05" in verdict.summary
    assert verdict.evidence["twin_distance_in_eps_sqrtT_travel"] > 1e3
    holds = effective_batch(*fixed)
    assert holds.verdict == HOLDS, holds.summary
    assert holds.evidence["twin_distance_in_eps_sqrtT_travel"] < 1e3


def same_points(honest):
    """A point stream frozen at its first draw: every update on the same points."""
    return lambda self, key, step: honest(self, key, 0)


KEEP_LAST = Machinery(primitives=Primitives(accumulate=lambda total, new: new))
SUMMED = Machinery(primitives=Primitives(accumulate=lambda total, new: total + N * new))  # N times the average


@pytest.mark.parametrize("defect", ["one micro-batch kept", "summed", "frozen stream"])
def test_every_planted_accumulation_defect_fails_on_the_fixed_chaotic_problem(fixed, defect, monkeypatch):
    options = dict(batchsize=B, accumulation_steps=N)
    if defect == "frozen stream":
        monkeypatch.setattr(PointStream, "indices", same_points(PointStream.indices))
    machinery = {"one micro-batch kept": KEEP_LAST, "summed": SUMMED}.get(defect, Machinery())
    verdict = effective_batch(solve("acc", crux.lrs(1e-5), machinery=machinery, **options), *fixed[1:])
    assert verdict.verdict == FAILS, verdict.summary


def test_a_schedule_stepped_per_micro_batch_fails_with_twins_in_the_sweep():
    """A decaying schedule advanced once per micro-batch rather than per update (N times as fast), on the small
    Poisson problem with a twin of one batch of N·B."""
    def problem(transition: int):
        return small_poisson(optax.sgd, crux.lrs.exponential(1e-3, 0.5, transition), n=64, hidden=(8, 8))

    def record(run_id: str, transition: int = 8, twin: int = 0, **options) -> RunRecord:
        p = problem(transition)
        for model in p.models.values():
            model.params = roundoff_twin(model.params, twin)
        solver = p.solver()
        initial = jax.tree.map(np.array, solver.params)
        stats = solver.solve(32, **options)
        return record_from_solve(run_id, solver, initial, stats, SolveOptions(epochs=32, **options),
                                 roundoff_twin=twin)

    partners = [record("big", batchsize=16), record("plain", batchsize=4), record("twin", twin=1, batchsize=16)]
    honest = effective_batch(record("acc", **ACC), *partners)
    assert honest.verdict == HOLDS, honest.summary
    broken = effective_batch(record("acc", transition=2, **ACC), *partners)
    assert broken.verdict == FAILS, broken.summary


# -- through the real sweep and report, on the problem registered as a user registers one -----------------------
SWEEP = ["problem=biharmonic", "model.width=8", "model.depth=2", "solver.epochs=100", "memory=b8,b32,b8_acc4",
         "gradient_draws=0"]


@pytest.mark.integration  # runs two sweeps in subprocesses
def test_the_accumulation_sweep_on_a_chaotic_problem_names_the_fix_and_holds_with_it(tmp_path):
    """``crux-sweep accumulation --config-dir conf problem=biharmonic``, then again with the override its report
    names: inconclusive (the twins part beyond the bound) with ``schedule.value=1e-05``, then holds."""
    (tmp_path / "conf" / "problem").mkdir(parents=True)
    (tmp_path / "conf" / "problem" / "biharmonic.yaml").write_text(
        "_target_: chaotic_problem.biharmonic_square\nn_interior: 256\nn_edge: 32\nscale: 1.0\n")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    verdicts = []
    for k, extra in enumerate(([], ["schedule.value=1e-05"])):
        done = subprocess.run([sys.executable, "-m", "cruxlab.commands.sweep", "accumulation", "--config-dir", "conf",
                               *SWEEP, "problem.n_interior=256", *extra, f"hydra.sweep.dir={tmp_path / str(k)}"],
                              cwd=tmp_path, capture_output=True, text=True, timeout=600,
                              env={**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(TESTS)})
        assert done.returncode == 0, done.stderr[-3000:]
        out = tmp_path / f"report{k}"
        assert report_main(["accumulation", "--tracking-uri", uri, "--out", str(out)]) == 0
        (found,) = [v for v in json.loads((out / "verdicts.json").read_text())
                    if v["id"] == "accumulation.effective_batch[b8_acc4]"]
        verdicts.append(found)
    before, after = verdicts
    assert before["verdict"] == INCONCLUSIVE, before["summary"]
    assert "amplifies round-off" in before["summary"] and "schedule.value=1e-05" in before["summary"]
    assert after["verdict"] == HOLDS, after["summary"]
