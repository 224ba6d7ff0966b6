"""Where runs go: one absolute tracking URI for every job, the store checked before anything is written to it,
experiments created once.

As MLflow's own default, the store is ``mlflow.db`` in the working directory;
but jobs of a sweep may start elsewhere (other processes, other nodes), so the
URI is made absolute once and every job receives it with its parent run
(:mod:`cruxlab.runtime.multirun` sets both for every job).

Whatever keeps a command from using the store raises :class:`StoreError`, whose
message is one line naming the store and the fix. A SQLite file is checked with
SQLite itself before MLflow opens it (MLflow would give a file that is not yet a
store a fresh schema, and report a damaged one with a long traceback), a
tracking server that does not answer is given up within seconds (:data:`HTTP_LIMITS`;
MLflow's own defaults retry for about 4 minutes), and a PostgreSQL server is asked
for one ``SELECT 1`` within :data:`POSTGRESQL_SECONDS` first (MLflow retries the
opening of a SQL store for about 100 s, whatever the reason it fails: a wrong
password as well as a stopped server).

MLflow creates a new SQLite store's tables the first time a process opens it, in
several steps; two processes doing so at once break each other's migration
(``alembic_version ... 0 found``). :func:`writable_store` therefore creates them
while holding a lock on the store's folder, which every crux command takes before
opening a store that has no tables yet; a store that has no file yet is given a
copy of MLflow's empty schema (:mod:`cruxlab.store.empty_schema`).
"""
from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import sqlite3
import sys
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Callable, Iterator, Mapping

from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from mlflow.utils.credentials import read_mlflow_creds
from requests.exceptions import RequestException

from cruxlab.store import empty_schema
from cruxlab.store.contract import CLAIM, PARENT_ID, SWEEP, SWEPT
from cruxlab.store.descriptions import experiment_tags
from cruxlab.store.kinds import POSTGRESQL, StoreKind, is_tracking_server, kind_of, sqlite_file, sqlite_uri, store_folder
from cruxlab.store.secrets import PASSWORD_VARIABLE, masked, move_credentials, without_credentials

log = logging.getLogger(__name__)

PARENT_RUN, TRACKING_URI = "CRUX_PARENT_RUN_ID", "CRUX_TRACKING_URI"
"""The environment variables that give each job of a sweep its parent run and its store."""
SEARCH_PARENT = "CRUX_SEARCH_PARENT_RUN_ID"
"""The environment variable that gives each job of another Hydra sweeper's multirun its parent run
(:mod:`cruxlab.runtime.search`)."""
DESTINATION = "CRUX_DESTINATION"
"""The environment variable that gives each job of a sweep where it logs (:meth:`Destination.handed_down`): a job
that has it reads nothing from the store before it trains."""
# Values the user set in the environment win.
HTTP_LIMITS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
               "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}
"""MLflow's own retries of one request and the seconds it waits for each answer (MLflow's defaults: 7 retries
doubling from 2 s, 120 s per answer, about 4 minutes against a server that is down)."""
ANSWERED = re.compile(r"too many (\d+) error responses")
"""What MLflow's client says of a server that answered a request with an error status (500, 503: its store or
artifact root cannot be written) rather than not at all; the status."""
POSTGRESQL_SECONDS = 10
"""How long the check of a PostgreSQL store (:func:`check_postgresql`) waits for its server to answer."""
CLIENT_ERRORS = (MlflowException, RequestException, sqlite3.Error)
PROBLEM_CHARS = 300


def request_deadline() -> float:
    """The longest one request to a tracking server takes before MLflow gives it up, in seconds: every try waits
    its timeout for an answer, with MLflow's backoff (urllib3's: none before the first retry, then the factor
    doubling) between tries (:data:`HTTP_LIMITS`, or what the environment sets)."""
    def setting(key: str) -> float:
        return float(os.environ.get(key, HTTP_LIMITS[key]))
    retries = int(setting("MLFLOW_HTTP_REQUEST_MAX_RETRIES"))
    backoff = sum(setting("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR") * 2 ** (retry - 1) for retry in range(2, retries + 1))
    return (retries + 1) * setting("MLFLOW_HTTP_REQUEST_TIMEOUT") + backoff


def store_error_types() -> tuple[type[BaseException], ...]:
    """What a store's client raises when the store fails a request: MLflow's errors, the HTTP client's, SQLite's,
    and SQLAlchemy's where it is imported. Only MLflow's SQL store imports SQLAlchemy, so no other can have raised
    its errors; a tracking server's client does without it (0.09 s of a sweep's imports)."""
    sql = sys.modules.get("sqlalchemy.exc")
    return CLIENT_ERRORS + ((sql.SQLAlchemyError,) if sql is not None else ())


class StoreError(Exception):
    """The tracking store cannot be used as a command needs it; the message is one line for the user, with any
    credential in it masked (:func:`cruxlab.store.secrets.masked`)."""

    def __init__(self, message: str):
        super().__init__(masked(message))


@dataclass(frozen=True)
class Access:
    """How a command uses the store, for its messages: what it ``does`` to it, the option that names the
    store (``setting``), the store it ``needs``, and whether a store that fails it may need restoring."""

    does: str
    setting: str
    needs: str
    restore: bool
    permission: str
    """What a server with authentication must grant: READ, or EDIT (log runs)."""


READING = Access("read", "--tracking-uri", "the store your sweeps logged to", restore=True, permission="READ")
WRITING = Access("written", "tracking.uri=", "a store this command can write (sqlite:///PATH/mlflow.db or "
                                             "http://HOST:PORT)", restore=False, permission="EDIT")


def tracking_uri(configured: str | None, folder: Path | None = None) -> str:
    """The store's URI: ``configured``, else ``$MLFLOW_TRACKING_URI``, else ``mlflow.db`` in the working directory.

    A relative SQLite path is made absolute against ``folder``, the folder of the command that was typed (default:
    the working directory; a job that Hydra runs in its output folder passes the command's), and credentials are
    left out (:func:`cruxlab.store.secrets.without_credentials`): they reach the store's client by the environment,
    where :func:`move_store_credentials` puts them. Nothing is written.
    """
    uri = without_credentials(configured or os.environ.get("MLFLOW_TRACKING_URI") or sqlite_uri("mlflow.db"))
    path = sqlite_file(uri)
    return sqlite_uri(((folder or Path.cwd()) / path).resolve()) if path is not None else uri


def move_store_credentials(configured: str | None) -> None:
    """Move the credentials of the store's URI (``configured``, else ``$MLFLOW_TRACKING_URI``) into the
    environment (:func:`cruxlab.store.secrets.move_credentials`), where the store's client reads them and the
    processes a sweep starts inherit them; ``$MLFLOW_TRACKING_URI`` keeps its URI without them. Called before the
    store of :func:`tracking_uri` is opened."""
    if configured:
        move_credentials(configured)
    elif os.environ.get("MLFLOW_TRACKING_URI"):
        os.environ["MLFLOW_TRACKING_URI"] = move_credentials(os.environ["MLFLOW_TRACKING_URI"])


def experiment_name(configured: str | None, choices: Mapping[str, str | None]) -> str:
    """``configured``, else the sweep's name (Hydra's choice of ``sweeps``), else ``crux``."""
    return configured or choices.get("sweeps") or "crux"


# -- checking a store ---------------------------------------------------------------------------
@contextmanager
def bounded_http() -> Iterator[None]:
    """Within: MLflow's HTTP retries and timeout bounded by :data:`HTTP_LIMITS` where the user set none."""
    unset = [key for key in HTTP_LIMITS if key not in os.environ]
    os.environ.update({key: HTTP_LIMITS[key] for key in unset})
    try:
        yield
    finally:
        for key in unset:
            os.environ.pop(key, None)


@contextmanager
def store_errors(uri: str, access: Access, experiment: str = "") -> Iterator[None]:
    """Turn what the tracking store raises within into one StoreError line naming the store and the fix
    (``experiment``: the one the command works on, named when a server refuses it)."""
    try:
        yield
    except store_error_types() as error:
        refusal = refused(error, uri, access, experiment)
        if refusal:
            raise StoreError(refusal) from None
        where = f"MLFLOW_TRACKING_URI / {access.setting}"
        if is_tracking_server(uri):
            raise StoreError(f"the tracking server at {uri} did not answer ({brief(error)}): start it, or point "
                             f"{where} at a running one") from None
        raise StoreError(f"the tracking store at {uri} could not be {access.does} ({brief(error)}): point {where} "
                         f"at {access.needs}" + (", or restore it from a backup" if access.restore else "")) from None


def refused(error: BaseException, uri: str, access: Access, experiment: str) -> str | None:
    """What a tracking server with authentication refused, and how to get it, in one line; None for any other
    error. 401: no credentials or wrong ones; 403: the user lacks the permission on the experiment."""
    code = getattr(error, "error_code", None)
    if code == "UNAUTHENTICATED":
        return (f"the server at {uri} refused the credentials: set MLFLOW_TRACKING_USERNAME and "
                f"MLFLOW_TRACKING_PASSWORD (or ~/.mlflow/credentials)")
    if code == "PERMISSION_DENIED":
        user = read_mlflow_creds().username or "(no name given)"
        what = f"experiment {experiment!r}" if experiment else "this store's experiments"
        verb = "read" if access.permission == "READ" else "write"
        return (f"user {user} may not {verb} {what} at {uri}: ask for {access.permission} permission, or use "
                f"another experiment name")
    return None


def brief(error: BaseException) -> str:
    """An exception in a few words: a server's error status (``the server answered 503 (Service Unavailable)``:
    MLflow's client keeps no more of it), a request a server did not answer in time (``no answer within 10 s``), its
    innermost OS reason (``[Errno 111] Connection refused``) where it has one, else its type and the first
    sentence of its message."""
    text = str(error)
    answered = ANSWERED.search(text)
    if answered:
        return f"the server answered {answered[1]} ({HTTPStatus(int(answered[1])).phrase}): its log says why"
    waited = re.search(r"Read timed out\. \(read timeout=([\d.]+)\)", text)
    if waited:
        return f"no answer within {float(waited[1]):g} s"
    reasons = re.findall(r"\[Errno -?\d+\] [^'\")]+", text)
    if reasons:
        return reasons[-1].strip()
    first = text.strip().splitlines()[0].split(". ")[0] if text.strip() else ""
    return f"{type(error).__name__}: {first}"[:PROBLEM_CHARS] if first else type(error).__name__


def check_sqlite(path: Path, uri: str, access: Access) -> None:
    """Read MLflow's schema version and experiments table, read-only: a file of another kind, or a truncated or
    corrupt store, fails here before MLflow touches it."""
    try:
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            db.execute("SELECT version_num FROM alembic_version").fetchall()
            db.execute("SELECT experiment_id, name FROM experiments").fetchall()
    except sqlite3.Error as error:
        raise StoreError(f"{uri} is not a readable MLflow store ({brief(error)}): point MLFLOW_TRACKING_URI / "
                         f"{access.setting} at {access.needs}, or restore the file from a backup") from None


def check_postgresql(uri: str, access: Access) -> None:
    """Connect to the PostgreSQL server of ``uri`` and run ``SELECT 1``, within :data:`POSTGRESQL_SECONDS`;
    StoreError in one line where it refuses the user or does not answer. Nothing is checked where PostgreSQL's
    client (psycopg, crux's ``postgres`` extra) is not installed: MLflow then says so."""
    try:
        import psycopg
    except ImportError:
        return
    rest = uri.split("://", 1)[1]
    try:
        with psycopg.connect(f"postgresql://{rest}", connect_timeout=POSTGRESQL_SECONDS) as connection:
            connection.execute("SELECT 1")
    except psycopg.Error as error:
        first = (str(error).strip().splitlines() or [""])[0]  # libpq's reason, then hints on further lines
        reason = " ".join(first.split("failed: ")[-1].split()) or type(error).__name__
        if "password" in reason or "authentication" in reason:
            raise StoreError(f"the PostgreSQL server of {uri} refused the user ({reason}): set {PASSWORD_VARIABLE} "
                             f"to the user's password (or give it in the URI)") from None
        answer = ("refused the connection" if "refused" in reason.lower() else
                  f"did not answer within {POSTGRESQL_SECONDS} s")  # nothing listens there, or nothing came back
        raise StoreError(f"the PostgreSQL server of {uri} {answer} ({reason}): start it, or point "
                         f"MLFLOW_TRACKING_URI / {access.setting} at a running one") from None


SERVER_CHECKS: dict[StoreKind, Callable[[str, Access], None]] = {POSTGRESQL: check_postgresql}
"""How the server of each store kind that has a check of its own is asked to take the user before MLflow opens it
(MLflow's own retries take minutes); a tracking server is asked by the first query, within :data:`HTTP_LIMITS`."""


def check_server(uri: str, access: Access) -> None:
    """Ask the server of ``uri`` its kind's check (:data:`SERVER_CHECKS`); StoreError in one line where it fails.
    Nothing for a store whose kind has none."""
    check = SERVER_CHECKS.get(kind_of(uri))
    if check is not None:
        check(uri, access)


def writable_store(uri: str) -> MlflowClient:
    """A client on ``uri`` once the store is known to take a command's runs: a SQLite store's folder exists
    and may be written, its file (if any) is an MLflow store, and its tables exist (created now, under the
    folder's lock, for a new one); any other store answers a query. Raises StoreError otherwise."""
    path = sqlite_file(uri)
    if path is not None:
        folder = path.parent
        problem = (f"its folder {folder} does not exist" if not folder.exists() else
                   f"{folder} is not a folder" if not folder.is_dir() else
                   f"its folder {folder} cannot be written" if not os.access(folder, os.W_OK) else
                   f"{path} cannot be written" if path.exists() and not os.access(path, os.W_OK) else None)
        if problem:
            raise StoreError(f"the tracking store at {uri} cannot be written: {problem}; point MLFLOW_TRACKING_URI / "
                             f"{WRITING.setting} at {WRITING.needs}")
        # a store that another process is making (its tables made in several steps) has not every table yet; it is
        # judged under the lock, once that process is done
        if not empty_schema.has_every_table(path):
            with locked_folder(folder):
                if not empty_schema.has_every_table(path):
                    _has_tables(path, uri)  # a file that is no MLflow store is refused here
                    if not path.exists():
                        empty_schema.place(path)
                    return _open(uri)  # MLflow creates (or completes) the tables under the lock
    check_server(uri, WRITING)
    return _open(uri)


def _has_tables(path: Path, uri: str) -> bool:
    """Whether the SQLite file at ``path`` holds MLflow's tables: False for no file or a database without
    tables, StoreError for anything but an MLflow store."""
    if not path.is_file() or path.stat().st_size == 0:
        return False
    try:
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            if not db.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall():
                return False
    except sqlite3.Error:
        pass  # check_sqlite names what is wrong
    check_sqlite(path, uri, WRITING)
    return True


@contextmanager
def locked_folder(folder: Path) -> Iterator[None]:
    """Within: an exclusive lock on ``folder`` (held by one process at a time, released if it dies; it takes no
    room on the disk). A filesystem that locks no folder (NFS emulates ``flock`` with locks that need a file open
    for writing) is used unlocked, as it would be without this lock."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX)
        except OSError as error:
            log.debug("%s could not be locked (%s): used unlocked", folder, error)
        yield
    finally:
        os.close(handle)


def _open(uri: str) -> MlflowClient:
    """A client on ``uri`` that has answered a query (a new SQLite store's tables are created by it). The
    HTTP client's warning at each retry is held back: the StoreError says it all."""
    retries = logging.getLogger("urllib3.connectionpool")
    level = retries.level
    retries.setLevel(logging.ERROR)
    try:
        with bounded_http(), store_errors(uri, WRITING):
            client = MlflowClient(uri)
            client.search_experiments(max_results=1)
    finally:
        retries.setLevel(level)
    return client


# -- experiments and runs -----------------------------------------------------------------------
def ensure_experiment(client: MlflowClient, name: str, uri: str, claim: str = "") -> str:
    """The id of experiment ``name``, created (artifacts in ``mlartifacts/<name>/`` beside a SQLite store) if
    absent, tagged as training runs described by ``claim`` (:func:`cruxlab.store.descriptions.experiment_tags`).

    A sweep calls this once before its jobs; a concurrent creation elsewhere (two
    plain crux-runs) is met by reading the winner's experiment back. An experiment
    of that name that was deleted (in the UI) stays deleted, with its runs: MLflow
    keeps the name of a deleted experiment taken, so it is renamed
    ``<name> (deleted, id <id>)`` first, and a new experiment ``name`` is created,
    with a warning saying so.
    """
    found = client.get_experiment_by_name(name)
    if found is not None and found.lifecycle_stage == "deleted":
        kept = f"{name} (deleted, id {found.experiment_id})"
        client.restore_experiment(found.experiment_id)  # MLflow renames active experiments only
        client.rename_experiment(found.experiment_id, kept)
        client.delete_experiment(found.experiment_id)
        log.warning("experiment %r (id %s) was deleted: it stays deleted, with its runs, renamed %r; these runs "
                    "go to a new experiment %r", name, found.experiment_id, kept, name)
        found = None
    tags = experiment_tags(claim)
    if found is None:
        folder = store_folder(uri)
        location = (folder / "mlartifacts" / name).as_uri() if folder is not None else None
        try:
            return client.create_experiment(name, artifact_location=location, tags=tags)
        except MlflowException:
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
    for key, value in tags.items():
        if found.tags.get(key) != value:
            client.set_experiment_tag(found.experiment_id, key, value)
    return found.experiment_id


def child_runs(client: MlflowClient, experiment_id: str, parent_run_id: str) -> Iterator[Run]:
    """Every run whose ``mlflow.parentRunId`` is ``parent_run_id``, page by page."""
    return runs_where(client, experiment_id, f"tags.{PARENT_ID} = '{parent_run_id}'")


def runs_where(client: MlflowClient, experiment_id: str, where: str, order_by: list[str] | None = None
               ) -> Iterator[Run]:
    """The runs of the experiment that match MLflow's filter ``where``, page by page."""
    token = None
    while True:
        page = client.search_runs([experiment_id], where, order_by=order_by, max_results=1000, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


@dataclass(frozen=True)
class Destination:
    """Where a job logs: the store, the experiment, the parent run (None for a lone crux-run), and what the
    sweep is (its name, claim and swept keys)."""

    uri: str
    experiment_id: str
    parent_run_id: str | None
    sweep: str
    claim: str
    swept: list[str] = field(default_factory=list)
    artifact_location: str = ""
    """The experiment's artifact location, where known."""

    def handed_down(self) -> str:
        """This destination as :data:`DESTINATION`'s value (JSON)."""
        return json.dumps(asdict(self))

    @staticmethod
    def from_handed_down(value: str) -> "Destination":
        """The destination that :meth:`handed_down` wrote."""
        return Destination(**json.loads(value))

    @staticmethod
    def of_parent(client: MlflowClient, uri: str, parent_run_id: str) -> "Destination":
        """Where the jobs of the sweep whose parent run is ``parent_run_id`` log, read from that run."""
        parent = client.get_run(parent_run_id)
        tags = parent.data.tags
        return Destination(uri, parent.info.experiment_id, parent_run_id, tags.get(SWEEP, ""),
                           tags.get(CLAIM, ""), json.loads(tags.get(SWEPT, "[]")))
