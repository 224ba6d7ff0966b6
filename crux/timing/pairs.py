"""Interleaved pairs: how much longer one setting of solve() takes per epoch than another, measured in one
process.

Two solvers of the same problem (the *candidate* setting and the *reference* it is compared with) train in
alternating chunks of the same number of epochs, the order flipped every pair (A B, B A, A B, ...), so
neither always runs first and a load on the machine that drifts over seconds hits both sides of a pair
alike. The pairs' ratios are summarised by :func:`crux.timing.interval.ratio_interval`; a chunk's seconds are
on the clock of :mod:`crux.timing.machine`.

A program's speed also depends on the build it was given: two builds of the same problem and options in one
process, each with its own buffers, can differ by several percent for as long as they live, so the chunks of
one build measure that build. The timing can rotate its pairs through several builds of each
side (pair i on build i mod B); the interval then resamples the builds with replacement and then the pairs of
each drawn build, so that it holds how much the ratio moves between builds, not only between chunks.

The run is sequential: it looks at the interval after ``FIRST_LOOK`` pairs per build and then each time the
count has doubled, and stops as soon as the interval lies wholly inside the band it is held to or wholly
outside it, or before a pair that would take it past its time budget, once it has a pair of every build and two
at least (then the pairs so far are what it has: fewer than a first look's decide nothing in the report). The budget counts every
second from the start (finding the chunk length and warming the builds up included) but the compiling its
solves report, which is the cost of the programs, not of the timing: a timing spends at most its budget and a
pair's noise, more only where its warm-up and those first pairs take longer.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Mapping, Protocol, Sequence

import numpy as np

from crux.stats import Statistics
from crux.timing.interval import UNDECIDED, Band, RatioInterval, ratio_interval
from crux.timing.machine import CPU_TIME, WALL_TIME, Machine, clock_here, load_average

FIRST_LOOK = 8  # pairs before the first look: fewer give a bootstrap interval of a handful of distinct medians
MIN_CHUNK_SECONDS = 0.1  # each chunk runs at least this long, so that the timer's and one dispatch's jitter is small
MAX_GROWTH = 1024  # the most one look of the calibration multiplies the chunk length by (a chunk timed at ~0 s)
CHUNKS_IN_BUDGET = 4  # a chunk of the slower side takes at most a quarter of the budget: the last look and the
# two pairs a ratio needs at least fit in it with the warm-up


def in_turn(pair: int) -> tuple[int, int]:
    """The order the two sides run in, flipped every pair so that neither side always runs first.

    Args:
        pair: the pair's index, from 0.

    Returns:
        ``(0, 1)`` for an even pair, ``(1, 0)`` for an odd one (0: the candidate, 1: the reference).
    """
    return (0, 1) if pair % 2 == 0 else (1, 0)


class Stopwatch:
    """Seconds since it was made, less the compiling that the solves it was given reported."""

    def __init__(self):
        self.started, self.compile_seconds = perf_counter(), 0.0

    def spent(self) -> float:
        """Seconds since it was made, less the compiling it was given."""
        return perf_counter() - self.started - self.compile_seconds


class Trainable(Protocol):
    """What a side of a timing trains: a solver (``crux.Crux``) or anything with its ``solve``."""

    def solve(self, epochs: int, **options: Any) -> Statistics: ...


@dataclass(frozen=True)
class Side:
    """One setting to time: a solver and the solve() options it trains with."""

    solver: Trainable
    options: Mapping[str, Any] = field(default_factory=dict)

    @property
    def inner_steps(self) -> int:
        """The updates a call of this side fuses (its ``inner_steps`` option, 1 without it)."""
        return int(self.options.get("inner_steps", 1))

    def chunk(self, epochs: int, clock: str = WALL_TIME, watch: Stopwatch | None = None) -> float:
        """Train ``epochs`` epochs and time them.

        Args:
            epochs: the chunk's epochs, a multiple of :attr:`inner_steps`.
            clock: :data:`~crux.timing.machine.WALL_TIME` or :data:`~crux.timing.machine.CPU_TIME`.
            watch: the timing's stopwatch, which the solve's compiling goes to (None: none).

        Returns:
            Seconds per epoch on ``clock``: the solve loop's time, its planning and compiling left out.
        """
        stats = self.solver.solve(epochs, **self.options)
        if watch is not None:
            watch.compile_seconds += float(getattr(stats, "compile_seconds", 0.0))
        return (stats.run_cpu_seconds if clock == CPU_TIME else stats.run_seconds) / epochs


@dataclass(frozen=True)
class PairedTimes:
    """Seconds per epoch of each chunk of the two sides on ``clock`` (pair i is ``candidate[i]``,
    ``reference[i]``, timed on build ``build[i]`` of each side), the chunk length in epochs, the load average
    after each pair, the budget, the (wall-clock) seconds the timing spent against it and the seconds its solves
    spent compiling, which it does not count."""

    candidate: tuple[float, ...]
    reference: tuple[float, ...]
    chunk_epochs: int
    load: tuple[float, ...]
    budget_seconds: float
    spent_seconds: float
    machine: Machine
    clock: str = WALL_TIME
    build: tuple[int, ...] = ()  # none given: every pair on one build
    compile_seconds: float = 0.0

    def __post_init__(self):
        if not self.build:
            object.__setattr__(self, "build", (0,) * len(self.candidate))

    @property
    def builds(self) -> int:
        """How many builds of each side the pairs ran on."""
        return len(set(self.build))

    def interval(self) -> RatioInterval:
        """The candidate-over-reference ratio's interval, the pairs grouped by build (:func:`ratio_interval`)."""
        return ratio_interval(np.array(self.candidate), np.array(self.reference), groups=np.array(self.build))


def chunk_epochs(candidate: Side, reference: Side, min_seconds: float = MIN_CHUNK_SECONDS,
                 clock: str = WALL_TIME, watch: Stopwatch | None = None, max_seconds: float = math.inf) -> int:
    """The chunk length: the smallest multiple of both sides' ``inner_steps``, times the power of two at which a
    chunk of the faster side takes ``min_seconds`` on ``clock``, or at which the slower side's would take at most
    ``max_seconds`` where that comes first (sides that differ a thousandfold would otherwise give the slower one
    chunks of minutes). Each look multiplies the length by the power of two its chunks ask for (at most
    ``MAX_GROWTH``), not by two: every look costs both sides a ``solve()``, whose fixed cost (a library that warms
    its loop up at each call pays seconds) would otherwise be paid a dozen times before the first pair. The
    chunks run here also warm both sides up (their first compiles, which go to ``watch``).

    Args:
        candidate: the setting timed.
        reference: the setting it is compared with.
        min_seconds: the least seconds a chunk of the faster side takes.
        clock: :data:`~crux.timing.machine.WALL_TIME` or :data:`~crux.timing.machine.CPU_TIME`.
        watch: the timing's stopwatch (None: none).
        max_seconds: the most seconds a chunk of the slower side may take; it wins over ``min_seconds``.

    Returns:
        The chunk's epochs.
    """
    epochs = math.lcm(candidate.inner_steps, reference.inner_steps)
    for side in (candidate, reference):  # compile and warm up
        side.chunk(epochs, clock, watch)
    while True:
        fast, slow = sorted(side.chunk(epochs, clock, watch) * epochs for side in (candidate, reference))
        if fast >= min_seconds:
            return epochs
        growth = min(MAX_GROWTH, 2 ** max(1, math.ceil(math.log2(min_seconds / fast)))) if fast > 0 else MAX_GROWTH
        if slow * growth > max_seconds:  # the slower side's chunk would outgrow what the timing can spend on it
            return epochs * max(1, 2 ** math.floor(math.log2(max_seconds / slow)))
        epochs *= growth


def time_paired(candidate: Side | Sequence[Side], reference: Side | Sequence[Side], band: Band,
                budget_seconds: float, min_chunk_seconds: float = MIN_CHUNK_SECONDS,
                clock: str | None = None) -> PairedTimes:
    """Alternate chunks of the two sides until the interval of the time ratio is placed in or out of ``band``,
    or until the next pair would take the timing past ``budget_seconds`` of wall-clock time (counted from the
    start, the solves' compiling left out); at least one pair per build, and two. ``candidate`` and
    ``reference`` are one side each or equally many builds of each (``candidate[b]`` is timed against
    ``reference[b]``, pair i on build i mod B). ``clock``: what a chunk's seconds are, by default the one for JAX's
    device (:func:`clock_here`).

    Args:
        candidate: the setting timed, one side or several builds of it.
        reference: the setting it is compared with, as many builds as ``candidate``.
        band: the ratios the claim allows; the timing stops once the interval is placed in or out of it.
        budget_seconds: the wall-clock seconds the timing may spend, compiling left out, > 0.
        min_chunk_seconds: the least seconds a chunk of the faster side takes.
        clock: :data:`~crux.timing.machine.WALL_TIME` or :data:`~crux.timing.machine.CPU_TIME` (None:
            :func:`clock_here`).

    Returns:
        The pairs' times, the chunk length, the load, the machine and what the timing spent.

    Raises:
        ValueError: ``budget_seconds <= 0``, or not as many builds of each side (at least one).
    """
    if budget_seconds <= 0:
        raise ValueError(f"the timing budget must be positive, got {budget_seconds} s")
    candidates = [candidate] if isinstance(candidate, Side) else list(candidate)
    references = [reference] if isinstance(reference, Side) else list(reference)
    if not candidates or len(candidates) != len(references):
        raise ValueError(f"paired timing needs as many builds of the reference as of the candidate, at least "
                         f"one, got {len(candidates)} and {len(references)}")
    clock, watch = clock or clock_here(), Stopwatch()
    epochs = chunk_epochs(candidates[0], references[0], min_chunk_seconds, clock, watch,
                          budget_seconds / CHUNKS_IN_BUDGET)
    for side in [*candidates[1:], *references[1:]]:  # compile and warm up the other builds
        side.chunk(epochs, clock, watch)
    builds = len(candidates)
    times: tuple[list[float], list[float]] = ([], [])
    load: list[float] = []
    build: list[int] = []
    first_look = FIRST_LOOK * builds
    look = first_look
    while True:
        pair, before = len(load), watch.spent()
        sides = (candidates[pair % builds], references[pair % builds])
        for side in in_turn(pair // builds):
            times[side].append(sides[side].chunk(epochs, clock, watch))
        load.append(load_average())
        build.append(pair % builds)
        spent = watch.spent()
        if len(load) >= look:
            look *= 2
            if band.place(ratio_interval(np.array(times[0]), np.array(times[1]), groups=np.array(build))) != UNDECIDED:
                break
        if len(load) >= max(builds, 2) and spent + (spent - before) > budget_seconds:  # the next pair would overrun
            break
    return PairedTimes(tuple(times[0]), tuple(times[1]), epochs, tuple(load), float(budget_seconds), spent,
                       Machine.here(), clock, tuple(build), watch.compile_seconds)
