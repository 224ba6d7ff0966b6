"""Whether the process that opened a run is still there, so that the runs a killed process left RUNNING
(``kill -9``, out of memory, a lost machine) are closed KILLED by the next command that looks.

Every run crux opens records its process: tags ``crux.host``, ``crux.pid`` and
``crux.process``, an identity that a later process with the same pid does not
share (on Linux, the machine's boot id and the process's start time; empty
elsewhere, where the pid alone is checked). A run of this machine is orphaned when
no process with that identity runs. A run of another machine cannot be checked
that way: while the run is open its process sets tag ``crux.heartbeat`` (Unix
time) every :data:`HEARTBEAT_SECONDS`, and a run whose heartbeat is older than
:data:`STALE_SECONDS` is taken for lost with its machine. Both limits are generous
so that clocks a few minutes apart do not close a live run.

A worker process that a sweep started (joblib's) ends with its sweep
(:func:`follow_sweep`), and the process it runs a job in with it (:func:`end_with_parent`):
killed with it (``kill -9``), it would train its job to the end for nobody, and hold
its run open against the next command's closing of orphans.

A run whose job, or whose sweep, stopped because the tracking store was away
recorded that in the sweep's folder (:func:`cruxlab.store.faults.record_fault`):
such a run is closed with that cause, ``crux.error_type`` = ``StoreFault``.
"""
from __future__ import annotations

import logging
import os
import socket
import threading
import time
from pathlib import Path
from typing import Mapping

from mlflow.entities import RunTag
from mlflow.tracking import MlflowClient

from cruxlab.store.connection import runs_where
from cruxlab.store.contract import (ERROR_MESSAGE, ERROR_TYPE, HEARTBEAT, HOST, KILLED, PARENT_ID, PID, PROCESS,
                                    RUNNING, SWEEP_DIR)
from cruxlab.store.faults import recorded_fault

log = logging.getLogger(__name__)

HEARTBEAT_SECONDS = 60.0
STALE_SECONDS = 15 * 60.0
SWEEP_PID = "CRUX_SWEEP_PID"
"""The environment variable that gives each job of a sweep the process id of the sweep's driver."""
FOLLOW_SECONDS = 0.2
"""How often a worker of a sweep looks whether the sweep is still there."""
GONE, STORE_FAULT = "ProcessGone", "StoreFault"
"""The ``crux.error_type`` of a run closed because its process was gone, and because the store was away."""


def process_identity(pid: int) -> str | None:
    """``<boot id>/<start time in clock ticks>`` of process ``pid`` on Linux; None where no such process runs
    or the system does not tell."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return f"{boot}/{stat[stat.rindex(')') + 2:].split()[19]}"  # field 22, the start time; fields 3- follow ')'


def process_tags() -> dict[str, str]:
    """The tags that say which process opens a run: this one."""
    pid = os.getpid()
    return {HOST: socket.gethostname(), PID: str(pid), PROCESS: process_identity(pid) or "",
            HEARTBEAT: str(int(time.time()))}


def is_gone(tags: Mapping[str, str], now: float) -> bool:
    """Whether the process recorded in a run's ``tags`` has ended for sure (False for a run that recorded none)."""
    if tags.get(HOST) == socket.gethostname() and PID in tags:
        recorded = tags.get(PROCESS, "")
        this_boot = process_identity(os.getpid())
        if recorded and this_boot and recorded.split("/")[0] == this_boot.split("/")[0]:
            return process_identity(int(tags[PID])) != recorded
        if not recorded:
            return not process_exists(int(tags[PID]))
    beat = tags.get(HEARTBEAT)
    return beat is not None and now - float(beat) > STALE_SECONDS


def _store_fault(client: MlflowClient, run_id: str, tags: Mapping[str, str]) -> str | None:
    """What the store fault that left run ``run_id`` open was, as its job or sweep recorded it in the sweep's
    folder (the run's tag ``crux.sweep_dir``, or its parent's); None where none was recorded (or the folder is
    on another machine)."""
    folder = tags.get(SWEEP_DIR)
    if folder is None and PARENT_ID in tags:
        folder = client.get_run(tags[PARENT_ID]).data.tags.get(SWEEP_DIR)
    fault = recorded_fault(Path(folder)) if folder else None
    return fault["runs"].get(run_id) if fault else None


def process_exists(pid: int) -> bool:
    """Whether a process ``pid`` runs on this machine (whoever's it is)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it runs, as another user
        return True
    return True


def close_orphans(client: MlflowClient, experiment_id: str, closer: str) -> list[str]:
    """Close KILLED every RUNNING run of the experiment whose process is gone (:func:`is_gone`), with tags
    ``crux.error_type`` = ``ProcessGone`` (or ``StoreFault`` where the store's absence ended it: :func:`_store_fault`)
    and ``crux.error_message`` saying whose process, why and who closed it (``closer``, e.g. ``crux-sweep``);
    their ids."""
    now, closed = time.time(), []
    for run in list(runs_where(client, experiment_id, f"attributes.status = '{RUNNING}'")):
        tags = run.data.tags
        if not is_gone(tags, now):
            continue
        where = f"pid {tags.get(PID)} on {tags.get(HOST)}"
        fault = _store_fault(client, run.info.run_id, tags)
        why = (f"the tracking store failed ({fault})" if fault else
               "killed (kill -9, out of memory), or its machine lost")
        message = (f"its process ({where}) ended without closing the run: {why}; closed by {closer} on "
                   f"{time.strftime('%Y-%m-%d %H:%M:%S')}")
        client.log_batch(run.info.run_id, tags=[RunTag(ERROR_TYPE, STORE_FAULT if fault else GONE),
                                                RunTag(ERROR_MESSAGE, message)])
        client.set_terminated(run.info.run_id, KILLED)
        closed.append(run.info.run_id)
        log.warning("run %s (%s) was left RUNNING by a process that is gone (%s): closed KILLED",
                    run.info.run_id, run.info.run_name, where)
    return closed


_following = threading.Lock()
_followed: set[int] = set()


def follow_sweep() -> None:
    """In a job of a sweep that runs in a child process of the sweep's (a joblib worker): end this process within
    :data:`FOLLOW_SECONDS` of the sweep's end, from a daemon thread started once a process. A job in the sweep's
    own process, or in a process that is not its child (Ray, Slurm), is left alone."""
    recorded = os.environ.get(SWEEP_PID, "")
    if not recorded.isdigit() or int(recorded) == os.getpid() or os.getppid() != int(recorded):
        return
    with _following:
        if int(recorded) in _followed:
            return
        _followed.add(int(recorded))
    threading.Thread(target=_end_with, args=(int(recorded),), name="crux-follow-sweep", daemon=True).start()


def end_with_parent() -> None:
    """End this process within :data:`FOLLOW_SECONDS` of its parent's end, from a daemon thread: a job's
    process that a worker of a sweep forked (:mod:`cruxlab.runtime.job_process`) ends with that worker."""
    threading.Thread(target=_end_with, args=(os.getppid(),), name="crux-follow-parent", daemon=True).start()


def _end_with(parent: int) -> None:
    while os.getppid() == parent:  # a child whose parent ended is handed to another process
        time.sleep(FOLLOW_SECONDS)
    os._exit(128 + 9)  # as killed with it: its run stays open, closed as an orphan by the next command


class Heartbeat:
    """Sets a run's ``crux.heartbeat`` to the time every :data:`HEARTBEAT_SECONDS` from a daemon thread, from
    :meth:`start` until :meth:`stop`. A beat that fails (a store briefly away) is skipped."""

    def __init__(self, client: MlflowClient, run_id: str):
        self.client, self.run_id = client, run_id
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"crux-heartbeat-{run_id}", daemon=True)

    def start(self) -> "Heartbeat":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()

    def _beat(self) -> None:
        while not self._stopped.wait(HEARTBEAT_SECONDS):
            try:
                self.client.set_tag(self.run_id, HEARTBEAT, str(int(time.time())))
            except Exception as error:  # noqa: BLE001 - whatever the store raised, the next beat tries again
                log.debug("heartbeat of run %s skipped: %s", self.run_id, error)
