"""Capacity: each memory option trains at a size where the run without it does not fit.

The claims' table says when to reach for each memory option: ``batchsize`` when the dataset does not fit,
``accumulation_steps`` for a larger effective batch than fits, ``checkpoint_gradients`` for very deep networks,
``offload_data`` for very large datasets. Each is shown where it matters: sizes grow, from ``start``, until
the run without the option does not fit the budget (its compiled update needs more bytes than the budget, or
XLA refuses it with RESOURCE_EXHAUSTED); that size is evidence, recorded in one line. Then the option's run at
that size trains a couple of updates (:func:`train_updates`), and its peak (``memory["peak_bytes"]``, :mod:`crux.device_memory`) is
held to the budget.

Sizes are points of the 1-D Poisson problem (``crux.problems.poisson1d``) on a network of three hidden layers, or,
for ``checkpoint_gradients``, its hidden layers over a fixed point set:

- ``batchsize``: the full batch of N points does not fit; mini-batches of half the largest full batch that fits
  train over the N points.
- ``accumulation_steps``: one batch of N points does not fit; micro-batches of half the largest batch that fits,
  as many as make an effective batch of N, train.
- ``checkpoint_gradients``: the plain update of a network of L hidden layers over a fixed point set does not
  fit, the checkpointed one does. Depth is what rematerialising saves on (the layers' activations); more
  points grow the points' own arrays and every layer's alike, which it cannot drop (on a TPU v5e at 8 layers
  the checkpointed update over 786,432 points was refused as the plain one was). The depths are bisected
  further between the doublings, as rematerialising saves a fraction, not a factor of two. The fixed point set
  is chosen where the shallow plain update needs a small share of the budget, so that the depth that does
  not fit stays within tens of layers.
- ``offload_data``: mini-batches drawn on the device from N points do not fit (the points do not); the same
  batches streamed from the host train, and their seconds per update are set against on-device batches of
  the largest point set that fits. The points may have several coordinates (the Poisson problem on the cube
  ``[0, 1]^dims``, :func:`crux.problems.poisson_cube`), so that a point set past a device's memory stays within
  the 2^31 - 1 points a constraint may have; the largest tried is what the host can hold (``host_points_limit``).
"""
from __future__ import annotations

import gc
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import jax
import optax

from crux import device_memory
from crux.batching import MAX_POINTS
from crux.problems import poisson1d, poisson_cube
from crux.schedules import lrs
from crux.solver import Crux

OPTIONS = ("batchsize", "accumulation_steps", "checkpoint_gradients", "offload_data")
UPDATES = 2  # each of the option's two solve() calls: enough to show that it trains, few enough for the largest sizes
POINTS, LAYERS = "points", "layers"  # what a search grows: the point set, or the network's hidden layers
SHALLOW = 3  # the hidden layers of a network whose point set grows, and the first depth tried where layers grow
MAX_LAYERS = 1024  # the deepest network tried
HOST_COPIES = 2  # host bytes a point set takes, in multiples of its own: on a TPU v5e's host, 2^30 4-D points
# (16 GiB) peaked at 32.9 GB while the device refused them and the offloaded run trained


WITHOUT = {"batchsize": "the full batch", "accumulation_steps": "one batch of the effective size",
           "checkpoint_gradients": "the plain update", "offload_data": "batches drawn on the device"}
"""The run without each option, in words."""


def without_option(option: str, points: float, layers: float, grows_layers: bool, dims: float = 1.0) -> str:
    """The run without ``option`` at one size, in words: "the plain update of a network of 96 hidden layers over
    4,096 points" where the layers grew, "the full batch over 4,194,304 points (3 hidden layers)" where the
    points did, "... points of 4 coordinates" where they have several (the layers left out where a record has
    none)."""
    over = f"over {int(points):,} points" + (f" of {int(dims)} coordinates" if dims > 1 else "")
    if math.isnan(layers):
        return f"{WITHOUT[option]} {over}"
    if grows_layers:
        return f"{WITHOUT[option]} of a network of {int(layers)} hidden layers {over}"
    return f"{WITHOUT[option]} {over} ({int(layers)} hidden layers)"


@dataclass(frozen=True)
class Sizes:
    """Where a search starts: the networks' width, the first point set, offload_data's batch,
    checkpoint_gradients' points and offload_data's coordinates."""

    width: int
    start: int
    offload_batch: int
    depth_points: int
    offload_dims: int


# At a device's gigabytes, and at a declared budget of a few MiB on a CPU. The points under growing depth are where
# the depth that does not fit is about ten layers, not tens: the plain update is compiled unrolled, and on a TPU v5e
# the plain update of 16 layers of 256 took 62 s to compile (it needs 0.40 GB a layer over 131,072 points, so over
# 524,288 about 1.6 GB a layer of the chip's 15.75 GiB); on a CPU 0.7 MB of 4 MiB over 64 points. On a device the
# points of offload_data have four coordinates: 2^30 of them are 16 GiB, past a TPU v5e's 15.75 GiB, within a
# constraint's 2^31 - 1 points.
DEVICE_SIZES = Sizes(width=256, start=1024, offload_batch=2 ** 16, depth_points=2 ** 19, offload_dims=4)
CPU_SIZES = Sizes(width=64, start=64, offload_batch=256, depth_points=64, offload_dims=1)


def default_sizes() -> Sizes:
    """:data:`DEVICE_SIZES` on a device that reports its memory, :data:`CPU_SIZES` elsewhere."""
    return DEVICE_SIZES if device_budget() is not None else CPU_SIZES


@dataclass(frozen=True)
class Setup:
    """The runs one option is shown with: the options of the run without it and with it at size N (``largest``:
    the largest N that fitted without it), and what the size counts (``grows``: points or hidden layers)."""

    without: Callable[[int], dict[str, Any]]
    with_option: Callable[[int, int], dict[str, Any]]
    refine: bool = False  # bisect between the doublings too
    growth: int = 2  # the factor from one size tried to the next
    grows: str = POINTS


def _mini_batches(n: int, largest: int) -> dict[str, Any]:
    return {"batchsize": max(largest // 2, 1)}


def _accumulated(n: int, largest: int) -> dict[str, Any]:
    b = max(largest // 2, 1)
    return {"batchsize": b, "accumulation_steps": -(-n // b)}


def setups(offload_batch: int) -> dict[str, Setup]:
    """Each option's runs, with on-device and offloaded batches of ``offload_batch`` points."""
    return {
        "batchsize": Setup(lambda n: {}, _mini_batches),
        "accumulation_steps": Setup(lambda n: {}, _accumulated),
        "checkpoint_gradients": Setup(lambda n: {}, lambda n, largest: {"checkpoint_gradients": True},
                                      refine=True, grows=LAYERS),
        # the point set grows, the batches do not; far under the budget the search jumps (``_factor``)
        "offload_data": Setup(lambda n: {"batchsize": offload_batch},
                              lambda n, largest: {"batchsize": offload_batch, "offload_data": True}),
    }


@dataclass(frozen=True)
class Attempt:
    """One size tried without the option: the network's hidden layers and the points (of ``dims`` coordinates),
    which of them the search grew, and what its compiled update needs, or XLA's refusal."""

    points: int
    layers: int
    needed: int | None  # temporaries, arguments and outputs of the compiled update; where refused, XLA's figure
    refused: str | None = None  # XLA's RESOURCE_EXHAUSTED message
    grows: str = POINTS
    dims: int = 1

    @property
    def size(self) -> int:
        """What the search grew: the points, or the hidden layers."""
        return self.layers if self.grows == LAYERS else self.points

    def fits(self, budget: int) -> bool:
        return self.refused is None and self.needed is not None and self.needed <= budget

    def __str__(self) -> str:
        what = "refused (RESOURCE_EXHAUSTED)" if self.refused else f"needs {self.needed:,} bytes"
        coordinates = f" of {self.dims} coordinates" if self.dims > 1 else ""
        return f"tried {self.points:,} points{coordinates}, {self.layers} hidden layers: {what}"


@dataclass(frozen=True)
class Capacity:
    """What one option was shown with: the budget, the sizes tried without it, and its own run."""

    option: str
    budget: int
    attempts: tuple[Attempt, ...]
    run_options: dict[str, Any] = field(default_factory=dict)
    peak: int | None = None  # the option's run's peak bytes
    trained: bool = False
    error: str | None = None  # why the option's run did not train
    step_seconds: float | None = None  # the option's run's median seconds per update
    reference_step_seconds: float | None = None  # on-device batches at the largest size that fits (offload_data)
    form: str | None = None  # the form of crux.remat the option's run compiled (checkpoint_gradients)
    compared: bool | None = None  # whether that form was chosen by comparing every form (crux.remat.compared)

    @property
    def does_not_fit(self) -> Attempt | None:
        """The smallest size tried that did not fit without the option (None: every size fitted)."""
        failing = [a for a in self.attempts if not a.fits(self.budget)]
        return min(failing, key=lambda a: a.size) if failing else None

    @property
    def largest_fit(self) -> Attempt | None:
        fitting = [a for a in self.attempts if a.fits(self.budget)]
        return max(fitting, key=lambda a: a.size) if fitting else None

    def __str__(self) -> str:
        """One line: the size that does not fit, what it needed, the limit, the option's peak."""
        failing = self.does_not_fit
        if failing is None:
            return f"{self.option}: every size tried fits {self.budget:,} bytes"
        needed = f"needs {failing.needed:,} bytes" if failing.needed is not None else "its need not named"
        needed = f"refused (RESOURCE_EXHAUSTED), {needed}" if failing.refused else needed
        peak = f"peak {self.peak:,} bytes" if self.peak is not None else f"not trained ({self.error})"
        run = without_option(self.option, failing.points, failing.layers, failing.grows == LAYERS, failing.dims)
        form = f" (the {self.form} form)" if self.form is not None else ""
        return (f"{self.option}: {run} does not fit ({needed}, limit {self.budget:,} bytes); "
                f"with {self.run_options}{form}: {peak}")

    def record(self) -> dict[str, Any]:
        """What a capacity.json keeps of it: the option's run's options and form, and every size tried."""
        return {"run_options": self.run_options, "form": self.form, "compared": self.compared,
                "attempts": [vars(a) for a in self.attempts]}

    def metrics(self) -> dict[str, float]:
        """The numbers a verdict is given: ``capacity/...`` (NaN where there is none)."""
        failing, nan = self.does_not_fit, math.nan
        return {"capacity/budget_bytes": float(self.budget),
                "capacity/points": float(failing.points) if failing else nan,
                "capacity/layers": float(failing.layers) if failing else nan,
                "capacity/dims": float(failing.dims) if failing else nan,
                "capacity/grows_layers": float(self.attempts[0].grows == LAYERS) if self.attempts else nan,
                "capacity/needed_bytes": float(failing.needed) if failing and failing.needed is not None else nan,
                "capacity/refused": float(bool(failing and failing.refused)),
                "capacity/option_peak_bytes": float(self.peak) if self.peak is not None else nan,
                "capacity/option_trained": float(self.trained),
                "capacity/step_seconds": self.step_seconds if self.step_seconds is not None else nan,
                "capacity/reference_step_seconds": (self.reference_step_seconds
                                                    if self.reference_step_seconds is not None else nan),
                "capacity/checkpoint_compared": float(self.compared) if self.compared is not None else nan}


def poisson_solver(points: int, hidden: Sequence[int], seed: int = 0, dims: int = 1) -> Crux:
    """The Poisson problem's solver over ``points`` interior points: the 1-D problem, or with ``dims > 1`` the one on
    the cube ``[0, 1]^dims`` (where a point set past a device's memory takes fewer than 2^31 points)."""
    problem = (poisson1d(n_interior=points, hidden=tuple(hidden), seed=seed) if dims == 1
               else poisson_cube(n_interior=points, dims=dims, hidden=tuple(hidden), seed=seed))
    problem.models["u"].optimizer(optax.adam).scale(lrs(1e-3))
    return problem.solver()


def attempt(points: int, hidden: Sequence[int], options: dict[str, Any], grows: str = POINTS,
            dims: int = 1) -> Attempt:
    """The update of ``options`` over ``points`` points (of ``dims`` coordinates), compiled and not run: what it
    needs, or the refusal."""
    needed, refused = compiled_need(poisson_solver(points, hidden, dims=dims), options)
    return Attempt(points, len(hidden), needed, refused, grows, dims)


def compiled_need(solver: Crux, options: dict[str, Any]) -> tuple[int | None, str | None]:
    """The bytes ``solver``'s update of ``options`` compiles to need, and None; or, where XLA refuses it, XLA's
    figure (None where it names none) and its refusal."""
    try:
        memory = solver.compiled_memory(**options)
    except Exception as error:  # XLA's own error type differs between versions; its message does not
        refused = device_memory.refusal(error)
        if refused is None:
            raise
        return device_memory.refused_bytes(str(error)), refused
    return device_memory.compiled_bytes(memory), None


SETTING_OPTIONS = {"plain": {}, "checkpoint_gradients": {"checkpoint_gradients": True},
                   "offload_data": {"offload_data": True}}
"""The memory options a user's own setting is searched with (:func:`largest_batches`), and without (``plain``)."""


def largest_batches(solver: Crux, budget: int) -> dict[str, Any]:
    """The batches (points per constraint) of ``solver``'s own problem tried against ``budget`` bytes without a
    memory option and with each of :data:`SETTING_OPTIONS`: from the full batch (its largest constraint's points)
    halving until one fits, then bisected to within an eighth (:func:`smallest_not_fitting`); offload_data streams
    mini-batches, so its batches start one point short of the full batch. Compiled, not run.

    Returns:
        ``{"budget_bytes", "full_batch", "tried": {label: [{"batch", "needed", "refused"}, ...]}}``, what
        :func:`cruxlab.report.advice.advise` weighs.
    """
    full = max(c.size for c in solver.constraints)
    tried: dict[str, list[dict[str, Any]]] = {}
    for label, options in SETTING_OPTIONS.items():
        streamed = bool(options.get("offload_data"))
        start = limit = full - 1 if streamed else full

        def try_batch(batch: int, options: dict[str, Any] = options) -> Attempt:
            needed, refused = compiled_need(solver, {**options, "batchsize": batch if batch < full else None})
            return Attempt(batch, 0, needed, refused)

        with device_memory.held_to(budget):  # checkpoint_gradients compares its forms where the budget decides
            found = smallest_not_fitting(budget, try_batch, start, limit, refine=True) if start >= 1 else []
        tried[label] = [{"batch": a.points, "needed": a.needed, "refused": a.refused} for a in found]
    return {"budget_bytes": budget, "full_batch": full, "tried": tried}


def _factor(tried: Attempt, budget: int, growth: int) -> int:
    """The factor to the next size up: ``growth``, or, where ``tried`` needs a small share of ``budget``, the
    largest power of ``growth`` that keeps its need, grown in proportion to the size, within half the budget
    (a PINN's update needs memory in proportion to its points once they fill the device's tiles, and to its
    layers less a part that depth does not grow, so the jump falls short rather than over)."""
    if tried.refused or tried.needed is None or tried.needed <= 0 or budget <= 2 * tried.needed * growth:
        return growth
    return growth ** max(int(math.log(budget / (2 * tried.needed), growth)), 1)


def smallest_not_fitting(budget: int, try_size: Callable[[int], Attempt], start: int, limit: int,
                         refine: bool = False, growth: int = 2) -> list[Attempt]:
    """The sizes tried: from ``start``, growing (by ``growth``, or by a power of it where a size needs a small share
    of ``budget``) until one does not fit (or ``limit`` is passed), or, where ``start`` does not fit, halving until
    one does; then bisected, in powers of ``growth``, to the smallest ``start · growth^k`` that does not fit; with
    ``refine``, further between the largest that fits and the smallest that does not until they are within an
    eighth of each other."""
    tried = [try_size(start)]
    fits_first = tried[0].fits(budget)
    while tried[-1].fits(budget) == fits_first:
        if fits_first:
            factor = _factor(tried[-1], budget, growth)
            while factor > growth and tried[-1].size * factor > limit:
                factor //= growth
            size = tried[-1].size * factor
        else:
            size = tried[-1].size // 2
        if not 1 <= size <= limit:
            return tried  # every size fits, or none does: nothing to bracket
        tried.append(try_size(size))
    low = max(a.size for a in tried if a.fits(budget))
    high = min(a.size for a in tried if not a.fits(budget))
    while high > low * growth:  # a jump overshot: halve the powers of growth between them
        middle = low * growth ** max(round(math.log(high / low, growth) / 2), 1)
        tried.append(try_size(middle))
        low, high = (middle, high) if tried[-1].fits(budget) else (low, middle)
    if refine:
        while high - low > max(high // 8, 1):
            middle = (low + high) // 2
            tried.append(try_size(middle))
            low, high = (middle, high) if tried[-1].fits(budget) else (low, middle)
    return tried


def host_points_limit(dims: int) -> int:
    """The most points of ``dims`` float32 coordinates a search builds: what the host's available memory holds
    :data:`HOST_COPIES` times over, at most a constraint's :data:`crux.batching.MAX_POINTS`."""
    try:
        with open("/proc/meminfo") as meminfo:
            available = next(int(line.split()[1]) * 1024 for line in meminfo if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError, IndexError):  # not Linux: the free physical pages
        available = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    return max(min(MAX_POINTS, available // (HOST_COPIES * 4 * dims)), 1)


def measure_capacity(option: str, budget: int, width: int = 64, start: int = 64, limit: int | None = None,
                     offload_batch: int = 256, depth_points: int = 256, offload_dims: int = 1,
                     compiled: dict[tuple, Attempt] | None = None,
                     tried: Callable[[Attempt], None] | None = None) -> Capacity:
    """Show ``option`` (one of :data:`OPTIONS`) at the smallest size that does not fit ``budget`` bytes without it.

    Points grow from ``start`` up to ``limit`` (default: :func:`host_points_limit`) on networks of :data:`SHALLOW`
    hidden layers, in one dimension, or for ``offload_data`` in ``offload_dims``; for ``checkpoint_gradients``
    the hidden layers grow, from :data:`SHALLOW` up to :data:`MAX_LAYERS`, over ``depth_points`` points.

    Nothing that does not fit stops it: a size that does not fit is recorded as such; the option's own run is
    recorded as not trained, with XLA's message, if it does not fit either. ``compiled`` keeps the sizes tried
    between calls (``batchsize`` and ``accumulation_steps`` try the same runs without them): pass one dict to
    the calls of one device. ``tried`` is told each size as it is tried (a search at a device's sizes takes
    minutes: a run stopped at a time limit still shows how far it came).
    """
    if option not in OPTIONS:
        raise ValueError(f"capacity: no option {option!r}; choose from {', '.join(OPTIONS)}")
    setup = setups(offload_batch)[option]
    dims = offload_dims if option == "offload_data" else 1
    if option == "offload_data":  # a batch of offload_batch needs a larger point set to be drawn from
        start = max(start, 2 * offload_batch)
    if setup.grows == LAYERS:
        start, limit = SHALLOW, MAX_LAYERS
    elif limit is None:
        limit = host_points_limit(dims)
    compiled = {} if compiled is None else compiled

    def try_size(size: int) -> Attempt:
        points, layers = (depth_points, size) if setup.grows == LAYERS else (size, SHALLOW)
        without = setup.without(size)
        key = (setup.grows, points, dims, (width,) * layers, tuple(sorted(without.items())))  # what grew is kept
        if key not in compiled:
            compiled[key] = attempt(points, (width,) * layers, without, setup.grows, dims)
            if setup.grows == POINTS and 8 * points >= limit:  # a point set near what the host holds: freed
                gc.collect()  # before the next, larger one is built (a collection costs ~0.1 s: not for each)
            if tried is not None:
                tried(compiled[key])
        return compiled[key]

    attempts = smallest_not_fitting(budget, try_size, start, limit, setup.refine, setup.growth)
    capacity = Capacity(option, budget, tuple(attempts))
    failing, largest = capacity.does_not_fit, capacity.largest_fit
    if failing is None or largest is None:  # every size fitted, or not even the first did: nothing to show
        return capacity
    options = setup.with_option(failing.size, largest.size)
    run = train_updates(poisson_solver(failing.points, (width,) * failing.layers, dims=dims), options, budget)
    reference = None
    if option == "offload_data" and run["trained"]:
        gc.collect()
        reference = train_updates(poisson_solver(largest.points, (width,) * largest.layers, dims=dims),
                                  setup.without(largest.size), budget)["step_seconds"]
    return Capacity(option, budget, tuple(attempts), options, run["peak"], run["trained"], run["error"],
                    run["step_seconds"], reference, run["form"], run["compared"])


def train_updates(solver: Crux, options: dict[str, Any], budget: int) -> dict[str, Any]:
    """:data:`UPDATES` updates of ``options`` by ``solver``, in two solve() calls: whether they trained within
    ``budget``, the larger of their peak bytes and, with ``checkpoint_gradients``, the form of :mod:`crux.remat`
    the update was compiled in (``memory["checkpoint_form"]``) and whether the forms were compared, as they are
    where the form likely kept needs more than a share of the budget (the solves are held to it:
    :func:`crux.device_memory.held_to`). The seconds per update are the second's, as the
    first compiles and sends the points to the device (on a TPU v5e 2^29 points of 4 coordinates, 8.6 GB: 8.6 s
    an update counted with them, docs/tpu/README.md#capacity)."""
    try:
        with device_memory.held_to(budget):
            runs = [solver.solve(UPDATES, **options) for _ in range(2)]
    except Exception as error:
        refused = device_memory.refusal(error)
        if refused is None:
            raise
        return {"peak": None, "trained": False, "error": refused, "step_seconds": None, "form": None,
                "compared": None}
    peaks = [stats.memory.get("peak_bytes") for stats in runs]
    form = runs[-1].memory.get("checkpoint_form")
    peak = None if None in peaks else max(peaks)
    trained = peak is not None and peak <= budget  # a peak the device did not report is no evidence of fitting
    if peak is None:
        error = "the device reported no peak memory for it, so whether it fits the budget is not known"
    else:
        error = None if trained else f"its peak, {peak} bytes, is over the budget of {budget} bytes"
    return {"peak": peak, "trained": trained, "error": error, "step_seconds": runs[-1].median_step_seconds,
            "form": form, "compared": runs[-1].memory.get("checkpoint_compared")}


def budget(declared: int | None = None, without_limit: int | None = None) -> int | None:
    """The bytes a search fits in: ``declared``, else the device's memory (:func:`device_budget`), else, on a device
    that reports none (a CPU), ``without_limit``; None where none of them is given."""
    if declared is not None:
        return int(declared)
    device = device_budget()
    return device if device is not None else without_limit


def device_budget() -> int | None:
    """The first device's memory limit (``memory_stats()["bytes_limit"]``), None where it reports none (CPU)."""
    stats = jax.local_devices()[0].memory_stats() or {}
    return int(stats["bytes_limit"]) if "bytes_limit" in stats else None
