"""A sweep from start to end: every job's config checked, the store checked, the parent run opened (or, on
``--resume``, reopened), the jobs launched, the parent closed with the truth whatever happens.

Hydra runs a multirun through its sweeper; crux's (``hydra/sweeper=crux``, the
default in ``conf/config.yaml``, in ``hydra_plugins/crux_sweeper``) hands it to
:class:`Multirun`. The layout it writes is docs/CONTRACT.md's: the parent run
records the jobs it plans before the first starts (tag ``crux.planned_jobs``,
artifact ``planned_jobs.json``) and closes FINISHED only when every planned job has
a FINISHED run, else FAILED, or KILLED when the sweep was stopped (SIGINT,
SIGTERM: :mod:`cruxlab.runtime.interrupt`); runs of its jobs still RUNNING then are
closed KILLED too. A resumed sweep runs the jobs of its plan that did not finish
again, each as a new child run with the same ``crux.job``, under the same parent. A store that stays away
longer than ``tracking.retry_seconds`` stops the sweep: no job starts after it, and one line says what failed,
which jobs finished and the ``--resume`` command (:mod:`cruxlab.store.faults`).

Nothing is created before every job's config is known to be usable
(:func:`cruxlab.config.out_of_range`) and the store to take writes
(:func:`cruxlab.store.connection.writable_store`); a refusal is one line and exit
status 1, with no run and no job.

How a job finds its parent: every launcher builds each job's config again from
the config files and the multirun's ``hydra.overrides.hydra`` (in the job's
process for joblib and submitit, in this one for Ray), so that list is how what
is decided here reaches every job, whatever machine runs it. The sweep folder
goes into it as an absolute path (a relative one would be resolved in each job's
working directory, which on a Ray cluster started elsewhere is the cluster's),
and the parent run's id and the absolute tracking URI go into
``hydra.job.env_set``, the environment Hydra gives each job while it runs. A launcher that composes in this
process gets the check's composition of the job with those overrides applied (:mod:`cruxlab.runtime.composed`).
"""
from __future__ import annotations

import json
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.errors import HydraException
from hydra.plugins.launcher import Launcher
from mlflow.entities import Metric, Run, RunTag
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import OmegaConfBaseException

from cruxlab.config import effective_settings, overrides_without
from cruxlab.config.keys import refused_override
from cruxlab.config.refusals import config_refusals, refusals as job_refusals
from cruxlab.device_start import jax_settings_of_its_own
from cruxlab.runtime.compilation_cache import use_compilation_cache
from cruxlab.runtime.composed import override_lines
from cruxlab.runtime.handover import Pickup, read_results, workers_output_ended
from cruxlab.runtime.interrupt import deferred, exit_status, interruptible, signal_name
from cruxlab.runtime.job import JobRun
from cruxlab.runtime.kept import kept_folder, kept_results
from cruxlab.runtime.launch_lines import LaunchLines
from cruxlab.runtime.liveness import (GONE, STORE_FAULT, SWEEP_PID, Heartbeat, close_orphans, is_gone, process_tags)
from cruxlab.runtime.run_writes import finished_jobs, unwritten_jobs
from cruxlab.runtime.provenance import checkout, mlflow_source
from cruxlab.runtime.space import StoreReserve
from cruxlab.runtime.tracebacks import tracebacks_shown
from cruxlab.runtime.writer import process_writer
from cruxlab.runtime.write_kept import write_kept
from cruxlab.store.artifacts import write_artifacts
from cruxlab.store.connection import (DESTINATION, PARENT_RUN, TRACKING_URI, WRITING, Destination, StoreError,
                                      brief, child_runs, ensure_experiment, experiment_name, move_store_credentials,
                                      store_error_types, store_errors, tracking_uri, writable_store)
from cruxlab.store.contract import (BACKEND, CLAIM, CLAIMS, COMMAND, ERROR_MESSAGE, ERROR_TYPE, FAILED, FINISHED, HOST,
                                    JOB, KILLED, NOTE, OVERRIDES, PARENT, PID, PLANNED_JOBS, PLANNED_JOB_COUNT, RESUMES,
                                    ROLE, RUNNING, SWEEP, SWEEP_DIR, SWEPT, VARIANT, VARIANT_PARAM, WORKING_DIR,
                                    tag_filter)
from cruxlab.store.descriptions import runs_page, sweep_description
from cruxlab.store.faults import (PatientClient, StoreFault, bringing_back, full_disk, is_disk_full, is_store_fault,
                                  reach, record_fault, recorded_fault, reserve_fault_record, set_retry_budget,
                                  store_named)
from cruxlab.store.kinds import is_tracking_server
from cruxlab.store.params import as_requested, flatten
from cruxlab.store.secrets import masked, needed_to_run

log = logging.getLogger(__name__)

UNCOMPARED = ("tracking.", "jax.")
"""Settings a resumed sweep may change: where runs and compiled programs are kept, not what a job computes."""
CONFIG_ERRORS = (HydraException, OmegaConfBaseException, ValueError, TypeError)
ERROR_TAGS = {ERROR_TYPE, ERROR_MESSAGE}
TRACKER_WARNING = "ignore:resource_tracker:UserWarning"
"""A ``PYTHONWARNINGS`` filter for the warning of a process pool's resource tracker about what it frees."""
WORKER_KILLED = ("TerminatedWorkerError", "BrokenProcessPool")
"""What a launcher whose pool lost a worker process raises (joblib's loky, Python's process pools)."""


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


class Multirun:
    """One invocation of a sweep (new or resumed) on ``launcher``. ``compose`` builds a job's config from the
    multirun's and the job's overrides, as the launcher will (Hydra's ``load_sweep_config``); ``command`` is the
    command line that ran the sweep, for the parent's description and the messages (its first word names the
    program)."""

    def __init__(self, config: DictConfig, parser: OverridesParser, launcher: Launcher,
                 compose: Callable[[DictConfig, list[str]], DictConfig], max_batch_size: int | None, command: str):
        self.config, self.parser, self.launcher, self.compose = config, parser, launcher, compose
        self.max_batch_size, self.command = max_batch_size, command
        self.program = command.split()[0]
        self.uri = tracking_uri(config.tracking.uri)
        self.name = experiment_name(config.tracking.experiment, config.hydra.runtime.choices)
        self.reserve = StoreReserve(self.uri)  # room to close the runs in should the store's disk fill up
        self.said_ended: set[int] = set()  # jobs whose process ended without returning, said when it did

    @property
    def resume_command(self) -> str:
        flag = "--resume" if self.program == "crux-sweep" else "hydra.sweeper.resume=true"
        return f"{self.command} {flag}" if flag not in self.command else self.command

    @property
    def resume_advice(self) -> str:
        """:attr:`resume_command` quoted, with the variables it needs set where the store takes credentials
        (named, never shown: the command holds none, even where the sweep's ``tracking.uri=`` held a password)."""
        return f"`{self.resume_command}`{needed_to_run(self.uri)}"

    def run(self, resume: bool) -> list[Sequence[JobReturn]]:
        """Check, open, launch, close; raises SystemExit with one line when refused, with the shell's status of
        the signal when stopped, and with a summary when jobs failed."""
        os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # a bar for a one-file download
        # MLflow's "View run … / View experiment …" lines for each run a server closes: the sweep says where its
        # runs are once, at its end
        os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")
        logging.raiseExceptions = False  # a log file on a full disk: its lines still reach the console, untraced
        # a killed worker leaves its semaphores to the pool's resource tracker, which frees them and would warn
        # after the sweep's last line; the tracker, started later, takes its warnings' filters from here
        filters = os.environ.get("PYTHONWARNINGS", "")
        if TRACKER_WARNING not in filters.split(","):
            os.environ["PYTHONWARNINGS"] = ",".join(filter(None, (filters, TRACKER_WARNING)))
        set_retry_budget(self.config.tracking.retry_seconds)
        move_store_credentials(self.config.tracking.uri)  # the store's client and every job read them there
        with interruptible():
            try:
                self.reserve.take()
                opened = self._reopen() if resume else self._open()
                if opened is None:
                    return []
                return self._launch(opened)
            except (Refused, StoreError, StoreFault) as error:
                store = f"{error.store} failed: " if getattr(error, "store", None) else ""
                raise SystemExit(f"{self.program}: {store}{masked(str(error))}") from None
            finally:
                self.reserve.release()

    # -- before any job ------------------------------------------------------------------------
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
                found = [refused_override(error, without) or _one_line(error)]
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
            raise Refused(_one_line(error)) from None
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

    # -- the jobs ------------------------------------------------------------------------------
    def _launch(self, opened: Opened) -> list[Sequence[JobReturn]]:
        """Hand the parent run to the jobs, launch those to run, close the parent whatever happens; the
        launcher's returns, or SystemExit when stopped or when jobs failed."""
        set_for_every_job(self.config, f"hydra.job.env_set.{PARENT_RUN}", opened.parent_id)
        set_for_every_job(self.config, f"hydra.job.env_set.{TRACKING_URI}", opened.uri)
        set_for_every_job(self.config, f"hydra.job.env_set.{SWEEP_PID}", str(os.getpid()))
        where = Destination.of_parent(opened.client, opened.uri, opened.parent_id)
        where = replace(where, artifact_location=opened.client.get_experiment(opened.experiment_id).artifact_location)
        set_for_every_job(self.config, f"hydra.job.env_set.{DESTINATION}", where.handed_down())
        heartbeat = Heartbeat(opened.client, opened.parent_id).start()
        returns: list[Sequence[JobReturn]] = []
        completed: list[int] = []
        stopped: KeyboardInterrupt | None = None
        sweep_dir = Path(self.config.hydra.sweep.dir)
        lines = LaunchLines(sweep_dir).start()
        # jobs in processes of the launcher's leave their results here, written by this process's writer
        pickup = Pickup(sweep_dir, lambda results, artifacts: JobRun.taken_over(opened.client, sweep_dir, results,
                                                                                artifacts),
                        lambda note: self._job_ended(opened, note), lines.started).start()
        try:
            sweep_dir.mkdir(parents=True, exist_ok=True)
            reserve_fault_record(sweep_dir)  # a fault of a resumed sweep in the same folder is over
            OmegaConf.save(self.config, sweep_dir / "multirun.yaml")
            batches = list(self._batches(opened.todo))
            while batches:
                batch = batches.pop(0)
                if recorded_fault(sweep_dir) is not None:
                    break  # the store is away: the jobs left would wait for it in vain
                try:
                    lines.expect(batch)
                    returns.append(self.launcher.launch([opened.jobs[n] for n in batch], initial_job_idx=batch[0]))
                    completed += [n for n, result in zip(batch, returns[-1]) if result.status == JobStatus.COMPLETED]
                except Exception as error:  # noqa: BLE001 - a job the launcher lost (a Slurm job past its time
                    if is_store_fault(error) or recorded_fault(sweep_dir) is not None:  # a full disk: said at the end
                        if recorded_fault(sweep_dir) is None:
                            record_fault(sweep_dir, None, launcher_fault(error, sweep_dir))
                        break
                    if type(error).__name__ in WORKER_KILLED:
                        batches[:0] = self._after_killed_worker(opened, batch, error)
                        continue
                    log.error("the launcher failed on jobs %s", batch, exc_info=error)  # limit): the others go on
                finally:  # the lines of the jobs that started are said; the others' too, unless a fault kept them
                    pickup.take_now()
                    lines.release()
        except KeyboardInterrupt as error:
            stopped = error
        finally:
            workers_output_ended()
            lines.stop()
            heartbeat.stop()
            with deferred():  # every job's last writes are this process's writer's: done before counting
                pickup.stop()
                process_writer().drain()
            completed = sorted((set(completed) | finished_jobs(sweep_dir)) - unwritten_jobs(sweep_dir))
            status, missing, runs = self._close_or_report(opened, stopped, sweep_dir, completed, pickup.unreadable)
            print(job_table(runs), flush=True)
        if stopped is not None:
            print(f"{self.program}: stopped by {signal_name(stopped)}: parent run {opened.parent_id} closed {status} "
                  f"with {len(opened.jobs) - len(missing)} of {len(opened.jobs)} jobs finished; {self.resume_advice} "
                  f"runs the others", file=sys.stderr)
            raise SystemExit(exit_status(stopped))
        for result in (result for results in returns for result in results if result.status == JobStatus.FAILED):
            error = result._return_value  # the job's exception (``return_value`` would raise it, logging it again)
            if isinstance(error, StoreFault) or result.hydra_cfg.hydra.job.num in self.said_ended:
                continue  # said in one line by the job and by the sweep's end, or when its process ended
            log.error("job %s (%s) failed: %s", result.hydra_cfg.hydra.job.num, " ".join(result.overrides),
                      _one_line(error), exc_info=error if tracebacks_shown() else None)
        if missing:
            raise SystemExit(f"{self.program}: {len(missing)} of the {len(opened.jobs)} jobs did not finish "
                             f"(job{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))}); parent run {opened.parent_id} closed {status}; "
                             f"{self.resume_advice} runs them again")
        return returns

    def _job_ended(self, opened: Opened, note: dict) -> None:
        """Job ``note["job"]``'s process ended before the job returned (killed: the out-of-memory killer): its run,
        left open, is closed KILLED with ``note["why"]``, and the line is said now, not when the sweep ends."""
        job = str(note["job"])
        for run in child_runs(opened.client, opened.experiment_id, opened.parent_id):
            if run.data.tags.get(JOB) == job and run.info.status == RUNNING:
                opened.client.log_batch(run.info.run_id, tags=[
                    RunTag(ERROR_TYPE, GONE), RunTag(ERROR_MESSAGE, f"{note['why']}; closed by {self.program}")])
                opened.client.set_terminated(run.info.run_id, KILLED)
        self.said_ended.add(int(job))
        log.error("job %s (%s) failed: %s", job, " ".join(note["overrides"]), note["why"])

    def _after_killed_worker(self, opened: Opened, batch: list[int], error: BaseException) -> list[list[int]]:
        """Said in one line: a worker process of the launcher was killed (the kernel's out-of-memory killer) and
        the launch of ``batch`` ended with it; the batches of its jobs that had not started yet, to launch now
        (those that ran then are closed with their cause when the sweep ends, and run again by ``--resume``)."""
        started = {run.data.tags.get(JOB) for run in child_runs(opened.client, opened.experiment_id,
                                                                  opened.parent_id)}
        left = [n for n in batch if str(n) not in started]
        log.error("a worker process of the launcher was killed during the launch of jobs %s (%s): the runs of those it stopped "
                  "are closed with the cause when the sweep ends; %s", ", ".join(map(str, batch)), type(error).__name__,
                  f"jobs {', '.join(map(str, left))}, not started yet, go on" if left else "no job was left to start")
        return list(self._batches(left))

    def _batches(self, todo: list[int]) -> Iterator[list[int]]:
        """``todo`` in runs of consecutive job numbers (a launcher numbers the jobs of one launch in a row), each
        cut to ``max_batch_size``."""
        size = self.max_batch_size or len(todo) or 1
        block: list[int] = []
        for number in todo + [-1]:
            if block and (number != block[-1] + 1 or len(block) == size):
                yield block
                block = []
            block.append(number)

    def _close_or_report(self, opened: Opened, stopped: KeyboardInterrupt | None, sweep_dir: Path,
                         completed: list[int], unreadable: dict[str, str]) -> tuple[str, list[int], list[Run]]:
        """:meth:`_close`; where a job found the store away (or the closing does), closing is tried once, and
        SystemExit with one line says what failed, which jobs finished and how to go on."""
        fault = recorded_fault(sweep_dir)
        if fault is not None:  # try once: the jobs waited the whole budget already
            opened = Opened(getattr(opened.client, "client", opened.client), opened.uri, opened.experiment_id,
                            opened.parent_id, opened.jobs, opened.todo)
            self.reserve.release()  # a full disk: the room held for closing the runs
        try:
            if fault is not None:
                reach(self.uri)  # a server that does not answer would hold each closing request its whole deadline
            closed = self._close(opened, stopped, unreadable, {
                run: f"{store_named(fault, self.uri)} failed ({message})"
                for run, message in (fault or {}).get("runs", {}).items()})
        except (StoreFault, OSError, *store_error_types()) as error:
            fault = fault or {"message": f"closing the sweep failed: {error}"}
            record_fault(sweep_dir, opened.parent_id, fault["message"])
            closed = None
        if fault is None:
            return closed
        if closed:  # read from the store
            completed = [n for n in opened.todo if n not in closed[1]]
        finished = f" (job {', '.join(map(str, sorted(completed)))})" if completed else ""
        kept = {read_results(entry).job: entry for entry in kept_results(sweep_dir)}
        where = (kept_folder(sweep_dir) if all(entry.parent == kept_folder(sweep_dir) for entry in kept.values())
                 else ", ".join(str(entry) for _, entry in sorted(kept.items())))
        said = (f"; the results that job{'s' if len(kept) > 1 else ''} {', '.join(map(str, sorted(kept)))} trained "
                f"are kept in {where}" if kept else "")
        raise SystemExit(
            f"{self.program}: {store_named(fault, self.uri)} failed: {masked(fault['message'])}; "
            f"{len(completed)} of the {len(opened.todo)} jobs run finished{finished}, none started after it{said}; "
            + (f"parent run {opened.parent_id} closed {closed[0]}" if closed else
               f"the runs left open (parent run {opened.parent_id}) are closed by the next `crux-sweep --resume` "
               f"or `crux-report`")
            + bringing_back(fault, self.uri)
            + f"; once the store is back, {self.resume_advice} "
            + ("writes the kept results into their runs and runs the others" if kept else "runs the others"))

    @deferred()
    def _close(self, opened: Opened, stopped: KeyboardInterrupt | None, unreadable: dict[str, str],
               faulted: dict[str, str]) -> tuple[str, list[int], list[Run]]:
        """Close the parent with the truth read from the store, after closing the runs of its jobs still RUNNING
        with their cause (:func:`closing_cause`; ``unreadable``: job -> why its handed-over results could not be
        read, ``faulted``: run -> the store fault that left it open, in words); its status, the planned jobs with no
        FINISHED run, and the jobs' runs as the store now has them (read once more only where some were closed
        here)."""
        client = opened.client
        finished: set[int] = set()
        now = time.time()
        runs = list(child_runs(client, opened.experiment_id, opened.parent_id))
        open_runs = any(run.info.status == RUNNING for run in runs)
        for run in runs:
            if run.info.status == RUNNING:
                status, kind, why = closing_cause(run, stopped, unreadable, faulted, now)
                client.log_batch(run.info.run_id, tags=[RunTag(ERROR_TYPE, kind),
                                                        RunTag(ERROR_MESSAGE, f"{why}; closed by {self.program}")])
                client.set_terminated(run.info.run_id, status)
            elif run.info.status == FINISHED and run.data.tags.get(JOB, "").isdigit():
                finished.add(int(run.data.tags[JOB]))
        missing = [n for n in range(len(opened.jobs)) if n not in finished]
        status = FINISHED if not missing else KILLED if stopped else FAILED
        now = int(time.time() * 1000)
        client.log_batch(opened.parent_id, metrics=[Metric("jobs", len(opened.jobs), now, 0),
                                                    Metric("failed_jobs", len(missing), now, 0)])
        client.set_terminated(opened.parent_id, status)
        served = is_tracking_server(opened.uri)
        log.info("MLflow: the sweep's runs at %s%s", masked(runs_page(opened.uri, opened.experiment_id)),
                 "" if served else f" once `mlflow ui --backend-store-uri {masked(opened.uri)}` serves them")
        if open_runs:
            runs = list(child_runs(client, opened.experiment_id, opened.parent_id))
        return status, missing, runs


def closing_cause(run: Run, stopped: KeyboardInterrupt | None, unreadable: dict[str, str], faulted: dict[str, str],
                  now: float) -> tuple[str, str, str]:
    """Status, ``crux.error_type`` and message for a job's run still RUNNING when its sweep closes: FAILED where
    the results its job handed over could not be read (``unreadable``, by job number), else KILLED: by the store
    fault that left it open (``faulted``: which store failed and how, by run), by the signal that stopped the
    sweep, by the end of its process (:func:`cruxlab.runtime.liveness.is_gone`: killed, out of memory), else by
    the end of its sweep."""
    tags = run.data.tags
    job = tags.get(JOB, "")
    if job in unreadable:
        return FAILED, "ResultsUnreadable", f"the results its job handed over could not be read ({unreadable[job]})"
    if run.info.run_id in faulted:
        return KILLED, STORE_FAULT, faulted[run.info.run_id]
    if stopped is not None:
        return KILLED, "SweepStopped", f"its sweep was stopped by {signal_name(stopped)} while it ran"
    if is_gone(tags, now):
        return KILLED, GONE, (f"its process (pid {tags.get(PID)} on {tags.get(HOST)}) ended without closing the run "
                              f"(killed: kill -9, out of memory)")
    return KILLED, "SweepEnded", "its sweep ended while it ran"


def launcher_fault(error: BaseException, sweep_dir: Path) -> StoreFault:
    """The store fault the launcher met starting a job: a full disk (Hydra writes each job's folder in the sweep's)
    is the sweep's folder's, named with its free bytes; anything else the store's."""
    if is_disk_full(error):
        return StoreFault(f"the launcher could not start a job: {full_disk(error, folder=sweep_dir)}",
                          store=f"the sweep's folder {sweep_dir}")
    return StoreFault(f"the launcher could not start a job: {brief(error)}")


def job_table(runs: Iterable[Run]) -> str:
    """The sweep's jobs, one line each (its newest run): number, variant, status, final loss, seconds from the
    run's start to its end."""
    newest: dict[str, Run] = {}
    for run in sorted(runs, key=lambda run: run.info.start_time or 0):
        newest[run.data.tags.get(JOB, "?")] = run
    rows = [("job", "variant", "status", "final loss", "seconds")]
    for number, run in sorted(newest.items(), key=lambda item: int(item[0]) if item[0].isdigit() else -1):
        loss, info = run.data.metrics.get("final_loss"), run.info
        seconds = (info.end_time - info.start_time) / 1000 if info.end_time and info.start_time else None
        rows.append((number, info.run_name or run.data.tags.get(VARIANT, ""), info.status,
                     "-" if loss is None else f"{loss:.4g}", "-" if seconds is None else f"{seconds:.1f}"))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join("  ".join(cell.rjust(width) if column in (0, 3, 4) else cell.ljust(width)
                               for column, (cell, width) in enumerate(zip(row, widths))).rstrip() for row in rows)


def _which(numbers: list[int], jobs: list[list[str]]) -> str:
    """``every job``, or ``job 2 (memory=b8), 5 (memory=b32)``: each by the overrides that tell it apart."""
    if len(numbers) == len(jobs):
        return "every job"
    varying = {o for job in jobs for o in job if not all(o in other for other in jobs)}
    return "job " + ", ".join(f"{n} ({' '.join(o for o in jobs[n] if o in varying)})" for n in numbers)


def _one_line(error: BaseException) -> str:
    """A config error's message (Hydra's run over several lines) on one line."""
    return " ".join(str(error).split()) or type(error).__name__
