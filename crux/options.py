"""The options of ``solve()``: one frozen type, :class:`SolveOptions`, checked where it is built.

A SolveOptions is built from ``solve()``'s keyword arguments, by ``crux.SolveOptions(...)`` or from a
crux-run config (:func:`cruxlab.config.settings.solve_options`); every path refuses the same values with the
same message, naming the option as the Python argument and saying how to fix it. What depends on the
problem (its constraints' points, the devices JAX sees) is checked when a solver takes the options
(:func:`resolved`), still before anything is traced or compiled.
"""
from __future__ import annotations

import dataclasses
import difflib
import logging
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from crux import precision as matmul

log = logging.getLogger("crux")

Substeps = tuple[tuple[tuple[int, ...], int], ...]  # ((constraint indices, updates), ...)


@dataclass(frozen=True)
class SolveOptions:
    """The options of one ``solve()`` call (see :meth:`crux.Crux.solve` for their meaning), checked and
    normalised when built: integers as ``int``, ``precision`` one of crux's names (:mod:`crux.precision`),
    ``substeps`` as ``((constraint indices, updates), ...)``, so that equal requests compare equal however they
    were spelt.

    Raises TypeError/ValueError naming the option and the fix for a value no solve() could use.
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
            raise ValueError(f"inner_steps={inner_steps} must divide epochs={epochs}; choose one of "
                             f"{divisors(epochs)}")
        substeps = self.substeps
        if substeps is not None:
            if accumulation_steps > 1 or inner_steps > 1:
                raise ValueError("substeps cannot be combined with accumulation_steps > 1 or inner_steps > 1 "
                                 "(each substep is its own update); set both to 1")
            substeps = _substeps(substeps)
        for name, value in (("epochs", epochs), ("batchsize", batchsize), ("accumulation_steps", accumulation_steps),
                            ("checkpoint_gradients", checkpoint_gradients), ("offload_data", offload_data),
                            ("inner_steps", inner_steps), ("substeps", substeps), ("devices", devices),
                            ("precision", precision)):
            object.__setattr__(self, name, value)

    def keywords(self) -> dict[str, Any]:
        """Every option but ``epochs``, by name: ``solve(epochs, **options.keywords())`` is ``solve(epochs,
        options)``, for what passes the options on as keyword arguments."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "epochs"}


def requested(epochs: Any = None, options: SolveOptions | None = None, keywords: dict[str, Any] | None = None,
              call: str = "solve") -> SolveOptions:
    """The options ``call(epochs, options, **keywords)`` asks for: ``options`` (None: the defaults) with ``epochs``
    (where given) and each keyword in its place. Raises TypeError for an unknown keyword or an ``options`` that
    is not a SolveOptions, and as :class:`SolveOptions` does."""
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
    """The options of one compiled call of ``solve()`` (``call``: the method asking), taken as :func:`requested`
    takes them, ``epochs`` the call's ``inner_steps``."""
    inner_steps = keywords.get("inner_steps", 1 if options is None else options.inner_steps)
    return requested(inner_steps, options, keywords, call)


def resolved(options: SolveOptions, sizes: Sequence[int], available_devices: int) -> SolveOptions:
    """``options`` as a solver of constraints of ``sizes`` points runs them on ``available_devices`` devices, or
    ValueError naming the fix.

    ``accumulation_steps`` with ``batchsize=None``, or with a batch size at least every constraint's points, is
    not an error: every update already sees every point (each micro-batch would repeat the whole set), so it
    is logged and taken as 1: one update of the whole set, the gradient the micro-batches would average.
    """
    batchsize, accumulation_steps, devices = options.batchsize, options.accumulation_steps, options.devices
    if devices > available_devices:
        raise ValueError(f"devices={devices}, but JAX sees {available_devices} device(s) (jax.devices()); pass "
                         f"devices={available_devices} or fewer. On a CPU, XLA_FLAGS="
                         f"--xla_force_host_platform_device_count={devices} (set before JAX starts) makes "
                         f"{devices} host devices")
    largest = max(sizes)
    if options.offload_data and (batchsize is None or batchsize >= largest):
        raise ValueError(f"offload_data=True streams mini-batches, so it needs batchsize smaller than the "
                         f"largest constraint ({largest} points); got batchsize={batchsize}. Pass a "
                         f"smaller batchsize or set offload_data=False")
    for k, (entry, _) in enumerate(options.substeps or ()):
        for i in entry:
            if not 0 <= i < len(sizes):
                raise ValueError(f"substeps[{k}] names constraint {i!r}, but indices run from 0 to "
                                 f"{len(sizes) - 1} (the order of the constraints given to crux.Crux)")
    if batchsize is None and accumulation_steps > 1:
        log.warning("accumulation_steps=%d ignored: with batchsize=None every update already sees all points, "
                    "so there is nothing to accumulate; using 1", accumulation_steps)
        return dataclasses.replace(options, accumulation_steps=1)
    if batchsize is not None and batchsize >= largest and accumulation_steps > 1:
        log.warning("accumulation_steps=%d ignored: batchsize=%d is at least every constraint's points (the "
                    "largest has %d), so each micro-batch would be the whole set again; one update of the whole "
                    "set runs (accumulation_steps=1)", accumulation_steps, batchsize, largest)
        return dataclasses.replace(options, accumulation_steps=1)
    return options


def divisors(epochs: int) -> list[int]:
    """The values of ``inner_steps`` that divide ``epochs``, in order."""
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
        raise ValueError(f"substeps must be a non-empty list of entries like [0, 1] or ([0], 2), got {substeps!r}")
    entries = []
    for k, entry in enumerate(substeps):
        steps = 1
        if isinstance(entry, (list, tuple)) and len(entry) == 2 and isinstance(entry[0], (list, tuple)):
            # ([indices], n); a list pair too, as YAML and JSON write it: an index is never a list
            entry, steps = entry
            steps = _integer(f"substeps[{k}] step count", steps, "write the entry as ([indices], n) with n >= 1")
        if not isinstance(entry, (list, tuple)) or not entry:
            raise ValueError(f"substeps[{k}] is {entry!r}: each entry needs at least one constraint index, "
                             f"e.g. [0] or ([0, 1], 2)")
        for i in entry:
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)):
                raise ValueError(f"substeps[{k}] names constraint {i!r}, but a constraint is named by its index, "
                                 f"0 for the first given to crux.Crux")
        if len(set(entry)) != len(entry):
            raise ValueError(f"substeps[{k}] repeats a constraint index: {list(entry)}")
        entries.append((tuple(int(i) for i in entry), steps))
    return tuple(entries)
