"""checkpoint_gradients: activations rematerialised in the backward pass; same numbers."""
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import crux
from crux import engine, remat
from crux.executables import compile_once
from crux.solver import Machinery
from crux_testing import EPS32, flat, poisson, relative, train

# Rematerialisation recomputes the same forward ops; XLA may order the recomputed sums differently, a few
# ulp per update (measured: about 0.5 eps relative to the distance travelled over 20 updates).
ROUND_OFF = 100 * EPS32


def test_checkpointing_gives_the_same_numbers_and_records_its_memory():
    deep = dict(n=512, hidden=(32,) * 8)
    initial, plain, stats_plain = train(poisson(optax.adam, **deep), 20, batchsize=256)
    _, remat, stats_remat = train(poisson(optax.adam, **deep), 20, batchsize=256, checkpoint_gradients=True)
    np.testing.assert_allclose(stats_remat.losses, stats_plain.losses, rtol=ROUND_OFF)
    assert relative(remat, plain, np.linalg.norm(plain - initial)) < ROUND_OFF
    # Deep and narrow: the stacked hidden layers are applied in rematerialised segments, so the backward
    # pass keeps the segments' inputs instead of every intermediate.
    assert stats_remat.memory["temp_bytes"] < stats_plain.memory["temp_bytes"]


# Residuals of each form a PINN uses: the network's value, its gradient, partial derivatives, its Laplacian and
# a product of them (Burgers), on a network where rematerialising costs memory for some of them (the gradient).
RESIDUALS = {
    "value": lambda net, x: net.u(x) - 1.0,
    "grad": lambda net, x: jnp.sum(crux.grad(net.u)(x)),
    "partial": lambda net, x: crux.partial(net.u, 0, 0)(x) + crux.partial(net.u, 1)(x),
    "laplacian": lambda net, x: crux.laplacian(net.u)(x),
    "burgers": lambda net, x: net.u(x) * crux.partial(net.u, 0)(x) - 0.01 * crux.partial(net.u, 0, 0)(x),
}


@pytest.mark.parametrize("form", RESIDUALS)
def test_checkpointing_never_needs_more_memory_than_the_plain_update(form):
    points = np.random.default_rng(0).uniform(size=(3000, 2)).astype(np.float32)

    def solved(checkpoint_gradients):
        u = crux.mlp(2, 1, hidden=(64,) * 8)
        u.optimizer(optax.adam).scale(crux.lrs(1e-3))
        solver = crux.Crux([crux.Constraint("r", RESIDUALS[form], points)], {"u": u})
        return solver.solve(1, checkpoint_gradients=checkpoint_gradients), flat(solver.params)

    (plain, plain_params), (checkpointed, params) = solved(False), solved(True)
    assert checkpointed.memory["temp_bytes"] <= plain.memory["temp_bytes"]
    used = remat.FORMS[checkpointed.memory["checkpoint_used"]]
    if used == remat.PLAIN:  # the plain update's own program: the same numbers, bit for bit
        assert checkpointed.memory["temp_bytes"] == plain.memory["temp_bytes"]
        np.testing.assert_array_equal(params, plain_params)
    else:
        assert checkpointed.memory["temp_bytes"] < plain.memory["temp_bytes"]


def test_the_form_of_fewest_temporary_bytes_is_chosen_plain_on_a_tie():
    assert remat.least_memory({"plain": 10, "layers": 7, "whole": 8}) == remat.LAYERS
    assert remat.least_memory({"plain": 10, "layers": 12, "whole": 9}) == remat.WHOLE
    assert remat.least_memory({"plain": 10, "layers": 10, "whole": 10}) == remat.PLAIN
    assert remat.least_memory({"plain": None, "layers": None, "whole": None}) == remat.LAYERS


def test_a_form_the_device_refuses_is_not_a_candidate():
    """Where XLA refuses the plain update for want of device memory (RESOURCE_EXHAUSTED at compile), a
    rematerialised form that compiles is run; where every form is refused, solve() raises XLA's refusal of the
    form that needed the least."""
    def make_call(plan):
        call = engine.make_call(plan)
        return lambda state, data, form=plan.remat: call(state, data)

    needs = {remat.PLAIN: "36.02G", remat.LAYERS: "64.02G", remat.WHOLE: "18.01G"}  # as XLA names them

    def compile_unless(refused):
        def compile(function, *args, donate_argnums=()):
            form = function.__defaults__[0]
            if form in refused:
                raise RuntimeError(f"RESOURCE_EXHAUSTED: Ran out of memory on HBM, the total memory required for "
                                   f"HLO temporaries ({needs[form]}) exceeds available HBM (15.75G).")
            return compile_once(function, *args, donate_argnums=donate_argnums)
        return compile

    problem = poisson(optax.adam, n=64, hidden=(16,) * 4)
    _, _, stats = train(problem, 2, Machinery(make_call=make_call, compile=compile_unless({remat.PLAIN})),
                        checkpoint_gradients=True)
    assert remat.FORMS[stats.memory["checkpoint_used"]] != remat.PLAIN and stats.steps == 2
    # every form refused: the refusal raised is that of the form that needed the least, what the user must free
    with pytest.raises(RuntimeError, match=r"RESOURCE_EXHAUSTED.*\(18\.01G\)"):
        train(poisson(optax.adam, n=64, hidden=(16,) * 4), 2,
              Machinery(make_call=make_call, compile=compile_unless(set(remat.FORMS))), checkpoint_gradients=True)
