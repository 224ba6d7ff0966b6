"""The solver: constraints and models in; ``solve()`` plans the compiled call, runs it and keeps the history."""
from __future__ import annotations

import dataclasses
import functools
import itertools
import logging
import math
import time
import weakref
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from crux import device_memory, remat, sharding
from crux.batching import DevicePoints, HostBatches, PointStream
from crux.constraint import Constraint, checked_reach
from crux.engine import Data, Entry, OptimizerState, Plan, Primitives, State, make_call, started
from crux.executables import compile_once, memory_of, memory_once
from crux.loop import (RECORD_ROWS, SYNC_SECONDS, UNROLL_COMPILE_FLOOR, UNROLL_MEMORY_SHARE, UNROLL_PAYBACK,
                       Executable, HostLoop, progress_bar, record_slots, unrolled)
from crux.model import Model
from crux.options import SolveOptions, one_call, requested, resolved
from crux.stats import PendingFingerprint, Statistics

log = logging.getLogger("crux")


class Compiled(NamedTuple):
    """A compiled call, the seconds it took to get, and its memory from ``memory_analysis()``."""

    call: Executable
    seconds: float
    memory: dict[str, int]


class CompiledCall(NamedTuple):
    """What ``Crux.compiled_call`` gives: the compiled call ``solve()`` runs, a fresh state to call it with (the
    solver's parameters, optimizer states and counters; the call donates it) and the points it takes, so that
    ``call(state, data)`` makes ``inner_steps`` updates as ``solve()`` would, without its host loop."""

    call: Executable
    state: State
    data: Data


def _strongly_typed(tree: Any) -> Any:
    """Weak-typed leaves (optax's L-BFGS starts its line-search info from Python scalars) as the arrays a
    compiled call returns, so a state has the same types before and after a call and a later solve() traces
    nothing."""
    return jax.tree.map(lambda x: jnp.asarray(x, x.dtype) if getattr(x, "weak_type", False) else x, tree)


def models_reached(reach: Sequence[set[str]], models: Sequence[str]) -> tuple[str, ...]:
    """The models an entry trains: those its constraints reach, so that a model no constraint of the entry
    reaches keeps its parameters bit for bit.

    Args:
        reach: the models each of the entry's constraints reaches, one set per constraint.
        models: the solver's model names (unused by this rule; a test's planted variant may train others).

    Returns:
        The names, sorted.
    """
    return tuple(sorted(set().union(*reach)))


@dataclass(frozen=True)
class Machinery:
    """What a solver builds, compiles and runs its calls with: the engine's primitives and call, the compiler,
    the host loop's synchronisation and progress bar, and which models an entry trains.

    The defaults are crux's own; a solver's ``machinery`` is replaced only by tests, to plant a defect that a
    check must catch (a fused loop that drops an update, a call interrupted at a given run) or to make the
    host loop synchronise at set points.
    """

    primitives: Primitives = Primitives()
    make_call: Callable[[Plan], Executable] = make_call  # the traced function of a plan
    compile: Callable[..., Executable] = compile_once  # ``compile(function, *args, donate_argnums=...)``
    # ``memory(function, *args, donate_argnums=...)``: the memory analysis of what ``compile`` would compile
    memory: Callable[..., dict[str, int]] = memory_once
    sync_seconds: float = SYNC_SECONDS  # how often the host loop waits for the device
    record_rows: int = RECORD_ROWS  # epochs' records the device holds between two waits
    progress: Callable[..., Any] = progress_bar  # makes the progress bar (tqdm's interface)
    trained: Callable[[Sequence[set[str]], Sequence[str]], tuple[str, ...]] = models_reached  # an entry's models
    flat_params: bool | None = None  # False: every model's parameters as its own tree (None: crux's choice)


class Crux:
    """A PINN problem: constraints on collocation points and the models that satisfy them, trained by
    :meth:`solve`.

    ``solve()`` may be called repeatedly: parameters, the update counter (and so
    the point stream) and, for models whose optimizer was not changed, optimizer
    state and schedule position carry over. The constraints' points go to the
    device at the first solve() and stay there (not with ``offload_data``).

    Args:
        constraints: the :class:`crux.Constraint` list, names unique; ``substeps`` names them by index.
        models: ``{name: crux.Model}``, the names the residuals use (``net.u``); the dict is copied, the models
            are shared (``solve()`` leaves the trained parameters in them).
        seed: the key of the point stream (which points each update sees), from 0 to 2**32 - 1; the models'
            initial parameters come from their own seeds.
        machinery: what the solver builds, compiles and runs its calls with (:class:`Machinery`); crux's own by
            default, replaced only by tests, to plant a defect that a check must catch.

    Raises:
        TypeError: no constraints, something other than a constraint among them, or ``models`` not a non-empty
            ``{str: crux.Model}``.
        ValueError: two constraints share a name, one model object is given under two names, or ``seed`` is
            outside 0 ... 2**32 - 1.
    """

    def __init__(self, constraints: Sequence[Constraint], models: dict[str, Model], seed: int = 0,
                 machinery: Machinery = Machinery()):
        if isinstance(constraints, Constraint):
            raise TypeError(f"crux.Crux needs a list of crux.Constraint, got the constraint {constraints.name!r} "
                            f"alone: put it in a list, crux.Crux([constraint], models)")
        constraints = list(constraints)
        if not constraints or not all(isinstance(c, Constraint) for c in constraints):
            raise TypeError("crux.Crux needs a non-empty list of crux.Constraint")
        names = [c.name for c in constraints]
        if len(set(names)) != len(names):
            raise ValueError(f"constraint names must be unique, got {names}")
        if (not isinstance(models, dict) or not models or not all(isinstance(m, Model) for m in models.values())
                or not all(isinstance(name, str) for name in models)):
            raise TypeError(f"crux.Crux needs models={{'name': crux.Model, ...}} (names are strings), got {models!r}")
        names_of: dict[int, list[str]] = {}
        for name, model in models.items():
            names_of.setdefault(id(model), []).append(name)
        shared = next((names for names in names_of.values() if len(names) > 1), None)
        if shared:  # one set of parameters under two names would be trained as two copies, left as one
            raise ValueError(f"crux.Crux: models {shared} are one crux.Model object; give each name its own model "
                             f"(a residual that uses one network twice names it once: net.{shared[0]})")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2 ** 32:
            raise ValueError(f"crux.Crux: seed must be an integer from 0 to 2**32 - 1 (the point stream's key holds "
                             f"32 bits: larger seeds would repeat smaller ones' streams), got {seed!r}")
        self.constraints = constraints
        self.models = dict(models)
        self.seed = int(seed)
        self.machinery = machinery
        self._key = jax.random.key(self.seed, impl="threefry2x32")  # the point stream draws with Threefry
        self._step = 0  # updates so far: drives the point stream
        self._device_step: tuple[int, jax.Array] | None = None  # (updates so far, that count on the device)
        self._epoch = 0
        self._opt_states: dict[tuple, tuple[int, OptimizerState]] = {}  # (entry key, model) -> (version, state)
        self._compiled: dict[tuple, Compiled] = {}
        self._chosen: dict[tuple, str] = {}  # checkpoint_gradients' form, per key of its plan (_compiled_forms)
        self._unrolled: dict[tuple, tuple[Plan, Compiled]] = {}  # the plain plan's key -> its unrolled loop, compiled
        self._background: ThreadPoolExecutor | None = None  # where the unrolled loop last compiled beside the plain one
        self._started_kinds: set[tuple] = set()  # the kinds of starting state made so far (see _first_state)
        # (devices, what a call draws its batches from: the key and the points, on those devices)
        self._points_on_device: tuple[int, DevicePoints] | None = None
        self._reach: list[set[str]] | None = None
        self._history: list[Statistics] = []
        # the parameter arrays the last solve() ended with (weakly held) and their fingerprint, to be taken while the
        # next solve()'s first calls run
        self._last_fingerprint: tuple[list[weakref.ref], PendingFingerprint] | None = None

    # -- public state ------------------------------------------------------------
    @property
    def params(self) -> dict[str, Any]:
        """``{name: model.params}``: every model's current parameters."""
        return {name: m.params for name, m in self.models.items()}

    @property
    def history(self) -> Statistics | None:
        """Statistics over every solve() so far (None before the first)."""
        return Statistics.concat(self._history) if self._history else None

    def optimizer_state(self, model: str) -> Any:
        """The optax state ``model``'s optimizer carries into the next plain solve() (without ``substeps``).

        Args:
            model: a model's name.

        Returns:
            The state; None before its first update there, or once its optimizer or schedule changed (the next
            solve() starts a fresh one).

        Raises:
            KeyError: no such model.
        """
        if model not in self.models:
            raise KeyError(f"Crux.optimizer_state({model!r}): no such model; the solver has {sorted(self.models)}")
        version, state = self._opt_states.get((self._entry_key(None, 0), model), (None, None))
        return state.inner if state is not None and version == self.models[model].optimizer_version else None

    @property
    def reach(self) -> list[set[str]]:
        """For each constraint, the models its residual reaches (resolved by tracing, once, which also checks
        that the residual gives one value, or one vector, per point)."""
        if self._reach is None:
            params = self.params
            self._reach = [checked_reach(c, self.models, params) for c in self.constraints]
        return self._reach

    # -- solve -------------------------------------------------------------------------
    def solve(self, epochs: int | None = None, options: SolveOptions | None = None, **keywords: Any) -> Statistics:
        """Train for ``epochs`` epochs; return their Statistics (also appended to ``history``).

        An epoch is one update of every reached model on every constraint (with ``substeps``, one pass over the
        entries). The options are ``options`` with ``epochs`` and each keyword argument in its place:
        ``solve(1000, batchsize=8)`` is ``solve(options=crux.SolveOptions(1000, batchsize=8))``. They run as
        :meth:`resolve` gives them, and every option is checked before anything is traced or compiled. Calling it
        again resumes where the last call ended (what carries over: :class:`Crux`).

        Args:
            epochs: the number of epochs, in place of ``options.epochs``.
            options: a :class:`crux.SolveOptions` (None: the defaults); its fields say what each option does.
            **keywords: any field of :class:`crux.SolveOptions` but ``epochs``, in place of the same field of
                ``options`` (``batchsize``, ``accumulation_steps``, ``inner_steps``, ``checkpoint_gradients``,
                ``offload_data``, ``substeps``, ``devices``, ``precision``).

        Returns:
            The statistics of these epochs, one row per epoch, with the options they ran
            (``Statistics.options``).

        Raises:
            TypeError: an unknown keyword, or a value of the wrong type (:class:`crux.SolveOptions`).
            ValueError: options no solve() of this solver could run (a :class:`crux.options.OptionError` where
                it names options), a residual or model that does not trace as its constraint says, a trained
                model without an optimizer; before any compute.
            FloatingPointError: a loss or an update turned non-finite. Whatever stops a solve() (that error,
                another exception, KeyboardInterrupt), the epochs up to the last synchronisation stay in
                ``history`` and the parameters, optimizer states and counters are those at that point (before
                the failing update, for a non-finite one), so that a later solve() resumes from there.
        """
        options = self._resolved(requested(epochs, options, keywords))
        entries = self._trained_entries(options)
        if options.accumulation_steps > 1:
            b, a, largest = options.batchsize, options.accumulation_steps, max(c.size for c in self.constraints)
            log.info("Gradient accumulation enabled: %d micro-batches per update (effective batch = %s)", a,
                     f"{b} × {a} = {a * b}" if a * b <= largest else
                     f"every point of each constraint, the largest's {largest} (fewer than {b} × {a})")
        return self._run(self._plan(options, entries), options)

    def resolve(self, epochs: int | None = None, options: SolveOptions | None = None,
                **keywords: Any) -> SolveOptions:
        """The options :meth:`solve` runs when called with these arguments, without running anything: what it
        logs or records as run (``Statistics.options`` holds them), checked as solve() checks them.

        A ``batchsize`` above every constraint's points runs as the largest constraint's, and
        ``accumulation_steps`` where every micro-batch would be the whole set (``batchsize=None``, or at least
        every constraint's points) as 1 (with a warning): the same training as the request, said as it runs
        (:func:`crux.options.resolved`). solve() takes the options this way too, so the two cannot differ.

        Args:
            epochs: the number of epochs, in place of ``options.epochs``.
            options: a :class:`crux.SolveOptions` (None: the defaults).
            **keywords: any field of :class:`crux.SolveOptions` but ``epochs``, in place of that field.

        Returns:
            The :class:`crux.SolveOptions` solve() runs.

        Raises:
            TypeError: as :meth:`solve` raises it for these options.
            ValueError: as :meth:`solve` raises it for these options (a :class:`crux.options.OptionError`: more
                ``devices`` than JAX sees, ``offload_data`` with a batch of every point, a ``substeps`` index past
                the constraints). What depends on the models (an optimizer attached, residuals that trace) is
                solve()'s to check.
        """
        return self._resolved(requested(epochs, options, keywords, "resolve"))

    def _resolved(self, options: SolveOptions) -> SolveOptions:
        """``options`` as this solver runs them (:func:`crux.options.resolved`): refused where they do not fit its
        constraints or the devices JAX sees."""
        return resolved(options, [c.size for c in self.constraints], len(jax.devices()))

    def _trained_entries(self, options: SolveOptions) -> tuple[Entry, ...]:
        """The entries of ``options``, refused where one trains a model without an optimizer (the first call
        traces every residual and checks its shape)."""
        entries = self._entries(options)
        for entry in entries:
            for name in entry.models:
                if not self.models[name].has_optimizer:
                    raise ValueError(f"model '{name}' has no optimizer: call models['{name}'].optimizer(optax.adam)"
                                     f".scale(crux.lrs(1e-3)) before solve()")
        return entries

    def _entries(self, options: SolveOptions) -> tuple[Entry, ...]:
        reach = self.reach
        if options.substeps is None:
            models = self.machinery.trained(reach, list(self.models))
            unreached = sorted(set(self.models) - set(models))
            if unreached:
                log.warning("models %s are reached by no constraint and will not be trained", unreached)
            return (Entry(tuple(range(len(self.constraints))), models, 1),)
        entries = []
        for constraints, steps in options.substeps:
            models = self.machinery.trained([reach[c] for c in constraints], list(self.models))
            entries.append(Entry(constraints, models, steps))
        uncovered = sorted(set(range(len(self.constraints))) - {c for e in entries for c in e.constraints})
        if uncovered:
            log.warning("constraints %s appear in no substep: they are not trained and their loss is NaN",
                        [self.constraints[c].name for c in uncovered])
        return tuple(entries)

    def _plan(self, options: SolveOptions, entries: tuple[Entry, ...]) -> Plan:
        """The compiled call's static part. A call checks each update's loss and the parameters it leaves,
        and a failing window is replayed with every update checked (see :class:`crux.engine.Plan`), also
        at one update a call, where the full check would make every update wait for a reduction over the
        new parameters before it is kept. Offloaded calls check every update, as their streamed batches
        are not kept for a replay (a window could hold thousands)."""
        stream = PointStream(tuple(c.size for c in self.constraints), options.batchsize, options.accumulation_steps,
                             options.devices)
        flat = lambda m: m.trains_flat and self.machinery.flat_params is not False
        layouts = {name: m.layout(flat(m)) for name, m in self.models.items()}
        transforms = {n: self.models[n].transform(n) for e in entries for n in e.models}
        return Plan(tuple(self.constraints), self.models, layouts, transforms, entries, stream, options.inner_steps,
                    offload_data=options.offload_data, precision=options.precision,
                    check_updates=options.offload_data, unroll=unrolled(options.inner_steps, jax.default_backend()),
                    record_slots=record_slots(options.inner_steps, self.machinery.record_rows),
                    primitives=self.machinery.primitives)

    # -- running ------------------------------------------------------------------------
    def _run(self, plan: Plan, options: SolveOptions) -> Statistics:
        calls = options.epochs // options.inner_steps
        resume, begin = self._beginning(plan, options)
        # The starting parameters (and those the last solve() ended with, where it started elsewhere) are
        # fingerprinted while the device runs the first calls, read back meanwhile.
        before = sharding.local(resume[0])
        for leaf in jax.tree.leaves(before):
            leaf.copy_to_host_async()
        last = self._last_fingerprint[1] if self._last_fingerprint is not None else None
        start = self._fingerprint(before)
        fingerprints = [f for f in (last, start) if f is not None]
        state, start_seconds = self._first_state(plan, begin)
        feed, example = self._feed(plan, options, calls)
        requested = plan
        plan, compiled = self._compiled_update(plan, options, state, example)
        faster = self._unrolled_later(requested, plan, compiled, state, example)
        checked = None
        if not plan.check_updates:
            checked = lambda at: self._compile(dataclasses.replace(plan, check_updates=True), at, example)[:2]

        loop = HostLoop(plan, self._epoch, self.machinery.sync_seconds, self.machinery.progress)
        try:
            loop.run(compiled.call, state, begin, feed, calls, checked,
                     meanwhile=lambda: [f.value() for f in fingerprints], faster=faster)
        finally:  # also on an exception or interrupt: keep what was synchronised
            stats, error = loop.statistics(compiled.seconds + start_seconds, compiled.memory)
            lr = {m: stats.lr.get(m, np.full(stats.steps, np.nan, np.float32)) for m in self.models}  # NaN: untrained
            stats = dataclasses.replace(stats, options=[options], lr=lr)
            if loop.state is not None:
                end = self._fingerprint(sharding.local(loop.state).train.params)
                stats = dataclasses.replace(stats, fingerprints=[(start, end)])
                self._commit(loop.state, plan, options, stats.steps)
                if error is None:  # a failed update's window counts updates it did not apply: the host's count stands
                    self._device_step = (self._step, sharding.local(loop.state).train.step)
            if stats.steps:
                self._history.append(stats)
        if error:
            raise FloatingPointError(error)
        return stats

    def _feed(self, plan: Plan, options: SolveOptions, calls: int) -> tuple[Any, Data]:
        """What the calls take, one item each, and an item's example to compile with: the points on the device
        (the same item every call), or with ``offload_data`` each call's batches streamed from the host (of the
        constraints whose batches are fewer points than they have; the others' points sent whole, once)."""
        if plan.offload_data:
            self._points_on_device = None  # offloading is for when they should not stay on the device
            target = jax.local_devices()[0] if options.devices == 1 else sharding.split(options.devices, 1)
            host = HostBatches(plan.stream, tuple(c.points for c in self.constraints), self._key, self._step,
                               options.inner_steps * plan.steps_per_epoch, calls, target,
                               whole=sharding.placement(options.devices))
            return iter(host), host.shapes()
        example = self._device_points(options.devices)
        return itertools.repeat(example, calls), example

    def compiled_memory(self, options: SolveOptions | None = None, **keywords: Any) -> dict[str, int | str]:
        """What solve() with these options compiles its update to need on the device, without running an update:
        how a size that may not fit is tried. The constraints' points go to the device as solve() would send them
        (not with ``offload_data``), so a device without room for them refuses here (RESOURCE_EXHAUSTED).

        Args:
            options: as :meth:`solve` takes them, ``epochs`` one call's (``inner_steps`` where not given).
            **keywords: fields of :class:`crux.SolveOptions` in place of ``options``'.

        Returns:
            XLA's memory analysis of the update: ``temp_bytes``, ``argument_bytes``, ``output_bytes``;
            with ``checkpoint_gradients``, ``checkpoint_form`` (the name of the form of :mod:`crux.remat` chosen),
            ``checkpoint_compared`` and ``capacity_bytes`` (whether it was chosen by comparing the forms, against
            what device memory; :meth:`solve`'s ``memory``).

        Raises:
            TypeError, ValueError: as :meth:`resolve` does.
        """
        options = self._resolved(one_call(options, keywords, "compiled_memory"))
        plan = self._plan(options, self._entries(options))
        _, example = self._feed(plan, options, 1)
        state = self._first_state(plan, self._beginning(plan, options)[1])[0]
        return dict(self._compiled_update(plan, options, state, example)[1].memory)

    def compiled_call(self, options: SolveOptions | None = None, **keywords: Any) -> CompiledCall:
        """The compiled call that solve() with these options runs, for timing or inspecting the program
        (``call.as_text()``, ``call.cost_analysis()``) without solve()'s host loop; the program is compiled
        once per solver and options, as solve() compiles it.

        Args:
            options: as :meth:`solve` takes them, ``epochs`` one call's (``inner_steps`` where not given).
            **keywords: fields of :class:`crux.SolveOptions` in place of ``options``'.

        Returns:
            ``(call, state, data)``: ``call(state, data)`` returns the state after ``inner_steps`` updates, bit
            for bit those solve() makes, without advancing the solver; ``state`` is a fresh one from where the
            solver stands (the call donates it), ``data`` the points on the device.

        Raises:
            TypeError, ValueError: as :meth:`solve` does; ValueError for ``offload_data=True``, whose calls take
                batches streamed from the host.
        """
        options = self._resolved(one_call(options, keywords, "compiled_call"))
        if options.offload_data:
            raise ValueError("compiled_call(offload_data=True): an offloaded solve() streams each call's batches "
                             "from the host, so no one call takes the points; pass offload_data=False")
        plan = self._plan(options, self._trained_entries(options))
        state = self._first_state(plan, self._beginning(plan, options)[1])[0]
        _, data = self._feed(plan, options, 1)
        return CompiledCall(self._compiled_update(plan, options, state, data)[1].call, state, data)

    def _device_points(self, devices: int) -> DevicePoints:
        """The stream's key and the constraints' points on the device (whole on each of ``devices``), sent once and
        kept for later solve() calls on as many devices."""
        if self._points_on_device is None or self._points_on_device[0] != devices:
            target = sharding.placement(devices)
            self._points_on_device = (devices, sharding.put(
                DevicePoints(self._key, tuple(c.points for c in self.constraints)), target))
        return self._points_on_device[1]

    @staticmethod
    def _entry_key(options: SolveOptions | None, index: int) -> tuple:
        """Which optimizer states an entry carries on: one for plain solve() calls (``options`` None or without
        substeps), one per entry of each substep plan."""
        return ("solve",) if options is None or options.substeps is None else ("substeps", options.substeps, index)

    def _resume_point(self, plan: Plan, options: SolveOptions) -> tuple[dict[str, Any], tuple, Any]:
        """Parameters (packed), each entry's optimizer states and the update counter, as the last solve() left them
        and on the devices the calls run on; an optimizer state starts afresh where the model's optimizer or
        schedule changed since. What the last solve() left on the devices stays there: a solve() that follows
        another sends the device nothing."""
        params = {name: self.models[name].packed(layout) for name, layout in plan.layouts.items()}
        opt, fresh = [], {}
        for index, entry in enumerate(plan.entries):
            states = {}
            for name in entry.models:
                version, states[name] = self._opt_states.get((self._entry_key(options, index), name), (None, None))
                if version != self.models[name].optimizer_version:
                    fresh[index, name] = plan.transforms[name]
            opt.append(states)
        if fresh:  # one program for every optimizer state that starts afresh, not one per operation of their inits
            def starts(params):
                return {(index, name): OptimizerState(jnp.int32(0), _strongly_typed(transform.init(params[name])))
                        for (index, name), transform in fresh.items()}
            for (index, name), state in compile_once(starts, params)(params).items():
                opt[index][name] = state
        on_device = self._device_step is not None and self._device_step[0] == self._step
        step = self._device_step[1] if on_device else np.int32(self._step)
        return sharding.put((params, tuple(opt), step), sharding.placement(options.devices))

    def _beginning(self, plan: Plan, options: SolveOptions) -> tuple[tuple, Callable[[], State]]:
        """Where the solver stands (:meth:`_resume_point`), and what makes from it, at each call, a fresh state to
        call the compiled update with."""
        resume = self._resume_point(plan, options)
        return resume, functools.partial(started, *resume, plan.record_shape, sharding.placement(options.devices))

    def _first_state(self, plan: Plan, begin: Callable[[], State]) -> tuple[State, float]:
        """``begin()``, and the seconds it took where it was this solver's first of its kind: the program that makes
        the state is compiled then (or found in JAX's caches), time that counts as compilation, not training."""
        kind = (plan.entries, plan.stream.devices, plan.record_shape, tuple(plan.layouts.items()), self._versions(plan))
        if kind in self._started_kinds:
            return begin(), 0.0
        start = time.perf_counter()
        state = begin()
        self._started_kinds.add(kind)
        return state, time.perf_counter() - start

    def _versions(self, plan: Plan) -> tuple:
        """The optimizer version of each model the plan trains: a new optimizer or schedule is a new program."""
        return tuple((n, self.models[n].optimizer_version) for e in plan.entries for n in e.models)

    def _compiled_update(self, plan: Plan, options: SolveOptions, state: State, data: Data) -> tuple[Plan, Compiled]:
        """The plan the solve runs and its compiled call: its loop unrolled where an earlier solve() of the same
        plan compiled that form while it trained (:meth:`_unrolled_later`), else plain."""
        plain = dataclasses.replace(plan, unroll=1)
        unrolled_form = self._unrolled.get(self._static_key(plain))
        if unrolled_form is not None:
            return unrolled_form[0], unrolled_form[1]._replace(seconds=0.0)
        return self._compiled_forms(plain, options, state, data)

    def _unrolled_later(self, requested: Plan, running: Plan, compiled: Compiled, state: State,
                        data: Data) -> Callable[[float], Future | None] | None:
        """Where the backend runs the loop faster unrolled (:func:`crux.loop.unrolled`) and the solve runs the plain
        loop: what starts compiling the unrolled loop on a thread of its own, given the seconds the calls left will
        train, if they are long enough to repay its compile (``UNROLL_PAYBACK``); the solve takes it from the next
        call once it is ready, and later solve()s of the plan start with it. The two programs make the same updates
        (a turn of the loop holds several; on a CPU they gave the same bits), so when the switch happens changes the
        time, not the training. None where there is nothing to compile."""
        if requested.unroll == 1 or running.unroll > 1:
            return None
        key = self._static_key(dataclasses.replace(requested, unroll=1))
        plan = dataclasses.replace(running, unroll=requested.unroll)
        shapes = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=a.sharding), (state, data))
        cost = requested.unroll * max(compiled.seconds, UNROLL_COMPILE_FLOOR)

        def start(remaining_seconds: float) -> Future | None:
            if remaining_seconds < UNROLL_PAYBACK * cost:
                return None
            # a thread for this compile alone: it ends with it, so no idle thread outlives a sweep's job
            self._background = ThreadPoolExecutor(1, thread_name_prefix="crux-unrolled")
            future = self._background.submit(self._compile_unrolled, key, plan, *shapes)
            self._background.shutdown(wait=False)
            return future
        return start

    def _compile_unrolled(self, key: tuple, plan: Plan, state: Any, data: Any) -> Executable | None:
        """The unrolled loop's compiled call, kept for later solve()s under the plain plan's ``key``; None where it
        does not compile or its temporaries pass ``UNROLL_MEMORY_SHARE`` of the device's memory (the plain loop
        then trains on)."""
        try:
            compiled = self._compile(plan, state, data)
        except Exception as error:  # the plain loop trains on: nothing is lost but time
            log.info("the unrolled loop did not compile (%s: %s); the plain one trains on", type(error).__name__, error)
            return None
        budget = device_memory.limit(jax.devices()[0])
        if budget is not None and compiled.memory.get("temp_bytes", 0) > UNROLL_MEMORY_SHARE * budget:
            return None
        self._unrolled[key] = (plan, compiled)
        return compiled.call

    def _compiled_forms(self, plan: Plan, options: SolveOptions, state: State, data: Data) -> tuple[Plan, Compiled]:
        """The plan and its compiled call. With ``checkpoint_gradients``, the form of :mod:`crux.remat` likely to need
        the least (:func:`crux.remat.likely_least`) is compiled in full; where its compiled bytes are within
        :data:`crux.remat.COMPARED_FROM` of the device's memory (:func:`crux.device_memory.capacity`) it runs,
        else every other form a model has (:attr:`crux.Model.forms`: another form's program would be one of theirs
        again) is measured (``machinery.memory``: XLA's memory analysis, without the machine code where the backend
        allows), side by side, and the one of the fewest temporary bytes runs (plain where no rematerialisation
        needs fewer). ``memory`` records the form (``checkpoint_form``), whether the forms were compared
        (``checkpoint_compared``) and the device's bytes (``capacity_bytes``); the seconds from the first form
        traced to the form kept compiled count as compilation."""
        if not options.checkpoint_gradients:
            return plan, self._compile(plan, state, data)
        capacity = device_memory.capacity(jax.devices()[0])
        # the choice is the device's memory's and the comparing's as much as the plan's
        key = ("forms", remat.always_compared(), capacity, *self._static_key(plan))
        if key in self._compiled:
            chosen, compiled = self._chosen[key], self._compiled[key]
            return dataclasses.replace(plan, remat=chosen), compiled._replace(seconds=0.0)
        start = time.perf_counter()
        plans = {form: dataclasses.replace(plan, remat=form) for form in remat.FORMS
                 if any(form in model.forms for model in plan.models.values())}
        functions = {form: self.machinery.make_call(p) for form, p in plans.items()}
        guess = remat.likely_least(plans, jax.default_backend())
        figures, refused = {}, {}
        try:
            compiled = self._compile(plans[guess], state, data, functions[guess])
            figures[guess] = compiled.memory
        except Exception as error:
            if device_memory.refusal(error) is None:
                raise
            refused[guess] = error  # a form the device has no room for is not a candidate
        compared = guess in refused or remat.compared(device_memory.compiled_bytes(figures[guess]), capacity)
        if compared:
            with ThreadPoolExecutor(max(len(plans) - 1, 1)) as pool:
                pending = {form: pool.submit(self.machinery.memory, functions[form], state, data, donate_argnums=0)
                           for form in plans if form != guess}
            for form, future in pending.items():
                error = future.exception()
                if error is None:
                    figures[form] = future.result()
                elif device_memory.refusal(error) is not None:
                    refused[form] = error
                else:
                    raise error
        if not figures:  # XLA's refusal of the form that needed the least (the earlier form on a tie)
            raise refused[remat.least_memory({form: device_memory.refused_bytes(str(error)) or math.inf
                                              for form, error in refused.items()})]
        least = lambda figures: remat.least_memory({name: f.get("temp_bytes") for name, f in figures.items()})
        form = least(figures)
        compiled = self._compile(plans[form], state, data, functions[form])
        if compiled.memory.get("temp_bytes") != figures[form].get("temp_bytes"):
            log.warning("checkpoint_gradients: the %s form's memory-only compile said %s temporary bytes, its compile "
                        "%s: every form compiled in full to choose", form, figures[form].get("temp_bytes"),
                        compiled.memory.get("temp_bytes"))
            figures = {name: self._compile(plans[name], state, data, functions[name]).memory for name in figures}
            form = least(figures)
            compiled = self._compile(plans[form], state, data, functions[form])
        why = (f"temporary bytes per form: {({name: f.get('temp_bytes') for name, f in figures.items()})}" if compared
               else f"not compared: it needs {device_memory.compiled_bytes(compiled.memory)} bytes")
        log.info("checkpoint_gradients: the update compiled %s (%s; the device has %s bytes)", form, why, capacity)
        self._chosen[key] = form
        self._compiled[key] = Compiled(compiled.call, time.perf_counter() - start, {
            **compiled.memory, "checkpoint_form": form, "checkpoint_compared": compared,
            **({"capacity_bytes": capacity} if capacity is not None else {})})
        return plans[form], self._compiled[key]

    def _static_key(self, plan: Plan) -> tuple:
        """What sets one compiled call of this solver apart from another."""
        return (plan.entries, plan.stream, plan.inner_steps, plan.remat, plan.offload_data, plan.precision,
                plan.check_updates, plan.unroll, plan.record_slots, tuple(plan.layouts.items()), self._versions(plan),
                self.machinery)

    def _compile(self, plan: Plan, state: State, data: Data, function: Executable | None = None) -> Compiled:
        """The compiled call of ``plan`` (traced from ``function`` where given: the plan's call, made already),
        kept per static key, so a later solve() traces nothing; a new key is traced, and a program that another
        solver of the process compiled is reused."""
        key = self._static_key(plan)
        if key in self._compiled:
            return self._compiled[key]._replace(seconds=0.0)
        start = time.perf_counter()
        function = function or self.machinery.make_call(plan)
        call = self.machinery.compile(function, state, data, donate_argnums=0)
        self._compiled[key] = Compiled(call, time.perf_counter() - start, memory_of(call))
        return self._compiled[key]

    def _fingerprint(self, params: Any) -> PendingFingerprint:
        """The fingerprint of ``params`` (:class:`crux.stats.PendingFingerprint`, taken when asked for), one for the
        arrays of the last one asked for: a solve() that starts from the very arrays the last one ended with (arrays
        never change) shares its fingerprint."""
        leaves = jax.tree.leaves(params)
        if self._last_fingerprint is not None:
            refs, pending = self._last_fingerprint
            if len(refs) == len(leaves) and all(ref() is leaf for ref, leaf in zip(refs, leaves)):
                return pending
        pending = PendingFingerprint(params)
        if all(isinstance(leaf, jax.Array) for leaf in leaves):
            self._last_fingerprint = ([weakref.ref(leaf) for leaf in leaves], pending)
        return pending

    def _commit(self, state: State, plan: Plan, options: SolveOptions, epochs: int) -> None:
        """Keep what the next solve() resumes from: parameters, optimizer states, counters after ``epochs``."""
        state = sharding.local(state)
        for name, params in state.train.params.items():
            self.models[name].hold_packed(params, plan.layouts[name])
        for index, entry in enumerate(plan.entries):
            for name in entry.models:
                self._opt_states[(self._entry_key(options, index), name)] = (
                    self.models[name].optimizer_version, state.train.opt[index][name])
        self._step += epochs * plan.steps_per_epoch
        self._epoch += epochs
