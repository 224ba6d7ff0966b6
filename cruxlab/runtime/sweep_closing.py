"""How a sweep ends: the runs of its jobs still RUNNING closed with their cause, the parent closed with the truth
read from the store, the jobs' table; where the store failed, one line saying what failed, which jobs finished and
how to go on (:class:`SweepClosing`, the part of :class:`cruxlab.runtime.multirun.Multirun` after its jobs).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Iterable

from mlflow.entities import Metric, Run, RunTag

from cruxlab.runtime.handover import read_results
from cruxlab.runtime.interrupt import deferred, signal_name
from cruxlab.runtime.kept import kept_folder, kept_results
from cruxlab.runtime.liveness import GONE, STORE_FAULT, is_gone
from cruxlab.runtime.space import StoreReserve
from cruxlab.runtime.sweep_parent import Opened
from cruxlab.store.connection import child_runs, store_error_types
from cruxlab.store.contract import ERROR_MESSAGE, ERROR_TYPE, FAILED, FINISHED, HOST, JOB, KILLED, PID, RUNNING, VARIANT
from cruxlab.store.descriptions import runs_page
from cruxlab.store.faults import StoreFault, bringing_back, reach, record_fault, recorded_fault, store_named
from cruxlab.store.kinds import is_tracking_server
from cruxlab.store.secrets import masked

log = logging.getLogger(__name__)


class SweepClosing:
    """The part of a sweep (:class:`cruxlab.runtime.multirun.Multirun`) after its jobs: closing and saying how it
    ended. Reads the sweep's attributes below."""

    program: str
    uri: str
    reserve: StoreReserve
    resume_advice: str

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
