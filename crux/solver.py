"""The solver: constraints and models in, ``solve()`` options checked, compiled calls run, history kept."""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from crux.batching import HostBatches, PointStream
from crux.constraint import Constraint
from crux.engine import Columns, Entry, empty_records, make_call, reached_models
from crux.executables import compile_once
from crux.layout import Layout
from crux.model import Model
from crux.stats import Statistics

log = logging.getLogger("crux")

SYNC_SECONDS = 0.25  # how often the loop waits for the device: progress, timing and the non-finite check
RECORD_ROWS = 4096  # epochs' records the device holds between syncs (a few tens of KiB)


@dataclass(frozen=True)
class Options:
    """The validated options of one solve() call."""

    epochs: int
    batchsize: int | None
    checkpoint_gradients: bool
    offload_data: bool
    accumulation_steps: int
    inner_steps: int
    substeps: tuple[tuple[tuple[int, ...], int], ...] | None


def _integer(name: str, value: Any, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}; {fix}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}; {fix}")
    return int(value)


def _parse_substeps(substeps: Any, n_constraints: int) -> tuple[tuple[tuple[int, ...], int], ...]:
    """``[[i, j], ([k], n), ...]`` -> ``(((i, j), 1), ((k,), n), ...)``, with every index checked."""
    if not isinstance(substeps, (list, tuple)) or not substeps:
        raise ValueError(f"substeps must be a non-empty list of entries like [0, 1] or ([0], 2), got {substeps!r}")
    plan = []
    for k, entry in enumerate(substeps):
        steps = 1
        if isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], (list, tuple)):
            entry, steps = entry
            steps = _integer(f"substeps[{k}] step count", steps, "write the entry as ([indices], n) with n >= 1")
        if not isinstance(entry, (list, tuple)) or not entry:
            raise ValueError(f"substeps[{k}] is {entry!r}: each entry needs at least one constraint index, "
                             f"e.g. [0] or ([0, 1], 2)")
        for i in entry:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < n_constraints:
                raise ValueError(f"substeps[{k}] names constraint {i!r}, but indices run from 0 to "
                                 f"{n_constraints - 1} (the order of the constraints given to crux.Crux)")
        if len(set(entry)) != len(entry):
            raise ValueError(f"substeps[{k}] repeats a constraint index: {list(entry)}")
        plan.append((tuple(int(i) for i in entry), steps))
    return tuple(plan)


@jax.jit
def _fresh_copy(tree: Any) -> Any:
    """One dispatch that copies every buffer (a tree.map of copies costs one dispatch per leaf)."""
    return jax.tree.map(jnp.copy, tree)


def _strongly_typed(tree: Any) -> Any:
    """Weak-typed leaves (optax's L-BFGS starts its line-search info from Python scalars) as the arrays a
    compiled call returns, so a state has the same types before and after a call and a later solve() traces
    nothing."""
    return jax.tree.map(lambda x: jnp.asarray(x, x.dtype) if getattr(x, "weak_type", False) else x, tree)


def _read_window(state: dict, first_call: int, count: int) -> list[np.ndarray]:
    """The records of ``count`` calls from call ``first_call`` on, from the ring buffer (waits for the last call;
    a copy, as the next call donates the buffer)."""
    records = np.array(state["records"])
    return [records[(first_call + i) % len(records)] for i in range(count)]


def _finite(window: list[np.ndarray], columns: Columns) -> bool:
    return all(np.all(record[:, columns.finite]) for record in window)


def _peak_bytes(device: jax.Device) -> int | None:
    """The device's peak memory in use since the process started, where the backend reports it (not on CPU)."""
    stats = device.memory_stats()
    return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


class Crux:
    """A PINN problem: constraints on collocation points and the models that satisfy them.

    ``solve()`` may be called repeatedly: parameters, the update counter (and so
    the point stream) and, for models whose optimizer was not changed, optimizer
    state and schedule position carry over. The constraints' points go to the
    device at the first solve() and stay there (not with ``offload_data``).
    """

    def __init__(self, constraints: Sequence[Constraint], models: dict[str, Model], seed: int = 0):
        constraints = list(constraints)
        if not constraints or not all(isinstance(c, Constraint) for c in constraints):
            raise TypeError("crux.Crux needs a non-empty list of crux.Constraint")
        names = [c.name for c in constraints]
        if len(set(names)) != len(names):
            raise ValueError(f"constraint names must be unique, got {names}")
        if not models or not all(isinstance(m, Model) for m in models.values()):
            raise TypeError("crux.Crux needs models={'name': crux.Model, ...}")
        self.constraints = constraints
        self.models = dict(models)
        self.seed = int(seed)
        self._key = jax.random.key(self.seed, impl="threefry2x32")  # the point stream draws with Threefry
        self._step = 0  # updates so far: drives the point stream
        self._epoch = 0
        self._opt_states: dict[tuple, tuple[int, Any]] = {}  # (entry key, model) -> (optimizer version, state)
        self._compiled: dict[tuple, tuple[Any, float, dict]] = {}
        self._points_on_device: tuple[jax.Array, ...] | None = None
        self._reach: list[set[str]] | None = None
        self._history: list[Statistics] = []

    # -- public state ------------------------------------------------------------
    @property
    def params(self) -> dict[str, Any]:
        return {name: m.params for name, m in self.models.items()}

    @property
    def history(self) -> Statistics | None:
        """Statistics over every solve() so far (None before the first)."""
        return Statistics.concat(self._history) if self._history else None

    @property
    def reach(self) -> list[set[str]]:
        """For each constraint, the models its residual reaches (resolved by tracing, once)."""
        if self._reach is None:
            params = self.params
            self._reach = [reached_models(c, self.models, params) for c in self.constraints]
        return self._reach

    # -- solve -------------------------------------------------------------------------
    def solve(self, epochs: int, batchsize: int | None = None, checkpoint_gradients: bool = False,
              offload_data: bool = False, accumulation_steps: int = 1, inner_steps: int = 1,
              substeps: Sequence | None = None) -> Statistics:
        """Train for ``epochs`` epochs; return their Statistics (also appended to ``history``).

        Raises ValueError/TypeError for bad options before any compute, and
        FloatingPointError when a loss turns non-finite (history kept up to it,
        parameters left at the last finite update).
        """
        options = self._validate(epochs, batchsize, checkpoint_gradients, offload_data, accumulation_steps,
                                 inner_steps, substeps)
        entries = self._entries(options)
        for entry in entries:
            for name in entry.models:
                if not self.models[name].has_optimizer:
                    raise ValueError(f"model '{name}' has no optimizer: call models['{name}'].optimizer(optax.adam)"
                                     f".scale(crux.lrs(1e-3)) before solve()")
        if options.accumulation_steps > 1:
            b, a = options.batchsize, options.accumulation_steps
            log.info("Gradient accumulation enabled: %d micro-batches per update (effective batch = %d × %d = %d)",
                     a, b, a, a * b)
        stream = PointStream(tuple(c.size for c in self.constraints), options.batchsize, options.accumulation_steps)
        return self._run(options, entries, stream)

    def _validate(self, epochs, batchsize, checkpoint_gradients, offload_data, accumulation_steps, inner_steps,
                  substeps) -> Options:
        epochs = _integer("epochs", epochs, "pass the number of epochs to train, e.g. solve(epochs=1000)")
        if batchsize is not None:
            batchsize = _integer("batchsize", batchsize, "pass a positive batch size, or None for full batch")
        accumulation_steps = _integer("accumulation_steps", accumulation_steps,
                                      "use 1 for no accumulation, or N > 1 micro-batches per update")
        inner_steps = _integer("inner_steps", inner_steps, "use 1, or a divisor of epochs")
        if epochs % inner_steps:
            divisors = [k for k in range(1, min(epochs, 100) + 1) if epochs % k == 0]
            raise ValueError(f"inner_steps={inner_steps} must divide epochs={epochs}; choose one of {divisors}")
        if offload_data:
            largest = max(c.size for c in self.constraints)
            if batchsize is None or batchsize >= largest:
                raise ValueError(f"offload_data=True streams mini-batches, so it needs batchsize smaller than the "
                                 f"largest constraint ({largest} points); got batchsize={batchsize}. Pass a "
                                 f"smaller batchsize or set offload_data=False")
        plan = None
        if substeps is not None:
            if accumulation_steps > 1 or inner_steps > 1:
                raise ValueError("substeps cannot be combined with accumulation_steps > 1 or inner_steps > 1 "
                                 "(each substep is its own update); set both to 1")
            plan = _parse_substeps(substeps, len(self.constraints))
        if batchsize is None and accumulation_steps > 1:
            log.warning("accumulation_steps=%d ignored: with batchsize=None every update already sees all points, "
                        "so there is nothing to accumulate; using 1", accumulation_steps)
            accumulation_steps = 1
        return Options(epochs, batchsize, bool(checkpoint_gradients), bool(offload_data), accumulation_steps,
                       inner_steps, plan)

    def _entries(self, options: Options) -> tuple[Entry, ...]:
        reach = self.reach
        if options.substeps is None:
            models = tuple(sorted(set().union(*reach)))
            unreached = sorted(set(self.models) - set(models))
            if unreached:
                log.warning("models %s are reached by no constraint and will not be trained", unreached)
            return (Entry(tuple(range(len(self.constraints))), models, 1),)
        entries = []
        for constraints, steps in options.substeps:
            models = tuple(sorted(set().union(*(reach[c] for c in constraints))))
            entries.append(Entry(constraints, models, steps))
        uncovered = sorted(set(range(len(self.constraints))) - {c for e in entries for c in e.constraints})
        if uncovered:
            log.warning("constraints %s appear in no substep: they are not trained and their loss is NaN",
                        [self.constraints[c].name for c in uncovered])
        return tuple(entries)

    # -- running ------------------------------------------------------------------------
    def _device_points(self) -> tuple[jax.Array, ...]:
        """The constraints' points on the device, sent once and kept for later solve() calls."""
        if self._points_on_device is None:
            self._points_on_device = tuple(jax.device_put(c.points) for c in self.constraints)
        return self._points_on_device

    def _layouts(self) -> dict[str, Layout]:
        return {name: Layout(m.params, m.trains_flat) for name, m in self.models.items()}

    def _initial_state(self, entries: tuple[Entry, ...], options: Options, transforms: dict,
                       layouts: dict[str, Layout], records: dict[str, np.ndarray]) -> dict:
        params = {name: layout.packed for name, layout in layouts.items()}
        opt = []
        for index, entry in enumerate(entries):
            states = {}
            for name in entry.models:
                key = (self._entry_key(options, index), name)
                version, state = self._opt_states.get(key, (None, None))
                if version != self.models[name].optimizer_version:
                    state = (np.int32(0), _strongly_typed(transforms[name].init(params[name])))
                states[name] = state
            opt.append(states)
        state = {"params": params, "opt": tuple(opt), "step": np.int32(self._step), "failed": np.bool_(False),
                 **records}
        # Fresh buffers: the call donates them, and L-BFGS's state holds the parameter arrays themselves.
        # One dispatch; host leaves (counters, the record buffer) travel with it.
        return _fresh_copy(state)

    @staticmethod
    def _entry_key(options: Options, index: int) -> tuple:
        return ("solve",) if options.substeps is None else ("substeps", options.substeps, index)

    def _compile(self, entries, options, stream, layouts, transforms, state, data,
                 check_updates: bool) -> tuple[Any, float, dict]:
        """(executable, seconds spent getting it, its memory). Kept per option key, so a later solve() traces
        nothing; a new key is traced, and a program that another solver of the process compiled is reused."""
        versions = tuple((n, self.models[n].optimizer_version) for e in entries for n in e.models)
        flat = tuple((name, layout.flat) for name, layout in layouts.items())
        key = (entries, options.inner_steps, options.checkpoint_gradients, options.offload_data, stream, versions,
               flat, check_updates)
        if key in self._compiled:
            compiled, _, memory = self._compiled[key]
            return compiled, 0.0, memory
        call = make_call(self.constraints, self.models, layouts, transforms, entries, stream,
                         options.inner_steps, options.checkpoint_gradients, options.offload_data, check_updates)
        start = time.perf_counter()
        compiled = compile_once(call, state, data, donate_argnums=0)
        seconds = time.perf_counter() - start
        analysis = compiled.memory_analysis()
        memory = {}
        if analysis is not None:
            memory = {"temp_bytes": int(analysis.temp_size_in_bytes),
                      "argument_bytes": int(analysis.argument_size_in_bytes),
                      "output_bytes": int(analysis.output_size_in_bytes)}
        self._compiled[key] = (compiled, seconds, memory)
        return compiled, seconds, memory

    def _run(self, options: Options, entries: tuple[Entry, ...], stream: PointStream) -> Statistics:
        transforms = {n: self.models[n].transform(n) for e in entries for n in e.models}
        layouts = self._layouts()
        columns = Columns.of(len(self.constraints), entries)
        slots = max(RECORD_ROWS // options.inner_steps, 1)  # calls between two reads of the records, at most
        state = self._initial_state(entries, options, transforms, layouts,
                                    empty_records(columns, slots, options.inner_steps))
        steps_per_epoch = sum(e.steps for e in entries)
        calls = options.epochs // options.inner_steps
        steps_per_call = options.inner_steps * steps_per_epoch
        device = jax.devices()[0]
        if options.offload_data:
            self._points_on_device = None  # offloading is for when they should not stay on the device
            host = HostBatches(stream, tuple(c.points for c in self.constraints), self._key, self._step,
                               steps_per_call, calls, device)
            feed = ({"batches": b} for b in host)
            first = {"batches": tuple(jax.ShapeDtypeStruct((steps_per_call, stream.micro_batches,
                                                            stream.batch_size(c), con.points.shape[1]), jnp.float32)
                                      for c, con in enumerate(self.constraints))}
        else:
            data = {"key": self._key, "points": self._device_points()}
            feed = (data for _ in range(calls))
            first = data
        # A call of several updates checks each one's loss, and the parameters it leaves, and a failing window is
        # replayed with every update checked (see make_call); a call of one update checks it fully. Streamed
        # batches are not kept for a replay (a window could hold thousands): offloaded calls check fully too.
        replayable = steps_per_call > 1 and not options.offload_data
        compiled, compile_seconds, memory = self._compile(entries, options, stream, layouts, transforms, state,
                                                          first, check_updates=not replayable)
        peak_before = _peak_bytes(device) or 0

        rows, pending, step_seconds = [], 0, []
        first_epoch = self._epoch
        bar = tqdm(total=options.epochs, desc="solve", disable=None, leave=False)
        start = window_start = time.perf_counter()
        for call_index, data in enumerate(feed):
            if replayable and not pending:  # a window starts: keep its state, to replay the window if it fails
                snapshot = _fresh_copy(state)
            state = compiled(state, data)
            pending += 1
            if call_index == calls - 1 or pending == slots or time.perf_counter() - window_start > SYNC_SECONDS:
                window = _read_window(state, call_index + 1 - pending, pending)
                if replayable and not _finite(window, columns):  # find the update that failed, as documented
                    checked, seconds, _ = self._compile(entries, options, stream, layouts, transforms, snapshot,
                                                        first, check_updates=True)
                    compile_seconds += seconds
                    state = snapshot
                    for _ in range(pending):
                        state = checked(state, data)  # the points on the device: the same data every call
                    window = _read_window(state, call_index + 1 - pending, pending)
                rows += window
                pending = 0
                now = time.perf_counter()
                updates = len(window) * steps_per_call
                step_seconds.append((now - window_start) / updates)
                bar.update(updates // steps_per_epoch)
                bar.set_postfix(loss=f"{np.nansum(window[-1][-1, columns.losses]):.3e}")
                window_start = now
                if not _finite(window, columns):
                    break
        jax.block_until_ready(state)
        run_seconds = time.perf_counter() - start
        bar.close()

        table = np.concatenate(rows)
        losses = table[:, columns.losses]
        lr = {m: table[:, column] for m, column in columns.lr.items()}
        finite = table[:, columns.finite] > 0
        error = None
        if not finite.all():
            row = int(np.argmin(finite))
            losses, lr = losses[:row + 1], {m: v[:row + 1] for m, v in lr.items()}
            bad = [self.constraints[c].name for c in self._evaluated(entries) if not np.isfinite(losses[row, c])]
            cause = (f"loss of constraint '{bad[0]}' became non-finite" if bad else
                     f"the update made the parameters non-finite (loss {np.nansum(losses[row]):.3e})")
            error = (f"{cause} at epoch {first_epoch + row}; training stopped. History up to that epoch is kept "
                     f"in solver.history; the parameters are those before it (lower the learning rate, or check "
                     f"the residual for a division by zero or a log of a negative number).")

        memory = dict(memory)
        peak = _peak_bytes(device)
        if peak is not None and peak > peak_before:  # the device peak is per process: only a new one is ours
            memory["peak_bytes"] = peak
        stats = Statistics(names=[c.name for c in self.constraints], losses=losses,
                           epoch=np.arange(first_epoch, first_epoch + len(losses)), lr=lr,
                           compile_seconds=compile_seconds, run_seconds=run_seconds,
                           step_seconds=np.asarray(step_seconds), memory=memory, phases=[first_epoch])
        self._commit(state, layouts, entries, options, len(losses) * steps_per_epoch, len(losses))
        self._history.append(stats)
        if error:
            raise FloatingPointError(error)
        return stats

    def _evaluated(self, entries: tuple[Entry, ...]) -> list[int]:
        return sorted({c for e in entries for c in e.constraints})

    def _commit(self, state: dict, layouts: dict[str, Layout], entries: tuple[Entry, ...], options: Options,
                updates: int, epochs: int) -> None:
        """Keep what the next solve() resumes from: parameters, optimizer states, counters."""
        for name, params in state["params"].items():
            self.models[name].params = layouts[name].unpack(params)
        for index, entry in enumerate(entries):
            for name in entry.models:
                self._opt_states[(self._entry_key(options, index), name)] = (
                    self.models[name].optimizer_version, state["opt"][index][name])
        self._step += updates
        self._epoch += epochs
