"""inner_steps=K: K updates in one compiled call, the same numbers and one history row per epoch."""
import time

import numpy as np
import optax
import pytest

import crux
import crux.device_memory
import crux.executables
import crux.loop
import crux.solver

from crux.solver import Machinery
from crux_testing import EPS32, CompileStages, flat, poisson, relative, train

EPOCHS = 40
# Fusing changes which program runs the arithmetic, not the arithmetic. On a full batch XLA may fuse the loop
# body a little differently, a few ulp per update: over 40 Adam updates, relative to the distance travelled,
# that stays within ~10 eps; 100 eps is the bound (measured: 0.87 eps on a CPU). On mini-batches, whose points
# are gathered inside the update, the fused and the single updates are the same program: bit for bit.
ROUND_OFF = 100 * EPS32


@pytest.mark.parametrize("options", [{}, {"batchsize": 8, "accumulation_steps": 4}, {"batchsize": 16}],
                         ids=["full-batch", "accumulation", "mini-batch"])
def test_inner_steps_equal_single_steps(options):
    """docs/api.md's promise: bit for bit on mini-batches, to round-off on the full batch."""
    initial, single, stats_1 = train(poisson(optax.adam), EPOCHS, inner_steps=1, **options)
    _, fused, stats_10 = train(poisson(optax.adam), EPOCHS, inner_steps=10, **options)
    assert len(stats_10.total_loss) == len(stats_1.total_loss) == EPOCHS
    np.testing.assert_array_equal(stats_10.epoch, np.arange(EPOCHS))
    if options.get("batchsize"):
        np.testing.assert_array_equal(stats_10.losses, stats_1.losses)
        np.testing.assert_array_equal(fused, single)
        return
    np.testing.assert_allclose(stats_10.losses, stats_1.losses, rtol=ROUND_OFF)
    assert relative(fused, single, np.linalg.norm(single - initial)) < ROUND_OFF


def test_inner_steps_must_divide_epochs():
    problem = poisson()
    with pytest.raises(ValueError, match=r"inner_steps=7 must divide epochs=40"):
        problem.solver().solve(40, inner_steps=7)
    assert problem.solver().history is None


@pytest.mark.parametrize("inner_steps", [1, 2])
@pytest.mark.parametrize("sync_seconds", [0.0, 1e9], ids=["read-every-call", "read-when-full"])
def test_history_rows_keep_their_order_when_the_record_buffer_wraps(inner_steps, sync_seconds):
    # The device keeps RECORD_ROWS epochs' records in a ring buffer that the loop reads at a sync; with 3 rows
    # it wraps several times in 12 epochs. The numbers must be those of a run that never wraps, row for row.
    schedule = crux.lrs.exponential(1e-3, 0.9, 1)
    _, _, reference = train(poisson(optax.adam, schedule), 12, inner_steps=inner_steps)
    wrapping = Machinery(record_rows=3, sync_seconds=sync_seconds)
    _, _, wrapped = train(poisson(optax.adam, schedule), 12, wrapping, inner_steps=inner_steps)
    assert len(np.unique(reference.total_loss)) == 12 and len(np.unique(reference.lr["u"])) == 12
    np.testing.assert_array_equal(wrapped.losses, reference.losses)
    np.testing.assert_array_equal(wrapped.lr["u"], reference.lr["u"])


class Ticks:
    """``time`` for crux.loop: ``perf_counter`` a second later at every reading, so no test waits on a clock."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now

    process_time = staticmethod(time.process_time)


def test_a_windows_seconds_per_update_spread_its_time_over_its_updates(monkeypatch):
    # One synchronisation window holds all four calls of ten updates: its seconds over its 40 updates, which the
    # run's seconds contain (on a clock that ticks a second per reading; a window per call would be 10x more).
    monkeypatch.setattr(crux.loop, "time", Ticks())
    _, _, stats = train(poisson(optax.adam), 40, Machinery(sync_seconds=1e9), inner_steps=10)
    assert len(stats.step_seconds) == 1
    assert 0 < stats.step_seconds[0] * 40 <= stats.run_seconds


def unrolled_after_a_first_solve(monkeypatch, payback: float = 0.0) -> crux.Crux:
    """A solver whose first solve() ran where the backend unrolls the loop (the CPU standing in for a TPU), with
    ``payback`` as UNROLL_PAYBACK, its side compile (if any) waited for."""
    monkeypatch.setitem(crux.loop.UNROLL, "cpu", 4)
    monkeypatch.setattr(crux.solver, "UNROLL_PAYBACK", payback)
    solver = poisson(optax.adam).solver()
    solver.solve(4 * crux.loop.UNROLL_FROM, inner_steps=crux.loop.UNROLL_FROM)
    if solver._background is not None:
        solver._background.shutdown(wait=True)
    return solver


def test_a_loop_unrolled_as_on_a_tpu_makes_the_same_updates(monkeypatch):
    """Where the backend runs a call's loop several epochs to a turn (a TPU), a solve() starts on the plain loop
    and takes the unrolled one, compiled on the side, once it is ready, and the next solve() starts on it: the
    updates are those of the plain loop, the same operations in the same order, so the same numbers within the
    fusion's round-off (as above; measured: the same bits on a CPU)."""
    assert crux.loop.unrolled(crux.loop.UNROLL_FROM, "tpu") > 1
    assert crux.loop.unrolled(crux.loop.UNROLL_FROM - 1, "tpu") == crux.loop.unrolled(10_000, "cpu") == 1
    epochs, k = 4 * crux.loop.UNROLL_FROM, crux.loop.UNROLL_FROM
    plain = poisson(optax.adam).solver()
    initial = flat(plain.params)
    plain_stats = [plain.solve(epochs, inner_steps=k), plain.solve(epochs, inner_steps=k)]
    solver = unrolled_after_a_first_solve(monkeypatch)
    (plan, _), = solver._unrolled.values()
    assert plan.unroll == 4
    with CompileStages() as stages:
        stats = solver.solve(epochs, inner_steps=k)
    assert stages.compiled == 0 and stats.compile_seconds == 0  # it started on the unrolled loop compiled before
    assert relative(flat(solver.params), flat(plain.params), np.linalg.norm(flat(plain.params) - initial)) < ROUND_OFF
    np.testing.assert_allclose(solver.history.losses, np.concatenate([s.losses for s in plain_stats]), rtol=ROUND_OFF)


def test_a_solve_too_short_to_repay_the_unrolled_compile_keeps_the_plain_loop(monkeypatch):
    solver = unrolled_after_a_first_solve(monkeypatch, payback=1e9)
    assert solver._background is None and not solver._unrolled


def test_the_unrolled_loop_is_kept_only_while_small_beside_the_devices_memory(monkeypatch):
    """The unrolled program holds more temporaries: where they pass the share of the device's memory it may
    take, the plain program trains on."""
    monkeypatch.setattr(crux.device_memory, "limit", lambda device: 10 ** 12)
    (_, compiled), = unrolled_after_a_first_solve(monkeypatch)._unrolled.values()
    unrolled = compiled.memory["temp_bytes"]
    plain = poisson(optax.adam).solver().solve(crux.loop.UNROLL_FROM, inner_steps=crux.loop.UNROLL_FROM)
    assert unrolled != plain.memory["temp_bytes"]  # the two programs differ: the share below tells them apart
    monkeypatch.setattr(crux.device_memory, "limit",
                        lambda device: int(unrolled / crux.loop.UNROLL_MEMORY_SHARE) - 1)
    crux.executables.clear()
    assert not unrolled_after_a_first_solve(monkeypatch)._unrolled


class _Stream:
    def __init__(self, terminal: bool):
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


@pytest.mark.parametrize("stderr, stdout, drawn", [(False, False, False), (True, False, True), (False, True, True)])
def test_a_progress_bar_is_built_only_where_a_terminal_would_show_it(monkeypatch, stderr, stdout, drawn):
    monkeypatch.setattr("sys.stderr", _Stream(stderr))
    monkeypatch.setattr("sys.stdout", _Stream(stdout))
    bar = crux.loop.progress_bar(total=10, disable=None, leave=False)
    assert isinstance(bar, crux.loop.SilentBar) != drawn
    bar.update(10)
    bar.close()
