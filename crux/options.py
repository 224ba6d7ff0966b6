"""The options of ``solve()``: one frozen type, :class:`SolveOptions`, checked where it is built.

A SolveOptions is built from ``solve()``'s keyword arguments, by ``crux.SolveOptions(...)`` or from a
crux-run config (:func:`cruxlab.config.settings.solve_options`); every path refuses the same values with the
same message, naming the option as the Python argument and saying how to fix it. What depends on the
problem (its constraints' points, the devices JAX sees) is checked when a solver takes the options
(:func:`resolved`, what :meth:`crux.Crux.resolve` and ``solve()`` apply), still before anything is traced or
compiled. A refusal that names options is an :class:`OptionError`, which says itself again in another
caller's terms (crux-run's ``solver.inner_steps=3``), so that no caller restates a rule to word its message.
"""
from __future__ import annotations

import ast
import dataclasses
import difflib
import logging
import math
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import numpy as np

from crux import precision as matmul

log = logging.getLogger("crux")

Substeps = tuple[tuple[tuple[int, ...], int], ...]  # ((constraint indices, updates), ...)


class OptionError(ValueError):
    """Options no solve() could run, in words that name each option as a Python argument (``inner_steps=3``),
    and can name them otherwise (:meth:`spelt`): a command line's ``solver.inner_steps=3``.

    Args:
        template: the message, a :meth:`str.format` template in which ``{name}`` is option ``name`` at its value
            (``inner_steps=3``), ``{name:name}`` the option's name alone and ``{name:LITERAL}`` the option at
            another value, a Python literal (``{offload_data:False}``); any other field is a figure of the
            message (``{largest}``).
        **values: each option's value and each figure the template names.
    """

    def __init__(self, template: str, **values: Any):
        self.template, self.values = template, values
        super().__init__(self.spelt(str, repr))

    def spelt(self, name: Callable[[str], str], literal: Callable[[Any], str]) -> str:
        """The message with each option named ``name(option)`` and each of its values written ``literal(value)``.

        Args:
            name: an option's name (``"inner_steps"``) to the caller's (``"solver.inner_steps"``).
            literal: a value (``True``, ``None``, ``3``) as the caller writes it (``true``, ``null``, ``3``).

        Returns:
            The message in the caller's terms; ``str(error)`` is ``error.spelt(str, repr)``.
        """
        options = {f.name for f in dataclasses.fields(SolveOptions)}
        return self.template.format_map({key: _Spelt(key, value, name, literal) if key in options else value
                                         for key, value in self.values.items()})

    def __reduce__(self) -> tuple:
        return _option_error, (self.template, self.values)


def _option_error(template: str, values: dict[str, Any]) -> OptionError:
    return OptionError(template, **values)


@dataclass(frozen=True)
class _Spelt:
    """One option of an :class:`OptionError`'s template, written as its ``spelt`` asks (see there)."""

    option: str
    value: Any
    name: Callable[[str], str]
    literal: Callable[[Any], str]

    def __format__(self, spec: str) -> str:
        if spec == "name":
            return self.name(self.option)
        return f"{self.name(self.option)}={self.literal(ast.literal_eval(spec) if spec else self.value)}"


@dataclass(frozen=True)
class SolveOptions:
    """The options of one ``solve()`` call, checked and normalised when built: integers as ``int``, ``precision``
    one of crux's names (:mod:`crux.precision`), ``substeps`` as ``((constraint indices, updates), ...)``, so
    that equal requests compare equal however they were spelt. Frozen and hashable:
    ``dataclasses.replace(options, batchsize=16)`` makes another, checked again. What depends on a solver's
    constraints and devices is checked when it takes them (:meth:`crux.Crux.resolve`).

    Args:
        epochs: the epochs to train, each one update of every reached model on every constraint (with
            ``substeps``, one pass over the entries).
        batchsize: points per constraint and micro-batch, drawn afresh for each update from a keyed permutation
            of each constraint's points (a constraint of fewer points takes all of them); None: every point.
        accumulation_steps: micro-batches of ``batchsize`` per update, run one after another in the compiled
            update, their gradients averaged: the points of one batch of ``accumulation_steps * batchsize``.
        checkpoint_gradients: rematerialise activations in the backward pass, in the form of :mod:`crux.remat`
            that needs the least memory (never more than the plain update); the same numbers.
        offload_data: keep the points on the host and stream each call's batches to the device; needs a
            ``batchsize`` smaller than the largest constraint. The same numbers.
        inner_steps: epochs per compiled call (a divisor of ``epochs``), so Python dispatches ``epochs /
            inner_steps`` times; the same numbers.
        substeps: entries ``[i, j]`` or ``([i, j], n)`` run in order each epoch, each updating only the models
            its constraints reach with an optimizer state of its own, ``n`` times; not with
            ``accumulation_steps > 1`` or ``inner_steps > 1``.
        devices: split each update's micro-batches over the first ``devices`` devices (each takes
            ``accumulation_steps`` micro-batches of ``batchsize``; the gradients are averaged over all of them),
            parameters and optimizer states whole on each.
        precision: the float32 matrix-product precision of the compiled update: ``"highest"`` (full float32),
            ``"high"`` or ``"default"`` (the device's fastest: one bfloat16 pass on a TPU; see
            :mod:`crux.precision`).

    Raises:
        TypeError: a value of the wrong type (``True`` is not an integer, ``"False"`` not a flag).
        ValueError: a value no solve() could use, naming the option and the fix (an :class:`OptionError` where
            it is about several options).
    """

    epochs: int
    batchsize: int | None = None
    accumulation_steps: int = 1
    checkpoint_gradients: bool = False
    offload_data: bool = False
    inner_steps: int = 1
    substeps: Substeps | None = None
    devices: int = 1
    precision: str = matmul.CRUX_PRECISION

    def __post_init__(self) -> None:
        epochs = _integer("epochs", self.epochs, "pass the number of epochs to train, e.g. solve(epochs=1000)")
        precision = matmul.checked(self.precision)
        checkpoint_gradients = _flag("checkpoint_gradients", self.checkpoint_gradients)
        offload_data = _flag("offload_data", self.offload_data)
        batchsize = self.batchsize
        if batchsize is not None:
            batchsize = _integer("batchsize", batchsize, "pass a positive batch size, or None for full batch")
        accumulation_steps = _integer("accumulation_steps", self.accumulation_steps,
                                      "use 1 for no accumulation, or N > 1 micro-batches per update")
        inner_steps = _integer("inner_steps", self.inner_steps, "use 1, or a divisor of epochs")
        devices = _integer("devices", self.devices,
                           "use 1, or the number of devices to split each update's batch over")
        if epochs % inner_steps:
            raise OptionError("{inner_steps} must divide {epochs}; choose one of {divisors}", inner_steps=inner_steps,
                              epochs=epochs, divisors=divisors(epochs))
        if offload_data and batchsize is None:
            raise OptionError("{offload_data} streams mini-batches, so it needs a {batchsize:name} smaller than the "
                              "largest constraint's points; got {batchsize}. Set one, or {offload_data:False}",
                              offload_data=offload_data, batchsize=batchsize)
        substeps = self.substeps
        if substeps is not None:
            if accumulation_steps > 1 or inner_steps > 1:
                raise OptionError("{substeps:name} makes each substep an update of its own, so {accumulation_steps} "
                                  "and {inner_steps} must both be 1", substeps=substeps,
                                  accumulation_steps=accumulation_steps, inner_steps=inner_steps)
            substeps = _substeps(substeps)
        for name, value in (("epochs", epochs), ("batchsize", batchsize), ("accumulation_steps", accumulation_steps),
                            ("checkpoint_gradients", checkpoint_gradients), ("offload_data", offload_data),
                            ("inner_steps", inner_steps), ("substeps", substeps), ("devices", devices),
                            ("precision", precision)):
            object.__setattr__(self, name, value)

    def keywords(self) -> dict[str, Any]:
        """Every option but ``epochs``, by name, for what passes the options on as keyword arguments.

        Returns:
            ``{name: value}``: ``solve(epochs, **options.keywords())`` is ``solve(epochs, options)``.
        """
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "epochs"}


def requested(epochs: Any = None, options: SolveOptions | None = None, keywords: dict[str, Any] | None = None,
              call: str = "solve") -> SolveOptions:
    """The options ``call(epochs, options, **keywords)`` asks for, before the solver resolves them (:func:`resolved`).

    Args:
        epochs: the epochs, in place of ``options.epochs`` (None: as ``options`` has them).
        options: the options given (None: the defaults).
        keywords: fields of :class:`SolveOptions`, each in place of its field of ``options``.
        call: the method asking (``solve``, ``resolve``), named in the messages.

    Returns:
        ``options`` with ``epochs`` and each keyword in its place.

    Raises:
        TypeError: an unknown keyword, an ``options`` that is not a :class:`SolveOptions`, or as
            :class:`SolveOptions` raises for a value.
        ValueError: as :class:`SolveOptions` raises for a value.
    """
    keywords = dict(keywords or {})
    names = [f.name for f in dataclasses.fields(SolveOptions)]
    for key in keywords:
        if key not in names:
            close = difflib.get_close_matches(key, names, n=1)
            hint = f"did you mean {close[0]}?" if close else f"its options are {', '.join(names)}"
            raise TypeError(f"{call}() has no option {key!r}; {hint}")
    if epochs is not None:
        keywords["epochs"] = epochs
    if options is None:
        return SolveOptions(**{"epochs": None, **keywords})
    if not isinstance(options, SolveOptions):
        raise TypeError(f"{call}(epochs, options): options must be a crux.SolveOptions, got {options!r}; pass the "
                        f"other options by name ({call}(epochs, batchsize=8)) or as crux.SolveOptions(...)")
    return dataclasses.replace(options, **keywords)


def one_call(options: SolveOptions | None, keywords: dict[str, Any], call: str) -> SolveOptions:
    """The options of one compiled call of ``solve()``: its epochs are the call's ``inner_steps``.

    Args:
        options: the options given (None: the defaults).
        keywords: fields of :class:`SolveOptions`, each in place of its field of ``options``.
        call: the method asking, named in the messages.

    Returns:
        The options, as :func:`requested` gives them, ``epochs`` set to ``inner_steps``.

    Raises:
        TypeError, ValueError: as :func:`requested` raises them.
    """
    inner_steps = keywords.get("inner_steps", 1 if options is None else options.inner_steps)
    return requested(inner_steps, options, keywords, call)


def resolved(options: SolveOptions, sizes: Sequence[int], available_devices: int) -> SolveOptions:
    """``options`` as a solver of constraints of ``sizes`` points runs them on ``available_devices`` devices: what
    :meth:`crux.Crux.resolve` returns and ``solve()`` runs.

    Two requests run otherwise than asked, each the same training as the request. A ``batchsize`` above every
    constraint's points is the largest constraint's (every micro-batch takes every point either way).
    ``accumulation_steps`` with ``batchsize=None``, or with a batch size at least every constraint's points, is
    not an error: every update already sees every point (each micro-batch would repeat the whole set), so it
    is logged and taken as 1: one update of the whole set, the gradient the micro-batches would average.

    Args:
        options: the options asked for.
        sizes: the points of each constraint, in the solver's order.
        available_devices: the devices JAX sees.

    Returns:
        The options the solver runs.

    Raises:
        OptionError: more ``devices`` than JAX sees, ``offload_data`` with a batch size of every point, a
            ``substeps`` entry naming a constraint the solver does not have.
    """
    batchsize, devices = options.batchsize, options.devices
    if devices > available_devices:
        raise OptionError("{devices}, but JAX sees {available} device(s) (jax.devices()); use {devices:{available}} "
                          "or fewer. On a CPU, XLA_FLAGS=--xla_force_host_platform_device_count={wanted} (set before "
                          "JAX starts) makes {wanted} host devices", devices=devices, available=available_devices,
                          wanted=devices)
    largest = max(sizes)
    if options.offload_data and batchsize >= largest:
        raise OptionError("{offload_data} streams mini-batches, so it needs a {batchsize:name} smaller than the "
                          "largest constraint ({largest} points); got {batchsize}. Pass a smaller {batchsize:name} or "
                          "set {offload_data:False}", offload_data=True, batchsize=batchsize, largest=largest)
    for k, (entry, _) in enumerate(options.substeps or ()):
        for i in entry:
            if not 0 <= i < len(sizes):
                raise OptionError("{substeps:name}[{k}] names constraint {index}, but indices run from 0 to {last} "
                                  "(the order of the constraints given to crux.Crux)", substeps=options.substeps, k=k,
                                  index=i, last=len(sizes) - 1)
    applied = options
    if batchsize is not None and batchsize > largest:  # the stream of a batch of every point, as asked
        applied = dataclasses.replace(applied, batchsize=largest)
    unused = unused_accumulation(options, largest)
    if unused is not None:
        log.warning("%s; one update of the whole set runs (accumulation_steps=1)", unused)
        applied = dataclasses.replace(applied, accumulation_steps=1)
    return applied


def unused_accumulation(options: SolveOptions, largest: int | None = None) -> OptionError | None:
    """Why ``accumulation_steps`` has nothing to accumulate under ``options``, or None where its micro-batches split
    a batch: the one rule for it. ``solve()`` follows it by warning and taking ``accumulation_steps=1``
    (:func:`resolved`), the same training as asked; a caller that would rather refuse such a request (a sweep, whose
    job would ask for nothing) raises or words what this returns (:meth:`OptionError.spelt`).

    Args:
        options: the options asked for.
        largest: the largest constraint's points, where known: a batch size at least that is every point too.

    Returns:
        The reason, in the options' words, or None.
    """
    if options.accumulation_steps == 1:
        return None
    if options.batchsize is None:
        return OptionError("{accumulation_steps} ignored: with {batchsize} every update already sees every point, "
                           "so there is nothing to accumulate (set a {batchsize:name} below the largest "
                           "constraint's points, or {accumulation_steps:1})",
                           accumulation_steps=options.accumulation_steps, batchsize=None)
    if largest is not None and options.batchsize >= largest:
        return OptionError("{accumulation_steps} ignored: {batchsize} is at least every constraint's points (the "
                           "largest has {largest}), so each micro-batch would be the whole set again",
                           accumulation_steps=options.accumulation_steps, batchsize=options.batchsize,
                           largest=largest)
    return None


def divisors(epochs: int) -> list[int]:
    """The values of ``inner_steps`` a run of ``epochs`` epochs can take.

    Args:
        epochs: a positive number of epochs.

    Returns:
        The divisors of ``epochs``, ascending.
    """
    small = [k for k in range(1, math.isqrt(epochs) + 1) if epochs % k == 0]
    return small + [epochs // k for k in reversed(small) if k * k != epochs]


def _flag(name: str, value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}; pass {name}=True or {name}=False")
    return bool(value)


def _integer(name: str, value: Any, fix: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r}; {fix}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}; {fix}")
    return int(value)


def _substeps(substeps: Any) -> Substeps:
    """``[[i, j], ([k], n), ...]`` -> ``(((i, j), 1), ((k,), n), ...)``, every entry and index checked but for
    the range of the indices, which the solver's constraints set (:func:`resolved`)."""
    if not isinstance(substeps, (list, tuple)) or not substeps:
        raise OptionError("{substeps:name} must be a non-empty list of entries like [0, 1] or ([0], 2), got "
                          "{substeps}", substeps=substeps)
    entries = []
    for k, entry in enumerate(substeps):
        steps = 1
        if isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], (list, tuple)):
            # ([indices], n); a list pair too, as YAML and JSON write it: an index is never a list
            entry, steps = entry
            steps = _integer(f"substeps[{k}] step count", steps, "write the entry as ([indices], n) with n >= 1")
        if not isinstance(entry, (list, tuple)) or not entry:
            raise OptionError("{substeps:name}[{k}] is {entry!r}: each entry needs at least one constraint index, "
                              "e.g. [0] or ([0, 1], 2)", substeps=substeps, k=k, entry=entry)
        for i in entry:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise OptionError("{substeps:name}[{k}] names constraint {index!r}, but a constraint is named by its "
                                  "index, 0 for the first given to crux.Crux", substeps=substeps, k=k, index=i)
        if len(set(entry)) != len(entry):
            raise OptionError("{substeps:name}[{k}] repeats a constraint index: {entry}", substeps=substeps, k=k,
                              entry=list(entry))
        entries.append((tuple(int(i) for i in entry), steps))
    return tuple(entries)
