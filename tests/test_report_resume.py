"""The resume check on runs made straight from crux solves: the same optimizer over several solve() calls against
one call of the same epochs.

crux as it is gives bit-identical runs. Three solvers broken on purpose (monkeypatched here only, at public seams:
``Crux.solve``, ``Model.optimizer``/``Model.scale`` and ``PointStream.indices``) restart, at every solve() call,
Adam's moments, the schedule, or the point stream; each must turn the verdict to ``fails`` and be located at the
second call. The one-call runs are made with the same broken solver: one call never restarts anything.
"""
from __future__ import annotations

from dataclasses import replace

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import crux
from crux.batching import PointStream
from crux.model import Model
from crux.roundoff import roundoff_twin
from crux.solver import Crux
from cruxlab.measure import calibration as calibrate
from cruxlab.report import FAILS, HOLDS, INCONCLUSIVE, PhaseCall, RunRecord, SolveOptions, record_from_solve
from cruxlab.report.claims import check_resume
from crux_testing import poisson

CALLS = (10, 20, 15)  # uneven, so no restart lines up with a period of the one-call run
TOTAL = sum(CALLS)
B = 8  # of 64 interior points: every update draws its own batch
SCHEDULE = crux.lrs.warmup_cosine(TOTAL, 5, 1e-2, 1e-4)  # warm-up then decay: a restart changes the learning rate


def record(run_id: str, calls: tuple[int, ...], twin: int = 0) -> RunRecord:
    """Adam at SCHEDULE on mini-batches of B, trained in ``calls`` solve() calls that keep the first call's
    optimizer, recorded as crux-run records a phased run."""
    problem = poisson(optax.adam, SCHEDULE, n=64, hidden=(8, 8))
    for model in problem.models.values():
        model.params = roundoff_twin(model.params, twin)
    solver = problem.solver()
    initial = jax.tree.map(np.array, solver.params)
    for epochs in calls:
        solver.solve(epochs, batchsize=B)
    plans = [PhaseCall(epochs, "adam", SCHEDULE, fresh=k == 0) for k, epochs in enumerate(calls)]
    return record_from_solve(run_id, solver, initial, solver.history, SolveOptions(epochs=calls[0], batchsize=B),
                             plans, roundoff_twin=twin)


def judged(calls: tuple[int, ...] = CALLS):
    """The verdict on ``calls`` against one call of the same epochs and a round-off twin of it."""
    (verdict,) = check_resume([record("calls", calls), record("one call", (TOTAL,)),
                               record("one call, twin", (TOTAL,), twin=1)])
    return verdict


def test_several_calls_with_the_same_optimizer_are_bit_identical_to_one():
    verdict = judged()
    assert verdict.verdict == HOLDS, verdict.summary
    assert verdict.id == "resume.same_as_one_call[10+20+15]"
    assert verdict.evidence["bit_identical"] == 1.0 and verdict.evidence["first_epoch_loss_differs"] == -1
    assert verdict.source == "docs/claims.md#resume-same-optimizer"
    assert set(verdict.runs) == {"calls", "one call", "one call, twin"}


def test_a_run_whose_later_call_starts_a_new_optimizer_is_not_judged_as_resumed():
    """A second call after a new optimizer or schedule (``fresh``) is a new phase, not a resumed one: the claim
    is not about it, whatever its numbers; the same calls keeping the optimizer are judged."""
    kept = record("calls", (10, 35))
    changed = replace(kept, phases=[kept.phases[0], replace(kept.phases[1], fresh=True)])
    one_call = record("one call", (TOTAL,))
    (verdict,) = check_resume([changed, one_call])
    assert verdict.verdict == INCONCLUSIVE and verdict.summary == "the sweep has no resumed run"
    (verdict,) = check_resume([kept, one_call])
    assert verdict.id == "resume.same_as_one_call[10+35]" and verdict.verdict == HOLDS, verdict.summary


class CallStart:
    """The updates made before the solve() call in progress (from ``solver.history``), for defects that act at
    the start of every call. Compiled programs read it through a host callback, so the one update program a
    solver compiles serves every call, as it does in crux (one callback object: solvers share the program too)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch):
        self.updates = 0
        self._read = lambda: np.int32(self.updates)
        honest = Crux.solve

        def solve(solver, epochs, **options):
            history = solver.history
            self.updates = 0 if history is None else len(history.total_loss)
            return honest(solver, epochs, **options)

        monkeypatch.setattr(Crux, "solve", solve)

    def traced(self) -> jax.Array:
        return jax.pure_callback(self._read, jax.ShapeDtypeStruct((), jnp.int32))


def restart_adam(monkeypatch):
    """Each later call gets a fresh Adam (zero moments) whose schedule continues where the last call stopped."""
    honest = Crux.solve

    def solve(solver, epochs, **options):
        done = 0 if solver.history is None else len(solver.history.total_loss)
        if done:
            for model in solver.models.values():
                model.optimizer(optax.adam).scale(crux.Schedule(lambda t, done=done: SCHEDULE(t + done),
                                                                f"{SCHEDULE} from update {done}"))
        return honest(solver, epochs, **options)

    monkeypatch.setattr(Crux, "solve", solve)


def restart_schedule(monkeypatch):
    """Adam's moments carry over, but the schedule counts from 0 again at every call."""
    start = CallStart(monkeypatch)
    honest = Model.scale

    def scale(self, schedule):
        return honest(self, crux.Schedule(lambda t: schedule(t - start.traced()), f"{schedule}, per call"))

    monkeypatch.setattr(Model, "scale", scale)


def restart_point_stream(monkeypatch):
    """Every call draws the batches of the first call's first updates again."""
    start = CallStart(monkeypatch)
    honest = PointStream.indices
    monkeypatch.setattr(PointStream, "indices", lambda self, key, step: honest(self, key, step - start.traced()))


@pytest.mark.parametrize("defect, loss_epoch, lr_differs", [
    (restart_adam, CALLS[0] + 1, False),  # a call's first loss is that of the parameters it starts from
    (restart_schedule, CALLS[0] + 1, True),
    (restart_point_stream, CALLS[0], False),  # the first loss of call 2 is taken on another batch
], ids=["Adam's moments", "schedule", "point stream"])
def test_a_solver_that_restarts_at_each_call_fails_from_the_second_call(defect, loss_epoch, lr_differs, monkeypatch):
    defect(monkeypatch)
    verdict = judged()
    assert verdict.verdict == FAILS, verdict.summary
    assert verdict.evidence["first_epoch_loss_differs"] == loss_epoch
    assert (verdict.evidence["first_epoch_lr/u_differs"] == CALLS[0]) == lr_differs
    assert f"the loss first differs at epoch {loss_epoch}, epoch {loss_epoch - CALLS[0] + 1} of call 2" \
        in verdict.summary
    assert ("the schedule did not continue" in verdict.summary) == lr_differs


def synthetic(run_id: str, calls: tuple[int, ...], schedules: tuple[crux.Schedule, ...], final: float = 1.0
              ) -> RunRecord:
    """A run of ``calls`` whose later calls continue the first's optimizer, with a trivial trajectory."""
    plans = tuple(PhaseCall(epochs, "adam", schedule, fresh=k == 0)
                  for k, (epochs, schedule) in enumerate(zip(calls, schedules)))
    return RunRecord(run_id, SolveOptions(epochs=calls[0], batchsize=B),
                     {"loss/total": np.linspace(2.0, 1.0, sum(calls))}, {},
                     {"initial/u/0": np.zeros(2), "final/u/0": np.full(2, final)}, phases=plans)


def test_runs_not_configured_alike_or_without_a_one_call_run_are_inconclusive():
    """A warm-up cosine whose total was left to span the phase restarts by configuration, not by a defect; and a
    resumed run needs a one-call run of the same total epochs to be compared with."""
    per_call = crux.lrs.warmup_cosine(CALLS[0], 5, 1e-2, 1e-4)
    (verdict,) = check_resume([synthetic("calls", CALLS, (per_call,) * 3), synthetic("one", (TOTAL,), (SCHEDULE,))])
    assert verdict.verdict == INCONCLUSIVE and "set schedule.total" in verdict.summary
    (verdict,) = check_resume([synthetic("calls", CALLS, (SCHEDULE,) * 3), synthetic("one", (TOTAL - 1,), (SCHEDULE,))])
    assert verdict.verdict == INCONCLUSIVE
    assert f"no run of the same configuration that trains {TOTAL} epochs in one call" in verdict.summary
    (verdict,) = check_resume([synthetic("one", (TOTAL,), (SCHEDULE,))])
    assert verdict.verdict == INCONCLUSIVE and verdict.id == "resume.same_as_one_call"



@pytest.mark.parametrize("defect", [calibrate.forgetful, calibrate.never_hand_back],
                         ids=["later calls start from the first call's parameters", "parameters never handed back"])
def test_a_solve_that_does_not_carry_the_parameters_fails_never_inconclusive(defect, monkeypatch):
    """The loss at call 2's first epoch is taken on the run's first parameters instead of the trained ones, so the
    histories part at epoch CALLS[0]. Where the parameters are never handed back the one-call run did not move
    either, leaving no travel to scale by: the history alone decides."""
    monkeypatch.setattr(Crux, "solve", defect(Crux.solve))
    verdict = judged()
    assert verdict.verdict == FAILS, verdict.summary
    assert verdict.evidence["first_epoch_loss_differs"] == CALLS[0]
    assert "loss" in verdict.summary and f"the loss first differs at epoch {CALLS[0]}, epoch 1 of call 2" \
        in verdict.summary
