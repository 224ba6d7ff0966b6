"""``solve()`` on a jNO problem with crux's options, and what comes back: losses, learning rates, timings,
jNO's refusals and fallbacks.

jNO hands its callbacks one call per dispatch: every update with ``inner_steps=1``,
the last of every ``K`` with ``inner_steps=K``. The history therefore has a row per
epoch, NaN at the epochs jNO did not report, so fused and unfused runs line up at the
epochs both have. The losses arrive as device scalars and are read once, at the end.
``loss/total`` is the sum of the constraint losses, as crux records it (jNO itself
descends their mean).

The learning rate is the one jNO's optimizer state holds after each reported update.
jNO writes it after the update (``schedule(t)`` at update ``t``), so update ``t`` used
the rate written at ``t - 1``.
"""
from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Sequence

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jno.utils.adaptive.callbacks import Callback

from crux.options import SolveOptions
from crux.stats import Statistics
from cruxlab.backends.gradient_draws import flat
from cruxlab.backends.jno.problems import JnoProblem

SHARED_OPTIONS = ("accumulation_steps", "checkpoint_gradients", "offload_data", "inner_steps", "substeps")
"""The fields of :class:`crux.SolveOptions` that jNO's solve() takes by the same name (a batch size it takes as
``points`` or ``batchsize``; ``devices`` and ``precision`` are crux's: jNO trains on one device, at the precision
the job sets around it)."""

OPTIONS_IN_WARNINGS = SHARED_OPTIONS + ("batchsize", "points", "epochs")
"""A jNO warning during solve() that names one of these means it dropped or changed the option."""


class _Recorder(Callback):
    """Keeps what each ``on_epoch_end`` call reports, on the device."""

    def __init__(self, networks: dict[str, Any]):
        self.layers = {name: str(net.layer_id) for name, net in networks.items()}
        self.rows: list[tuple[int, Any, dict[str, Any]]] = []

    def on_epoch_end(self, *, epoch: int, individual_losses: Any, opt_states: Any, **kwargs: Any) -> bool:
        # a copy: the next update donates the optimizer state's buffers
        rates = {name: _learning_rate(opt_states.get(layer)) for name, layer in self.layers.items()}
        self.rows.append((int(epoch), individual_losses, rates))
        return False


def _learning_rate(state: Any) -> Any:
    """The rate jNO keeps in an optimizer state (``inject_hyperparams``), or None where the state has none."""
    rate = getattr(state, "hyperparams", {}).get("learning_rate")
    return None if rate is None else jnp.copy(rate)


class _WarningCollector(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@dataclass
class PhaseResult:
    """One ``solve()``: its statistics (None if jNO refused to start), and ``unsupported``, jNO's own message
    when it refused an option or fell back from one (None when it ran as asked)."""

    stats: Statistics | None
    unsupported: str | None


def solve_keywords(options: SolveOptions, form: str) -> dict[str, Any]:
    """jNO's ``solve()`` keywords for ``options``: ``batchsize=B`` draws ``points=B`` or ``batchsize=B``
    (samples), as ``form`` says; :data:`SHARED_OPTIONS` keep their names."""
    keywords = {name: getattr(options, name) for name in SHARED_OPTIONS}
    if options.batchsize is not None:
        keywords["points" if form == "points" else "batchsize"] = options.batchsize
    return keywords


def solve(problem: JnoProblem, epochs: int, first_epoch: int, log: Any, options: dict[str, Any]) -> PhaseResult:
    """``problem.core.solve(epochs, **options)``; the history numbers its epochs from ``first_epoch``.

    A ValueError, TypeError or NotImplementedError that jNO raises before the first update is its refusal of
    an option (a result without statistics); a warning naming an option is a fallback (statistics, and the
    message). Anything else propagates.
    """
    recorder = _Recorder(problem.networks)
    warnings = _WarningCollector()
    log.logger.addHandler(warnings)
    peak_before = _peak_bytes() or 0
    start = time.perf_counter()
    try:
        problem.core.solve(epochs, callbacks=[recorder], **options)
    except (ValueError, TypeError, NotImplementedError) as error:
        if recorder.rows:
            raise
        return PhaseResult(None, f"{type(error).__name__}: {error}")
    finally:
        log.logger.removeHandler(warnings)
    wall = time.perf_counter() - start
    run_seconds = float(problem.core.training_logs[-1]["training_time"])
    fallbacks = [m for m in warnings.messages if any(option in m for option in OPTIONS_IN_WARNINGS)]
    stats = _statistics(problem, recorder.rows, epochs, first_epoch, wall - run_seconds, run_seconds)
    peak = _peak_bytes()
    if peak is not None and peak > peak_before:  # the device peak is per process: only a new one is this solve's
        stats.memory["peak_bytes"] = peak
    return PhaseResult(stats, "; ".join(fallbacks) or None)


@dataclass
class Timed:
    """A jNO problem as one side of a paired timing (:class:`crux.timing.pairs.Side`): ``solve(epochs,
    **options)`` takes crux's solve() keywords, as crux's solver does, trains ``problem`` with them at their
    matmul precision (batches drawn in ``form``, as :func:`solve_keywords` maps them), and reports jNO's own
    loop time as its run seconds: what it spends before the loop (its set-up, compile and warm-up calls) is
    left out, as crux leaves out its planning and compiling. jNO times its loop on the wall clock only."""

    problem: JnoProblem
    form: str

    def solve(self, epochs: int, **options: Any) -> Statistics:
        asked = SolveOptions(epochs=epochs, **options)
        with jax.default_matmul_precision(asked.precision):
            self.problem.core.solve(epochs, **solve_keywords(asked, self.form))
        empty = np.zeros((0, len(self.problem.names)), np.float32)
        return Statistics(names=list(self.problem.names), losses=empty, epoch=np.zeros(0, np.int64),
                          run_seconds=float(self.problem.core.training_logs[-1]["training_time"]))


def _statistics(problem: JnoProblem, rows: Sequence[tuple[int, Any, dict[str, Any]]], epochs: int,
                first_epoch: int, compile_seconds: float, run_seconds: float) -> Statistics:
    """Rows at the epochs jNO reported, NaN at the others. The step time is the loop's average per epoch
    (jNO times its loop as a whole)."""
    losses = np.full((epochs, len(problem.names)), np.nan, np.float32)
    lr = {name: np.full(epochs, np.nan, np.float32) for name in problem.networks}
    reported, values, rates = zip(*rows) if rows else ((), (), ())
    values, rates = jax.device_get((list(values), list(rates)))
    for epoch, row, rate in zip(reported, values, rates):
        losses[epoch] = row
        for name, value in rate.items():
            if value is not None:
                lr[name][epoch] = value
    return Statistics(names=list(problem.names), losses=losses, epoch=np.arange(first_epoch, first_epoch + epochs),
                      lr=lr, compile_seconds=compile_seconds, run_seconds=run_seconds,
                      step_seconds=np.array([run_seconds / epochs]), memory={}, phases=[first_epoch])


def _peak_bytes() -> int | None:
    """The device's peak memory in use in this process, where it reports one (a GPU; not a CPU)."""
    stats = jax.devices()[0].memory_stats()
    return int(stats["peak_bytes_in_use"]) if stats and "peak_bytes_in_use" in stats else None


class _GradientProbe(Callback):
    """Keeps the gradient jNO hands its optimizer and hands back zeros, so the parameters never move: every
    update then draws its mini-batches at the initial parameters."""

    def __init__(self):
        self.gradients: list[Any] = []

    def on_before_update(self, *, grads: Any, **kwargs: Any) -> Any:
        self.gradients.append(jax.tree.map(jnp.copy, eqx.filter(grads, eqx.is_array)))
        return jax.tree.map(jnp.zeros_like, grads)


def gradient_draws(problem: JnoProblem, draws: int, options: dict[str, Any]) -> np.ndarray:
    """``draws`` gradients of the first update (rows, every model's leaves flattened), from ``draws`` updates of
    ``problem`` whose gradients reach its optimizer as zeros."""
    probe = _GradientProbe()
    problem.core.solve(draws, callbacks=[probe], **options)
    return np.stack([flat(g) for g in jax.device_get(probe.gradients)])
