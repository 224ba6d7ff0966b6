"""The MLflow run of one job: opened first so that any failure is recorded, then filled as the job goes
(:class:`JobRun`, its ``log_*`` methods; how and when each write reaches the store: :mod:`cruxlab.runtime.run_writes`).

Layout (docs/CONTRACT.md): params are the settings the job ran with
(:func:`cruxlab.config.effective_settings`, flattened) and its ``variant``; the
histories go to MLflow as evenly spaced epochs in one call, every epoch in
``stats.npz`` (:mod:`cruxlab.store.history`); summary metrics and the artifacts
follow, the artifacts as one folder uploaded when the run closes.

A sweep's job reads nothing from the
store before it trains: the sweep hands its destination down (it opens a connection to the store's server,
:mod:`cruxlab.runtime.readiness`, so that no job trains for a store known to be gone). What
each step costs a job is measured by scripts/measure_tracking.py
(docs/BENCHMARK.md).
"""
from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Mapping, Sequence

import jax
import numpy as np
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from crux.failures import failure_line
from crux.model import Model
from crux.params_file import save_params
from crux.problems import Problem
from crux.stats import Statistics
from cruxlab.config import effective_settings
from cruxlab.config.attachments import TrainingPlan
from cruxlab.runtime.environment import written_environment
from cruxlab.runtime.interrupt import deferred, signal_name
from cruxlab.runtime.kept import WRITE_KEPT
from cruxlab.runtime.launch_lines import job_starts
from cruxlab.runtime.liveness import follow_sweep
from cruxlab.runtime.naming import run_identity
from cruxlab.runtime.provenance import invocation, launch_folder
from cruxlab.runtime.readiness import check_artifact_store, wait_for_store
from cruxlab.runtime.run_writes import MESSAGE_CHARS, RunWrites, open_run, outcome_line
from cruxlab.runtime.space import NoRoom, check_room
from cruxlab.runtime.writer import process_writer
from cruxlab.store.connection import (DESTINATION, PARENT_RUN, TRACKING_URI, Destination, ensure_experiment,
                                      experiment_name, move_store_credentials, tracking_uri, writable_store)
from cruxlab.store.contract import (ADJUSTED, CONFIG, ENVIRONMENT, ERROR_MESSAGE, ERROR_TYPE, FAILED, FINAL, FINISHED,
                                    GIT_COMMIT, HISTORY_POINTS, INITIAL, KILLED, MODEL, NOTE, PARAMS,
                                    REQUESTED, STATS, VARIANT_PARAM, memory_logged)
from cruxlab.store.descriptions import job_description
from cruxlab.store.faults import (PatientClient, StoreFault, bringing_back, record_fault, recorded_fault,
                                  set_retry_budget, store_named, store_retrying)
from cruxlab.store.history import thinned
from cruxlab.store.model import write_model
from cruxlab.store.params import flatten
from cruxlab.store.secrets import masked, needed_to_run

log = logging.getLogger(__name__)

STOPPED_FROM_OUTSIDE = ("UncompletedJobError",)
"""Errors by which a launcher ends a job that was stopped rather than failed: submitit raises its
``UncompletedJobError`` in a job that Slurm signals at its time limit. Such a run closes KILLED."""


ParameterLeaves = dict[str, list[np.ndarray]]
"""Model name -> host copies of its parameter leaves, in ``jax.tree.leaves`` order."""


def parameter_leaves(models: dict[str, Model]) -> ParameterLeaves:
    """Host copies of every model's parameter leaves (in ``jax.tree.leaves`` order)."""
    return {name: [np.array(leaf) for leaf in jax.tree.leaves(model.params)] for name, model in models.items()}


class WriteFailed(Exception):
    """Writing a job's results to the store failed; its run closed FAILED with the reason."""


_destinations: dict[tuple[str, str], Destination] = {}
_artifact_locations: dict[tuple[str, str], str] = {}


def _sweep_destination(client: MlflowClient, uri: str, parent_run_id: str) -> Destination:
    """:meth:`Destination.of_parent`, read once a process: the parent's tags do not change while its jobs run,
    and a job whose results the writer is still writing need not ask the store beside it."""
    key = (uri, parent_run_id)
    if key not in _destinations:
        _destinations[key] = Destination.of_parent(client, uri, parent_run_id)
    return _destinations[key]


class OpenedOnFirstUse:
    """A store client (:class:`cruxlab.store.faults.PatientClient`) for ``tracking_uri`` that opens the store
    on its first request: MLflow opens a SQL store (imports, engine, schema check) when a client is made, which
    a job whose writer makes the requests would otherwise wait for before it trains."""

    def __init__(self, tracking_uri: str):
        self.tracking_uri = tracking_uri
        self._client: PatientClient | None = None
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        with self._lock:
            if self._client is None:
                self._client = PatientClient(MlflowClient(self.tracking_uri))
        return getattr(self._client, name)


def _artifact_location(client: MlflowClient, experiment_id: str) -> str:
    """The experiment's artifact location, read once a process."""
    key = (client.tracking_uri, experiment_id)
    if key not in _artifact_locations:
        _artifact_locations[key] = client.get_experiment(experiment_id).artifact_location
    return _artifact_locations[key]


class JobRun(RunWrites):
    """A child run of the multirun's parent, or a run of its own for a plain crux-run.

    Use as a context manager: leaving it closes the run FINISHED, or FAILED with
    tags ``crux.error_type`` and ``crux.error_message``, KILLED when the job was
    stopped (Ctrl-C, SIGTERM, an exit), keeping whatever was logged before; the
    exception goes on. While open, the run's heartbeat beats
    (:mod:`cruxlab.runtime.liveness`). The writes go through ``writer`` (the
    process's by default); with ``overlap``, the run is created by the writer
    (``run`` is then the request that creates it, returning its id), and a job
    that ends well hands its run's closing to the writer and goes on; with
    ``hands_over`` too, it waits for the writer (its run's creation and params,
    done while it trained) and leaves the rest of its results to its sweep's
    driver (:mod:`cruxlab.runtime.handover`, :meth:`taken_over`); else leaving
    waits for the writer. Leaving raises :class:`WriteFailed` when a write it
    waited for failed.
    """

    @classmethod
    def start(cls, cfg: DictConfig) -> "JobRun":
        """The job's run, opened in the store and under the parent run that its multirun handed over (in the
        job's environment: :mod:`cruxlab.runtime.multirun`), else a run of its own. A job of a sweep that runs
        in the sweep's own process (Hydra's basic launcher) overlaps its writes with the next job; a job of a
        crux sweep that runs in a process of its launcher's hands its results over to the sweep's driver. Either
        opens the store in its writer, while it trains."""
        hydra = HydraConfig.get()
        multirun = hydra.mode == RunMode.MULTIRUN
        parent = os.environ.get(PARENT_RUN) if multirun else None
        set_retry_budget(cfg.tracking.retry_seconds)
        sweep_dir = Path(hydra.sweep.dir) if parent else None
        in_sweep_process = multirun and hydra.launcher._target_.endswith(".BasicLauncher")
        hands_over = parent is not None and not in_sweep_process
        if hands_over:
            follow_sweep()
        overlap = in_sweep_process or hands_over
        if overlap and store_retrying():  # the previous job's write waits for the store: this job waits for it
            process_writer().drain()
        fault = recorded_fault(sweep_dir)
        if fault is not None:  # an earlier job of the sweep waited for the store in vain: this one would too
            raise StoreFault(f"not started: {fault['message']}")
        if parent:
            wait_for_store(os.environ[TRACKING_URI], sweep_dir)
        if parent and DESTINATION in os.environ:
            client = OpenedOnFirstUse(os.environ[TRACKING_URI])
            where = Destination.from_handed_down(os.environ[DESTINATION])
        elif parent:
            client = PatientClient(MlflowClient(os.environ[TRACKING_URI]))
            where = _sweep_destination(client, os.environ[TRACKING_URI], parent)
        else:  # a plain crux-run, or a multirun of another sweeper
            move_store_credentials(cfg.tracking.uri)
            uri = tracking_uri(cfg.tracking.uri, launch_folder())  # not Hydra's output folder (hydra.job.chdir)
            client = PatientClient(writable_store(uri))
            name = experiment_name(cfg.tracking.experiment, hydra.runtime.choices)
            where = Destination(uri, ensure_experiment(client, name, uri, cfg.claim), None, name, cfg.claim)
        if parent:
            check_artifact_store(where.artifact_location, where.uri, sweep_dir)
            job_starts(sweep_dir, hydra.job.num)
        variant, name, tags = run_identity(cfg, hydra, where)
        started = int(time.time() * 1000)  # the job's start, also where the writer creates the run later
        opening = {"experiment_id": where.experiment_id, "start_time": started, "tags": tags, "run_name": name}
        with deferred():
            return cls(client, lambda: open_run(client, opening), variant, cfg.repeat, sweep_dir,
                       cfg.tracking.history_points, overlap=overlap, job=hydra.job.num if multirun else None,
                       hands_over=hands_over, opening=opening, keeps_in=sweep_dir or Path(hydra.runtime.output_dir),
                       artifact_location=(where.artifact_location or _artifact_location(client, where.experiment_id))
                       if overlap else None)


    def __enter__(self) -> "JobRun":
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> bool:
        no_room = isinstance(error, NoRoom)  # the store is there: this run closes FAILED with the reason
        if isinstance(error, StoreFault) and not no_room and self.sweep_dir is not None:  # the sweep stops its jobs
            record_fault(self.sweep_dir, self._run_id, error)
        if isinstance(error, StoreFault) and not no_room:  # the store is away: closed later
            log.error("%s failed: %s; run %s stays open until the next crux-sweep --resume or "
                      "crux-report closes it", store_named(error, self.client.tracking_uri), error,
                      self._run_id or "(not created)")
            self._writer.submit(lambda: self._forget(str(error)))
            self._say_outcome()
            return False
        with deferred():
            if error is None:
                ended = int(time.time() * 1000) if self.overlap else None  # the job's end, not the writer's
                if self.hands_over and self._stats is not None:
                    self._writer.drain()  # the run's creation and params, written while the job trained
                    if self._failure is None and self._hand_over(ended):
                        return False
                self._writer.submit(lambda: self._close(FINISHED, [], ended))
                if self.overlap and not self.hands_over:
                    self._say_outcome()
                    self._writer.hold()  # until the next job trains (:meth:`trains`), or the sweep drains it
                    return False
                self._writer.drain()
                self._say_outcome()
                if self._failure is not None:
                    what, failure = self._failure
                    if isinstance(failure, StoreFault) and self.kept is not None and self.sweep_dir is None:
                        raise StoreFault(self._kept_line(failure), failure.store) from failure
                    kept = f"; its results are kept in {self.kept}" if self.kept is not None else ""
                    raise WriteFailed(f"writing {what} failed: {failure_line(failure)}{kept}") from failure
                return False
            stopped = isinstance(error, (KeyboardInterrupt, SystemExit)) or kind.__name__ in STOPPED_FROM_OUTSIDE
            what = f"stopped by {signal_name(error)}" if isinstance(error, KeyboardInterrupt) else failure_line(error)
            tags = [RunTag(ERROR_TYPE, kind.__name__), RunTag(ERROR_MESSAGE, what[:MESSAGE_CHARS])]
            self._writer.submit(lambda: self._close(KILLED if stopped else FAILED, tags, None))
            self._writer.drain()  # the exception may end the process: the run is closed first
            self._say_outcome()
            if no_room and self.sweep_dir is not None:
                # recorded once the writes queued before it are done (an earlier job's, which had room): the
                # sweep starts no job after it
                record_fault(self.sweep_dir, None, str(error))
        return False

    def _kept_line(self, fault: StoreFault) -> str:
        """One line for a lone run whose results a store fault kept: the store and the cause, where the results
        are, the run's state, and the command that writes them into it (:mod:`cruxlab.runtime.write_kept`)."""
        uri = self.client.tracking_uri
        state = f"closed {self.closed}" if self.closed else "left open (crux-report closes it)"
        return masked(f"{store_named(fault, uri)} failed: {fault}; the results the job trained are kept in "
                      f"{self.kept}; run {self._run_id or '(not created)'} {state}{bringing_back(fault, uri)}; "
                      f"once the store is back, "
                      f"`crux-run {WRITE_KEPT} {self.kept}`{needed_to_run(uri)} writes them into "
                      + (f"run {self._run_id}" if self._run_id else "a new run"))

    def trains(self) -> None:
        """The job's training starts: the writer, held since the previous job of the process ended, writes that
        job's results meanwhile, then starts this run's system metrics (:mod:`cruxlab.runtime.system_metrics`)."""
        self._writer.go_on()
        self._writer.submit(lambda: self._system.start(self._run_id, self.client.tracking_uri))

    def check_room(self, problem: Problem, epochs: int, phases: int) -> None:
        """Raise :class:`cruxlab.runtime.space.NoRoom` where this machine's store or artifact folder lacks room for
        what ``epochs`` of ``problem`` in ``phases`` phases write."""
        series = 1 + len(problem.constraints) + len(problem.models)
        parameter_bytes = sum(leaf.nbytes for model in problem.models.values()
                              for leaf in jax.tree.leaves(model.params))
        sent = epochs if self.history_points is None else min(epochs, self.history_points)
        check_room(self.client.tracking_uri, self._artifact_root(), epochs * series, sent * series, parameter_bytes,
                   phases + 3)  # initial, each phase's, final, and the model's copy of the final

    def _artifact_root(self) -> str:
        """Where the run's artifacts go, as far as the filesystem goes: its experiment's folder where known (the
        run's own lies in it), so that a job neither waits for the writer to create its run nor asks the store;
        else the run's own folder."""
        if self.artifact_location is not None:
            return self.artifact_location
        return self.client.get_run(self.run_id).info.artifact_uri

    # -- what is logged, in the writer's order --------------------------------------------------
    def log_config(self, cfg: DictConfig, applied: Mapping[str, Any] | None = None,
                   adjustments: Sequence[str] = (), trained_with: TrainingPlan | None = None) -> None:
        """``config.yaml`` (resolved), ``environment.json`` (of the working directory), then the params: the
        settings the job runs with and its ``variant``. ``applied``: settings (dotted keys) that ran otherwise
        than the config asked, logged as they ran, the request kept as ``<key>_requested``; ``adjustments``:
        lines saying what ran otherwise, in the tag ``crux.adjusted`` and the job's log; ``trained_with``: what
        each network trains with, its params and tags (:class:`cruxlab.config.attachments.TrainingPlan`), the
        lines saying what it replaced of a problem's own with the adjustments. Raises for a malformed later
        phase, the config kept."""
        if trained_with is not None:
            adjustments = [*adjustments, *trained_with.replaced]
        # resolved here, dumped to YAML by the writer: the dump costs ten times the resolving
        resolved = OmegaConf.to_container(cfg, resolve=True)
        self._stage(CONFIG, lambda: (self._staged / CONFIG).write_text(OmegaConf.to_yaml(resolved)))
        folder = launch_folder()
        precision = resolved["solver"].get("precision")  # the job's updates' matmul precision (crux.precision)
        # the command and overrides read now: the writer writes this file while the next job of the sweep, whose
        # Hydra config is then the current one, sets up
        job = invocation()
        self._stage(ENVIRONMENT, lambda: self._logged.logged_tags.update(written_environment(  # its commit, a tag
            self._staged / ENVIRONMENT, folder, resolved["problem"].get("_target_"), job, precision)))
        params = {**flatten(effective_settings(cfg, resolved)), **(trained_with.params() if trained_with else {}),
                  VARIANT_PARAM: self.variant}
        for key, value in (applied or {}).items():
            params[f"{key}{REQUESTED}"], params[key] = params[key], str(value)
        tags = [RunTag(ADJUSTED, "; ".join(adjustments)[:MESSAGE_CHARS])] if adjustments else []
        chosen = trained_with.tags() if trained_with is not None else {}
        tags += [RunTag(key, value[:MESSAGE_CHARS]) for key, value in chosen.items()]
        self._logged.params.update(params)
        self._logged.logged_tags.update({tag.key: tag.value for tag in tags})
        self._write("the params", lambda: self.client.log_batch(  # with environment.json's commit, once written
            self.run_id, params=[Param(k, v) for k, v in params.items()],
            tags=tags + [RunTag(k, v) for k, v in self._logged.logged_tags.items() if k == GIT_COMMIT]))
        for line in adjustments:
            log.info("%s", line)

    def log_results(self, problem: Problem, stats: Statistics, initial: ParameterLeaves,
                    phase_ends: Sequence[ParameterLeaves] = ()) -> None:
        """Histories, summary metrics, ``history.png``, ``stats.npz`` and ``params.npz``: the parameters
        before training (``initial``), after each finished phase (``phase<k>``, from ``phase_ends``) and now
        (``final``); and the networks as an MLflow model, ``model/`` (:mod:`cruxlab.store.model`)."""
        final = parameter_leaves(problem.models)
        self.log_outcome(stats, problem.relative_l2(), initial, phase_ends, final)
        self._stage(MODEL, lambda: write_model(self._staged / MODEL, self._staged / CONFIG, final))

    def log_outcome(self, stats: Statistics, errors: Mapping[str, float], initial: ParameterLeaves,
                    phase_ends: Sequence[ParameterLeaves], final: ParameterLeaves) -> None:
        """:meth:`log_results` from plain values, for a job whose models are not crux's (another backend):
        ``errors`` are the relative L2 errors per field, the parameters are host arrays per model. The files
        are written here; the requests and the figure are the writer's, or, for a job that hands its results
        over, the sweep driver's."""
        now = int(time.time() * 1000)
        sent, _ = thinned(stats.epoch, {}, self.history_points)
        summary = {"compile_seconds": stats.compile_seconds, "run_seconds": stats.run_seconds,
                   "median_step_seconds": stats.median_step_seconds,
                   "steps_per_second": stats.steps / stats.run_seconds if stats.run_seconds else float("nan"),
                   "final_loss": stats.final_loss}
        memory, memory_tags = memory_logged(stats.memory)
        summary.update(memory)
        summary.update({f"error/{field}": value for field, value in errors.items()})
        summary.update({f"param_distance/{name}": float(np.sqrt(sum(np.sum((f - i) ** 2)
                                                                    for f, i in zip(final[name], initial[name]))))
                        for name in final})
        stats.save(self._staged / STATS)
        snapshots = {INITIAL: initial, **{f"phase{k}": leaves for k, leaves in enumerate(phase_ends)},
                     FINAL: final}
        save_params(self._staged / PARAMS, snapshots)
        tags = {NOTE: job_description(self.variant, self.repeat, summary),
                HISTORY_POINTS: f"{len(sent)} of {stats.steps}", **memory_tags}
        self._stats, logged = stats, self._logged
        logged.logged_at, logged.summary, logged.tags, logged.errors = now, summary, tags, dict(errors)
        if self.hands_over:
            return
        uri = self.client.tracking_uri
        self._outcome = lambda: outcome_line(stats, errors, self._run_id, uri)
        self._write_outcome(stats, summary, tags, now)


    def log_metrics(self, values: Mapping[str, float]) -> None:
        """Summary metrics (step 0), e.g. a measurement made beside the training."""
        now = int(time.time() * 1000)
        metrics = [Metric(key, float(value), now, 0) for key, value in values.items()]
        self._logged.metrics.update({metric.key: metric.value for metric in metrics})
        self._write("the metrics", lambda: self.client.log_batch(self.run_id, metrics=metrics))

    def log_text(self, name: str, text: str) -> None:
        """An artifact ``name`` of the run holding ``text``, uploaded with the others when the run closes."""
        self._stage(name, lambda: (self._staged / name).write_text(text))

    def set_tags(self, tags: Mapping[str, str]) -> None:
        """Tags on the run, each cut to what MLflow keeps."""
        cut = [RunTag(key, str(value)[:MESSAGE_CHARS]) for key, value in tags.items()]
        self._logged.logged_tags.update({tag.key: tag.value for tag in cut})
        self._write("the tags", lambda: self.client.log_batch(self.run_id, tags=cut))

    @property
    def folder(self) -> Path:
        """A folder of this run's own for the files written while it is open (jobs of sweeps that share a Hydra
        folder write side by side); removed when the run closes, after its artifacts are logged."""
        return Path(self._files.name)

