"""The options of one ``solve()`` call, checked before anything is traced or compiled.

Every refusal names the option as the caller typed it and says how to fix it.
"""
from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from crux import precision as matmul

log = logging.getLogger("crux")

SubstepPlan = tuple[tuple[tuple[int, ...], int], ...]  # ((constraint indices, updates), ...)


@dataclass(frozen=True)
class Options:
    """The validated options of one solve() call (see :meth:`crux.Crux.solve` for their meaning)."""

    epochs: int
    batchsize: int | None
    checkpoint_gradients: bool
    offload_data: bool
    accumulation_steps: int
    inner_steps: int
    substeps: SubstepPlan | None
    devices: int = 1
    precision: str = matmul.DEFAULT


def validate(sizes: Sequence[int], epochs: Any, batchsize: Any = None, checkpoint_gradients: Any = False,
             offload_data: Any = False, accumulation_steps: Any = 1, inner_steps: Any = 1,
             substeps: Any = None, devices: Any = 1, available_devices: int = 1,
             precision: Any = matmul.DEFAULT) -> Options:
    """The options of ``solve()`` for constraints of ``sizes`` points, or TypeError/ValueError naming the fix.

    ``accumulation_steps`` with ``batchsize=None``, or with a batch size at least every constraint's points, is
    not an error: every update already sees every point (each micro-batch would repeat the whole set), so it
    is logged and taken as 1: one update of the whole set, the gradient the micro-batches would average. ``available_devices``: how many devices ``devices`` may use.
    """
    epochs = _integer("epochs", epochs, "pass the number of epochs to train, e.g. solve(epochs=1000)")
    precision = matmul.checked(precision)
    checkpoint_gradients = _flag("checkpoint_gradients", checkpoint_gradients)
    offload_data = _flag("offload_data", offload_data)
    if batchsize is not None:
        batchsize = _integer("batchsize", batchsize, "pass a positive batch size, or None for full batch")
    accumulation_steps = _integer("accumulation_steps", accumulation_steps,
                                  "use 1 for no accumulation, or N > 1 micro-batches per update")
    inner_steps = _integer("inner_steps", inner_steps, "use 1, or a divisor of epochs")
    devices = _integer("devices", devices, "use 1, or the number of devices to split each update's batch over")
    if devices > available_devices:
        raise ValueError(f"devices={devices}, but JAX sees {available_devices} device(s) (jax.devices()); pass "
                         f"devices={available_devices} or fewer. On a CPU, XLA_FLAGS="
                         f"--xla_force_host_platform_device_count={devices} (set before JAX starts) makes "
                         f"{devices} host devices")
    if epochs % inner_steps:
        raise ValueError(f"inner_steps={inner_steps} must divide epochs={epochs}; choose one of {divisors(epochs)}")
    if offload_data:
        largest = max(sizes)
        if batchsize is None or batchsize >= largest:
            raise ValueError(f"offload_data=True streams mini-batches, so it needs batchsize smaller than the "
                             f"largest constraint ({largest} points); got batchsize={batchsize}. Pass a "
                             f"smaller batchsize or set offload_data=False")
    plan = None
    if substeps is not None:
        if accumulation_steps > 1 or inner_steps > 1:
            raise ValueError("substeps cannot be combined with accumulation_steps > 1 or inner_steps > 1 "
                             "(each substep is its own update); set both to 1")
        plan = _substep_plan(substeps, len(sizes))
    if batchsize is None and accumulation_steps > 1:
        log.warning("accumulation_steps=%d ignored: with batchsize=None every update already sees all points, "
                    "so there is nothing to accumulate; using 1", accumulation_steps)
        accumulation_steps = 1
    if batchsize is not None and batchsize >= max(sizes) and accumulation_steps > 1:
        log.warning("accumulation_steps=%d ignored: batchsize=%d is at least every constraint's points (the "
                    "largest has %d), so each micro-batch would be the whole set again; one update of the whole "
                    "set runs (accumulation_steps=1)", accumulation_steps, batchsize, max(sizes))
        accumulation_steps = 1
    return Options(epochs, batchsize, checkpoint_gradients, offload_data, accumulation_steps, inner_steps, plan,
                   devices, precision)


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


def _substep_plan(substeps: Any, n_constraints: int) -> SubstepPlan:
    """``[[i, j], ([k], n), ...]`` -> ``(((i, j), 1), ((k,), n), ...)``, with every index checked."""
    if not isinstance(substeps, (list, tuple)) or not substeps:
        raise ValueError(f"substeps must be a non-empty list of entries like [0, 1] or ([0], 2), got {substeps!r}")
    plan = []
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
            if isinstance(i, bool) or not isinstance(i, (int, np.integer)) or not 0 <= i < n_constraints:
                raise ValueError(f"substeps[{k}] names constraint {i!r}, but indices run from 0 to "
                                 f"{n_constraints - 1} (the order of the constraints given to crux.Crux)")
        if len(set(entry)) != len(entry):
            raise ValueError(f"substeps[{k}] repeats a constraint index: {list(entry)}")
        plan.append((tuple(int(i) for i in entry), steps))
    return tuple(plan)
