"""Paired, interleaved timing: how much longer one setting of solve() takes per epoch than another, with a
confidence interval, measured in one process.

Two solvers of the same problem (the *candidate* setting and the *reference* it is compared with) train in
alternating chunks of the same number of epochs, the order flipped every pair (A B, B A, A B, ...), so
neither always runs first and a load on the machine that drifts over seconds hits both sides of a pair
alike. Each pair gives a ratio of seconds per epoch; the estimate is the median of the pairs' ratios and
its interval a percentile bootstrap over the pairs (a fixed seed: the same times give the same interval).

What a chunk's time is depends on the device. On a CPU it is the process's CPU time (all its threads): on a
machine shared with other work, a chunk's wall-clock time is its own work stretched by the share of the cores
the other processes left it, a share that changes within a second and so differs between the two chunks of a
pair; the CPU time counts only the work. On an accelerator, whose work the CPU time does not see, it is the
wall-clock time.

A program's speed also depends on the build it was given: two builds of the same problem and options in one
process, each with its own buffers, can differ by several percent for as long as they live, so the chunks of
one build measure that build. The timing can rotate its pairs through several builds of each
side (pair i on build i mod B); the interval then resamples the builds with replacement and then the pairs of
each drawn build, so that it holds how much the ratio moves between builds, not only between chunks.

The run is sequential: it looks at the interval after ``FIRST_LOOK`` pairs per build and then each time the
count has doubled, and stops as soon as the interval lies wholly inside the band it is held to or wholly
outside it, or when its time budget is spent (then the last interval is what it has).
"""
from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence

import jax
import numpy as np

from crux.stats import Statistics

CONFIDENCE = 0.95
RESAMPLES = 2000  # bootstrap resamples: the 2.5% and 97.5% quantiles are each read from 50 values beyond them
FIRST_LOOK = 8  # pairs before the first look: fewer give a bootstrap interval of a handful of distinct medians
MIN_CHUNK_SECONDS = 0.1  # each chunk runs at least this long, so that the timer's and one dispatch's jitter is small
WITHIN, OUTSIDE, UNDECIDED = "within", "outside", "undecided"
CPU_TIME, WALL_TIME = "process CPU time", "wall-clock time"  # what a chunk's seconds are (see the module's docstring)


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
        return int(self.options.get("inner_steps", 1))

    def chunk(self, epochs: int, clock: str = WALL_TIME) -> float:
        """Seconds per epoch of ``epochs`` epochs of training on ``clock`` (the solve loop's time: its planning
        and compiling are left out)."""
        stats = self.solver.solve(epochs, **self.options)
        return (stats.run_cpu_seconds if clock == CPU_TIME else stats.run_seconds) / epochs


@dataclass(frozen=True)
class Band:
    """The range of time ratios (candidate over reference) a claim allows: ``[low, high)``."""

    low: float
    high: float

    def __post_init__(self):
        if not 0 <= self.low < self.high:
            raise ValueError(f"a band of time ratios needs 0 <= low < high, got [{self.low}, {self.high})")

    def place(self, interval: "RatioInterval") -> str:
        """``within`` when the whole interval lies in the band, ``outside`` when none of it does, else
        ``undecided``."""
        if self.low <= interval.low and interval.high < self.high:
            return WITHIN
        if interval.high < self.low or interval.low >= self.high:
            return OUTSIDE
        return UNDECIDED


@dataclass(frozen=True)
class RatioInterval:
    """The median time ratio over ``pairs`` pairs of chunks and its ``confidence`` bootstrap interval."""

    estimate: float
    low: float
    high: float
    pairs: int
    confidence: float = CONFIDENCE


def ratio_interval(candidate: np.ndarray, reference: np.ndarray, confidence: float = CONFIDENCE,
                   resamples: int = RESAMPLES, seed: int = 0, groups: np.ndarray | None = None) -> RatioInterval:
    """The median of the per-pair ratios ``candidate[i] / reference[i]`` and its percentile bootstrap interval
    (``resamples`` resamples drawn with ``seed``: deterministic).

    ``groups`` labels each pair with what timed it under one condition of its own: a build of the two sides, in
    one run. Pairs of one group are resampled with replacement; pairs of several groups in two stages, the
    groups with replacement and then the pairs of each drawn group, so that the interval also holds how much
    the ratio moved between groups (between builds, and between runs at their moments of a shared machine),
    not only within them.
    """
    candidate, reference = np.asarray(candidate, np.float64), np.asarray(reference, np.float64)
    if candidate.shape != reference.shape or candidate.ndim != 1 or len(candidate) < 2:
        raise ValueError(f"paired timing needs two equally long series of at least 2 chunks, got "
                         f"{candidate.shape} and {reference.shape}")
    logs = np.log(candidate / reference)
    rng = np.random.default_rng(seed)
    members = [logs[np.asarray(groups) == group] for group in np.unique(groups)] if groups is not None else [logs]
    if len(members) == 1:
        medians = np.median(logs[rng.integers(0, len(logs), size=(resamples, len(logs)))], axis=1)
    else:
        medians = np.array([np.median(np.concatenate([group[rng.integers(0, len(group), len(group))] for group in
                                                      (members[g] for g in rng.integers(0, len(members),
                                                                                        len(members)))]))
                            for _ in range(resamples)])
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(medians, [tail, 100 - tail])
    return RatioInterval(float(np.exp(np.median(logs))), float(np.exp(low)), float(np.exp(high)), len(logs),
                         confidence)


@dataclass(frozen=True)
class Machine:
    """What ran the timing: the CPU model, its logical cores, the accelerator JAX used."""

    cpu: str
    cores: int
    device: str

    @staticmethod
    def here() -> "Machine":
        return Machine(cpu_model(), os.cpu_count() or 1, jax.devices()[0].device_kind)


def clock_here() -> str:
    """The clock chunks are timed on with JAX's default device: CPU time on a CPU, else wall-clock time."""
    return CPU_TIME if jax.devices()[0].platform == "cpu" else WALL_TIME


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else what ``platform`` says)."""
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def load_average() -> float:
    """The 1-minute load average (NaN where the system has none)."""
    try:
        return float(os.getloadavg()[0])
    except (OSError, AttributeError):
        return math.nan


@dataclass(frozen=True)
class PairedTimes:
    """Seconds per epoch of each chunk of the two sides on ``clock`` (pair i is ``candidate[i]``,
    ``reference[i]``, timed on build ``build[i]`` of each side), the chunk length in epochs, the load average
    after each pair, the budget and the (wall-clock) seconds the pairs took."""

    candidate: tuple[float, ...]
    reference: tuple[float, ...]
    chunk_epochs: int
    load: tuple[float, ...]
    budget_seconds: float
    spent_seconds: float
    machine: Machine
    clock: str = WALL_TIME
    build: tuple[int, ...] = ()  # none given: every pair on one build

    def __post_init__(self):
        if not self.build:
            object.__setattr__(self, "build", (0,) * len(self.candidate))

    @property
    def builds(self) -> int:
        return len(set(self.build))

    def interval(self) -> RatioInterval:
        return ratio_interval(np.array(self.candidate), np.array(self.reference), groups=np.array(self.build))


def chunk_epochs(candidate: Side, reference: Side, min_seconds: float = MIN_CHUNK_SECONDS,
                 clock: str = WALL_TIME) -> int:
    """The chunk length: the smallest multiple of both sides' ``inner_steps``, doubled until a chunk of
    either side takes ``min_seconds`` on ``clock``. The chunks run here also warm both sides up (their first
    compiles)."""
    epochs = math.lcm(candidate.inner_steps, reference.inner_steps)
    for side in (candidate, reference):  # compile and warm up
        side.chunk(epochs, clock)
    while min(candidate.chunk(epochs, clock), reference.chunk(epochs, clock)) * epochs < min_seconds:
        epochs *= 2
    return epochs


def time_paired(candidate: Side | Sequence[Side], reference: Side | Sequence[Side], band: Band,
                budget_seconds: float, min_chunk_seconds: float = MIN_CHUNK_SECONDS,
                clock: str | None = None) -> PairedTimes:
    """Alternate chunks of the two sides until the interval of the time ratio is placed in or out of ``band``
    or ``budget_seconds`` of wall-clock time (counted from the first timed pair) are spent; at least
    ``FIRST_LOOK`` pairs per build. ``candidate`` and ``reference`` are one side each or equally many builds of
    each (``candidate[b]`` is timed against ``reference[b]``, pair i on build i mod B). ``clock``: what a
    chunk's seconds are, by default the one for JAX's device (:func:`clock_here`)."""
    if budget_seconds <= 0:
        raise ValueError(f"the timing budget must be positive, got {budget_seconds} s")
    candidates = [candidate] if isinstance(candidate, Side) else list(candidate)
    references = [reference] if isinstance(reference, Side) else list(reference)
    if not candidates or len(candidates) != len(references):
        raise ValueError(f"paired timing needs as many builds of the reference as of the candidate, at least "
                         f"one, got {len(candidates)} and {len(references)}")
    clock = clock or clock_here()
    epochs = chunk_epochs(candidates[0], references[0], min_chunk_seconds, clock)
    for side in [*candidates[1:], *references[1:]]:  # compile and warm up the other builds
        side.chunk(epochs, clock)
    builds = len(candidates)
    times: tuple[list[float], list[float]] = ([], [])
    load: list[float] = []
    build: list[int] = []
    first_look = FIRST_LOOK * builds
    look, start = first_look, time.perf_counter()
    while True:
        pair = len(load)
        sides = (candidates[pair % builds], references[pair % builds])
        order = (0, 1) if (pair // builds) % 2 == 0 else (1, 0)
        for side in order:
            times[side].append(sides[side].chunk(epochs, clock))
        load.append(load_average())
        build.append(pair % builds)
        spent = time.perf_counter() - start
        if len(load) >= look:
            look *= 2
            if band.place(ratio_interval(np.array(times[0]), np.array(times[1]), groups=np.array(build))) != UNDECIDED:
                break
        if len(load) >= first_look and spent >= budget_seconds:
            break
    return PairedTimes(tuple(times[0]), tuple(times[1]), epochs, tuple(load), float(budget_seconds), spent,
                       Machine.here(), clock, tuple(build))
