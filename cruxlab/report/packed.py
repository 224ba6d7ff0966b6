"""A SQLite store that travels as files: ``mlflow.db.gz`` (or ``mlflow.db.xz``) and an archive of its artifacts, read
where it was made.

A SQLite store's runs name their artifacts by absolute path, in ``mlartifacts/`` beside the store's file where the
sweep ran (``file:///tmp/crux-device-check/mlartifacts/<experiment>/<run>/artifacts``: scripts/device_check.sh keeps
that folder fixed for this). So the archive beside a packed store (``mlartifacts.tar.xz``, ``mlartifacts.tgz``, or
the device check's ``reports.tgz``, which holds ``mlartifacts/``) is unpacked into the folder its experiments name, where it was made,
files already there kept: the artifacts of several stores made there (a device check's calls) lie side by side.
The store's file itself is unpacked into a folder of the temporary directory named by its content's hash and the
version of MLflow's schema, never over another store's: one process may read several stores made in one place,
and MLflow keeps the database it opened at an address for the life of the process, so two stores never share one.

xz packs a store that is kept (in docs/) to about half of gzip's size, and its artifacts (histories in ``.npz``
files, alike from run to run) to a quarter: ``xz -9 mlflow.db`` and ``tar -cJf mlartifacts.tar.xz mlartifacts``.
"""
from __future__ import annotations

import gzip
import hashlib
import lzma
import os
import shutil
import sqlite3
import tarfile
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

from cruxlab.store.connection import StoreError
from cruxlab.store.empty_schema import schema_version
from cruxlab.store.kinds import PACKED_SUFFIXES, sqlite_uri

OPENERS = dict(zip(PACKED_SUFFIXES, (gzip.open, lzma.open)))
"""How a packed store's file is read, by its suffix."""
STORE_FILE = "mlflow.db"
ARTIFACTS = "mlartifacts"
ARCHIVES = ("mlartifacts.tar.xz", "mlartifacts.tgz", "reports.tgz")
"""The artifacts' archive beside a packed store, by the names it is looked for under, in this order."""


def _digest(path: Path) -> str:
    sha = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            sha.update(block)
    return sha.hexdigest()


def made_in(store: Path) -> Path:
    """The folder the SQLite store ``store`` was made in: the one whose ``mlartifacts/`` its experiments name.
    Raises StoreError where they name none, or several."""
    try:
        with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as connection:
            locations = [row[0] for row in connection.execute("SELECT artifact_location FROM experiments")]
    except sqlite3.Error as error:
        raise StoreError(f"{store} is not an MLflow store: {error}") from None
    folders = set()
    for location in locations:
        path = Path(unquote(urlparse(location).path)) if location.startswith("file:") else Path(location)
        if path.parent.name == ARTIFACTS:
            folders.add(path.parent.parent)
    if len(folders) != 1:
        raise StoreError(f"the store names {'no' if not folders else 'several'} folders of {ARTIFACTS}/ for its "
                         f"experiments' artifacts ({', '.join(map(str, sorted(folders))) or 'none'}): it was not made "
                         f"by a sweep into one SQLite file")
    return folders.pop()


def unpack(packed: Path) -> str:
    """The URI of the store ``packed`` unpacked, its artifacts' archive (where one lies beside it) unpacked where
    the store was made. Raises StoreError naming what is missing or cannot be written."""
    packed = packed.resolve()
    if not packed.is_file():
        raise StoreError(f"no packed store at {packed}: give the path of an mlflow.db.gz or mlflow.db.xz")
    # per version of MLflow's schema too: MLflow opening a store that lacks one of its tables migrates it in place,
    # which would leave the copy unreadable by an older MLflow reading the same packed store
    folder = Path(tempfile.gettempdir()) / f"crux-packed-{_digest(packed)[:16]}-{schema_version()}"
    store = folder / STORE_FILE
    if not store.is_file():
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, delete=False) as target:
                partial = Path(target.name)
                with OPENERS[packed.suffix](packed, "rb") as source:
                    shutil.copyfileobj(source, target)
            os.replace(partial, store)  # whole or not at all: a reader never finds half a store
        except (OSError, EOFError, lzma.LZMAError) as error:
            partial.unlink(missing_ok=True)
            raise StoreError(f"{packed} could not be unpacked: {error}") from None
    archive = next((packed.parent / name for name in ARCHIVES if (packed.parent / name).is_file()), None)
    if archive is not None:
        extract_artifacts(archive, made_in(store))
    return sqlite_uri(store)


def extract_artifacts(archive: Path, folder: Path) -> None:
    """The members of ``archive`` under ``mlartifacts/`` into ``folder``, files already there kept."""
    try:
        with tarfile.open(archive, "r:*") as tar:
            members = []
            for member in tar.getmembers():
                name = member.name.removeprefix("./")
                if (name == ARTIFACTS or name.startswith(f"{ARTIFACTS}/")) and not (folder / name).exists():
                    member.name = name
                    members.append(member)
            folder.mkdir(parents=True, exist_ok=True)
            tar.extractall(folder, members=members, filter="data")
    except (OSError, tarfile.TarError, EOFError) as error:
        raise StoreError(f"the artifacts in {archive} could not be unpacked where its store was made, {folder}: "
                         f"{error}") from None
