"""The phases check of cruxlab.report on records made straight from crux solves: a later solve() resumes, every
phase moves, a new optimizer starts fresh; each shown to hold on crux as it is and to fail when a solve() is
broken on purpose (a forgetful or restarting solve, an optimizer kept across a switch), or judged from a
phase boundary's numbers alone."""
from __future__ import annotations

from dataclasses import replace

import jax
import numpy as np
import optax
import pytest

import crux
from crux.model import Model
from crux.solver import Crux
from cruxlab.measure import calibration as calibrate
from cruxlab.report import FAILS, HOLDS, INCONCLUSIVE, PhaseCall, RunRecord, SolveOptions, record_from_solve
from cruxlab.report.claims import check_phases
from cruxlab.report.run_records import snapshot_arrays
from cruxlab.store import contract
from crux_testing import mixed, only


PHASES = ((20, optax.adam, 1e-2), (20, optax.sgd, 1e-3))


def two_phases(run_id: str, phases=PHASES, batchsize: int | None = None) -> RunRecord:
    """Adam at 1e-2, then SGD at 1e-3, on the mixed problem, with the parameters recorded after each phase as the
    pipeline records them."""
    problem = mixed(optax.adam, lr=1e-2, n=32, hidden=(8,))  # two networks, as the substeps checks
    solver = problem.solver()
    initial = jax.tree.map(np.array, solver.params)
    plan, snapshots = [], {}
    for k, (epochs, optimizer, lr) in enumerate(phases):
        schedule = crux.lrs(lr)
        for model in problem.models.values():
            model.optimizer(optimizer).scale(schedule)
        solver.solve(epochs, batchsize=batchsize)
        snapshots.update(snapshot_arrays(solver.params, f"phase{k}"))
        plan.append(PhaseCall(epochs, optimizer.__name__, schedule, fresh=True))
    return record_from_solve(run_id, solver, initial, solver.history,
                             SolveOptions(epochs=phases[0][0], batchsize=batchsize), plan, snapshots)


def test_phases_resume_move_and_switch_optimizer():
    verdicts = check_phases([two_phases("phases")])
    for name in ("phases.resume", "phases.every_phase_moves", "phases.fresh_optimizer"):
        assert only(verdicts, name).verdict == HOLDS, only(verdicts, name).summary


@pytest.mark.parametrize("recorded, outcome", [("constant(0.003)", HOLDS), ("constant(0.01)", FAILS)])
def test_a_first_phase_on_a_networks_own_schedule_is_not_held_to_the_configured_one(recorded, outcome):
    """q trained its first phase at its problem's own 3e-3, as its network.q.schedule param records: nothing
    configured to compare with, so phase 0 of lr/q is left out, said so, and the SGD phase is judged. A run that
    records the configured schedule for q is held to it: its 3e-3 is a learning rate the plan did not ask for."""
    record = two_phases("own")
    lr_q = np.array(record.histories["lr/q"])
    lr_q[:20] = 3e-3
    record = replace(record, histories={**record.histories, "lr/q": lr_q},
                     params={"network.q.schedule": recorded, "network.u.schedule": "constant(0.01)"})
    verdict = only(check_phases([record]), "phases.fresh_optimizer")
    assert verdict.verdict == outcome, verdict.summary
    assert ("not judged, trained with the problem's own schedule: full lr/q phase 0 (constant(0.003))" in
            verdict.summary) == (outcome == HOLDS)
    assert "full/lr/q/phase1/relative_difference" in verdict.evidence


@pytest.mark.parametrize("second_lr, outcome", [(1e-3, HOLDS), (0.0, FAILS)])
def test_mini_batch_phases_are_judged_from_their_parameter_snapshots(second_lr, outcome):
    """A mini-batch loss changes from batch to batch whether a phase trains or not; the snapshots tell. SGD at
    learning rate 0 leaves every parameter where it was."""
    record = two_phases("b8", (PHASES[0], (20, optax.sgd, second_lr)), batchsize=8)
    verdict = only(check_phases([record]), "phases.every_phase_moves")
    assert verdict.verdict == outcome, verdict.summary
    assert "judged from per-phase parameter snapshots" in verdict.summary
    assert verdict.evidence["b8/phase0/moved"] > 0
    assert (verdict.evidence["b8/phase1/moved"] == 0) == (outcome == FAILS)


@pytest.mark.parametrize("defect, handed_back", [(calibrate.forgetful, True), (calibrate.never_hand_back, False)],
                         ids=["later calls start from the first call's parameters", "parameters never handed back"])
@pytest.mark.parametrize("batchsize", [None, 8], ids=["full batch", "short mini-batch phases"])
def test_a_solve_that_does_not_carry_the_parameters_fails_the_phases(defect, handed_back, batchsize, monkeypatch):
    """Phase 2's first update starts from the run's first parameters, not from where phase 1 ended: the
    fingerprints solve() records of the two differ, whatever the batch noise does to the loss (3 epochs a phase
    on batches of 8, where the loss at a boundary cannot place a restart). Parameters never handed back also leave
    every phase's snapshot where the run started."""
    monkeypatch.setattr(Crux, "solve", defect(Crux.solve))
    phases = PHASES if batchsize is None else ((3, optax.adam, 1e-2), (3, optax.sgd, 1e-3))
    label = "full" if batchsize is None else "b8"
    verdicts = check_phases([two_phases("forgetful", phases, batchsize=batchsize)])
    resume = only(verdicts, "phases.resume")
    assert resume.verdict == FAILS, resume.summary
    assert resume.evidence[f"{label}/boundary1/start_vs_previous_end"] > 0
    assert "phase 1 started where phase 0 started" in resume.summary
    assert ("were those it ended with" if handed_back else "were not those it ended with") in resume.summary
    moves = only(verdicts, "phases.every_phase_moves")
    assert moves.verdict == (HOLDS if handed_back else FAILS), moves.summary


def test_a_restart_fails_from_the_fingerprints_alone_where_the_parameter_snapshots_cannot_be_read(monkeypatch):
    """The fingerprints decide: with params.npz unreadable the restart still fails; only the finding's note on
    whether the trained parameters were handed back, which reads the snapshots, is left out."""
    monkeypatch.setattr(Crux, "solve", calibrate.forgetful(Crux.solve))
    record = replace(two_phases("forgetful", ((3, optax.adam, 1e-2), (3, optax.sgd, 1e-3)), batchsize=8),
                     unreadable={contract.PARAMS: "BadZipFile: File is not a zip file"})
    resume = only(check_phases([record]), "phases.resume")
    assert resume.verdict == FAILS, resume.summary
    assert "phase 1 started where phase 0 started" in resume.summary and "handed back" not in resume.summary


def test_short_mini_batch_phases_of_the_real_solve_resume_to_the_bit():
    """The same short mini-batch phases on the real solve(): each phase starts from the parameters the last one
    ended with, the same fingerprint to the bit."""
    record = two_phases("b8", ((3, optax.adam, 1e-2), (3, optax.sgd, 1e-3)), batchsize=8)
    resume = only(check_phases([record]), "phases.resume")
    assert resume.verdict == HOLDS, resume.summary
    assert resume.evidence["b8/boundary1/start_vs_previous_end"] == 0.0
    assert "judged from the parameters' fingerprints" in resume.summary


def test_phase_switch_that_keeps_the_old_optimizer_fails(monkeypatch):
    """Setting an optimizer no longer counts as a change, so the solver resumes the old one."""
    for method in ("optimizer", "scale"):
        honest = getattr(Model, method)

        def unchanged(self, value, honest=honest):
            version = self.optimizer_version
            honest(self, value)
            self.optimizer_version = version
            return self

        monkeypatch.setattr(Model, method, unchanged)
    verdict = only(check_phases([two_phases("phases-stale")]), "phases.fresh_optimizer")
    assert verdict.verdict == FAILS
    assert "phase 1" in verdict.summary


# -- judged from numbers alone: phase boundaries -----------------------------------------------------------
def test_phase_boundary_that_jumps_back_or_a_phase_that_stalls_fails():
    decay = np.exp(-np.arange(20) / 5.0)
    options = SolveOptions(epochs=20)
    phases = (PhaseCall(20, "adam", crux.lrs(1e-3), True), PhaseCall(20, "sgd", crux.lrs(1e-3), True))
    snapshots = {"initial/u/0": np.zeros(2), "final/u/0": np.ones(2)}

    def record(history):
        return RunRecord("r", options, {"loss/total": history}, {}, snapshots, phases=phases)

    resumed = np.concatenate([decay, decay[-1] * decay])
    restarted = np.concatenate([decay, decay])
    assert only(check_phases([record(resumed)]), "phases.resume").verdict == HOLDS
    assert only(check_phases([record(restarted)]), "phases.resume").verdict == FAILS
    stalled = np.concatenate([decay, np.full(20, decay[-1])])  # a full-batch phase whose loss never changes
    moves = only(check_phases([record(stalled)]), "phases.every_phase_moves")
    assert moves.verdict == FAILS
    assert "phase1" in moves.summary and "phase0" not in moves.summary
    # another run's params.npz unreadable (its mini-batch phases cannot be judged): the stalled phase still decides
    unread = replace(record(resumed), run_id="u", options=SolveOptions(epochs=20, batchsize=8),
                     unreadable={contract.PARAMS: "BadZipFile: File is not a zip file"})
    moves = only(check_phases([record(stalled), unread]), "phases.every_phase_moves")
    assert moves.verdict == FAILS, moves.summary
    moves = only(check_phases([record(resumed), unread]), "phases.every_phase_moves")
    assert moves.verdict == INCONCLUSIVE and "params.npz of run `u`" in moves.summary


@pytest.mark.parametrize("second_start, outcome", [(0.0, FAILS), (-1.0, INCONCLUSIVE), (-1.5, HOLDS)])
def test_a_mini_batch_phase_start_is_placed_against_the_batch_noise(second_start, outcome):
    """Log loss on batches of 8: phase 1 falls from 0 to -2 over 20 epochs, every epoch 0.2 above or below that
    line by the batch drawn, so it starts at 0.2 and ends at -2.2. Phase 2 falls by 1 with the same wiggle: the 38
    steps within the phases have mean -0.1 and standard deviation 0.406, so a continued boundary's step stays
    below 0.1 + t(37, 0.9995) 3.57 · 0.406 · sqrt(1 + 1/38) = 1.57. Phase 2 starts at ``second_start`` + 0.2: at
    0.2 it is 2.4 from the end and 0 from the start, a restart beyond that; at -0.8, 1.4 from the end and 1.0 from
    the start, 0.4 apart, within it; at -1.3, 0.9 from the end, nearer it than the start."""
    wiggle = np.where(np.arange(20) % 2 == 0, 0.2, -0.2)
    first = np.exp(np.linspace(0.0, -2.0, 20) + wiggle)
    second = np.exp(second_start + np.linspace(0.0, -1.0, 20) + wiggle)
    phases = (PhaseCall(20, "adam", crux.lrs(1e-3), True), PhaseCall(20, "sgd", crux.lrs(1e-3), True))
    record = RunRecord("r", SolveOptions(epochs=20, batchsize=8), {"loss/total": np.concatenate([first, second])},
                       {}, {"initial/u/0": np.zeros(2), "final/u/0": np.ones(2)}, phases=phases)
    verdict = only(check_phases([record]), "phases.resume")
    assert verdict.verdict == outcome, verdict.summary


def test_a_continued_mini_batch_boundary_whose_step_is_the_largest_of_few_is_no_restart():
    """The real solve() on a generated problem (calibration seed 33: 4 constraints, batches of 4, calls of 7, 5
    and 4 epochs): the second boundary's step, 0.673, is the largest of the 7 steps around it (0.408 at most) and
    lies 0.118 from phase 1's start. The largest of m steps bounds one more only with probability m/(m+1), so
    the bound is the steps' prediction interval: |-0.142| + t(6, 0.9995) 5.96 · 0.243 · sqrt(8/7) = 1.69, which
    0.673 - 0.118 = 0.555 stays within: a restart cannot be told apart, inconclusive, not a failure."""
    log_loss = [1.542, 0.989, 0.942, 0.656, 0.962, 0.087, 0.748, 0.564, 0.238, 0.584, 0.417, 0.009, 0.682, 0.583,
                0.351, 0.244]
    phases = tuple(PhaseCall(n, "sgd", crux.lrs(1e-2), k == 0) for k, n in enumerate((7, 5, 4)))
    record = RunRecord("r", SolveOptions(epochs=7, batchsize=4), {"loss/total": np.exp(log_loss)}, {},
                       {"initial/u/0": np.zeros(2), "final/u/0": np.ones(2)}, phases=phases)
    verdict = only(check_phases([record]), "phases.resume")
    assert verdict.verdict == INCONCLUSIVE, verdict.summary
    assert verdict.evidence["b4/boundary2/step_bound"] == pytest.approx(1.690, abs=1e-3)
