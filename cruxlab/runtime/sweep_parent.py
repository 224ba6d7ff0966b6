"""A sweep's plan and its parent run: each job's overrides as Hydra's basic sweeper numbers them, every job's config
checked before anything is created, the parent run opened with its plan or, on ``--resume``, reopened with the jobs
it lacks (:class:`SweepParent`, the part of :class:`cruxlab.runtime.multirun.Multirun` before its jobs).

Nothing is created before every job's config is known to be usable
(:func:`cruxlab.config.out_of_range`) and the store to take writes
(:func:`cruxlab.store.connection.writable_store`); a refusal is one line and exit
status 1, with no run and no job. A resumed sweep first writes the results its last invocation kept after a store
fault into their runs (:mod:`cruxlab.runtime.kept`), and is refused where its finished jobs ran with other settings
than its config gives now.
"""
from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from mlflow.entities import Run, RunTag
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from cruxlab.config import effective_settings, overrides_without
from cruxlab.config.keys import refused_override
from cruxlab.config.refusals import config_refusals, refusals as job_refusals
from cruxlab.device_start import jax_settings_of_its_own
from cruxlab.runtime.compilation_cache import use_compilation_cache
from cruxlab.runtime.composed import override_lines
from cruxlab.runtime.interrupt import deferred
from cruxlab.runtime.kept import kept_results
from cruxlab.runtime.liveness import close_orphans, process_tags
from cruxlab.runtime.provenance import checkout, mlflow_source
from cruxlab.runtime.tracebacks import one_line
from cruxlab.runtime.write_kept import write_kept
from cruxlab.store.artifacts import write_artifacts
from cruxlab.store.connection import WRITING, child_runs, ensure_experiment, store_errors, writable_store
from cruxlab.store.contract import (BACKEND, CLAIM, CLAIMS, COMMAND, ERROR_MESSAGE, ERROR_TYPE, FAILED, FINISHED, HOST,
                                    JOB, NOTE, OVERRIDES, PARENT, PID, PLANNED_JOBS, PLANNED_JOB_COUNT, RESUMES, ROLE,
                                    RUNNING, SWEEP, SWEEP_DIR, SWEPT, VARIANT_PARAM, WORKING_DIR, tag_filter)
from cruxlab.store.descriptions import sweep_description
from cruxlab.store.faults import PatientClient, StoreFault, reserve_fault_record
from cruxlab.store.params import as_requested, flatten
from cruxlab.store.secrets import masked

log = logging.getLogger(__name__)

UNCOMPARED = ("tracking.", "jax.")
"""Settings a resumed sweep may change: where runs and compiled programs are kept, not what a job computes."""
CONFIG_ERRORS = (HydraException, OmegaConfBaseException, ValueError, TypeError)
ERROR_TAGS = {ERROR_TYPE, ERROR_MESSAGE}


class Refused(Exception):
    """The sweep cannot start as asked; the message is one line for the user."""


# -- what the sweep plans ------------------------------------------------------------------------
def _sweep_overrides(config: DictConfig) -> list[str]:
    """What the sweeper expands: ``hydra.sweeper.params``, then the command line (which wins)."""
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    return [f"{key}={value}" for key, value in params.items()] + override_lines(config.hydra.overrides.task)


def swept_keys(config: DictConfig) -> list[str]:
    """The keys that differ between the jobs: swept in ``hydra.sweeper.params`` or on the command line.

    As in Hydra's basic sweeper, the command line comes last and wins (``repeat=0`` stops a file's repeats).
    """
    last = {o.key_or_group: o for o in OverridesParser.create().parse_overrides(_sweep_overrides(config))}
    return sorted(key for key, override in last.items() if override.is_sweep_override())


def planned_jobs(config: DictConfig, parser: OverridesParser | None = None) -> list[list[str]]:
    """Each job's overrides, numbered as Hydra's basic sweeper numbers them (``hydra.job.num``), which
    crux's sweeper keeps. ``glob(...)`` over a config group's options needs ``parser`` made with the
    config loader."""
    overrides = (parser or OverridesParser.create()).parse_overrides(_sweep_overrides(config))
    return [list(job) for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]


def set_for_every_job(config: DictConfig, key: str, value: str) -> None:
    """Set ``key`` to ``value`` in the multirun's config and, as the last override of that key, in every
    job's."""
    quoted = "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    with read_write(config.hydra), open_dict(config.hydra):
        OmegaConf.update(config, key, value, force_add=True)
        config.hydra.overrides.hydra.append(f"++{key}={quoted}")


def pin_sweep_dir(config: DictConfig) -> Path:
    """Make ``hydra.sweep.dir`` absolute, in the multirun's config and in every job's, and return it."""
    sweep_dir = Path(config.hydra.sweep.dir).resolve()
    set_for_every_job(config, "hydra.sweep.dir", str(sweep_dir))
    return sweep_dir


@dataclass
class Opened:
    """A sweep whose parent run is open: the jobs it plans, and those this invocation runs."""

    client: MlflowClient
    uri: str
    experiment_id: str
    parent_id: str
    jobs: list[list[str]]
    todo: list[int]


class SweepParent:
    """The part of a sweep (:class:`cruxlab.runtime.multirun.Multirun`) before its jobs: their configs checked, the
    parent run opened or reopened. Reads the sweep's attributes below."""

    config: DictConfig
    parser: OverridesParser
    compose: Callable[[DictConfig, list[str]], DictConfig]
    uri: str
    name: str
    program: str
    command: str

    def _checked(self, jobs: list[list[str]]) -> list[DictConfig]:
        """Each job's config, composed as its launcher will compose it; Refused naming every value out of
        range (:func:`cruxlab.config.out_of_range`), a backend that cannot run it
        (:func:`cruxlab.config.backend_choice.backend_refusals`), a problem that cannot be built from it
        (:func:`cruxlab.config.problem_faults`) or config that does not compose, and the jobs it is in."""
        configs, refusals = [], {}
        for number, overrides in enumerate(jobs):
            cfg = None
            try:
                cfg = self.compose(self.config, list(overrides))
                own_jax = jax_settings_of_its_own(cfg.hydra.job.env_set)
                with read_write(cfg), open_dict(cfg):
                    del cfg["hydra"]
                # a job that sets JAX up otherwise (XLA_FLAGS, JAX_PLATFORMS) is not built here: JAX, once started
                # in this process to build it, would keep its devices for the jobs this process runs; building it
                # compiles (its networks' initialisation), into the cache the job asks for
                if not own_jax:
                    use_compilation_cache(cfg.jax.compilation_cache_dir)
                found = config_refusals(cfg) if own_jax else job_refusals(cfg)
            except CONFIG_ERRORS as error:
                without = lambda key: self.compose(self.config, overrides_without(list(overrides), key))  # noqa: E731
                found = [refused_override(error, without) or one_line(error)]
            configs.append(cfg)
            for refusal in found:
                refusals.setdefault(refusal, []).append(number)
        if refusals:
            raise Refused("; ".join(f"{refusal} (in {_which(numbers, jobs)})" for refusal, numbers in refusals.items())
                          + "; nothing was run")
        return configs

    @deferred()
    def _open(self) -> Opened:
        """A new sweep: its parent run opened, with its plan."""
        try:
            jobs = planned_jobs(self.config, self.parser)
        except CONFIG_ERRORS as error:
            raise Refused(one_line(error)) from None
        self._checked(jobs)
        client = PatientClient(writable_store(self.uri))
        with store_errors(self.uri, WRITING, self.name):
            experiment_id = ensure_experiment(client, self.name, self.uri, self.config.claim)
            close_orphans(client, experiment_id, self.program)
            sweep_dir = pin_sweep_dir(self.config)
            tags = {SWEEP: self.name, CLAIM: self.config.claim,
                    CLAIMS: json.dumps(list(self.config.claims)), ROLE: PARENT,
                    BACKEND: self.config.backend.name, SWEEP_DIR: str(sweep_dir),
                    OVERRIDES: " ".join(override_lines(self.config.hydra.overrides.task)),
                    COMMAND: self.command, WORKING_DIR: os.getcwd(), NOTE: sweep_description(self.command), PLANNED_JOB_COUNT: str(len(jobs)),
                    SWEPT: json.dumps(swept_keys(self.config)), **process_tags(),
                    **mlflow_source(self.program, checkout(Path.cwd())["commit"])}
            run = client.create_run(experiment_id, run_name=f"{self.name} {time.strftime('%Y-%m-%d %H:%M:%S')}",
                                    tags=tags)
            try:
                self._log_plan(client, run.info.run_id, jobs)
            except StoreFault as fault:  # the artifact store refused it: the sweep ends before any job
                client.log_batch(run.info.run_id, tags=[RunTag(ERROR_TYPE, type(fault).__name__),
                                                        RunTag(ERROR_MESSAGE, str(fault))])
                client.set_terminated(run.info.run_id, FAILED)
                raise
        log.info("MLflow: experiment %r, parent run %s at %s", self.name, run.info.run_id, masked(self.uri))
        return Opened(client, self.uri, experiment_id, run.info.run_id, jobs, list(range(len(jobs))))

    @deferred()
    def _reopen(self) -> Opened | None:
        """The newest sweep of the name, reopened with the jobs it lacks; None when it lacks none."""
        client = PatientClient(writable_store(self.uri))
        with store_errors(self.uri, WRITING, self.name):
            experiment = client.get_experiment_by_name(self.name)
            if experiment is None or experiment.lifecycle_stage != "active":
                raise Refused(f"no sweep of {self.name!r} at {self.uri} to resume: start one without --resume")
            close_orphans(client, experiment.experiment_id, self.program)
            (parent, *_) = client.search_runs([experiment.experiment_id], tag_filter(ROLE, PARENT),
                                              order_by=["attributes.start_time DESC"], max_results=1) or [None]
            if parent is None:
                raise Refused(f"experiment {self.name!r} at {self.uri} holds no sweep to resume: start one without "
                              f"--resume")
            jobs = self._recorded_plan(client, parent)
            self._write_kept(client, parent)
            finished = self._finished(client, parent, jobs)
        todo = [n for n in range(len(jobs)) if n not in finished]
        parent_id = parent.info.run_id
        with store_errors(self.uri, WRITING, self.name):
            if not todo:
                if parent.info.status != FINISHED:
                    client.set_terminated(parent_id, FINISHED)
                log.info("sweep %s (parent run %s) is complete: every one of its %d jobs finished; nothing to run",
                         self.name, parent_id, len(jobs))
                return None
            resumes = int(parent.data.tags.get(RESUMES, "0")) + 1
            client.update_run(parent_id, status=RUNNING)
            for key in ERROR_TAGS & parent.data.tags.keys():  # why it ended before no longer holds
                client.delete_tag(parent_id, key)
            sweep_dir = pin_sweep_dir(self.config)  # where this invocation's jobs record faults and keep results
            client.log_batch(parent_id, tags=[RunTag(k, v) for k, v in
                                              {**process_tags(), RESUMES: str(resumes),
                                               SWEEP_DIR: str(sweep_dir)}.items()])
        log.info("MLflow: resuming sweep %s (parent run %s at %s): %d of its %d jobs to run (%s)", self.name,
                 parent_id, masked(self.uri), len(todo), len(jobs), ", ".join(map(str, todo)))
        return Opened(client, self.uri, parent.info.experiment_id, parent_id, jobs, todo)

    def _write_kept(self, client: MlflowClient, parent: Run) -> None:
        """Write the results that the sweep's last invocation kept after a store fault
        (:mod:`cruxlab.runtime.kept`) into their jobs' runs, so that those jobs finish without training again;
        StoreFault where the store fails again (the results stay kept)."""
        folder = parent.data.tags.get(SWEEP_DIR)
        entries = kept_results(Path(folder)) if folder else []
        if entries:
            reserve_fault_record(Path(folder))  # the fault is over: the writes below are attempted
        for entry in entries:
            run = write_kept(client, Path(folder), entry)
            log.info("job %s: the results it kept after the store failed are written into run %s, FINISHED; it is "
                     "not run again", run.job, run.run_id)

    def _recorded_plan(self, client: MlflowClient, parent: Run) -> list[list[str]]:
        """The jobs the sweep of ``parent`` planned; Refused where it is still running, recorded no plan, or
        the command line asks for other settings than the sweep ran with."""
        tags, parent_id = parent.data.tags, parent.info.run_id
        if parent.info.status == RUNNING:
            raise Refused(f"the newest sweep of {self.name!r} (parent run {parent_id}) is still running (pid "
                          f"{tags.get(PID, '?')} on {tags.get(HOST, '?')}): wait for it to end, or stop it, then "
                          f"resume")
        if PLANNED_JOB_COUNT not in tags:
            raise Refused(f"the newest sweep of {self.name!r} (parent run {parent_id}) recorded no plan of its jobs, "
                          f"so what it lacks is not known: run it again without --resume")
        recorded = tags.get(OVERRIDES, "").split()
        extra = [o for o in " ".join(override_lines(self.config.hydra.overrides.task)).split() if o not in recorded
                 and not o.lstrip("+~").startswith(UNCOMPARED)]  # the store moved, its budget changed: not the jobs
        if extra:
            raise Refused(f"--resume runs the jobs sweep {parent_id} planned, with the overrides it ran with "
                          f"({' '.join(recorded)}); {' '.join(extra)} is not among them: leave it out, or start a "
                          f"new sweep without --resume")
        with tempfile.TemporaryDirectory(prefix="crux-plan-") as folder:
            plan = json.loads(Path(client.download_artifacts(parent_id, PLANNED_JOBS, folder)).read_text())
        return [list(entry["overrides"]) for entry in sorted(plan, key=lambda entry: entry["job"])]

    def _finished(self, client: MlflowClient, parent: Run, jobs: list[list[str]]) -> dict[int, Run]:
        """Job number -> its newest FINISHED run, each checked to have run with the settings its config gives
        now; Refused naming those that did not (the sweep's files changed since)."""
        finished = {}
        for run in sorted(child_runs(client, parent.info.experiment_id, parent.info.run_id),
                          key=lambda run: run.info.start_time or 0):
            number = run.data.tags.get(JOB, "")
            if run.info.status == FINISHED and number.isdigit() and int(number) < len(jobs):
                finished[int(number)] = run
        configs = self._checked(jobs)
        changed = []
        for number, run in sorted(finished.items()):
            now = flatten(effective_settings(configs[number]))
            before = {key: value for key, value in as_requested(run.data.params).items() if key != VARIANT_PARAM}
            differ = sorted(key for key in now.keys() | before.keys()
                            if not key.startswith(UNCOMPARED) and now.get(key) != before.get(key))
            if differ:
                changed.append(f"job {number}: " + ", ".join(f"{key} {before.get(key)} -> {now.get(key)}"
                                                              for key in differ[:3]))
        if changed:
            raise Refused(f"the finished jobs of sweep {parent.info.run_id} ran with other settings than its config "
                          f"gives now ({'; '.join(changed)}): restore the files it ran with, or start a new sweep "
                          f"without --resume")
        return finished

    @staticmethod
    def _log_plan(client: MlflowClient, run_id: str, jobs: list[list[str]]) -> None:
        """``planned_jobs.json``: ``[{"job": number, "overrides": [...]}, ...]``, the number being ``crux.job``;
        StoreFault naming the artifact store where it refuses it."""
        with tempfile.TemporaryDirectory(prefix="crux-plan-") as folder:
            path = Path(folder) / PLANNED_JOBS
            path.write_text(json.dumps([{"job": n, "overrides": overrides} for n, overrides in enumerate(jobs)],
                                       indent=1))
            write_artifacts(client, run_id, Path(folder))


def _which(numbers: list[int], jobs: list[list[str]]) -> str:
    """``every job``, or ``job 2 (memory=b8), 5 (memory=b32)``: each by the overrides that tell it apart."""
    if len(numbers) == len(jobs):
        return "every job"
    varying = {o for job in jobs for o in job if not all(o in other for other in jobs)}
    return "job " + ", ".join(f"{n} ({' '.join(o for o in jobs[n] if o in varying)})" for n in numbers)

