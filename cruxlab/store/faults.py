"""A store fault is not a job fault: a tracking store that is unreachable, full or restarting is waited for, up to
a budget, and past it the sweep stops and says so, instead of failing every job in turn.

Every write crux makes (MLflow's REST client, its SQL store, crux's direct
history insert, status updates) goes through :func:`patiently`: an error that
says the store is away (:func:`is_store_fault`: no connection, a timeout, a
database restarting) is retried with growing pauses for up to
``tracking.retry_seconds`` (:func:`set_retry_budget`, kept in the environment so
that the jobs a sweep starts inherit it) from the first failure; past that it
raises :class:`StoreFault`. A full disk is a store fault that does not pass by
itself: it raises StoreFault at once, naming the disk. MLflow's own HTTP retries are cut to seconds
(:data:`cruxlab.store.connection.HTTP_LIMITS`) so that this budget is the one that
counts. A job that meets a StoreFault writes it into the sweep's folder
(:func:`record_fault`): the jobs after it end at once, the sweep ends with one
line, and the runs it left open are closed later with that cause. The room for
that record is taken when the sweep starts (:func:`reserve_fault_record`), so
that a disk that fills up still takes it.
"""
from __future__ import annotations

import errno
import functools
import json
import logging
import os
import shutil
import socket
import sqlite3
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, TypeVar
from urllib.parse import urlsplit

from mlflow.exceptions import MlflowException
from requests.exceptions import ConnectionError as RequestsConnectionError
from requests.exceptions import Timeout

from cruxlab.store.connection import HTTP_LIMITS, brief, locked_folder, request_deadline
from cruxlab.store.kinds import is_tracking_server, kind_of, sqlite_file
from cruxlab.store.secrets import masked

log = logging.getLogger(__name__)

T = TypeVar("T")
RETRY_SECONDS = "CRUX_STORE_RETRY_SECONDS"
"""The environment variable that carries ``tracking.retry_seconds`` to every process of a sweep."""
DEFAULT_RETRY_SECONDS = 60.0
LONGEST_PAUSE = 8.0
FAULT_FILE = "store_fault.json"
"""In the sweep's folder, once a job met a store fault: that fault (``{"message": ..., "runs": {run id:
message}}``), padded with blanks (which JSON ignores) to the room reserved for it."""
RESERVE_FILE = "store_fault.reserved"
"""In the sweep's folder while no store fault was met: :data:`RESERVED_BYTES` of blanks, the room that the fault's
record takes over (renamed, then written in place) when there is one."""
RESERVED_BYTES = 64 * 1024
"""The room taken for the fault's record when a sweep starts: its message and a line per run left open."""
UNAVAILABLE = ("TEMPORARILY_UNAVAILABLE",)
FAULT_WORDS = ("failed with exception", "failed with timeout exception", "database or disk is full",
               "No space left on device", "503 != 200", "502 != 200", "504 != 200")
"""What MLflow's messages say when the store, not the request, failed."""
QUIET_LOGGERS = ("mlflow.store.db.utils", "urllib3.connectionpool")
"""Loggers that print a traceback or a warning at each failed attempt: the retry says it once instead."""


_retrying = 0  # calls of this process waiting for the store now
_retrying_lock = threading.Lock()
_recording = threading.Lock()  # a job and the process's writer may record a fault at once (and other processes:
# the jobs of a launcher's workers, the sweep's driver, each under the lock of the sweep's folder)


class StoreFault(Exception):
    """A store stayed unreachable, full or refusing writes for the whole retry budget; the message is one line
    saying what failed. ``store`` names the store where it is not the tracking store (the artifact store:
    :mod:`cruxlab.store.artifacts`)."""

    def __init__(self, message: str, store: str | None = None):
        super().__init__(message)
        self.store = store


def store_named(fault: BaseException | dict | None, tracking_uri: str) -> str:
    """The store a fault (a :class:`StoreFault`, or its record: :func:`recorded_fault`) met, in words: the
    artifact store it names, else the tracking store at ``tracking_uri`` (masked)."""
    store = fault.get("store") if isinstance(fault, dict) else getattr(fault, "store", None)
    return store or f"the tracking store at {masked(tracking_uri)}"


def bringing_back(fault: BaseException | dict | None, tracking_uri: str) -> str:
    """Where ``fault`` is the tracking server's at ``tracking_uri`` (not its artifact store's): how a server that
    scripts/mlflow_server.sh started comes back as it was, so that the command printed with it holds; else
    nothing."""
    if not is_tracking_server(tracking_uri) or store_named(fault, tracking_uri) != store_named(None, tracking_uri):
        return ""  # another store (its artifact store) failed
    return ("; a server that scripts/mlflow_server.sh started comes back on its own port, store and artifact root "
            "with `bash scripts/mlflow_server.sh restart DIR`")


def retry_budget() -> float:
    """Seconds a write waits for the store: ``tracking.retry_seconds`` of this sweep."""
    return float(os.environ.get(RETRY_SECONDS, DEFAULT_RETRY_SECONDS))


def set_retry_budget(seconds: float) -> None:
    """Make ``seconds`` this process's budget, and that of the processes it starts, MLflow's own HTTP retries
    bounded (:data:`HTTP_LIMITS`, where the user set none); quiet the per-attempt logs."""
    os.environ[RETRY_SECONDS] = str(float(seconds))
    for key, value in HTTP_LIMITS.items():
        os.environ.setdefault(key, value)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.CRITICAL)


def is_store_fault(error: BaseException) -> bool:
    """Whether ``error`` says the store is away (no connection, a timeout, a database down or restarting, no space
    left) rather than that the request was wrong."""
    if isinstance(error, (RequestsConnectionError, Timeout, sqlite3.OperationalError, ConnectionError, TimeoutError)):
        return True
    sql = sys.modules.get("sqlalchemy.exc")  # imported by MLflow's SQL store, the only one to raise its errors
    if sql is not None and (isinstance(error, sql.OperationalError)
                            or isinstance(error, sql.DBAPIError) and error.connection_invalidated):
        return True
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if isinstance(error, MlflowException):
        return error.error_code in UNAVAILABLE or any(words in str(error) for words in FAULT_WORDS)
    return False


def store_retrying() -> bool:
    """Whether a call of this process is waiting for the store now (:func:`patiently`, between its first
    failure and its success or StoreFault)."""
    return _retrying > 0


def _count_retrying(change: int) -> None:
    global _retrying
    with _retrying_lock:
        _retrying += change


DISK_FULL_WORDS = ("database or disk is full", "No space left on device", "Disk quota exceeded")
"""What SQLite, the OS and a server relaying them say of a disk with no room left."""


def is_disk_full(error: BaseException) -> bool:
    """Whether ``error``, or an error it was raised from, says a disk has no room left: a state that lasts until
    someone frees space, not a fault that passes."""
    while error is not None:
        if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if any(words in str(error) for words in DISK_FULL_WORDS):
            return True
        error = error.__cause__ or error.__context__
    return False


def full_disk(error: BaseException, uri: str | None = None, folder: Path | None = None) -> str:
    """A full disk in the user's words: which disk (the file that could not be written: a copy's destination,
    else a SQLite store's file, else ``folder``, the one being written) and how many bytes it has free; the store's
    own words where the disk is a server's."""
    written = error
    while written is not None and not getattr(written, "filename", None):
        written = written.__cause__ or written.__context__
    path = (getattr(written, "filename2", None) or getattr(written, "filename", None)  # a copy's: (source, target)
            or (uri and sqlite_file(uri)) or folder)
    if not path:
        return f"the store's disk is full ({brief(error)}): free some space on the store's server"
    folder = Path(path).parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    free = shutil.disk_usage(folder).free
    return f"the disk holding {path} is full ({free:,} bytes free): free some space there"


def patiently(call: Callable[[], T], what: str, uri: str | None = None) -> T:
    """``call()``, tried again while it fails with a store fault, for up to :func:`retry_budget` seconds from the
    start of the first try that failed; past that StoreFault naming ``what``, the seconds waited and the last
    error. A try that the store does not answer is given up by MLflow's HTTP client (:func:`request_deadline`),
    so that a store that does not answer is a fault within the budget plus one request's deadline. A full disk
    (:func:`is_disk_full`) is not waited for: StoreFault at once, naming the disk (``uri``: the store's, where it
    is a file)."""
    deadline, pause, first = None, 0.5, 0.0
    try:
        while True:
            tried = time.monotonic()
            try:
                return call()
            except Exception as error:
                if not is_store_fault(error):
                    raise
                if is_disk_full(error):
                    raise StoreFault(f"{what} failed: {full_disk(error, uri)}") from error
                now = time.monotonic()
                if deadline is None:
                    first, deadline = tried, tried + retry_budget()
                    _count_retrying(1)
                    if now < deadline:  # else its one try took the whole budget: the fault is said below
                        log.warning("the tracking store did not take %s (%s): trying again for up to %.0f s", what,
                                    brief(error), deadline - now)
                if now >= deadline:
                    raise StoreFault(f"{what} failed for {now - first:.0f} s (tracking.retry_seconds "
                                     f"{retry_budget():g} s, each try given up after {request_deadline():g} s "
                                     f"at most): {brief(error)}") from error
                time.sleep(min(pause, deadline - now))
                pause = min(2 * pause, LONGEST_PAUSE)
    finally:
        if deadline is not None:
            _count_retrying(-1)


REACH_SECONDS = 5.0
"""How long :func:`reach` waits for a store's server to take a connection, and a tracking server to answer."""


def reach(uri: str) -> None:
    """Open and close a connection to the server of ``uri`` (a tracking server, a PostgreSQL server on a host),
    and have a tracking server over plain HTTP answer ``GET /health`` (a server whose processes are stopped still
    takes connections): ConnectionError or TimeoutError, store faults, where none is taken or answered within
    :data:`REACH_SECONDS`. A store without a server (SQLite) is not checked here: its writes say whether its disk
    takes them."""
    parts, kind = urlsplit(uri), kind_of(uri)
    if not parts.hostname or kind is None or not kind.server:
        return
    with socket.create_connection((parts.hostname, kind.port(uri)), REACH_SECONDS):
        pass
    if parts.scheme == "http":
        try:
            urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=REACH_SECONDS).close()
        except urllib.error.HTTPError as answered:  # it answers; only an error of its own is its fault
            if answered.code >= 500:
                raise ConnectionError(f"the server answered {answered.code} to GET /health") from None
        except (urllib.error.URLError, TimeoutError) as error:
            reason = getattr(error, "reason", error)
            if isinstance(reason, TimeoutError):
                raise TimeoutError(f"the server did not answer GET /health within {REACH_SECONDS:g} s") from None
            raise ConnectionError(f"GET /health: {reason}") from None


class PatientClient:
    """An ``MlflowClient`` whose every public method goes through :func:`patiently`."""

    def __init__(self, client: Any):
        self.client = client

    def __getattr__(self, name: str) -> Any:
        member = getattr(self.client, name)
        if name.startswith("_") or not callable(member):
            return member

        @functools.wraps(member)
        def call(*args: Any, **kwargs: Any) -> Any:
            return patiently(lambda: member(*args, **kwargs), name, getattr(self.client, "tracking_uri", None))
        return call


def record_fault(folder: Path, run_id: str | None, fault: str | StoreFault) -> None:
    """Write into the sweep's ``folder`` that a store failed (``fault``: its message, or the StoreFault, which may
    name the store), with the run it left open: into the room reserved for it (:func:`reserve_fault_record`), in
    place, which a full disk takes, where it fits. The first fault recorded is the sweep's. The processes of a
    sweep (its driver, its launcher's workers) record one after another, none losing another's entry."""
    message, store = str(fault), getattr(fault, "store", None)
    with _recording, locked_folder(folder):
        recorded = recorded_fault(folder) or {"message": message, "runs": {}, **({"store": store} if store else {})}
        if run_id:
            recorded["runs"][run_id] = message
        _write_record(folder, recorded)


def record_kept(folder: Path, job: int, where: Path) -> None:
    """Add to the fault recorded in the sweep's ``folder`` that job ``job``'s results are kept in ``where``, a
    folder outside it (:mod:`cruxlab.runtime.kept`: the sweep's own disk had no room for them)."""
    with _recording, locked_folder(folder):
        recorded = recorded_fault(folder) or {"message": "", "runs": {}}
        recorded.setdefault("kept", {})[str(job)] = str(where)
        _write_record(folder, recorded)


def _write_record(folder: Path, recorded: dict) -> None:
    """``recorded`` as the sweep's fault record, in the reserved room where it fits."""
    text = json.dumps(recorded, indent=1).encode()
    path, written = folder / FAULT_FILE, folder / f"{FAULT_FILE}.part"  # whole or absent for a reader elsewhere
    if not path.is_file():
        try:  # the reserved room becomes the record: renamed and written in place, it needs no free space
            os.replace(folder / RESERVE_FILE, written)
        except FileNotFoundError:  # none reserved, or another process took it first
            pass
        else:
            if _filled(written, text):
                os.replace(written, path)
                return
    if not (path.is_file() and _filled(path, text)):
        written.write_bytes(text)
        os.replace(written, path)


def _filled(path: Path, text: bytes) -> bool:
    """Write ``text`` over the file at ``path`` in place, padded with blanks (which JSON ignores) to its size, so
    that a full disk takes it; False, nothing written, where it does not fit."""
    size = path.stat().st_size
    if len(text) > size:
        return False
    with open(path, "r+b") as file:
        file.write(text.ljust(size))
        file.flush()
        os.fsync(file.fileno())
    return True


def reserve_fault_record(folder: Path) -> None:
    """Take :data:`RESERVED_BYTES` in ``folder`` (:data:`RESERVE_FILE`) for the record of a store fault,
    forgetting one recorded there before (a sweep resumed in the same folder)."""
    (folder / FAULT_FILE).unlink(missing_ok=True)
    with open(folder / RESERVE_FILE, "wb") as file:
        file.write(b" " * RESERVED_BYTES)
        file.flush()
        os.fsync(file.fileno())


def recorded_fault(folder: Path | None) -> dict | None:
    """What :func:`record_fault` wrote into ``folder``; None where nothing was."""
    path = folder / FAULT_FILE if folder is not None else None
    if path is None or not path.is_file():
        return None
    try:
        text = path.read_text()
        return json.loads(text) if text.strip() else None  # blanks: room reserved, no fault
    except (OSError, ValueError):  # a record half written, read by another process: seen whole at its next look
        return None
