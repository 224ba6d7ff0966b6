"""Multi-phase training: solve() resumes; a new optimizer starts fresh; Adam -> L-BFGS -> SOAP each move."""
import re

import jax
import numpy as np
import optax
import pytest

import crux
from crux import executables
from crux.constraint import constraint_loss
from crux.optim import soap
from crux_testing import EPS32, REPO, CompileStages, flat, poisson, relative, train

# Two calls run the same compiled update on the same state as one call: identical arithmetic.
# The compiled call is reused, so the bound is exact equality up to a few ulp of XLA scheduling.
ROUND_OFF = 10 * EPS32


def test_split_solve_equals_one_solve():
    schedule = crux.lrs.warmup_cosine(60, 10, 1e-2, 1e-4)
    split = poisson(optax.adam, schedule)
    solver = split.solver()
    initial = flat(solver.params)
    solver.solve(25, batchsize=16)
    solver.solve(35, batchsize=16)
    _, whole, stats = train(poisson(optax.adam, schedule), 60, batchsize=16)
    history = solver.history
    assert history.phases == [0, 25]
    np.testing.assert_array_equal(history.epoch, np.arange(60))
    np.testing.assert_allclose(history.losses, stats.losses, rtol=ROUND_OFF)
    np.testing.assert_allclose(history.lr["u"], stats.lr["u"], rtol=ROUND_OFF)
    assert relative(flat(solver.params), whole, np.linalg.norm(whole - initial)) < ROUND_OFF


@pytest.mark.parametrize("optimizer, options", [
    (optax.adam, {"batchsize": 16}),
    (optax.adam, {"batchsize": 16, "offload_data": True}),
    (optax.lbfgs, {}),  # its initial state holds weak-typed scalars; the state a call returns does not
], ids=["device", "offload", "lbfgs"])
def test_second_identical_solve_compiles_nothing(optimizer, options):
    executables.clear()  # no other test's program to reuse
    solver = poisson(optimizer).solver()
    with CompileStages() as first:
        solver.solve(5, **options)
    with CompileStages() as second:
        solver.solve(7, **options)  # more epochs: more calls of the same program
    assert first.compiled > 0
    assert second.traced == second.lowered == second.compiled == 0  # the solver kept its executable


def test_new_optimizer_starts_fresh_state_and_schedule():
    schedule = lambda: crux.lrs.warmup_cosine(40, 10, 1e-2, 1e-4)
    problem = poisson(optax.adam, schedule())
    solver = problem.solver()
    solver.solve(20)
    after_first = jax.tree.map(np.array, solver.params["u"])
    problem.models["u"].optimizer(optax.adam).scale(schedule())
    restarted = solver.solve(20)
    # The restarted phase equals a brand-new solver started from the same parameters (full batch, so the
    # point stream plays no part): fresh Adam moments and a schedule counting from 0.
    fresh = poisson(optax.adam, schedule())
    fresh.models["u"].params = jax.tree.map(jax.numpy.asarray, after_first)
    reference = fresh.solver().solve(20)
    np.testing.assert_allclose(restarted.lr["u"], reference.lr["u"], rtol=1e-6)
    np.testing.assert_allclose(restarted.losses, reference.losses, rtol=ROUND_OFF)
    # ... and differs from carrying on with the old state.
    carried = poisson(optax.adam, schedule()).solver().solve(40)
    assert np.abs(carried.losses[20:] - restarted.losses).max() > 1e3 * ROUND_OFF * restarted.losses.max()


def test_the_optimizer_state_carried_on_is_readable_until_the_optimizer_changes():
    problem = poisson(optax.adam, 1e-3)
    solver = problem.solver()
    assert solver.optimizer_state("u") is None  # nothing to carry before the first update
    solver.solve(7)
    solver.solve(5)
    state = solver.optimizer_state("u")  # inject_hyperparams(adam): its count, and adam's chain inside
    assert int(state.count) == int(state.inner_state[0].count) == 12  # both calls' updates, on one state
    problem.models["u"].optimizer(optax.sgd).scale(crux.lrs(1e-3))
    assert solver.optimizer_state("u") is None  # the next solve() starts a fresh state
    with pytest.raises(KeyError, match=r"no such model; the solver has \['u'\]"):
        solver.optimizer_state("v")


def full_batch_loss(problem) -> float:
    """The loss over every point with the current parameters."""
    params = problem.solver().params
    return float(sum(constraint_loss(c, problem.models, params, jax.numpy.asarray(c.points)) for c in problem.constraints))


def test_adam_then_lbfgs_then_soap_each_move_the_parameters():
    problem = poisson(optax.adam, crux.lrs.warmup_cosine(300, 30, 1e-2, 1e-4), n=128)
    solver = problem.solver()
    u = problem.models["u"]
    snapshots = [flat(solver.params)]
    solver.solve(300)
    snapshots.append(flat(solver.params))
    before_lbfgs = full_batch_loss(problem)
    u.optimizer(optax.lbfgs).scale(crux.lrs(1.0))
    solver.solve(30)
    snapshots.append(flat(solver.params))
    after_lbfgs = full_batch_loss(problem)
    u.optimizer(soap(1)).scale(crux.lrs(1e-5))   # phase 3 of the documented multi-phase example, as written
    solver.solve(20)
    snapshots.append(flat(solver.params))
    assert solver.history.phases == [0, 300, 330]
    for before, after in zip(snapshots, snapshots[1:]):
        assert np.linalg.norm(after - before) > 1e3 * EPS32 * np.linalg.norm(before)
    assert after_lbfgs < 0.5 * before_lbfgs  # quasi-Newton refinement of a full-batch loss


@pytest.mark.parametrize("option", ["lbfgs", "lbfgs_soap"])
def test_the_readmes_lbfgs_phase_is_the_one_the_configs_ship(hydra_configs, option):
    """The L-BFGS rate chosen by measurement (docs/BENCHMARK.md#lbfgs-rate), 1.0, in the README's example and in
    the phases a job composes."""
    from hydra import compose

    readme = (REPO / "README.md").read_text()
    (rate,) = re.findall(r"optax\.lbfgs\)\.scale\(lrs\(([^)]+)\)\)", readme)
    phase = compose("config", [f"phases={option}"]).phases.lbfgs
    assert float(rate) == phase.schedule.value == 1.0 and phase.optimizer.name == "lbfgs"
