"""What a job's run writes and when: the store's requests and the run's staged files, handed to the process's
writer, and the run's creation, closing, keeping and handover (:class:`RunWrites`, which
:class:`cruxlab.runtime.job.JobRun` fills through its ``log_*`` methods).

The store's requests and ``history.png`` are handed to the process's writer
(:mod:`cruxlab.runtime.writer`) in order: the params while the job trains, the
results and the closing once it has trained. A job of a sweep that runs its jobs
one after another in its own process (Hydra's basic launcher) returns at once,
and its next job trains while the writer works; a job of a crux sweep whose
launcher runs it in another process (joblib, Ray, submitit) has its writer
create its run and write its params while it trains, and hands the rest to the
sweep's process (:mod:`cruxlab.runtime.handover`); any other job (a lone crux-run)
waits for the writer before it returns. In a sweep of
the basic launcher the next run is created by the writer behind the previous
job's writes: a write that meets a store fault records it in
the sweep's folder, and no run is created, nor any write attempted, after it
(the sweep ends with that fault's line). The run closes FINISHED only after
every write succeeded; a write that fails closes it FAILED with the reason; where the store is away, the
job's results are kept on disk (:mod:`cruxlab.runtime.kept`).
"""
from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Self

from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from crux.failures import failure_line
from crux.stats import Statistics
from cruxlab import figure_process
from cruxlab.runtime.handover import Results, hand_over
from cruxlab.runtime.kept import keep
from cruxlab.runtime.liveness import STORE_FAULT, Heartbeat, process_tags
from cruxlab.runtime.system_metrics import SystemMetrics
from cruxlab.runtime.writer import Beside, Writer, process_writer
from cruxlab.store.artifacts import write_artifacts
from cruxlab.store.contract import ERROR_MESSAGE, ERROR_TYPE, FAILED, FINISHED, HISTORY_PLOT, KILLED, STATS
from cruxlab.store.faults import StoreFault, record_fault, recorded_fault
from cruxlab.store.history import history_series, log_history, thinned
from cruxlab.store.secrets import masked, without_credentials

log = logging.getLogger(__name__)

MESSAGE_CHARS = 4000  # MLflow caps a tag value (8000 characters in 3.x)


_unwritten_jobs: dict[Path, set[int]] = {}
_finished_jobs: dict[Path, set[int]] = {}


def unwritten_jobs(sweep_dir: Path) -> set[int]:
    """The numbers of the jobs of the sweep in ``sweep_dir`` that returned in this process but whose runs the
    writer could not create or close FINISHED (a write failed): the sweep does not count them as finished."""
    return set(_unwritten_jobs.get(sweep_dir, ()))


def finished_jobs(sweep_dir: Path) -> set[int]:
    """The numbers of the jobs of the sweep in ``sweep_dir`` whose runs this process closed FINISHED."""
    return set(_finished_jobs.get(sweep_dir, ()))


def open_run(client: MlflowClient, opening: Mapping[str, Any]) -> str:
    """Create a job's run as ``opening`` says (:class:`cruxlab.runtime.handover.Results`); its id."""
    return client.create_run(opening["experiment_id"], start_time=opening["start_time"], tags=opening["tags"],
                             run_name=opening["run_name"]).info.run_id


def outcome_line(stats: Statistics, errors: Mapping[str, float], run_id: str | None, uri: str) -> str:
    """How the job ended, in one line: final loss in total and per constraint, the error per field where the
    problem knows its solution, and where the run is (``run_id`` None: the store failed before the run was
    created). The line goes to the log and the sweep's files: any password in ``uri`` is masked here."""
    if not stats.steps:
        losses = "no epoch trained"
    else:
        final = stats.losses[-1]
        losses = (f"final loss {stats.final_loss:.4g} (" +
                  ", ".join(f"{name} {value:.4g}" for name, value in zip(stats.names, final)) + ")")
    shown = "".join(f", error/{field} {value:.4g}" for field, value in errors.items())
    where = f"run {run_id} in {uri}" if run_id is not None else f"not recorded: the store at {uri} failed first"
    return masked(f"{losses}{shown}; {where}")

def _clear_closing(client: MlflowClient, run_id: str) -> None:
    """Remove the cause its sweep closed run ``run_id`` with (a store fault), now that its results are written."""
    for key in (ERROR_TYPE, ERROR_MESSAGE):
        if key in client.get_run(run_id).data.tags:
            client.delete_tag(run_id, key)


class RunWrites:
    """A job's run as its writes go: its requests to the store (:meth:`_write`) and its staged artifacts
    (:meth:`_stage`) in the writer's order, each attempted unless a write failed before or the sweep met a store
    fault (:meth:`_attempt`); the run's creation, by the writer for a job that overlaps its writes
    (:meth:`_create`); its closing, the artifacts uploaded in one call (:meth:`_close`); its results kept on disk
    where the store is away (:meth:`_keep`); and their handover to the sweep's driver (:meth:`_hand_over`,
    :meth:`taken_over`). Arguments: :class:`cruxlab.runtime.job.JobRun`.
    """

    def __init__(self, client: MlflowClient, run: str | Callable[[], str], variant: str, repeat: int,
                 sweep_dir: Path | None = None, history_points: int | None = None, overlap: bool = False,
                 writer: Writer | None = None, job: int | None = None, artifact_location: str | None = None,
                 hands_over: bool = False, opening: dict | None = None, keeps_in: Path | None = None):
        self.client, self.variant, self.repeat, self.job = client, variant, repeat, job
        self._opening = opening  # how the run is created, for results kept before the store created it
        self._keeps_in = keeps_in or sweep_dir  # where results the store could not take are kept
        self._logged = Results("", job if job is not None else 0, variant, repeat, history_points, 0, 0)
        self.kept: Path | None = None  # where this run's results were kept, once the store failed
        self.hands_over = hands_over and overlap and sweep_dir is not None and job is not None
        self._stats: Statistics | None = None  # the job's statistics, once it has trained
        self._outcome: Callable[[], str] | None = None  # the job's result line, said by the job itself
        self.artifact_location = artifact_location  # the experiment's artifact folder, where known
        self.sweep_dir = sweep_dir
        self.history_points = history_points  # per series sent as metrics; None: every epoch
        self.overlap = overlap
        self._writer = writer or process_writer()
        self._failure: tuple[str, Exception] | None = None  # the first write that failed, and why
        self._files = tempfile.TemporaryDirectory(prefix="crux-run-")
        self._staged = Path(self._files.name) / "artifacts"  # uploaded as one folder when the run closes
        self._staged.mkdir()
        self._run_id: str | None = None
        self.closed: str | None = None  # the status this process closed the run with
        self._heartbeat: Heartbeat | None = None
        self._system = SystemMetrics()  # MLflow's system metrics, while the job trains, where asked for
        self._created = threading.Event()
        self._figure: Beside | None = None  # history.png, drawn beside the histories' request where it may
        if callable(run) and overlap:
            self._writer.submit(lambda: self._create(run))
        else:
            self._opened(run() if callable(run) else run)

    @property
    def run_id(self) -> str:
        """The run's id, once created (by the writer, for a job that overlaps its writes: this waits for it);
        raises what kept the run from being created."""
        self._writer.go_on()  # held between jobs (:meth:`trains`): it creates the run
        self._created.wait()
        if self._run_id is None:
            raise self._failure[1]
        return self._run_id

    def _say_outcome(self) -> None:
        """Log the job's result line in the job's own thread, once its run is created (or could not be): the
        writer works on while the next job of the sweep runs, whose log and console a line of the writer's would
        reach, or miss while Hydra sets up that job's logging."""
        if self._outcome is not None:
            if not self._created.is_set():
                self._writer.go_on()  # it creates the run; a writer held with the run created stays held
            self._created.wait()
            log.info("%s", self._outcome())
            self._outcome = None

    def _write_outcome(self, stats: Statistics, summary: Mapping[str, float], tags: Mapping[str, str], now: int,
                       outcome: Callable[[], str] | None = None) -> None:
        """Hand the histories (thinned by the writer too), the summary, ``history.png`` and the ``outcome`` line
        (where given; a job says its own, :meth:`_say_outcome`) to the writer. Where the process waits for the
        writer as the histories go, the figure is drawn meanwhile; otherwise after the summary, so that it does
        not share the interpreter with the next job's set-up."""
        png = self._staged / HISTORY_PLOT
        figure = self._figure = Beside(lambda: figure_process.draw_figure(self._staged / STATS, png,
                                                                          lambda: stats.plot(png)))

        def histories() -> None:
            if self._writer.draining:
                figure.start()
            log_history(self.client, self.run_id,
                        *thinned(stats.epoch, history_series(stats), self.history_points), now)

        self._write("the histories", histories)
        self._write("the summary", lambda: self.client.log_batch(
            self.run_id, metrics=[Metric(key, float(value), now, 0) for key, value in summary.items()],
            tags=[RunTag(key, value) for key, value in tags.items()]))
        self._write(HISTORY_PLOT, figure.finish)
        if outcome is not None:
            self._writer.submit(lambda: log.info("%s", outcome()))

    def _hand_over(self, ended: int) -> bool:
        """Leave the results and the staged artifacts to the sweep's driver, the run open for it; False, said in
        the log, where they cannot be left: they are then handed to this process's writer."""
        results, stats = self._logged, self._stats
        results.run_id, results.ended = self.run_id, ended
        results.outcome = outcome_line(stats, results.errors, self.run_id, self.client.tracking_uri)
        try:
            hand_over(self.sweep_dir, results, self._staged)
        except OSError as error:
            log.warning("run %s: its results could not be left for the sweep (%s); this job writes them",
                        self.run_id, failure_line(error))
            self._staged.mkdir(exist_ok=True)
            self._write_outcome(stats, results.summary, results.tags, results.logged_at, lambda: results.outcome)
            return False
        self._system.stop()
        if self._heartbeat is not None:
            self._heartbeat.stop()  # the driver beats for the run from now on
        self._files.cleanup()
        log.info("%s", results.outcome)  # in the job's own log; the driver writes the results and says so
        return True

    @classmethod
    def taken_over(cls, client: MlflowClient, sweep_dir: Path, results: Results, artifacts: Path,
                   writer: Writer | None = None, kept: bool = False) -> Self:
        """In a sweep's driver: the run of a job that handed its ``results`` over, or (``kept``) whose results a
        store fault kept (:mod:`cruxlab.runtime.kept`), its files moved from ``artifacts``; the run's process
        becomes this one, and the rest of its writes and its closing go to ``writer`` (the process's by
        default). A run the store never created is created; what the job logged while it trained is sent again
        (the store keeps each value once); a kept run that its sweep closed with a cause closes FINISHED
        without it. Where the artifacts' ``stats.npz`` cannot be read, everything else is written and the run
        closes FAILED naming the file."""
        created = results.run_id or (lambda: open_run(client, results.opening))
        run = cls(client, created, results.variant, results.repeat, sweep_dir, results.history_points,
                  overlap=True, writer=writer, job=results.job, opening=results.opening)
        for path in artifacts.iterdir():
            shutil.move(str(path), run._staged / path.name)
        run._logged = results
        now = results.logged_at or int(time.time() * 1000)
        run._write("the run's process", lambda: client.log_batch(
            run.run_id, params=[Param(key, value) for key, value in results.params.items()],
            metrics=[Metric(key, float(value), now, 0) for key, value in results.metrics.items()],
            tags=[RunTag(key, value) for key, value in {**results.logged_tags, **process_tags()}.items()]))
        if kept:
            run._write("the earlier closing", lambda: _clear_closing(client, run.run_id))
        try:
            stats = Statistics.load(run._staged / STATS)
        except Exception as error:  # noqa: BLE001 - a damaged file: the rest of the results still count
            damaged = f"its {STATS}, handed over in {artifacts.parent}, could not be read ({failure_line(error)})"
            log.error("job %s (run %s): %s; its summary, params and config are written, the run closes FAILED",
                      results.job, results.run_id or "(not created)", damaged)
            run._write("the summary", lambda: client.log_batch(
                run.run_id, metrics=[Metric(key, float(value), now, 0) for key, value in results.summary.items()],
                tags=[RunTag(key, value) for key, value in results.tags.items()]))
            why = [RunTag(ERROR_TYPE, "ResultsUnreadable"), RunTag(ERROR_MESSAGE, damaged[:MESSAGE_CHARS])]
            run._writer.submit(lambda: run._close(FAILED, why, results.ended))
            return run
        run._stats = stats
        said = (lambda: outcome_line(stats, results.errors, run._run_id, client.tracking_uri)) if kept else None
        run._write_outcome(stats, results.summary, results.tags, now, said)  # a job that handed over said its own
        run._writer.submit(lambda: run._close(FINISHED, [], results.ended))
        return run
    # -- the writer's tasks ----------------------------------------------------------------------
    def _write(self, what: str, write: Callable[[], Any]) -> None:
        """Hand ``write``, a request to the store, to the writer."""
        self._writer.submit(lambda: self._attempt(what, write))

    def _stage(self, what: str, write: Callable[[], Any]) -> None:
        """Hand ``write``, a file of the run's artifacts written on this machine, to the writer: written whatever
        the store does, so that results kept after a store fault hold it."""
        self._writer.submit(lambda: self._attempt(what, write, to_store=False))

    def _attempt(self, what: str, write: Callable[[], Any], to_store: bool = True) -> None:
        """Run ``write`` unless it goes to the store and a write of this run failed before, or (overlapping) the
        sweep met a store fault; a failure is kept for the closing, a store fault recorded in the sweep's folder
        at once, so that no run is created and no job started after it."""
        if self._failure is not None and to_store:
            return
        fault = recorded_fault(self.sweep_dir) if self.overlap and to_store else None
        if fault is not None:
            self._failure = (what, StoreFault(f"not attempted: {fault['message']}"))
            return
        try:
            write()
        except Exception as error:  # noqa: BLE001 - the run closes FAILED with it
            self._failure = self._failure or (what, error)
            if isinstance(error, StoreFault) and self.sweep_dir is not None:
                record_fault(self.sweep_dir, self._run_id, error)

    def _create(self, create: Callable[[], str]) -> None:
        """Create the run, unless the store failed before (its job then goes unrecorded, and is run again by
        the sweep's --resume)."""
        try:
            self._attempt("the run", lambda: self._opened(create()))
        finally:
            self._created.set()

    def _opened(self, run_id: str) -> None:
        """The run exists: its heartbeat starts, and whoever waits for its id has it."""
        self._run_id = run_id
        self._heartbeat = Heartbeat(self.client, run_id).start()
        self._created.set()

    def _close(self, status: str, tags: list[RunTag], ended: int | None) -> None:
        """Upload the staged artifacts in one call, then close the run with ``status``, or FAILED with the
        reason where a write failed, at ``ended`` (ms; None: now). A store fault leaves the run open, as a
        job's does."""
        start = time.perf_counter()
        self._system.stop()
        if self._heartbeat is not None:
            self._heartbeat.stop()
        try:
            if any(self._staged.iterdir()):
                self._attempt("the artifacts", lambda: write_artifacts(self.client, self.run_id, self._staged))
            if self._failure is not None:
                what, failure = self._failure
                log.error("run %s: writing %s failed: %s", self._run_id or "(not created)", what,
                          failure_line(failure))
                if self.job is not None and self.sweep_dir is not None and status == FINISHED:
                    _unwritten_jobs.setdefault(self.sweep_dir, set()).add(self.job)
                if isinstance(failure, StoreFault) or self._run_id is None:
                    try:
                        if self.sweep_dir is not None and isinstance(failure, StoreFault):
                            record_fault(self.sweep_dir, self._run_id, failure)
                    finally:  # the results are kept whether the sweep's folder takes the record or not
                        self._keep(ended)
                    if self.sweep_dir is None and isinstance(failure, StoreFault) and failure.store:
                        self._close_alone(failure, ended)
                    return  # the store is away: closed later, as for a job's own store fault
                if status == FINISHED:
                    status = FAILED
                    tags = [RunTag(ERROR_TYPE, type(failure).__name__),
                            RunTag(ERROR_MESSAGE, f"writing {what} failed: {failure_line(failure)}"
                                   [:MESSAGE_CHARS])]
            if tags:
                self.client.log_batch(self.run_id, tags=tags)
            self.client.set_terminated(self.run_id, status, end_time=ended)
            self.closed = status
            if status == FINISHED and self.job is not None and self.sweep_dir is not None:
                _finished_jobs.setdefault(self.sweep_dir, set()).add(self.job)
            log.info("run %s closed %s, its results written in %.2f s", self.run_id, status,
                     time.perf_counter() - start)
        except Exception as error:  # noqa: BLE001 - said; crux-report or a resumed sweep closes it later
            try:
                if isinstance(error, StoreFault) and self.sweep_dir is not None:
                    record_fault(self.sweep_dir, self._run_id, error)  # no job starts, no write waits, after it
            finally:
                if isinstance(error, StoreFault):
                    self._keep(ended)
            if self.job is not None and self.sweep_dir is not None and status == FINISHED:
                _unwritten_jobs.setdefault(self.sweep_dir, set()).add(self.job)  # its run is not FINISHED
            log.error("run %s could not be closed %s: %s", self.run_id, status, failure_line(error))
        finally:
            self._remove_files()

    def _close_alone(self, fault: StoreFault, ended: int | None) -> None:
        """A lone run whose artifact store failed (the tracking store answers): no sweep closes it, so it closes
        KILLED with the fault now, once; ``crux-run --write-kept`` closes it FINISHED with its kept results."""
        why = f"{fault.store} failed ({fault})" + (f"; its results are kept in {self.kept}" if self.kept else "")
        try:
            self.client.log_batch(self.run_id, tags=[RunTag(ERROR_TYPE, STORE_FAULT),
                                                     RunTag(ERROR_MESSAGE, masked(why)[:MESSAGE_CHARS])])
            self.client.set_terminated(self.run_id, KILLED, end_time=ended)
            self.closed = KILLED
        except Exception as error:  # noqa: BLE001 - left open: crux-report closes it later
            log.error("run %s could not be closed %s: %s", self.run_id, KILLED, masked(failure_line(error)))

    def _forget(self, fault: str) -> None:
        """After a store fault (``fault``): the run stays open, recorded as such in the sweep's folder; the
        job's results, where it trained, are kept; its other files go."""
        self._system.stop()
        if self._heartbeat is not None:
            self._heartbeat.stop()
        if self._run_id is not None and self.sweep_dir is not None:
            record_fault(self.sweep_dir, self._run_id, fault)
        self._keep(None)
        self._remove_files()

    def _keep(self, ended: int | None) -> None:
        """Where the job trained and the store did not take its results: keep them on this machine's disk
        (:func:`cruxlab.runtime.kept.keep`), with what creates the run where the store never did, and say where."""
        if self._stats is None or self._keeps_in is None or not self._staged.is_dir():
            return
        if self._figure is not None:
            self._figure.wait()
        logged = self._logged
        logged.run_id, logged.outcome = self._run_id or "", ""
        logged.ended = ended or logged.ended or int(time.time() * 1000)
        logged.opening = self._opening if self._run_id is None else None
        logged.store = "" if self.sweep_dir is not None else without_credentials(self.client.tracking_uri)
        self.kept = keep(self._keeps_in, logged, self._staged, self.sweep_dir)
        if self.kept is not None:
            job = f"job {self.job} ({self.variant})" if self.job is not None else f"the job ({self.variant})"
            log.warning("%s: its results, trained before the store failed, are kept in %s%s", job, self.kept,
                        "; `--resume` writes them into its run" if self.sweep_dir else "")

    def _remove_files(self) -> None:
        """Remove the run's files, once a figure drawn beside a write that failed (:class:`Beside`) is done."""
        if self._figure is not None:
            self._figure.wait()
        self._files.cleanup()
