"""Layout-free optimizers train one flat parameter vector: the same numbers as the tree, and the tree comes back."""
import functools

import jax
import numpy as np
import optax
import pytest

from crux.layout import Layout, layout_free
from crux.stats import fingerprint
from crux.optim import soap
from crux_testing import EPS32, poisson, relative, train

# Flat and tree run the same elementwise arithmetic; only XLA's fusion of it differs (a few ulp per update at
# most): 100 eps of the distance travelled is the bound (measured after 30 Adam epochs: 0 eps). L-BFGS's inner
# products sum in another order and its line search amplifies that about 1.3x per epoch (measured 0.6, 1.4, 13,
# 66 eps after 3, 5, 10, 20 epochs), so it is compared after 5.
ROUND_OFF = 100 * EPS32


def tree_twin(factory):
    """The same optimizer behind a wrapper crux does not recognise, so it keeps the parameter tree."""
    return lambda learning_rate: factory(learning_rate)


@pytest.mark.parametrize("factory, lr, epochs", [(optax.adam, 1e-3, 30), (optax.lbfgs, 1.0, 5)],
                         ids=["adam", "lbfgs"])
def test_flat_vector_trains_like_the_tree(factory, lr, epochs):
    flat_problem, tree_problem = poisson(factory, lr), poisson(tree_twin(factory), lr)
    assert flat_problem.models["u"].trains_flat and not tree_problem.models["u"].trains_flat
    initial, flat_final, flat_stats = train(flat_problem, epochs)
    _, tree_final, tree_stats = train(tree_problem, epochs)
    travel = np.linalg.norm(tree_final - initial)
    assert travel > 0
    assert relative(flat_final, tree_final, travel) < ROUND_OFF
    np.testing.assert_allclose(flat_stats.losses, tree_stats.losses, rtol=ROUND_OFF)


def test_parameters_come_back_as_the_models_tree():
    problem = poisson(optax.adam)
    before = problem.models["u"].params
    problem.solver().solve(5)
    after = problem.models["u"].params
    assert jax.tree.structure(after) == jax.tree.structure(before)
    assert [a.shape for a in jax.tree.leaves(after)] == [b.shape for b in jax.tree.leaves(before)]
    assert not all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(after), jax.tree.leaves(before)))


def test_only_layout_free_optimizers_go_flat():
    assert layout_free(optax.adam) and layout_free(optax.lbfgs)
    assert layout_free(functools.partial(optax.adamw, weight_decay=1e-4, b1=0.8))
    assert not layout_free(functools.partial(optax.adamw, mask=lambda params: params))  # a tree-shaped argument
    assert not layout_free(optax.lamb)  # per-layer trust ratios depend on the split
    assert not layout_free(soap(1e-3))  # per-matrix preconditioners
    assert not layout_free(tree_twin(optax.adam))


def test_packing_round_trips_any_leaves_exactly():
    params = {"scale": 1.5, "w": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.float32([-2.0, 0.25])}
    layout = Layout.of(params, flat=True)
    packed = layout.pack(params)
    assert packed.shape == (9,)
    back = layout.unpack(packed)
    assert jax.tree.structure(back) == jax.tree.structure(params)
    for name in params:
        np.testing.assert_array_equal(back[name], params[name])  # a permutation or lost leaf would differ


def test_a_solve_that_follows_another_sends_the_device_nothing():
    """What a solve() leaves on the device (the packed parameters, optimizer states, update counter) starts the
    next one there, with no transfer from the host, and gives the numbers that parameters read back and set
    again give (packed anew and sent)."""
    held, resent = poisson(optax.adam).solver(), poisson(optax.adam).solver()
    held.solve(4), resent.solve(4)
    with jax.transfer_guard_host_to_device("disallow_explicit"):
        held.solve(4, inner_steps=2)
    resent.models["u"].params = [dict(layer) for layer in resent.models["u"].params]
    resent.solve(4, inner_steps=2)
    for a, b in zip(jax.tree.leaves(held.params), jax.tree.leaves(resent.params)):
        np.testing.assert_array_equal(a, b)


def test_parameters_changed_in_place_between_solves_are_those_the_next_solve_starts_from():
    problem = poisson(optax.adam)
    solver = problem.solver()
    solver.solve(4)
    params = problem.models["u"].params
    params[0] = jax.tree.map(lambda w: w * 0.5, params[0])  # in the very list solve() left
    stats = solver.solve(4)
    assert stats.fingerprints[0][0] == fingerprint(params) != solver.history.fingerprints[0][1]
