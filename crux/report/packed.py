"""A SQLite store that travels as files: ``mlflow.db.gz`` and an archive of its artifacts, opened where it was made.

A SQLite store's runs name their artifacts by absolute path, in ``mlartifacts/`` beside the store's file where the
sweep ran (``file:///tmp/crux-device-check/mlartifacts/<experiment>/<run>/artifacts``: scripts/device_check.sh keeps
that folder fixed for this). A packed store is opened where it was made: its file is unpacked to ``mlflow.db`` in
the folder its experiments' artifacts name, and the archive beside it (``mlartifacts.tgz``, or the device check's
``reports.tgz``, which holds ``mlartifacts/``) into that folder, files already there kept. So the reports made from
it name the same store, and are the same, as those made where it ran. A store already at that place is replaced only
where crux unpacked it (a file ``.crux-unpacked`` beside it says from what); any other is refused, never overwritten.
"""
from __future__ import annotations

import gzip
import hashlib
import shutil
import sqlite3
import tarfile
import tempfile
from pathlib import Path
from urllib.parse import unquote, urlparse

from crux.tracking.store import SQLITE, StoreError

PACKED_SUFFIX = ".gz"
STORE_FILE = "mlflow.db"
ARTIFACTS = "mlartifacts"
ARCHIVES = ("mlartifacts.tgz", "reports.tgz")
"""The artifacts' archive beside a packed store, by the names it is looked for under, in this order."""
UNPACKED = ".crux-unpacked"


def packed_path(uri: str) -> Path | None:
    """The file of a packed store (``sqlite:///PATH.gz`` or a path ending in ``.gz``); None for any other URI."""
    path = uri[len(SQLITE):] if uri.startswith(SQLITE) else uri
    return Path(path) if "://" not in path and path.endswith(PACKED_SUFFIX) else None


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
    """Unpack the store ``packed`` (and its artifacts' archive beside it) where it was made; its URI there.
    Raises StoreError naming what is missing or in the way."""
    packed = packed.resolve()
    if not packed.is_file():
        raise StoreError(f"no packed store at {packed}: give the path of an mlflow.db.gz")
    digest = _digest(packed)
    with tempfile.TemporaryDirectory(prefix="crux-packed-") as scratch:
        store = Path(scratch) / STORE_FILE
        try:
            with gzip.open(packed, "rb") as source, open(store, "wb") as target:
                shutil.copyfileobj(source, target)
        except (OSError, EOFError) as error:
            raise StoreError(f"{packed} could not be unpacked: {error}") from None
        folder = made_in(store)
        target = folder / STORE_FILE
        marker = folder / UNPACKED
        try:
            folder.mkdir(parents=True, exist_ok=True)
            if target.exists() and not marker.is_file() and _digest(target) != _digest(store):
                raise StoreError(f"{packed} was made in {folder}, where another store is, {target}, which crux did "
                                 f"not unpack: move it away, and open {packed} again")
            if not (target.exists() and marker.is_file() and marker.read_text().strip() == digest):
                shutil.copyfile(store, target)
                marker.write_text(f"{digest}\n")
        except OSError as error:
            raise StoreError(f"{packed} could not be unpacked where it was made, {folder}: {error}") from None
    archive = next((packed.parent / name for name in ARCHIVES if (packed.parent / name).is_file()), None)
    if archive is not None:
        extract_artifacts(archive, folder)
    return f"{SQLITE}{target}"


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
            tar.extractall(folder, members=members, filter="data")
    except (OSError, tarfile.TarError, EOFError) as error:
        raise StoreError(f"the artifacts in {archive} could not be unpacked into {folder}: {error}") from None
