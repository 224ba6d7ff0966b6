"""A sweep from start to end: every job's config checked, the store checked, the parent run opened (or, on
``--resume``, reopened), the jobs launched, the parent closed with the truth whatever happens. This module
launches the jobs (:class:`Multirun`); the plan and the parent run's opening are
:mod:`cruxlab.runtime.sweep_parent`'s, the closing and the sweep's last lines :mod:`cruxlab.runtime.sweep_closing`'s.

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

import logging
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import Callable, Iterator, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from mlflow.entities import RunTag
from omegaconf import DictConfig, OmegaConf

from cruxlab import figure_process
from cruxlab.runtime.handover import Pickup, workers_output_ended
from cruxlab.runtime.interrupt import deferred, exit_status, interruptible, signal_name
from cruxlab.runtime.job import JobRun
from cruxlab.runtime.launch_lines import LaunchLines
from cruxlab.runtime.liveness import GONE, SWEEP_PID, Heartbeat
from cruxlab.runtime.run_writes import finished_jobs, unwritten_jobs
from cruxlab.runtime.space import StoreReserve
from cruxlab.runtime.sweep_closing import SweepClosing, job_table
from cruxlab.runtime.sweep_parent import Opened, Refused, SweepParent, set_for_every_job
from cruxlab.runtime.tracebacks import one_line, tracebacks_shown
from cruxlab.runtime.writer import process_writer
from cruxlab.store.connection import (DESTINATION, PARENT_RUN, TRACKING_URI, Destination, StoreError, brief, child_runs,
                                      experiment_name, move_store_credentials, tracking_uri)
from cruxlab.store.contract import ERROR_MESSAGE, ERROR_TYPE, JOB, KILLED, RUNNING
from cruxlab.store.faults import (StoreFault, full_disk, is_disk_full, is_store_fault, record_fault, recorded_fault,
                                  reserve_fault_record, set_retry_budget)
from cruxlab.store.secrets import masked, needed_to_run

log = logging.getLogger(__name__)

TRACKER_WARNING = "ignore:resource_tracker:UserWarning"
"""A ``PYTHONWARNINGS`` filter for the warning of a process pool's resource tracker about what it frees."""
WORKER_KILLED = ("TerminatedWorkerError", "BrokenProcessPool")
"""What a launcher whose pool lost a worker process raises (joblib's loky, Python's process pools)."""


class Multirun(SweepParent, SweepClosing):
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
                figure_process.start()  # its imports on another core while the jobs are checked and the store opened
                opened = self._reopen() if resume else self._open()
                if opened is None:
                    return []
                return self._launch(opened)
            except (Refused, StoreError, StoreFault) as error:
                store = f"{error.store} failed: " if getattr(error, "store", None) else ""
                raise SystemExit(f"{self.program}: {store}{masked(str(error))}") from None
            finally:
                figure_process.close()  # the last job's figure is drawn: the jobs' writes are drained by then
                self.reserve.release()

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
                      one_line(error), exc_info=error if tracebacks_shown() else None)
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


def launcher_fault(error: BaseException, sweep_dir: Path) -> StoreFault:
    """The store fault the launcher met starting a job: a full disk (Hydra writes each job's folder in the sweep's)
    is the sweep's folder's, named with its free bytes; anything else the store's."""
    if is_disk_full(error):
        return StoreFault(f"the launcher could not start a job: {full_disk(error, folder=sweep_dir)}",
                          store=f"the sweep's folder {sweep_dir}")
    return StoreFault(f"the launcher could not start a job: {brief(error)}")
