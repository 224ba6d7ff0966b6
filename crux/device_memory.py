"""The device memory a solve's update needs: what crux records as ``memory["peak_bytes"]``.

A device's ``peak_bytes_in_use`` is the process's high-water mark: it counts what was on the device before the
solve (another solver's points, earlier jobs' buffers) and stays at an earlier, larger solve's peak. The
update's own peak is the larger of what its compiled program needs (XLA's memory analysis: temporaries,
arguments, outputs) and how far the device's high-water mark rose above the bytes in use before it, where the
mark rose during the solve. Backends without ``memory_stats()`` (the CPU) give the compiled figure alone.
"""
from __future__ import annotations

import contextlib
import contextvars
import os
import re
from dataclasses import dataclass
from typing import Iterator, Mapping

import jax

COMPILED = ("temp_bytes", "argument_bytes", "output_bytes")  # the compiled program's figures that make its peak
REFUSED = "RESOURCE_EXHAUSTED"  # how XLA says a program or a buffer does not fit the device
# How XLA's refusal names what the program needed: "the total memory required for HLO temporaries (32.02G)", the
# figure in binary units (the same message gives a v5e's 16,909,336,064 bytes as "15.75G"); and how the runtime
# names a buffer it could not place (arguments sent to the device): "Attempting to allocate 16.00G".
_REQUIRED = re.compile(r"(?:required for [^(]*\(|Attempting to allocate )(\d+(?:\.\d+)?)([KMGT]?)\b")
_UNITS = {"": 1, "K": 2 ** 10, "M": 2 ** 20, "G": 2 ** 30, "T": 2 ** 40}
_HELD_TO: contextvars.ContextVar[int | None] = contextvars.ContextVar("crux_held_to", default=None)


@dataclass(frozen=True)
class Before:
    """The device's bytes in use and high-water mark before the update ran (None where it does not say)."""

    in_use: int | None
    high_water: int | None


def _stats(device: jax.Device) -> dict | None:
    try:
        return device.memory_stats()
    except Exception:  # a backend that does not implement it
        return None


def before(device: jax.Device) -> Before:
    """What ``device`` holds now, to be read before the update runs.

    Args:
        device: a JAX device.

    Returns:
        Its bytes in use and high-water mark, each None where the backend does not say (a CPU).
    """
    stats = _stats(device) or {}
    return Before(stats.get("bytes_in_use"), stats.get("peak_bytes_in_use"))


def limit(device: jax.Device) -> int | None:
    """The bytes ``device`` lets programs use.

    Args:
        device: a JAX device.

    Returns:
        The limit, None where the device does not say (a CPU).
    """
    value = (_stats(device) or {}).get("bytes_limit")
    return int(value) if value else None


@contextlib.contextmanager
def held_to(budget: int) -> Iterator[None]:
    """Programs compiled meanwhile (in this thread) held to ``budget`` bytes, below the device's own memory: a
    budget declared where the device reports none or a search fits within less (:mod:`cruxlab.capacity_search`).

    Args:
        budget: the bytes a program may need.
    """
    token = _HELD_TO.set(int(budget))
    try:
        yield
    finally:
        _HELD_TO.reset(token)


def capacity(device: jax.Device) -> int | None:
    """The bytes a program on ``device`` has: the device's limit (:func:`limit`), or on a device that reports none (a
    CPU, whose programs live in the host's memory) the host's physical memory; the budget of an enclosing
    :func:`held_to` where it is less.

    Args:
        device: a JAX device.

    Returns:
        The bytes, None where neither the device nor the host says.
    """
    own = limit(device)
    if own is None:
        try:
            own = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (AttributeError, ValueError, OSError):  # a host that does not say (no sysconf names)
            own = None
    known = [figure for figure in (own, _HELD_TO.get()) if figure is not None]
    return min(known) if known else None


def compiled_bytes(memory: Mapping[str, int]) -> int | None:
    """The compiled update's bytes: temporaries, arguments and outputs.

    Args:
        memory: the update's memory analysis, by figure (:func:`crux.executables.memory_of`).

    Returns:
        Their sum, None where a figure is missing (a backend without the analysis).
    """
    return sum(int(memory[key]) for key in COMPILED) if all(key in memory for key in COMPILED) else None


def update_peak(memory: Mapping[str, int], start: Before, device: jax.Device) -> int | None:
    """The update's own peak on ``device``: the larger of its compiled bytes and the rise of the device's
    high-water mark over the bytes in use at ``start``, where the mark rose since then.

    Args:
        memory: the update's memory analysis, by figure.
        start: what :func:`before` read before the update ran.
        device: the device it ran on.

    Returns:
        The peak in bytes, None where neither figure is known.
    """
    candidates = [compiled_bytes(memory)]
    high_water = (_stats(device) or {}).get("peak_bytes_in_use")
    if high_water is not None and start.in_use is not None and high_water > (start.high_water or 0):
        candidates.append(int(high_water) - int(start.in_use))
    known = [c for c in candidates if c is not None]
    return max(known) if known else None


def refusal(error: BaseException) -> str | None:
    """XLA's out-of-memory message, told by the status :data:`REFUSED` in its text (XLA's error type differs
    between versions, its status code does not).

    Args:
        error: an error a compile or a call raised.

    Returns:
        The message's first line (at most 300 characters) where ``error`` is an out-of-memory one, else None.
    """
    text = str(error)
    return text.strip().splitlines()[0][:300] if REFUSED in text else None


def refused_bytes(message: str) -> int | None:
    """The bytes XLA's refusal says the program needed.

    Args:
        message: XLA's out-of-memory message (:func:`refusal`).

    Returns:
        The bytes, to the two decimals of the message's unit; None where it names none.
    """
    match = _REQUIRED.search(message)
    return round(float(match.group(1)) * _UNITS[match.group(2)]) if match else None
