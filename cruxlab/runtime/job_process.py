"""Each job that a pool's worker runs (joblib's) in a process of its own, which the worker only waits on.

A pool of processes (joblib's loky) ends every worker when one of them dies: a job
killed by the kernel's out-of-memory killer would take the jobs of the other workers
with it, trained or not. So the worker forks, the job runs in the child, and the
worker waits for it: the process that grows with the job, the one the out-of-memory
killer picks, is the child, and its death is the end of that one job, reported as its
failure (:class:`JobProcessKilled`), while the pool and the jobs of its other workers go on.
The worker tells the sweep's driver at once (:func:`cruxlab.runtime.handover.say_ended`), which closes the run
the killed job left open and says why within a moment, not when the sweep ends. The child ends with its worker
(:func:`cruxlab.runtime.liveness.end_with_parent`), which ends with its sweep.
"""
from __future__ import annotations

import logging
import os
import pickle
import signal
import sys
from pathlib import Path
from typing import Any, Callable

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from cruxlab.runtime.composed import override_lines
from cruxlab.runtime.handover import say_ended
from cruxlab.runtime.liveness import end_with_parent, follow_sweep
from cruxlab.runtime.writer import process_writer

TaskFunction = Callable[[DictConfig], Any]


class JobProcessKilled(Exception):
    """The process of a job ended before the job returned (killed by a signal: the out-of-memory killer's
    SIGKILL, or ended without a word)."""


class InOwnProcess:
    """``task_function`` run in a forked child of the calling process, its return value or exception handed
    back through a pipe, wherever it is called from another process than the sweep's (``sweep_pid``): a worker
    of joblib's pool. Called in the sweep's own process (joblib with ``n_jobs=1``), it runs there."""

    def __init__(self, task_function: TaskFunction, sweep_pid: int | None = None):
        self.task_function = task_function
        self.sweep_pid = os.getpid() if sweep_pid is None else sweep_pid

    def __call__(self, cfg: DictConfig) -> Any:
        if os.getpid() == self.sweep_pid:
            return self.task_function(cfg)
        follow_sweep()  # this worker ends with its sweep, and the job's process with this worker
        sys.stdout.flush()
        sys.stderr.flush()
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the job's process: never back into the pool's code, whatever happens
            status = 1
            try:
                os.close(read)
                status = _run_and_hand_back(self.task_function, cfg, write)
            finally:
                os._exit(status)
        os.close(write)
        with os.fdopen(read, "rb") as handed:
            outcome = handed.read()
        _, status = os.waitpid(pid, 0)
        if not outcome:
            why = _how_it_ended(pid, status)
            if HydraConfig.initialized():  # the sweep's driver closes the job's run and says why at once
                hydra = HydraConfig.get()
                say_ended(Path(hydra.sweep.dir), hydra.job.num, why, override_lines(hydra.overrides.task))
            raise JobProcessKilled(why)
        returned, value = pickle.loads(outcome)
        if returned:
            return value
        raise value


def _run_and_hand_back(task_function: TaskFunction, cfg: DictConfig, write: int) -> int:
    """In the job's process: run the job, write ``(returned, value or exception)`` pickled to ``write``, let
    the writes it handed to this process's writer finish and the output reach its files; the exit status."""
    end_with_parent()
    status = 0
    try:
        outcome: tuple[bool, Any] = (True, task_function(cfg))
    except BaseException as error:  # noqa: BLE001 - handed back to the worker, which raises it as the job's
        outcome, status = (False, error), 1
    try:
        process_writer().drain()
        try:
            handed = pickle.dumps(outcome)
        except Exception:  # noqa: BLE001 - a value or an error that does not pickle: its words still travel
            handed = pickle.dumps((False, RuntimeError(f"{type(outcome[1]).__name__}: {outcome[1]}")))
        with os.fdopen(write, "wb") as out:
            out.write(handed)
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
    return status


def _how_it_ended(pid: int, status: int) -> str:
    """The end of a job's process that handed nothing back, in the user's words."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        oom = ", as the kernel's out-of-memory killer does" if number == signal.SIGKILL else ""
        return f"its process (pid {pid}) was killed by {name}{oom}; the jobs of the other workers go on"
    return f"its process (pid {pid}) ended with exit status {os.waitstatus_to_exitcode(status)} before the job returned"
