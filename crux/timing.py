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

The run is sequential: it looks at the interval after ``FIRST_LOOK`` pairs and then each time the count
has doubled, and stops as soon as the interval lies wholly inside the band it is held to or wholly outside
it, or when its time budget is spent (then the last interval is what it has).
"""
from __future__ import annotations

import math
import os
import platform
import time
from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol

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
                   resamples: int = RESAMPLES, seed: int = 0, runs: np.ndarray | None = None) -> RatioInterval:
    """The median of the per-pair ratios ``candidate[i] / reference[i]`` and its percentile bootstrap interval
    (``resamples`` resamples drawn with ``seed``: deterministic).

    ``runs`` labels each pair with the run that timed it. Pairs of one run are resampled with replacement;
    pairs of several runs in two stages, the runs with replacement and then the pairs of each drawn run, so
    that the interval also holds how much the ratio moved between the runs (a run's moment on a shared
    machine is a condition of its own), not only within them.
    """
    candidate, reference = np.asarray(candidate, np.float64), np.asarray(reference, np.float64)
    if candidate.shape != reference.shape or candidate.ndim != 1 or len(candidate) < 2:
        raise ValueError(f"paired timing needs two equally long series of at least 2 chunks, got "
                         f"{candidate.shape} and {reference.shape}")
    logs = np.log(candidate / reference)
    rng = np.random.default_rng(seed)
    groups = [logs[np.asarray(runs) == run] for run in np.unique(runs)] if runs is not None else [logs]
    if len(groups) == 1:
        medians = np.median(logs[rng.integers(0, len(logs), size=(resamples, len(logs)))], axis=1)
    else:
        medians = np.array([np.median(np.concatenate([group[rng.integers(0, len(group), len(group))] for group in
                                                      (groups[g] for g in rng.integers(0, len(groups), len(groups)))]))
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
    ``reference[i]``), the chunk length in epochs, the load average after each pair, the budget and the
    (wall-clock) seconds the pairs took."""

    candidate: tuple[float, ...]
    reference: tuple[float, ...]
    chunk_epochs: int
    load: tuple[float, ...]
    budget_seconds: float
    spent_seconds: float
    machine: Machine
    clock: str = WALL_TIME

    def interval(self) -> RatioInterval:
        return ratio_interval(np.array(self.candidate), np.array(self.reference))


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


def time_paired(candidate: Side, reference: Side, band: Band, budget_seconds: float,
                min_chunk_seconds: float = MIN_CHUNK_SECONDS, clock: str | None = None) -> PairedTimes:
    """Alternate chunks of the two sides until the interval of the time ratio is placed in or out of ``band``
    or ``budget_seconds`` of wall-clock time (counted from the first timed pair) are spent; at least
    ``FIRST_LOOK`` pairs. ``clock``: what a chunk's seconds are, by default the one for JAX's device
    (:func:`clock_here`)."""
    if budget_seconds <= 0:
        raise ValueError(f"the timing budget must be positive, got {budget_seconds} s")
    clock = clock or clock_here()
    epochs = chunk_epochs(candidate, reference, min_chunk_seconds, clock)
    times: tuple[list[float], list[float]] = ([], [])
    load: list[float] = []
    look, start = FIRST_LOOK, time.perf_counter()
    while True:
        order = (0, 1) if len(load) % 2 == 0 else (1, 0)
        for side in order:
            times[side].append((candidate, reference)[side].chunk(epochs, clock))
        load.append(load_average())
        spent = time.perf_counter() - start
        if len(load) >= look:
            look *= 2
            if band.place(ratio_interval(np.array(times[0]), np.array(times[1]))) != UNDECIDED:
                break
        if len(load) >= FIRST_LOOK and spent >= budget_seconds:
            break
    return PairedTimes(tuple(times[0]), tuple(times[1]), epochs, tuple(load), float(budget_seconds), spent,
                       Machine.here(), clock)
