"""substeps: alternating updates that move only the models their constraints reach."""
import jax
import numpy as np
import optax
import pytest

import crux
from crux_testing import EPS32, flat, mixed


def test_reach_is_resolved_from_the_trace():
    assert mixed().solver().reach == [{"q"}, {"q", "u"}, {"u"}]


def test_unreached_model_stays_bit_identical():
    # adamw's weight decay would move u even on a zero gradient: only a skipped step leaves it alone.
    problem = mixed(optax.adamw)
    solver = problem.solver()
    u_before, q_before = flat(solver.params["u"]), flat(solver.params["q"])
    stats = solver.solve(20, substeps=[([0], 2)])
    np.testing.assert_array_equal(flat(solver.params["u"]), u_before)
    assert np.linalg.norm(flat(solver.params["q"]) - q_before) > 1e3 * EPS32 * np.linalg.norm(q_before)
    # every model has its learning rates, NaN where it was not trained, as in the solver's history
    assert set(stats.lr) == {"u", "q"} and np.isnan(stats.lr["u"]).all() and np.isfinite(stats.lr["q"]).all()
    np.testing.assert_array_equal(solver.history.lr["u"], stats.lr["u"])
    assert np.isnan(stats.losses[:, 1:]).all() and np.isfinite(stats.losses[:, 0]).all()


def test_unreached_model_keeps_its_optimizer_state_untouched():
    # u's trajectory under [[2], [0]] must equal its trajectory under [[2]] alone: entry [0] neither steps u
    # nor decays the momentum that entry [2] keeps for it. (Full batch: the point stream plays no part.)
    alternating = mixed(optax.sgd, 1e-2)
    alternating.models["u"].optimizer(lambda learning_rate: optax.sgd(learning_rate, momentum=0.9)).scale(
        crux.lrs(1e-2))
    solver = alternating.solver()
    solver.solve(15, substeps=[[2], [0]])
    alone = mixed(optax.sgd, 1e-2)
    alone.models["u"].optimizer(lambda learning_rate: optax.sgd(learning_rate, momentum=0.9)).scale(crux.lrs(1e-2))
    reference = alone.solver()
    reference.solve(15, substeps=[[2]])
    np.testing.assert_array_equal(flat(solver.params["u"]), flat(reference.params["u"]))


@pytest.mark.parametrize("batchsize", [None, 16])
def test_substep_counts_and_state_carry_into_the_next_solve(batchsize):
    # With mini-batches the point stream must go on from the update the first solve() stopped at: three
    # updates an epoch here.
    plan = [([0], 2), ([1, 2], 1)]
    split = mixed().solver()
    split.solve(6, substeps=plan, batchsize=batchsize)
    split.solve(4, substeps=plan, batchsize=batchsize)
    whole = mixed().solver()
    stats = whole.solve(10, substeps=plan, batchsize=batchsize)
    np.testing.assert_allclose(split.history.losses, stats.losses, rtol=10 * EPS32)
    np.testing.assert_allclose(flat(split.params), flat(whole.params), rtol=10 * EPS32, atol=10 * EPS32)


def test_a_pair_written_as_a_list_as_yaml_writes_it_is_the_same_entry_as_a_tuple():
    as_list, as_tuple = mixed().solver(), mixed().solver()
    as_list.solve(4, substeps=[[[0], 2], [1, 2]])
    as_tuple.solve(4, substeps=[([0], 2), [1, 2]])
    np.testing.assert_array_equal(as_list.history.losses, as_tuple.history.losses)
    np.testing.assert_array_equal(flat(as_list.params), flat(as_tuple.params))


def test_an_entrys_loss_is_the_mean_over_its_updates_and_its_learning_rate_the_last_ones():
    # At learning rate 0 each of an entry's updates sees the same parameters: the mean of two equal losses is
    # that loss, exactly.
    once, twice = mixed(optax.sgd, 0.0).solver(), mixed(optax.sgd, 0.0).solver()
    np.testing.assert_array_equal(twice.solve(3, substeps=[([0], 2)]).losses, once.solve(3, substeps=[[0]]).losses)
    # The learning rate recorded for epoch e is the one of its last update, number 3e + 2 of the entry.
    schedule = crux.lrs.exponential(1e-2, 0.9, 1)
    problem = mixed(optax.sgd)
    problem.models["q"].scale(schedule)
    stats = problem.solver().solve(4, substeps=[([0], 3)])
    np.testing.assert_allclose(stats.lr["q"], [schedule(np.int32(3 * e + 2)) for e in range(4)], rtol=EPS32)


@pytest.mark.parametrize("options, message", [
    ({"substeps": [[0]], "accumulation_steps": 2, "batchsize": 8}, "substeps makes each substep an update of its "
                                                                     "own, so accumulation_steps=2 and inner_steps=1"),
    ({"substeps": [[0]], "inner_steps": 2}, "accumulation_steps=1 and inner_steps=2 must both be 1"),
    ({"substeps": [[0], [3]]}, r"substeps\[1\] names constraint 3"),
    ({"substeps": [[0], [-1]]}, r"substeps\[1\] names constraint -1"),
    ({"substeps": [[0], []]}, r"substeps\[1\] is \[\]"),
    ({"substeps": [([0], 0)]}, r"substeps\[0\] step count must be >= 1"),
    ({"substeps": []}, "non-empty list"),
    ({"substeps": [[1, 1]]}, "repeats a constraint"),
])
def test_bad_substeps_are_refused_before_compute(options, message):
    problem = mixed()
    before = flat(problem.solver().params)
    with pytest.raises(ValueError, match=message):
        problem.solver().solve(4, **options)
    assert problem.solver().history is None
    np.testing.assert_array_equal(flat(problem.solver().params), before)


def test_substeps_train_the_two_network_problem():
    problem = mixed(optax.adam, 1e-2)
    stats = problem.solver().solve(300, substeps=[([0], 1), ([1, 2], 1)])
    assert stats.total_loss[-1] < 1e-2 * stats.total_loss[0]
    jax.block_until_ready(problem.models["u"].params)
