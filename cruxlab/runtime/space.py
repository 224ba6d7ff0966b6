"""Room for what a job writes, checked before it trains: a job that could not store its history would train to
the end and only then fail.

What a job writes is estimated from its epochs, its series (``loss/total``, one
``loss/<constraint>`` per constraint, one ``lr/<model>`` per model) and its
parameters: in a SQLite store each history value costs a ``metrics`` row with
MLflow's indexes (233 bytes a value over 20,000 values, MLflow 3.17, rounded up to
:data:`BYTES_PER_STORED_VALUE`); the artifacts hold each value again in
``stats.npz``, the parameters once per snapshot in ``params.npz``, and
``history.png``. Only folders of this machine are checked: a SQLite store's, and
artifacts kept in files (a SQLite or direct PostgreSQL store's); a tracking
server's disk is the server's. A store that runs full later anyway is a store fault
(:mod:`cruxlab.store.faults`).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

from cruxlab.runtime.liveness import process_exists
from cruxlab.store.kinds import sqlite_file, store_folder
from cruxlab.store.faults import StoreFault

BYTES_PER_STORED_VALUE = 250
BYTES_PER_FILED_VALUE = 16  # stats.npz: the value and its step, 8 bytes each
STORE_BYTES_PER_RUN = 64 * 1024  # the run's row, its params and tags
ARTIFACT_BYTES_PER_RUN = 256 * 1024  # history.png (about 60 KB), config.yaml, environment.json, npz headers


class NoRoom(StoreFault):
    """The store's or the artifacts' filesystem has less room than a job needs; one line with both figures."""


def local_folder(uri: str) -> Path | None:
    """The folder of this machine that ``uri`` (a store or an artifact location) writes into; None elsewhere."""
    if (folder := store_folder(uri)) is not None:
        return folder
    parsed = urlparse(uri)
    if parsed.scheme == "file" or (parsed.scheme == "" and uri.startswith("/")):
        return Path(unquote(parsed.path))
    return None


def needed_bytes(values: int, sent: int, parameter_bytes: int, snapshots: int) -> tuple[int, int]:
    """Bytes a job writes into a SQLite store, and into its artifacts: ``values`` history values in its
    ``stats.npz``, ``sent`` of them as metrics, parameters of ``parameter_bytes`` saved ``snapshots`` times."""
    return (STORE_BYTES_PER_RUN + sent * BYTES_PER_STORED_VALUE,
            ARTIFACT_BYTES_PER_RUN + values * BYTES_PER_FILED_VALUE + parameter_bytes * snapshots)


def check_room(store_uri: str, artifact_uri: str, values: int, sent: int, parameter_bytes: int,
               snapshots: int) -> None:
    """Raise NoRoom where the filesystem of the store or of the artifacts (one sum where they share one) has less
    free space than the job writes (:func:`needed_bytes`)."""
    store, artifacts = needed_bytes(values, sent, parameter_bytes, snapshots)
    wanted: dict[int, list] = {}  # filesystem -> [a folder on it, bytes]
    for folder, size in ((local_folder(store_uri), store), (local_folder(artifact_uri), artifacts)):
        if folder is not None:
            existing = _existing(folder)
            wanted.setdefault(os.stat(existing).st_dev, [existing, 0])[1] += size
    for folder, size in wanted.values():
        free = shutil.disk_usage(folder).free
        if free < size:
            raise NoRoom(f"a job of {values:,} history values needs about {size:,} bytes on the filesystem of {folder} "
                         f"for its run and artifacts, and {free:,} are free: free some space, shorten the job "
                         f"(solver.epochs), or point tracking.uri at a store with room")


def _existing(folder: Path) -> Path:
    """``folder``, or the nearest folder above it that exists (artifact folders are made on first use)."""
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


RESERVE_BYTES = 512 * 1024
"""Room a sweep holds on its SQLite store's filesystem while it runs, given back should that disk fill up so that
the sweep can still close its runs with the truth (a few rows, SQLite's journal)."""
RESERVE_PREFIX = ".crux-room-"


class StoreReserve:
    """:data:`RESERVE_BYTES` held in a file beside a SQLite store (``.crux-room-<store>-<pid>``) from
    :meth:`take` until :meth:`release`; nothing for a store on a server, whose disk is the server's. Files left by
    a process that no longer runs (``kill -9``) are removed by the next :meth:`take`."""

    def __init__(self, uri: str):
        store = sqlite_file(uri)
        self.path = store.parent / f"{RESERVE_PREFIX}{store.name}-{os.getpid()}" if store else None
        self.held = False

    def take(self) -> None:
        """Hold the room; NoRoom, before anything is written, where the disk has not that much free."""
        if self.path is None or not self.path.parent.is_dir():
            return
        for left in self.path.parent.glob(f"{RESERVE_PREFIX}*"):
            pid = left.name.rpartition("-")[2]
            if pid.isdigit() and int(pid) != os.getpid() and not process_exists(int(pid)):
                left.unlink(missing_ok=True)
        free = shutil.disk_usage(self.path.parent).free
        if free < RESERVE_BYTES and not self.path.exists():
            raise NoRoom(f"the filesystem of {self.path.parent} has {free:,} bytes free, and a sweep holds "
                         f"{RESERVE_BYTES:,} there to close its runs should the disk fill up: free some space, or "
                         f"point tracking.uri at a store with room")
        with open(self.path, "wb") as file:
            os.posix_fallocate(file.fileno(), 0, RESERVE_BYTES)
        self.held = True

    def release(self) -> None:
        """Give the room back (at once where the disk has filled up: the runs are closed in it)."""
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False
