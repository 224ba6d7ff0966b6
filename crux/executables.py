"""Compiled programs shared by every solver in a process, found by what they compute.

A sweep runs its jobs in one process, and each job builds a new solver whose update traces to the same
program as the job before when only the seed, the data or a learning rate differ. JAX reuses a lowering
only for the same traced function object, so each new solver would lower its program again and load the
executable from the persistent cache; with this module it takes the executable an earlier solver compiled.

Here the key is the traced program itself: every equation, parameter, literal and captured constant by
value, the structure and placement of the arguments, the structure of the results, and JAX's
configuration. Constants and literals compare by their bytes (-0.0 is not 0.0), the operations'
parameters by their own equality, as JAX's cache of one-operation executables compares them (a function,
a callback's among them, by identity; the key holds it, so no other object can take its address). What
cannot be hashed compares by identity: it can make the key miss, never match another program.

The key reads JAX's jaxpr objects field by field (``KEYED_FIELDS``). A JAX release whose jaxprs have a
field this module does not know, or lack one it reads, turns sharing off with a warning (see
``uncovered()``): each solver then compiles its own program, as JAX alone would. ``clear()`` drops every
shared executable; ``set_aside()`` empties the table for a while and then puts it back.

``memory_once()`` gives XLA's memory analysis of the program ``compile_once()`` would compile, for choosing
between programs by what they need (:mod:`crux.remat`). XLA assigns a program's buffers before it generates
its machine code, so on a CPU the figures come from a compile that spends little on the machine code
(``MEMORY_ONLY``: 0.4-0.5x the time of a full compile on a 2-core CPU, the same temporary, argument and output
bytes); elsewhere from a full compile, whose executable is kept. The program traced for it is kept for the
``compile_once()`` of the same function that follows, so choosing a program traces it once.
"""
from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import weakref
from collections import OrderedDict
from typing import Any, Callable, Iterator

import jax
import jax.extend.core as jex
import jax.numpy as jnp
import numpy as np

log = logging.getLogger("crux")

CAPACITY = 32  # executables kept; the least recently used goes first
# JAX lowers these from their call_jaxpr alone; their differentiation rules, new functions at every trace
# (jax.nn.relu's among them), play no part in the compiled program.
LOWERED_FROM_CALL_JAXPR = {"custom_jvp_call", "custom_vjp_call"}
# The fields of JAX's jaxpr objects, named as their attributes (slots without the underscore), that the key
# reads; some exist only in some JAX versions (from 0.11 a Jaxpr holds its constants, and its constvars and
# invars are all_invars split at num_consts).
KEYED_FIELDS = {
    "ClosedJaxpr": {"jaxpr", "consts"},
    "Jaxpr": {"constvars", "invars", "all_invars", "num_consts", "outvars", "eqns", "effects", "is_high", "consts"},
    "JaxprEqn": {"invars", "outvars", "primitive", "params", "effects", "ctx"},
    "Var": {"aval", "initial_qdd", "final_qdd"},
    "Literal": {"val", "aval"},
}
# ... and those it leaves out on purpose: names and source locations, for messages and profiles only.
IGNORED_FIELDS = {"Jaxpr": {"debug_info"}, "JaxprEqn": {"source_info"}}
# Compile options, per backend, under which XLA runs every pass up to buffer assignment as it would (the same
# memory analysis) but optimises the machine code little: LLVM at its lowest level, its costly passes off. Such an
# executable is only measured, never run. (``xla_cpu_use_fusion_emitters=False`` would save a little more, but
# it changes the buffers XLA assigns.)
MEMORY_ONLY = {"cpu": {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}}


class Traced:
    """A function traced for its arguments, its program's key (None where sharing is off) and, once asked for,
    its lowering (lowered once however often it is compiled)."""

    def __init__(self, traced: Any, key: tuple | None):
        self.traced, self.key, self._lowered = traced, key, None

    @property
    def lowered(self) -> Any:
        """The traced function lowered, once."""
        if self._lowered is None:
            self._lowered = self.traced.lower()
        return self._lowered


def memory_of(compiled: Any) -> dict[str, int]:
    """XLA's memory analysis of a compiled program.

    Args:
        compiled: a compiled JAX executable.

    Returns:
        ``{"temp_bytes", "argument_bytes", "output_bytes": bytes}``; empty where the backend gives no analysis.
    """
    analysis = compiled.memory_analysis()
    if analysis is None:
        return {}
    return {"temp_bytes": int(analysis.temp_size_in_bytes), "argument_bytes": int(analysis.argument_size_in_bytes),
            "output_bytes": int(analysis.output_size_in_bytes)}


class ExecutableTable:
    """Executables keyed by the program they run, at most ``CAPACITY``, the least recently used dropped first.

    ``keyed_fields`` are the jaxpr fields the key is known to read (``KEYED_FIELDS``); a test gives a table
    fewer, as a JAX release with fields the key does not know would, to see sharing turn itself off.
    """

    def __init__(self, keyed_fields: dict[str, set[str]] = KEYED_FIELDS):
        self.keyed_fields = keyed_fields
        self._executables: OrderedDict[tuple, Any] = OrderedDict()
        self._memory: OrderedDict[tuple, dict[str, int]] = OrderedDict()  # memory_once's figures, by program
        # a function's program traced by memory_once, for the compile_once of the same function and arguments
        self._traced: weakref.WeakKeyDictionary[Callable, tuple[tuple, Traced]] = weakref.WeakKeyDictionary()
        self._measuring: dict[tuple, threading.Event] = {}  # programs memory_once is measuring, set when done
        self._memory_only = True  # False once the backend refused MEMORY_ONLY's options
        self._lock = threading.Lock()
        self._uncovered: list[str] | None = None  # uncovered(), once per table

    def clear(self) -> None:
        """Drop every shared executable: later solvers compile (or load from JAX's persistent cache) anew.
        A solver keeps the executables it already holds for its own later solve() calls."""
        with self._lock:
            self._executables.clear()
            self._memory.clear()

    @contextlib.contextmanager
    def set_aside(self) -> Iterator[None]:
        """The table empty for the duration and as it was afterwards, what was compiled meanwhile dropped: what a
        process without earlier solvers' executables pays, measured in one that has them."""
        with self._lock:
            kept, self._executables = (self._executables, self._memory), OrderedDict()
            self._memory = OrderedDict()
        try:
            yield
        finally:
            with self._lock:
                self._executables, self._memory = kept

    def uncovered(self) -> list[str]:
        """What of this JAX version's jaxprs the program key does not cover, one line each; empty when it
        covers everything. A field the key neither reads nor ignores might set apart two programs that the
        key cannot tell apart; a field the key reads that JAX no longer has breaks the key."""
        closed = jax.make_jaxpr(lambda x: jnp.sin(x) + jax.nn.relu(x) + 1.0)(np.float32(1.0))
        equations = closed.jaxpr.eqns
        literal = next(v for e in equations for v in e.invars if isinstance(v, jex.Literal))
        problems = []
        for sample in (closed, closed.jaxpr, equations[0], closed.jaxpr.invars[0], literal):
            name = type(sample).__name__
            extra = _fields(sample) - self.keyed_fields.get(name, set()) - IGNORED_FIELDS.get(name, set())
            if extra:
                problems.append(f"{name} has fields {sorted(extra)} that the program key neither reads nor ignores")
        try:
            program_key(closed)
        except Exception as error:  # noqa: BLE001 - any failure means the key no longer fits this JAX
            problems.append(f"keying a program fails: {type(error).__name__}: {error}")
        return problems

    def _sharing(self) -> bool:
        if self._uncovered is None:
            self._uncovered = self.uncovered()
            if self._uncovered:
                log.warning("crux.executables: with jax %s every solver compiles its own program, as the program "
                            "key does not cover this version: %s", jax.__version__, "; ".join(self._uncovered))
        return not self._uncovered

    def compile_once(self, fun: Callable, *args: Any, donate_argnums: int | tuple[int, ...] = ()) -> Any:
        """``jax.jit(fun, donate_argnums=...).lower(*args).compile()``, or the executable of an earlier call
        that traced to the same program.

        Args:
            fun: the function to compile.
            *args: its arguments (arrays or shapes), which the program is traced for.
            donate_argnums: the arguments whose buffers the executable may reuse.

        Returns:
            The compiled executable, shared with the earlier calls of the same program (compiled anew where the
            program key does not cover this JAX version).
        """
        traced = self._trace(fun, args, donate_argnums, keep=False)
        if traced.key is None:
            return traced.lowered.compile()
        with self._lock:  # solvers in threads: a hit must not race an eviction
            compiled = self._executables.get(traced.key)
            if compiled is not None:
                self._executables.move_to_end(traced.key)
        if compiled is None:
            compiled = traced.lowered.compile()
            self._keep(self._executables, traced.key, compiled)
        return compiled

    def memory_once(self, fun: Callable, *args: Any, donate_argnums: int | tuple[int, ...] = ()) -> dict[str, int]:
        """:func:`memory_of` the program ``compile_once(fun, *args, donate_argnums=...)`` compiles, from its shared
        executable where there is one, else from a compile under the backend's ``MEMORY_ONLY`` options (a full
        compile, kept as the shared executable, where it has none); the figures are kept by program, and the
        traced program for the ``compile_once`` of ``fun`` that follows. A program that another thread is
        measuring is measured once: this call waits for its figures.

        Args:
            fun: the function whose program is measured.
            *args: its arguments (arrays or shapes).
            donate_argnums: as :meth:`compile_once` takes them.

        Returns:
            The program's figures, as :func:`memory_of` gives them.
        """
        traced = self._trace(fun, args, donate_argnums, keep=True)
        if traced.key is None:
            return self._measure(traced)
        while True:
            with self._lock:
                compiled, figures = self._executables.get(traced.key), self._memory.get(traced.key)
                measuring = self._measuring.get(traced.key)
                if compiled is None and figures is None and measuring is None:
                    self._measuring[traced.key] = threading.Event()
            if compiled is not None:
                return memory_of(compiled)
            if figures is not None:
                return figures
            if measuring is None:
                break
            measuring.wait()  # then its figures are kept, or it failed and this call measures
        try:
            return self._measure(traced)
        finally:
            with self._lock:
                self._measuring.pop(traced.key).set()

    def _measure(self, traced: "Traced") -> dict[str, int]:
        """The figures of a compile of ``traced`` under the backend's ``MEMORY_ONLY`` options (or a full one, its
        executable kept), kept by program."""
        options = MEMORY_ONLY.get(jax.default_backend()) if self._memory_only else None
        compiled = None
        if options:
            try:
                compiled = traced.lowered.compile(options)
            except Exception as error:  # noqa: BLE001 - an XLA without one of the options: compile in full
                if "compile option" not in str(error):
                    raise
                log.warning("crux.executables: XLA refuses the options of a memory-only compile (%s); programs are "
                            "compiled in full to read their memory", error)
                self._memory_only = False
        if compiled is None:
            compiled = traced.lowered.compile()
            if traced.key is not None:
                self._keep(self._executables, traced.key, compiled)
        figures = memory_of(compiled)
        if traced.key is not None:
            self._keep(self._memory, traced.key, figures)
        return figures

    def _trace(self, fun: Callable, args: tuple, donate_argnums: int | tuple[int, ...], keep: bool) -> Traced:
        """``fun`` traced and lowered for ``args``, and its key: the program a ``memory_once`` of the same function
        and arguments traced (taken, unless ``keep``), else traced now (and kept for later, with ``keep``)."""
        signature = (donate_argnums, jax.tree.structure(args),
                     tuple((jax.typeof(leaf), getattr(leaf, "sharding", None)) for leaf in jax.tree.leaves(args)))
        with self._lock:
            found = self._traced.get(fun) if keep else self._traced.pop(fun, None)
        if found is not None and found[0] == signature:
            return found[1]
        traced = jax.jit(fun, donate_argnums=donate_argnums).trace(*args)
        key = None
        if self._sharing():
            placement = tuple(getattr(leaf, "sharding", None) for leaf in jax.tree.leaves(args))  # committed devices
            key = (program_key(traced.jaxpr), traced.in_tree, traced.out_tree, placement, donate_argnums,
                   jax.default_backend(),
                   tuple(sorted((name, repr(value)) for name, value in jax.config.values.items())))
        result = Traced(traced, key)
        if keep:
            with self._lock:
                self._traced[fun] = (signature, result)
        return result

    def _keep(self, table: OrderedDict, key: tuple, value: Any) -> None:
        with self._lock:
            table[key] = value
            table.move_to_end(key)
            while len(table) > CAPACITY:
                table.popitem(last=False)


def _fields(obj: Any) -> set[str]:
    """An object's attributes as stored: its slots and instance dict, without a leading underscore."""
    names = {slot for cls in type(obj).__mro__ for slot in getattr(cls, "__slots__", ())}
    names |= set(getattr(obj, "__dict__", {}))
    return {name.lstrip("_") for name in names - {"__weakref__", "__dict__"}}


SHARED = ExecutableTable()  # the process's table, which every solver uses
clear, set_aside, uncovered = SHARED.clear, SHARED.set_aside, SHARED.uncovered
compile_once, memory_once = SHARED.compile_once, SHARED.memory_once


def program_key(jaxpr: Any) -> tuple:
    """The key executables are shared by.

    Args:
        jaxpr: a (closed) jaxpr.

    Returns:
        A hashable value, equal for two jaxprs exactly when they compute the same thing.
    """
    return _Program().jaxpr(jaxpr)


class _Identity:
    """Compares by identity and holds the object, so its address cannot be reused by another."""

    __slots__ = ("obj",)

    def __init__(self, obj: Any):
        self.obj = obj

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Identity) and other.obj is self.obj

    def __hash__(self) -> int:
        return id(self.obj)


class _Program:
    """One walk over a program: variables are named by the order they are bound in."""

    def __init__(self):
        self.names: dict[Any, int] = {}

    def jaxpr(self, jaxpr: Any) -> tuple:
        consts = ()
        if isinstance(jaxpr, jex.ClosedJaxpr):
            consts, jaxpr = jaxpr.consts, jaxpr.jaxpr
        consts = tuple(consts) + tuple(getattr(jaxpr, "consts", ()))  # JAX >= 0.11: a Jaxpr holds its constants
        return ("jaxpr", tuple(map(_value, consts)),
                tuple(map(self.bind, jaxpr.constvars)), tuple(map(self.bind, jaxpr.invars)),
                tuple(map(self.equation, jaxpr.eqns)), tuple(map(self.use, jaxpr.outvars)),
                _param(jaxpr.effects, self), getattr(jaxpr, "is_high", False))

    def equation(self, eqn: Any) -> tuple:
        inputs = tuple(map(self.use, eqn.invars))
        params = eqn.params
        if eqn.primitive.name in LOWERED_FROM_CALL_JAXPR:
            params = {"call_jaxpr": params["call_jaxpr"]}
        params = _param(params, self)
        return (eqn.primitive, inputs, params, tuple(map(self.bind, eqn.outvars)), _param(eqn.ctx, self),
                _param(eqn.effects, self))

    def bind(self, var: Any) -> tuple:
        if isinstance(var, jex.DropVar):
            return ("dropped", var.aval)
        name = self.names[var] = len(self.names)
        qdd = (getattr(var, "initial_qdd", None), getattr(var, "final_qdd", None))
        return (name, var.aval, _param(qdd, self))

    def use(self, atom: Any) -> Any:
        if isinstance(atom, jex.Literal):
            return ("literal", _value(atom.val), atom.aval)
        name = self.names.get(atom)
        return _Identity(atom) if name is None else name  # not bound in this walk: only itself matches


# Parameter types that compare by their own equality and hold nothing to walk: most of a program's parameters,
# taken as they are before the checks below, which would come to the same.
OWN_EQUALITY = frozenset({int, float, str, bool, type(None)})


def _param(value: Any, program: _Program) -> Any:
    if type(value) in OWN_EQUALITY:
        return value
    if isinstance(value, (jex.Jaxpr, jex.ClosedJaxpr)):
        return program.jaxpr(value)
    if isinstance(value, (tuple, list)):
        return (type(value), tuple(_param(v, program) for v in value))
    if isinstance(value, dict):
        return (dict, tuple((k, _param(v, program)) for k, v in sorted(value.items(), key=lambda kv: repr(kv[0]))))
    if isinstance(value, (frozenset, set)):
        return (type(value), frozenset(_param(v, program) for v in value))
    if isinstance(value, (np.ndarray, np.generic, jax.Array)):
        return _value(value)
    try:
        hash(value)
    except TypeError:
        return _Identity(value)
    return value  # a parameter's own equality: what JAX's cache of one-operation executables relies on


def _value(array: Any) -> Any:
    """An array's exact contents, as a 256-bit digest so that a large captured array is not held twice; what
    has no contents (a typed PRNG key) compares by identity."""
    try:
        host = np.asarray(array)
    except TypeError:
        return _Identity(array)
    if host.dtype == object:
        return _Identity(array)
    return ("value", host.dtype.str, host.shape,
            hashlib.blake2b(np.ascontiguousarray(host).data, digest_size=32).digest())
