"""A job's paired timing (config ``timing``): after training, its solve() options against ``timing.against``,
timed in one process by :func:`crux.timing.pairs.time_paired`, logged to the job's run.

The chunks' seconds per epoch are metric histories (step = pair number), so MLflow shows them and the report
reads them: ``timing/candidate_seconds`` (the job's own options), ``timing/reference_seconds`` (with
``timing.against``), ``timing/load1`` (the 1-minute load average after each pair), ``timing/build`` (the build
of the two settings the pair ran on, of ``timing.builds``). Summary metrics
``timing/chunk_epochs``, ``timing/budget_seconds``, ``timing/spent_seconds`` (the budget's count: compiling left
out), ``timing/compile_seconds``, ``timing/cores`` and tags
``crux.timing.cpu``, ``crux.timing.device``, ``crux.timing.clock``, ``crux.timing.against`` say how and where it
was measured. The job times until the interval is placed by the band of the claim that will judge it
(:func:`cruxlab.bands.timing_band`), the band the report judges with.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Any, Callable

from mlflow.entities import Metric
from omegaconf import DictConfig, OmegaConf

from crux.options import SolveOptions
from crux.timing.pairs import PairedTimes, Side, time_paired
from cruxlab import config
from cruxlab.bands import timing_band
from cruxlab.config.attachments import job_plan
from cruxlab.config.settings import solve_options
from cruxlab.runtime.job import JobRun
from cruxlab.store.contract import TIMING_AGAINST, TIMING_CLOCK, TIMING_CPU, TIMING_DEVICE

log = logging.getLogger(__name__)

PREFIX = "timing/"


def reference_options(cfg: DictConfig, own: SolveOptions | None = None) -> SolveOptions | None:
    """The options the job is timed against: ``own``, the job's as its config asks them (default:
    :func:`cruxlab.config.settings.solve_options`), changed by ``timing.against``; None when it changes none."""
    own = own if own is not None else solve_options(cfg)
    other = dataclasses.replace(own, **OmegaConf.to_container(cfg.timing.against))
    return None if other == own else other


def time_against(cfg: DictConfig, run: JobRun, side: Callable[[SolveOptions], Side] | None = None,
                 clock: str | None = None, requested: SolveOptions | None = None,
                 applied: SolveOptions | None = None) -> PairedTimes | None:
    """Time the job's options against ``timing.against`` on fresh copies of its problem and log the chunks;
    None (and nothing logged) where there is nothing to time against. ``side(options)`` builds one copy
    trained with ``options`` (by default crux's solver of the configured problem, each network with what the job's
    first phase trains it with, :func:`cruxlab.config.attachments.job_plan`; another backend passes its own);
    ``clock``: as :func:`crux.timing.pairs.time_paired` takes it. ``requested``: the job's options as its config
    asks them (default: :func:`cruxlab.config.settings.solve_options`); ``applied``: as its solver ran them
    (:func:`cruxlab.config.settings.job_options`; default: ``requested``), what the candidate trains with."""
    requested = requested if requested is not None else solve_options(cfg)
    # the reference changes the request, as its config would: solve() resolves it as it resolved the job's
    other = reference_options(cfg, requested)
    if other is None:
        return None
    first = config.training_phases(cfg)[0]

    def crux_side(options: SolveOptions) -> Side:
        problem = config.problem(cfg)
        job_plan(problem, [first], cfg).attach(0, problem.models)
        return Side(problem.solver(), options.keywords())

    build = side or crux_side
    builds = range(cfg.timing.builds)
    own = applied if applied is not None else requested
    candidates, references = [build(own) for _ in builds], [build(other) for _ in builds]
    band = timing_band(cfg.timing.against)
    log.info("paired timing against %s on %d build(s) of each: until the ratio's interval is in or out of "
             "[%g, %g) or %g s are spent", dict(cfg.timing.against), cfg.timing.builds, band.low, band.high,
             cfg.timing.budget_seconds)
    times = time_paired(candidates, references, band, cfg.timing.budget_seconds, clock=clock)
    log_times(run, times, dict(OmegaConf.to_container(cfg.timing.against)))
    interval = times.interval()
    log.info("paired timing (%s): ratio %.3g, %d%% interval %.3g-%.3g over %d pairs of %d epochs on %d build(s)",
             times.clock, interval.estimate, round(interval.confidence * 100), interval.low, interval.high,
             interval.pairs, times.chunk_epochs, times.builds)
    return times


def logged(times: PairedTimes, against: dict[str, Any]) -> tuple[dict[str, tuple[float, ...]], dict[str, float],
                                                                  dict[str, str]]:
    """What a run records of ``times``: the metric histories by pair, the summary metrics, the tags."""
    series = {PREFIX + "candidate_seconds": times.candidate, PREFIX + "reference_seconds": times.reference,
              PREFIX + "load1": times.load, PREFIX + "build": times.build}
    summary = {PREFIX + "chunk_epochs": times.chunk_epochs, PREFIX + "budget_seconds": times.budget_seconds,
               PREFIX + "spent_seconds": times.spent_seconds, PREFIX + "compile_seconds": times.compile_seconds,
               PREFIX + "cores": times.machine.cores}
    tags = {TIMING_CPU: times.machine.cpu, TIMING_DEVICE: times.machine.device,
            TIMING_CLOCK: times.clock,
            TIMING_AGAINST: json.dumps(against, sort_keys=True)}
    return series, summary, tags


def log_times(run: JobRun, times: PairedTimes, against: dict[str, Any]) -> None:
    """The chunks as metric histories, how they were measured as summary metrics and tags."""
    now = int(time.time() * 1000)
    series, summary, tags = logged(times, against)
    metrics = [Metric(key, float(value), now, step) for key, values in series.items()
               for step, value in enumerate(values)]
    metrics += [Metric(key, float(value), now, 0) for key, value in summary.items()]
    for start in range(0, len(metrics), 1000):  # MLflow takes at most 1000 metrics a batch
        run.client.log_batch(run.run_id, metrics=metrics[start:start + 1000])
    run.set_tags(tags)
