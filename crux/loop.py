"""The host loop of one ``solve()``: compiled calls dispatched, synchronised now and then, a non-finite window
replayed, and the synchronised part kept whatever stops the loop.

A call returns before the device has run it, so the loop waits for the device only at a synchronisation:
every ``sync_seconds`` (``SYNC_SECONDS`` unless the solver says otherwise), when the device's record buffer
is full, and after the last call. There it reads every waiting record with one transfer and updates the
progress bar, the timing and the non-finite check.
What the loop keeps is what it has synchronised: the records up to the last synchronisation and the state
right after them, so that a loop stopped by a non-finite update, an exception or an interrupt leaves a
history and a state that belong together.

One exception to running ahead: a call split over several CPU devices waits for the one before it. XLA's CPU
collectives can deadlock when several such calls are queued (a device's thread waits at a sum that the
other devices' threads, still in an earlier call, never reach), which ends the process after 40 s.
"""
from __future__ import annotations

import logging
import sys
import time
from concurrent.futures import Future
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from crux import device_memory, sharding
from crux.engine import Columns, Data, Plan, State
from crux.stats import Statistics

log = logging.getLogger(__name__)

# The solver's defaults (see crux.solver.Machinery):
SYNC_SECONDS = 0.25  # how often the loop waits for the device: progress, timing and the non-finite check
RECORD_ROWS = 4096  # epochs' records the device holds between syncs (a few tens of KiB)

Executable = Callable[[State, Data], State]


class SilentBar:
    """A progress bar that draws nothing (tqdm's interface: ``update``, ``set_postfix``, ``close``)."""

    def update(self, n: float = 1) -> None:
        pass

    def set_postfix(self, **values: Any) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(**options: Any) -> Any:
    """tqdm's bar (``options`` as tqdm takes them) where stdout or stderr is a terminal; elsewhere a
    :class:`SilentBar`. Off a terminal tqdm draws nothing either (``disable=None``), but building and closing
    one cost 0.12 ms of each solve() on a TPU v5e's host (docs/BENCHMARK.md), about 1% of a call of 100 fused
    updates of the standard problem."""
    if any(stream is not None and stream.isatty() for stream in (sys.stderr, sys.stdout)):
        return tqdm(**options)
    return SilentBar()


@jax.jit
def fresh_copy(tree: Any) -> Any:
    """Every buffer copied, in one dispatch (a tree.map of copies costs one dispatch per leaf)."""
    return jax.tree.map(jnp.copy, tree)


# A TPU runs a fused call's loop faster with several epochs to a turn: on a TPU v5e, 4 to a turn made calls of
# 100 to 2000 epochs 1.11-1.32x faster (and calls of 10 no faster); a CPU gains nothing it can show. The unrolled
# loop holds more temporaries (2.6-3x for the built-in problems), so it is kept only for a program small beside
# the device's memory, where a call's fixed costs matter: a large one is bound by its arithmetic anyway. Its
# compile costs about as many times the plain loop's as it unrolls, more than most solve()s gain from it, so a
# solve() starts with the plain loop and compiles the unrolled one on the side only where the calls left will
# train for UNROLL_PAYBACK times that cost (the plain loop's compile seconds, at least UNROLL_COMPILE_FLOOR, times
# the unrolling): then it gains a tenth or more of that time back, and the compile runs on the host while the
# device trains.
UNROLL = {"tpu": 4}
UNROLL_PAYBACK = 2.0
UNROLL_COMPILE_FLOOR = 1.0  # seconds: the plain loop's cost where it was compiled before (its compile took 0 s)
UNROLL_FROM = 100  # epochs a call
UNROLL_MEMORY_SHARE = 1 / 16  # the unrolled program's temporaries, at most, as a share of the device's memory


def unrolled(inner_steps: int, backend: str) -> int:
    """How many epochs a turn of a call's loop runs.

    Args:
        inner_steps: the call's epochs.
        backend: the backend it is compiled for (``jax.default_backend()``).

    Returns:
        :data:`UNROLL`'s figure for ``backend`` from :data:`UNROLL_FROM` epochs a call, else 1.
    """
    return UNROLL.get(backend, 1) if inner_steps >= UNROLL_FROM else 1


def record_slots(inner_steps: int, record_rows: int) -> int:
    """How many calls' records the device holds between two syncs.

    Args:
        inner_steps: the epochs of a call.
        record_rows: the epochs' records the device may hold.

    Returns:
        ``record_rows // inner_steps``, at least 1.
    """
    return max(record_rows // inner_steps, 1)


class HostLoop:
    """Runs the calls of one solve() and keeps what it synchronised (see :meth:`run` and :meth:`statistics`)."""

    def __init__(self, plan: Plan, first_epoch: int, sync_seconds: float, progress: Callable[..., Any]):
        """``sync_seconds``: how often to wait for the device; ``progress``: what makes the progress bar (tqdm's
        interface: ``update``, ``set_postfix``, ``close``)."""
        self.plan, self.first_epoch = plan, first_epoch
        self.sync_seconds, self.progress = sync_seconds, progress
        self._rows: list[np.ndarray] = []  # records, one array per window; the first ``synced[0]`` count
        self._step_seconds: list[float] = []  # one per window; only the first ``synced[1]`` count
        # (records, windows, state after them), replaced as one value so that it is never half updated;
        # state None: nothing synchronised yet, the solver's own state is the last one
        self._synced: tuple[int, int, State | None] = (0, 0, None)
        self.replay_compile_seconds = 0.0
        self.run_seconds = 0.0
        self.run_cpu_seconds = 0.0
        self._device_before = device_memory.Before(None, None)
        self._one_call_at_a_time = plan.stream.devices > 1 and jax.local_devices()[0].platform == "cpu"

    @property
    def state(self) -> State | None:
        """The state after the last synchronised call (None before the first)."""
        return self._synced[2]

    def run(self, compiled: Executable, state: State, begin: Callable[[], State], feed: Iterator[Data], calls: int,
            checked: Callable[[State], tuple[Executable, float]] | None = None,
            meanwhile: Callable[[], Any] | None = None,
            faster: Callable[[float], Future | None] | None = None) -> None:
        """Run the calls of one solve(), waiting for the device about every ``sync_seconds``. The loop stops after
        a non-finite window; what it synchronised is :attr:`state` and :meth:`statistics`.

        Args:
            compiled: the call.
            state: the starting state, which the first call donates.
            begin: gives another copy of that starting state, should the first window be replayed.
            feed: one item of data per call.
            calls: the calls to run.
            checked: for calls that check only their loss and final parameters, gives the program that checks
                every update (and the seconds it took to get) for a state like its argument: a window whose
                records are non-finite is run again with it from a copy of the state at the window's start, to
                find the update that failed. None: the calls check every update.
            meanwhile: called once, when the first calls are dispatched and before the loop first waits for them:
                host work that then takes none of the loop's time.
            faster: called once, after the first window, with the seconds the calls left would take at its pace:
                starts compiling a faster program of the same call (and the same results) and gives its future, or
                None; the calls after it is ready run it.
        """
        columns, epochs_per_call = self.plan.columns, self.plan.inner_steps
        updates_per_call = epochs_per_call * self.plan.steps_per_epoch
        device = jax.local_devices()[0]
        self._device_before = device_memory.before(device)
        bar = self.progress(total=calls * epochs_per_call, desc="solve", disable=None, leave=False)
        pending, start, cpu_start = 0, time.perf_counter(), time.process_time()
        window_start, ready = start, None
        try:
            for index, data in enumerate(feed):
                if ready is not None and ready.done():
                    program, ready = ready.result(), None
                    if program is not None:
                        compiled = program
                        log.info("the unrolled loop runs from call %d of %d", index + 1, calls)
                if not pending and index:
                    # A window starts: keep its state, to replay the window or to be the state kept if the loop
                    # stops inside it; the calls donate a copy. (The first window's is the caller's, from begin().)
                    window_state = fresh_copy(state)
                    self._synced = (*self._synced[:2], window_state)
                state = self._call(compiled, state, data)
                pending += 1
                last = index == calls - 1
                if not last and pending < self.plan.record_slots and \
                        time.perf_counter() - window_start <= self.sync_seconds:
                    continue
                if meanwhile is not None:
                    meanwhile()
                    meanwhile = None
                if last:  # the caller reads the parameters the loop ends with: on their way with the records
                    for leaf in jax.tree.leaves(sharding.local(state.train.params)):
                        leaf.copy_to_host_async()
                first_call = index + 1 - pending
                window = _read_window(state, first_call, pending)
                if checked is not None and not _finite(window, columns):
                    program, seconds = checked(state)
                    self.replay_compile_seconds += seconds
                    state = fresh_copy(window_state) if first_call else begin()
                    for _ in range(pending):
                        state = self._call(program, state, data)  # the points on the device: the same each call
                    window = _read_window(state, first_call, pending)
                now = time.perf_counter()
                self._rows.append(window.reshape(-1, columns.width))
                self._step_seconds.append((now - window_start) / (len(window) * updates_per_call))
                self._synced = (len(self._rows), len(self._step_seconds), state)
                pending, window_start = 0, now
                if faster is not None:  # the first window's pace prices the calls left
                    ready, faster = faster((calls - index - 1) * (now - start) / (index + 1)), None
                log.debug("synchronised after call %d of %d", index + 1, calls)
                bar.update(len(window) * epochs_per_call)
                bar.set_postfix(loss=f"{np.nansum(window[-1][-1, columns.losses]):.3e}")
                if not _finite(window, columns):
                    break
            jax.block_until_ready(state)
        finally:
            self.run_seconds = time.perf_counter() - start
            self.run_cpu_seconds = time.process_time() - cpu_start
            bar.close()
            close = getattr(feed, "close", None)
            if close is not None:  # a host stream's producer thread stops
                close()

    def _call(self, executable: Executable, state: State, data: Data) -> State:
        """One call dispatched; run to its end first where calls must not queue (see the module's docstring)."""
        state = executable(state, data)
        return jax.block_until_ready(state) if self._one_call_at_a_time else state

    def statistics(self, compile_seconds: float, memory: dict[str, int]) -> tuple[Statistics, str | None]:
        """The synchronised epochs' Statistics, cut after the first non-finite one.

        Args:
            compile_seconds: the solve()'s compile time, recorded with them.
            memory: the compiled update's memory figures, recorded with them and its measured peak.

        Returns:
            The statistics, and the error that names the first non-finite epoch (None if every one was finite).
        """
        plan, columns = self.plan, self.plan.columns
        rows, windows, _ = self._synced
        table = np.concatenate(self._rows[:rows]) if rows else np.zeros((0, columns.width), np.float32)
        losses = table[:, columns.losses]
        lr = {m: table[:, column] for m, column in columns.lr.items()}
        finite = table[:, columns.finite] > 0
        error = None
        if not finite.all():
            row = int(np.argmin(finite))
            losses, lr = losses[:row + 1], {m: v[:row + 1] for m, v in lr.items()}
            evaluated = sorted({c for e in plan.entries for c in e.constraints})
            bad = [plan.constraints[c].name for c in evaluated if not np.isfinite(losses[row, c])]
            cause = (f"loss of constraint '{bad[0]}' became non-finite" if bad else
                     f"the update made the parameters non-finite (loss {np.nansum(losses[row]):.3e})")
            kept = ("the parameters are those that loss was evaluated at, so a later solve() drawing the same "
                    "points meets it again: set model.params back to earlier ones (or build the model anew) and"
                    if bad else "the parameters are those before that update:")
            error = (f"{cause} at epoch {self.first_epoch + row}; training stopped. History up to that epoch is "
                     f"kept in solver.history; {kept} lower the learning rate, or check the residual for a division "
                     f"by zero or a log of a negative number.")
        memory = dict(memory)
        peak = device_memory.update_peak(memory, self._device_before, jax.local_devices()[0])
        if peak is not None:
            memory["peak_bytes"] = peak
        stats = Statistics(names=[c.name for c in plan.constraints], losses=losses,
                           epoch=np.arange(self.first_epoch, self.first_epoch + len(losses)), lr=lr,
                           compile_seconds=compile_seconds + self.replay_compile_seconds,
                           run_seconds=self.run_seconds, run_cpu_seconds=self.run_cpu_seconds,
                           step_seconds=np.asarray(self._step_seconds[:windows]),
                           window_ends=np.minimum(self.first_epoch + np.cumsum([len(r) for r in self._rows[:windows]],
                                                                               dtype=np.int64),
                                                  self.first_epoch + len(losses)),
                           memory=memory, phases=[self.first_epoch], precision=[plan.precision])
        return stats, error


def _read_window(state: State, first_call: int, count: int) -> np.ndarray:
    """The records of ``count`` calls from call ``first_call`` on, from the ring buffer, as one array ``(count,
    inner_steps, width)`` (waits for the last call; a copy, as the next call donates the buffer)."""
    rows = np.asarray(sharding.local(state.records.rows))
    return rows[(first_call + np.arange(count)) % len(rows)]


def _finite(window: np.ndarray, columns: Columns) -> bool:
    return bool(np.all(window[:, :, columns.finite]))
