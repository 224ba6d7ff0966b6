"""A solve() stopped by an exception or an interrupt keeps what it synchronised: the history up to the last
synchronisation and the parameters, optimizer states and counters of that same point, so a later solve()
resumes as if the solve had been asked for just those epochs."""
import threading

import numpy as np
import optax
import pytest

import crux
from crux.batching import PRODUCER_THREAD
from crux.executables import compile_once
from crux.solver import Machinery
from crux_testing import flat, poisson

K = 5
CALLS = 10
KEPT_CALLS = 4  # syncs every two calls; the stop comes at the second sync or in the third window


def problem() -> crux.problems.Problem:
    """Adam on a decaying schedule: the kept optimizer state and schedule position both show in a resumed run."""
    return poisson(optax.adam, crux.lrs.exponential(1e-2, 0.9, 3))


def bar_stopping_at_update(n: int, error: type[BaseException]):
    """A progress bar whose ``n``-th update raises ``error``: the loop updates it right after a sync."""
    class Bar:
        updates = 0

        def __init__(self, *args, **kwargs):
            pass

        def update(self, epochs):
            Bar.updates += 1
            if Bar.updates == n:
                raise error("stopped at a sync")

        def set_postfix(self, **kwargs):
            pass

        def close(self):
            pass
    return Bar


def stopping_at_call(n: int, error: type[BaseException], **settings) -> Machinery:
    """Machinery whose calls raise ``error`` at their ``n``-th run (see :class:`CallStoppingAt`)."""
    return Machinery(compile=lambda *args, **kwargs: CallStoppingAt(compile_once(*args, **kwargs), n, error),
                     **settings)


class CallStoppingAt:
    """A compiled call whose ``n``-th run raises ``error`` after running: its input donated and its result lost,
    as when a signal arrives while the call is dispatched."""

    def __init__(self, compiled, n: int, error: type[BaseException]):
        self.compiled, self.n, self.error, self.calls = compiled, n, error, 0

    def __call__(self, state, data):
        self.calls += 1
        result = self.compiled(state, data)
        if self.calls == self.n:
            raise self.error("stopped inside a call")
        return result

    def __getattr__(self, name):
        return getattr(self.compiled, name)


@pytest.mark.parametrize("inner_steps", [1, K], ids=["one-epoch-calls", "fused-calls"])
@pytest.mark.parametrize("options", [{"batchsize": 16}, {"batchsize": 16, "offload_data": True}],
                         ids=["device", "offload"])
@pytest.mark.parametrize("where, error", [("sync", KeyboardInterrupt), ("call", KeyboardInterrupt),
                                          ("call", RuntimeError)],
                         ids=["interrupt-at-sync", "interrupt-inside-call", "exception-inside-call"])
def test_a_stopped_solve_keeps_the_synchronised_epochs_and_resumes_from_them(inner_steps, options, where, error):
    options = {**options, "inner_steps": inner_steps}
    every_two_calls = {"sync_seconds": 1e9, "record_rows": 2 * inner_steps}  # a sync every two calls
    kept = KEPT_CALLS * inner_steps
    reference = problem().solver()
    reference.machinery = Machinery(**every_two_calls)
    reference.solve(kept, **options)

    stopped = problem().solver()
    if where == "sync":  # after the second sync
        stopped.machinery = Machinery(progress=bar_stopping_at_update(2, error), **every_two_calls)
    else:  # the sixth call: the fifth ran but was not synchronised
        stopped.machinery = stopping_at_call(KEPT_CALLS + 2, error, **every_two_calls)
    with pytest.raises(error, match="stopped"):
        stopped.solve(CALLS * inner_steps, **options)
    reference.machinery = stopped.machinery = Machinery()

    history, expected = stopped.history, reference.history
    np.testing.assert_array_equal(history.epoch, np.arange(kept))
    np.testing.assert_array_equal(history.losses, expected.losses)
    np.testing.assert_array_equal(history.lr["u"], expected.lr["u"])
    np.testing.assert_array_equal(flat(stopped.params), flat(reference.params))
    # Both go on from the same point: the optimizer state, schedule position and point stream were kept.
    stopped.solve(2 * inner_steps, **options)
    reference.solve(2 * inner_steps, **options)
    np.testing.assert_array_equal(stopped.history.losses, reference.history.losses)
    np.testing.assert_array_equal(flat(stopped.params), flat(reference.params))
    assert stopped.history.phases == reference.history.phases == [0, kept]
    for producer in [t for t in threading.enumerate() if t.name == PRODUCER_THREAD]:
        producer.join(timeout=60)  # told to stop, it ends within its next put (0.1 s); the timeout ends a hang
    assert not any(t.name == PRODUCER_THREAD for t in threading.enumerate())  # no offloading thread left behind


def test_a_solve_stopped_before_its_first_sync_leaves_the_solver_as_it_was():
    solver = problem().solver()
    solver.solve(10, batchsize=16)
    before = flat(solver.params)
    solver.machinery = stopping_at_call(1, KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):  # fused calls: a program the solver has yet to compile (and wrap)
        solver.solve(10, batchsize=16, inner_steps=5)
    solver.machinery = Machinery()
    assert len(solver.history) == 10 and solver.history.phases == [0]
    np.testing.assert_array_equal(flat(solver.params), before)
    reference = problem().solver()
    reference.solve(10, batchsize=16)
    resumed, expected = solver.solve(10, batchsize=16), reference.solve(10, batchsize=16)
    np.testing.assert_array_equal(resumed.losses, expected.losses)
    np.testing.assert_array_equal(flat(solver.params), flat(reference.params))
