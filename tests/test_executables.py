"""Executables shared across solvers: reused when a new solver traces to the same program, never otherwise."""
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

import crux
from crux import executables

from crux.optim import soap
from crux.solver import Machinery
from crux_testing import CompileStages, flat, mixed, poisson

BOUNDARY = np.array([[0.0], [1.0]], np.float32)
INTERIOR = np.linspace(0.0, 1.0, 66, dtype=np.float32)[1:-1, None]


def fit(shift=0.0, weight: float = 1.0, seed: int = 0,
        table: executables.ExecutableTable = executables.SHARED) -> tuple[np.ndarray, np.ndarray]:
    """A fresh solver for -u'' = 1 with u(0) = u(1) = shift (a constant its residual captures); 20 fused
    mini-batch updates, compiled through ``table``. Returns (final parameters, loss history)."""
    net = crux.mlp(1, 1, (8, 8), seed=seed)
    net.optimizer(optax.sgd).scale(crux.lrs(1e-2))
    constraints = [crux.Constraint("pde", lambda net, x: -crux.laplacian(net.u)(x) - 1.0, INTERIOR),
                   crux.Constraint("bc", lambda net, x: net.u(x) - shift, BOUNDARY, weight=weight)]
    solver = crux.Crux(constraints, {"u": net}, seed=seed, machinery=Machinery(compile=table.compile_once))
    stats = solver.solve(20, batchsize=16, inner_steps=5)
    return flat(solver.params), stats.total_loss


def fit_compiled_afresh(**problem) -> tuple[np.ndarray, np.ndarray]:
    """``fit`` with no executable of an earlier solver to reuse."""
    executables.clear()
    return fit(**problem)


def test_a_new_solver_of_the_same_program_lowers_nothing_and_computes_what_a_fresh_compile_does():
    fit_compiled_afresh(seed=0)
    with CompileStages() as stages:
        params, losses = fit(seed=1)  # other initial parameters and point stream: arguments, not the program
    assert stages.lowered == 0
    fresh_params, fresh_losses = fit_compiled_afresh(seed=1)
    np.testing.assert_array_equal(params, fresh_params)
    np.testing.assert_array_equal(losses, fresh_losses)


@pytest.mark.parametrize("first, second", [
    ({"shift": 0.0}, {"shift": 0.5}),  # a literal in the program
    ({"shift": np.array([0.0], np.float32)}, {"shift": np.array([0.5], np.float32)}),  # a captured array
    ({"weight": 1.0}, {"weight": 4.0}),  # the constraint's weight
], ids=["literal", "captured-array", "weight"])
def test_a_solver_whose_program_differs_in_a_constant_gets_its_own_executable(first, second):
    fit_compiled_afresh(**first)
    with CompileStages() as stages:
        params, losses = fit(**second)
    assert stages.lowered == 1
    fresh_params, fresh_losses = fit_compiled_afresh(**second)
    np.testing.assert_array_equal(params, fresh_params)
    np.testing.assert_array_equal(losses, fresh_losses)


def test_after_clear_the_next_solver_compiles_its_program_again():
    fit(seed=0)
    executables.clear()
    with CompileStages() as stages:
        fit(seed=1)
    assert stages.lowered == 2  # the update, and the program that starts its optimizer's state


def test_set_aside_compiles_afresh_inside_and_gives_back_the_executables_before_it_without_those_inside():
    table = executables.ExecutableTable()
    fit(seed=0, table=table)  # the program of shift 0
    with table.set_aside():
        with CompileStages() as stages:
            fit(seed=1, table=table)
            fit(shift=0.5, table=table)  # another program, compiled inside only
        assert stages.lowered == 2
    with CompileStages() as stages:
        fit(seed=2, table=table)
    assert stages.lowered == 0  # the executable from before is back
    with CompileStages() as stages:
        fit(shift=0.5, seed=1, table=table)
    assert stages.lowered == 1  # the one compiled inside was dropped


def test_the_program_key_covers_this_jax_versions_jaxprs():
    """The key reads jaxprs field by field. When a JAX upgrade adds a field the key does not know, or drops one
    it reads, sharing turns itself off; this test names what changed so that the key can be brought up to date
    (key the field if it can set two programs apart, else list it among the ignored)."""
    problems = executables.uncovered()
    assert not problems, (f"crux.executables does not cover the jaxprs of jax {jax.__version__}: "
                          + "; ".join(problems) + ". Update KEYED_FIELDS/IGNORED_FIELDS and _Program.")


def test_a_jaxpr_field_the_key_does_not_know_turns_sharing_off(caplog):
    keyed = {**executables.KEYED_FIELDS, "JaxprEqn": executables.KEYED_FIELDS["JaxprEqn"] - {"params"}}
    table = executables.ExecutableTable(keyed)  # as if a new JAX had given equations "params"
    with caplog.at_level(logging.WARNING, logger="crux"):
        fit(seed=0, table=table)
    with CompileStages() as stages:
        fit(seed=1, table=table)
    assert stages.lowered == 1  # compiled anew: the table shares nothing, not even an identical program
    assert "JaxprEqn has fields ['params']" in caplog.text and "compiles its own program" in caplog.text


@pytest.mark.parametrize("build, options", [
    (lambda seed: poisson(optax.adam, n=64, hidden=(8,), seed=seed), {}),
    (lambda seed: poisson(optax.adam, n=64, hidden=(8,), seed=seed), {"batchsize": 8, "accumulation_steps": 2}),
    (lambda seed: poisson(optax.adam, n=64, hidden=(8,), seed=seed), {"batchsize": 8, "offload_data": True}),
    (lambda seed: poisson(optax.adam, n=64, hidden=(8,), seed=seed), {"checkpoint_gradients": True}),
    (lambda seed: poisson(optax.adam, n=64, hidden=(8,), seed=seed), {"inner_steps": 2}),
    (lambda seed: poisson(optax.lbfgs, lr=1.0, n=64, hidden=(8,), seed=seed), {}),
    (lambda seed: poisson(soap(1), n=64, hidden=(8,), seed=seed), {}),
    (lambda seed: mixed(n=32, hidden=(8,)), {"substeps": [([0, 1], 1), ([2], 1)]}),
    (lambda seed: poisson(optax.adam, n=64, hidden=(8,), seed=seed, activation="relu"), {}),
], ids=["full-batch", "accumulation", "offload", "checkpoint", "fused", "lbfgs", "soap", "substeps", "relu"])
def test_a_sweeps_next_job_compiles_nothing_whatever_the_options(build, options):
    """A job of a sweep builds its problem, models and optimizers anew: nothing they create per job (a closure,
    an optax transform, a jit of the model) may reach what it compiles, or every repeat job would lower and
    load it again. A job trains, then evaluates its error against the exact solution."""
    executables.clear()
    for seed in (0, 1):
        problem = build(seed)
        with CompileStages() as stages:
            problem.solver().solve(4, **options)
            problem.relative_l2()
    assert stages.lowered == 0


def test_a_program_two_threads_measure_at_once_is_compiled_once():
    """Two functions that trace to one program, traced side by side: the second measure waits for the first's
    figures instead of compiling the program again."""
    table, both_tracing = executables.ExecutableTable(), threading.Barrier(2)

    def function():
        def f(x):
            both_tracing.wait(timeout=60)
            return jnp.tanh(x @ x).sum()
        return f

    x = jnp.ones((32, 32), jnp.float32)
    with CompileStages() as stages, ThreadPoolExecutor(2) as pool:
        figures = list(pool.map(lambda f: table.memory_once(f, x), [function(), function()]))
    assert figures[0] == figures[1] and figures[0]["temp_bytes"] >= 0 and stages.compiled == 1


def _callback_times_two(x):
    return np.asarray(x) * 2


def _key(fun) -> tuple:
    return executables.program_key(jax.jit(fun).trace(jnp.ones(3, jnp.float32)).jaxpr)


def _callback(fun):
    return lambda x: jax.pure_callback(fun, jax.ShapeDtypeStruct(x.shape, x.dtype), x)


def _copy_of(fun):
    """A distinct function object with the same code, name and module."""
    return type(fun)(fun.__code__, fun.__globals__, fun.__name__)


def _custom_jvp_of(primal):
    """``primal`` with a differentiation rule of its own (a new function object at each call)."""
    fun = jax.custom_jvp(primal)
    fun.defjvp(lambda primals, tangents: (primal(primals[0]), tangents[0]))
    return fun


@pytest.mark.parametrize("one, other", [
    (lambda x: jnp.tanh(x * np.array([1.0, 2.0, 3.0], np.float32)) + 0.5,
     lambda y: jnp.tanh(y * np.array([1.0, 2.0, 3.0], np.float32)) + 0.5),
    (lambda x: jax.nn.relu(x), lambda y: jax.nn.relu(y)),  # custom_jvp: a new rule at every trace, not lowered
], ids=["closure", "custom-jvp"])
def test_the_same_computation_traced_again_has_the_same_key(one, other):
    assert _key(one) == _key(other)


@pytest.mark.parametrize("one, other", [
    (lambda x: x * 0.0, lambda x: x * -0.0),
    (lambda x: x + np.array([1.0, 2.0, 3.0], np.float32), lambda x: x + np.array([1.0, 2.0, 3.5], np.float32)),
    (lambda x: jnp.sin(x), lambda x: jnp.cos(x)),
    (lambda x: x.astype(jnp.bfloat16).astype(jnp.float32), lambda x: x.astype(jnp.float16).astype(jnp.float32)),
    (_callback(_callback_times_two), _callback(_copy_of(_callback_times_two))),
    (_custom_jvp_of(jnp.sin), _custom_jvp_of(jnp.cos)),
], ids=["signed-zero-literal", "captured-array", "primitive", "dtype", "callback", "custom-jvp"])
def test_computations_that_differ_have_different_keys(one, other):
    assert _key(one) != _key(other)
