"""The artifact store is a store: a run's artifacts that cannot be written are a store fault, as the tracking
store's are.

A run's artifacts go where its experiment says: a folder on this machine (``file://``, beside a SQLite store),
a tracking server that keeps them itself (``mlflow-artifacts:``), or a store of their own. A write there that
fails, and does not pass within ``tracking.retry_seconds`` (:func:`cruxlab.store.faults.patiently`), raises
:class:`cruxlab.store.faults.StoreFault` naming the artifact store (:func:`write_artifacts`): a folder turned
read-only, a full disk under it, a server answering 500 because its artifact root cannot be written. Its job's
results are then kept, no job starts after it, and the sweep's last line names the artifact store, as for a
fault of the tracking store. Before a sweep's job trains, a folder on this machine is checked to take a file
(:func:`check_artifact_folder`): no job trains for a folder that cannot keep what it trained.
"""
from __future__ import annotations

import errno
import tempfile
from http import HTTPStatus
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from mlflow.exceptions import MlflowException
from requests.exceptions import RequestException

from cruxlab.store.connection import ANSWERED, brief
from cruxlab.store.faults import StoreFault, is_disk_full, retry_budget
from cruxlab.store.secrets import masked

SERVED = "mlflow-artifacts:"
"""The scheme of artifacts a tracking server keeps itself (``mlflow server --artifacts-destination``)."""
ARTIFACT_ERRORS = (OSError, MlflowException, RequestException)


def artifact_store(location: str, tracking_uri: str) -> str:
    """The artifact store of ``location`` (an experiment's artifact URI, or a run's), in words."""
    if location.startswith(SERVED):
        return f"the artifact store at {location} (kept by the server at {masked(tracking_uri)})"
    return f"the artifact store at {masked(location)}"


def location_folder(location: str) -> Path | None:
    """The folder on this machine that ``location`` names (``file://`` or a plain path); None for any other store."""
    parts = urlsplit(location)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    return Path(location) if not parts.scheme else None


def experiment_location(run_artifacts: str, run_id: str) -> str:
    """The experiment's artifact location in which a run's (``<experiment>/<run id>/artifacts``) lies."""
    suffix = f"/{run_id}/artifacts"
    return run_artifacts[:-len(suffix)] if run_artifacts.endswith(suffix) else run_artifacts


def _is_artifact_stores(fault: StoreFault, location: str) -> bool:
    """Whether ``fault``, met writing artifacts to ``location``, is the artifact store's: always where it is not
    the tracking server's own, else where the server answered with an error or its disk is full (a server that
    does not answer at all is the tracking store's fault)."""
    return not location.startswith(SERVED) or is_disk_full(fault) or ANSWERED.search(str(fault.__cause__)) is not None


def write_artifacts(client: Any, run_id: str, folder: Path) -> None:
    """Upload the files of ``folder`` as run ``run_id``'s artifacts through ``client`` (patient: a
    :class:`cruxlab.store.faults.PatientClient`, which waits for a store fault to pass), after reading from the
    tracking store where they go; StoreFault naming the artifact store where it does not take them."""
    location = client.get_run(run_id).info.artifact_uri  # a fault here is the tracking store's
    named = artifact_store(experiment_location(location, run_id), client.tracking_uri)
    what = f"writing the artifacts of run {run_id}"
    try:
        client.log_artifacts(run_id, str(folder))
    except StoreFault as fault:
        if not _is_artifact_stores(fault, location):
            raise
        answered = ANSWERED.search(str(fault.__cause__))
        message = str(fault) if answered is None else (
            f"{what} was answered {answered[1]} ({HTTPStatus(int(answered[1])).phrase}) for {retry_budget():g} s "
            f"(tracking.retry_seconds): the server's log says why")
        raise StoreFault(message, store=named) from fault.__cause__
    except ARTIFACT_ERRORS as error:
        reason = str(error) if isinstance(error, OSError) and error.filename else brief(error)
        raise StoreFault(f"{what} failed: {reason}", store=named) from error


PROBED = (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT, errno.ENOENT, errno.ENOTDIR)


def check_artifact_folder(location: str, tracking_uri: str) -> None:
    """StoreFault naming the artifact store where ``location`` is a folder on this machine that takes no file (a
    read-only file system, no permission, no room for a file's entry): a job would train for nothing there. A
    folder not made yet is checked at the nearest folder above it that exists; other stores are not checked."""
    folder = location_folder(location) if location else None
    if folder is None:
        return
    existing = folder
    while not existing.is_dir() and existing != existing.parent:
        existing = existing.parent
    try:
        with tempfile.TemporaryFile(dir=existing):  # never seen by others: no name on Linux, removed on closing
            pass
    except OSError as error:
        if error.errno not in PROBED:
            raise
        raise StoreFault(f"{existing} takes no file ({error.strerror}: errno {errno.errorcode[error.errno]})",
                         store=artifact_store(location, tracking_uri)) from error
