"""``Crux.compiled_call``: the compiled call solve() runs, with a state and the points to call it with."""
import types

import jax
import numpy as np
import optax

import crux.engine
import crux.solver
from crux_testing import flat, poisson

OPTIONS = dict(inner_steps=4, batchsize=16, accumulation_steps=2)  # mini-batches: the point stream's position counts


def _packed(state) -> dict[str, np.ndarray]:
    return {name: np.asarray(params) for name, params in jax.device_get(state.train.params).items()}


def test_the_call_makes_the_updates_solve_makes_bit_for_bit_without_advancing_the_solver():
    ours, theirs = poisson(optax.adam).solver(), poisson(optax.adam).solver()
    for solver in (ours, theirs):  # optimizer states and the stream's position carried over, not fresh ones
        solver.solve(4, **OPTIONS)
    before = flat(ours.params)
    call, state, data = ours.compiled_call(**OPTIONS)
    updated = _packed(call(state, data))

    theirs.solve(4, **OPTIONS)
    expected = _packed(theirs.compiled_call(**OPTIONS).state)  # the parameters solve() left, packed as a call's
    assert updated.keys() == expected.keys()
    for name in expected:
        np.testing.assert_array_equal(updated[name], expected[name])
    assert not np.array_equal(flat(theirs.params), before)  # the four updates moved the parameters

    np.testing.assert_array_equal(flat(ours.params), before)  # the call left the solver as it stood:
    assert ours.history.steps == 4
    ours.solve(4, **OPTIONS)  # its next solve() makes the same updates, from the same step of the stream
    np.testing.assert_array_equal(flat(ours.params), flat(theirs.params))


def test_solve_runs_the_program_compiled_call_compiled():
    solver = poisson(optax.adam).solver()
    solver.compiled_call(**OPTIONS)
    assert solver.solve(4, **OPTIONS).compile_seconds == 0.0


def test_the_starting_states_program_counts_as_compilation_once_per_kind(monkeypatch):
    """A solver's first starting state of a kind compiles (or loads) the program that makes it: those seconds are
    compile time, not training, and later solve() calls of that kind spend none. A clock that moves only while
    that program is made shows it."""
    clock = [0.0]

    def started_in(seconds):
        def made(*args, **kwargs):
            clock[0] += seconds
            return crux.engine.started(*args, **kwargs)
        return made
    monkeypatch.setattr(crux.solver, "time", types.SimpleNamespace(perf_counter=lambda: clock[0]))
    monkeypatch.setattr(crux.solver, "started", started_in(5.0))
    solver = poisson(optax.adam).solver()
    assert solver.solve(4, inner_steps=2).compile_seconds == 5.0  # the update's compile counted nothing here
    assert solver.solve(4, inner_steps=2).compile_seconds == 0.0
    assert solver.solve(4, inner_steps=4).compile_seconds == 5.0  # another record buffer: another kind
