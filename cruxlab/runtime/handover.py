"""A finished job's results handed to its sweep's driver, which writes them while other jobs train.

A job that a parallel launcher (joblib, Ray, submitit) runs in a worker process
would otherwise wait at its end for its histories, figure, artifacts and the
closing of its run: seconds a job, and the worker's first job also opens the
store. Such a job instead leaves its results in the sweep's folder, which the
driver and the jobs share already (:mod:`cruxlab.store.faults` records a store
fault there): one folder per job, ``<sweep>/.crux-handed-over/<job>``, holding
the run's staged artifacts and :data:`RESULTS` (what remains to be sent), moved
into place whole so that the driver never reads half of it. The driver's
:class:`Pickup` watches that folder from a thread while the launcher runs the
jobs, and hands each job's results to its process's ordered writer
(:mod:`cruxlab.runtime.writer`); the sweep counts its runs only after the pickup
has stopped and the writer is drained. The run was created, and its params
written, by the job's own process while it trained; it closes FINISHED only
after the driver wrote the rest, FAILED with the reason when a write fails.
"""
from __future__ import annotations

import json
import logging
import shutil
import sys
import tempfile
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from crux.failures import failure_line
from cruxlab.store.secrets import masked

log = logging.getLogger(__name__)

FOLDER = ".crux-handed-over"
RESULTS = "results.json"
ARTIFACTS = "artifacts"
ENDED = ".ended.json"
"""A file ``<job>.ended.json`` in the hand-over folder: the job's process ended before its job returned
(:func:`say_ended`)."""
STARTED = ".started"
"""A file ``<job>.started`` in the hand-over folder: the job passed its checks and trains (:func:`say_started`)."""
POLL_SECONDS = 0.2
"""How often the driver looks for results: a job's results wait at most this long before being written."""


def workers_output_ended() -> None:
    """Disconnect this process from the Ray cluster that the Ray launcher connected it to, if any. Ray prints what
    its workers log as its log monitor forwards it, up to seconds late: a job's warnings would otherwise come after
    the sweep's last line. Lines not forwarded yet stay in each job's log file in the sweep's folder."""
    ray = sys.modules.get("ray")  # imported by the Ray launcher only
    if ray is not None and ray.is_initialized():
        ray.shutdown()


@dataclass
class Results:
    """What a job's run still needs once the job has trained: its histories (from its staged ``stats.npz``),
    the summary metrics and tags, ``history.png``, the artifacts, the outcome line and the closing."""

    run_id: str
    job: int
    variant: str
    repeat: int
    history_points: int | None
    logged_at: int
    """When the job logged its results (ms), the histories' and summary's timestamp."""
    ended: int
    """When the job ended (ms), the run's end time."""
    summary: dict[str, float] = field(default_factory=dict)
    tags: dict[str, str] = field(default_factory=dict)
    outcome: str = ""
    errors: dict[str, float] = field(default_factory=dict)
    """The relative L2 error per field, for the outcome line."""
    params: dict[str, str] = field(default_factory=dict)
    """What the job's process logged to the run while it trained, sent again where the store may have missed it
    (:mod:`cruxlab.runtime.kept`): the params, ``logged_tags`` and ``metrics`` (a measurement beside the training)."""
    logged_tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)
    opening: dict | None = None
    """How the run is created where the store never created it (``run_id`` empty): ``experiment_id``,
    ``start_time``, ``run_name``, ``tags``."""
    store: str = ""
    """The tracking store's URI, without credentials, where a lone run's results kept after a store fault go
    (``crux-run --write-kept``: :mod:`cruxlab.runtime.write_kept`); empty for a sweep's job."""


def handed_over(sweep_dir: Path) -> Path:
    """The folder where the jobs of the sweep in ``sweep_dir`` leave their results."""
    return sweep_dir / FOLDER


def hand_over(sweep_dir: Path, results: Results, staged: Path) -> None:
    """Leave ``results`` and the artifacts staged in ``staged`` (moved) for the sweep's driver."""
    leave(handed_over(sweep_dir), results, staged)


def leave(folder: Path, results: Results, staged: Path) -> Path:
    """Put ``results`` and the artifacts staged in ``staged`` (moved) into ``folder/<job>``, whole or not at all
    for a reader that scans ``folder``, replacing what was there; that folder. OSError (the artifacts left in
    ``staged``) where the disk takes them not."""
    folder.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{results.job}-", dir=folder))
    try:
        try:
            staged.rename(partial / ARTIFACTS)  # one filesystem: nothing is copied
        except OSError:
            shutil.copytree(staged, partial / ARTIFACTS)
        (partial / RESULTS).write_text(json.dumps(asdict(results)))
    except OSError:
        if not staged.exists():
            (partial / ARTIFACTS).rename(staged)
        shutil.rmtree(partial, ignore_errors=True)
        raise
    final = folder / str(results.job)
    if final.exists():
        shutil.rmtree(final)
    partial.rename(final)
    shutil.rmtree(staged, ignore_errors=True)
    return final


def say_ended(sweep_dir: Path, job: int, why: str, overrides: list[str]) -> None:
    """Tell the sweep's driver that job ``job`` (run with ``overrides``) ended without returning, and ``why``:
    it closes the job's run and says so at once, not when the sweep ends."""
    folder = handed_over(sweep_dir)
    folder.mkdir(parents=True, exist_ok=True)
    partial = folder / f".{job}{ENDED}.part"
    partial.write_text(json.dumps({"job": job, "why": why, "overrides": overrides}))
    partial.rename(folder / f"{job}{ENDED}")


def say_started(sweep_dir: Path, job: int) -> None:
    """Tell the sweep's driver that job ``job`` passed its checks and trains (it says the launcher's line about it:
    :mod:`cruxlab.runtime.launch_lines`)."""
    folder = handed_over(sweep_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{job}{STARTED}").touch()


def read_results(entry: Path) -> Results:
    """The results left in ``entry`` (:func:`leave`); OSError, ValueError or TypeError where they cannot be read."""
    return Results(**json.loads((entry / RESULTS).read_text()))


class Pickup:
    """The driver's thread that hands every job's results left in ``sweep_dir`` to ``take`` (the results and
    their artifacts' folder, whose files ``take`` moves away: the folder goes when it returns), in the order they
    appear, until :meth:`stop`; the number of each job said to start to ``started``, and the note of each job
    whose process ended to ``ended``. ``unreadable``: job number (as its run's ``crux.job`` tag) -> why its
    results could not be read or taken over, for the closing of its run."""

    def __init__(self, sweep_dir: Path, take: Callable[[Results, Path], None],
                 ended: Callable[[dict], None] | None = None, started: Callable[[int], None] | None = None):
        self._folder, self._take, self._ended, self._started = handed_over(sweep_dir), take, ended, started
        self.unreadable: dict[str, str] = {}
        self._stopped = threading.Event()
        self._scanning = threading.Lock()
        self._thread = threading.Thread(target=self._watch, name="crux-results-pickup", daemon=True)

    def start(self) -> "Pickup":
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching after taking every result left so far (the launcher has returned: none is on its way)."""
        self._stopped.set()
        self._thread.join()

    def take_now(self) -> None:
        """Take what was left so far now, in the calling thread: a launch returned, and what its jobs left counts."""
        with self._scanning:
            self._scan()

    def _watch(self) -> None:
        while True:
            stopping = self._stopped.wait(POLL_SECONDS)
            self.take_now()
            if stopping:
                return

    def _scan(self) -> None:
        if not self._folder.is_dir():
            return
        for entry in _arrived(self._folder):
            if entry.name.endswith(ENDED):
                self._job_ended(entry)
                continue
            if entry.name.endswith(STARTED):
                if self._started is not None:
                    self._started(int(entry.name.removesuffix(STARTED)))
                entry.unlink(missing_ok=True)
                continue
            try:
                results = read_results(entry)
            except (OSError, ValueError, TypeError) as error:
                self.unreadable[entry.name] = failure_line(error)
                log.error("the results left in %s cannot be read (%s); the job's run is closed FAILED when the sweep "
                          "ends", entry, error)
                shutil.rmtree(entry, ignore_errors=True)
                continue
            try:
                self._take(results, entry / ARTIFACTS)
            except Exception as error:  # noqa: BLE001 - the pickup must go on for the other jobs
                self.unreadable[str(results.job)] = masked(failure_line(error))
                log.error("the results of job %s (run %s) could not be taken over: %s; the run is closed when the "
                          "sweep ends", results.job, results.run_id, masked(failure_line(error)))
            finally:
                shutil.rmtree(entry, ignore_errors=True)

    def _job_ended(self, note: Path) -> None:
        """Hand what :func:`say_ended` left in ``note`` to ``ended``, once."""
        try:
            if self._ended is not None:
                self._ended(json.loads(note.read_text()))
        except Exception as error:  # noqa: BLE001 - the pickup must go on; the sweep's end closes the run
            log.error("the end of a job's process, noted in %s, could not be handled: %s", note,
                      masked(failure_line(error)))
        finally:
            note.unlink(missing_ok=True)


def _arrived(folder: Path) -> list[Path]:
    """The entries of ``folder`` that are whole, in the order they arrived. An entry still being written (its name
    starts with a dot) is left out, and so is one gone between the listing and its reading: a job's results being
    renamed into place, or a note taken meanwhile, is seen at the next scan."""
    found = []
    for entry in folder.iterdir():
        if entry.name.startswith("."):
            continue
        try:
            found.append((entry.stat().st_mtime, entry))
        except FileNotFoundError:
            continue
    return [entry for _, entry in sorted(found)]
