"""The launcher's ``#N : overrides`` line of a sweep's job, said once the job starts, never for one that did not.

Hydra's basic launcher says the line of each job just before running it, joblib's says those of a whole launch
before the first starts. A job refused for a store fault recorded in the sweep's folder (the store away, its
artifact folder read-only: :mod:`cruxlab.runtime.readiness`) never started, and the sweep's last line says which
jobs ran. So :class:`LaunchLines` holds each line until its job passes its checks (:func:`job_starts`): in this
process (the basic launcher, joblib with one job at a time) it is told at once; a job in a worker's process
leaves a note in the sweep's folder (:func:`cruxlab.runtime.handover.say_started`) that the sweep's pickup hands
on within a moment.
"""
from __future__ import annotations

import logging
import threading
from pathlib import Path
from typing import Callable, Iterator, Sequence

from cruxlab.runtime.handover import say_started
from cruxlab.store.faults import recorded_fault

_job_starts: Callable[[int], None] | None = None


def on_job_start(call: Callable[[int], None] | None) -> None:
    """Have ``call`` called with the number of each job of a sweep run in this process as it passes the checks
    before it trains (:func:`job_starts`); None: no longer."""
    global _job_starts
    _job_starts = call


def job_starts(sweep_dir: Path, job: int) -> None:
    """Job ``job`` of the sweep in ``sweep_dir`` passed its checks and starts: say so to whoever asked in this
    process (:func:`on_job_start`), else to the sweep's driver, through its folder."""
    if _job_starts is not None:
        _job_starts(job)
        return
    try:
        say_started(sweep_dir, job)
    except OSError:  # a full disk: the line is said when the launch returns
        pass


class LaunchLines(logging.Filter):
    """Holds the launchers' ``#N : overrides`` lines (a filter on :data:`LOGGERS`), each until its job starts
    (:meth:`started`). The jobs of a launch are those :meth:`expect` names, in the order their lines come. A line
    still held is said when the launch returns (:meth:`release`) or, from a launcher that runs its jobs one at a
    time in this process, when the next line comes (its job is over), unless a store fault is recorded then."""

    LOGGERS = ("hydra._internal.core_plugins.basic_launcher", "hydra_plugins.hydra_joblib_launcher._core")
    ONE_AT_A_TIME = LOGGERS[0]

    def __init__(self, sweep_dir: Path):
        super().__init__()
        self.sweep_dir = sweep_dir
        self._held: dict[int, logging.LogRecord] = {}
        self._jobs: Iterator[int] = iter(())
        self._lock = threading.Lock()

    def start(self) -> "LaunchLines":
        """Hold the launchers' lines, and hear of the jobs that start in this process, from now on."""
        for name in self.LOGGERS:
            logging.getLogger(name).addFilter(self)
        on_job_start(self.started)
        return self

    def stop(self) -> None:
        """Say the lines still held (:meth:`release`) and hold none from now on."""
        on_job_start(None)
        self.release()
        for name in self.LOGGERS:
            logging.getLogger(name).removeFilter(self)

    def expect(self, jobs: Sequence[int]) -> None:
        """The next launch runs ``jobs``, its lines coming in that order."""
        with self._lock:
            self._jobs = iter(list(jobs))

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "crux_started", False) or not record.getMessage().lstrip().startswith("#"):
            return True
        if record.name == self.ONE_AT_A_TIME:
            self.release()
        with self._lock:
            job = next(self._jobs, None)
            if job is None:
                return True  # a launch not announced: said as it comes
            self._held[job] = record
        return False

    def started(self, job: int) -> None:
        """Job ``job`` passed its checks: say its line."""
        with self._lock:
            record = self._held.pop(job, None)
        if record is not None:
            self._say(record)

    def release(self) -> None:
        """Say the lines held, unless a store fault is recorded (their jobs did not start)."""
        with self._lock:
            held, self._held = self._held, {}
        if recorded_fault(self.sweep_dir) is None:
            for _, record in sorted(held.items()):
                self._say(record)

    @staticmethod
    def _say(record: logging.LogRecord) -> None:
        record.crux_started = True
        logging.getLogger(record.name).handle(record)
