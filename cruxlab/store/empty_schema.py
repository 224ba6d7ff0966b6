"""A new SQLite store, given MLflow's empty schema by a copy instead of by MLflow's migrations.

MLflow gives a new SQLite store its tables by running every one of its schema migrations (some seventy alembic
scripts: 1-2 s of a command's start on a 2-core CPU, again for each new store). crux runs them once per version of
MLflow, SQLAlchemy and MLflow's migrations, into a file in the user's cache (``$XDG_CACHE_HOME/crux/mlflow``, else
``~/.cache/crux/mlflow``), takes out the default experiment that MLflow then adds, and gives each new store a copy
of that file. MLflow, opening the copy, finds every table at its own head revision and adds the default experiment
itself, located where the store is opened from, as it would in a store it had made.

Nothing of it is needed for a store to be made: where the cache cannot be written, or the copy cannot be placed,
MLflow makes the store as it always does.
"""
from __future__ import annotations

import hashlib
import logging
import os
import secrets
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

log = logging.getLogger(__name__)

DEFAULT_EXPERIMENT_ID = 0
"""The experiment MLflow adds to every store it opens that lacks one (``Default``)."""


def schema_version() -> str:
    """What decides MLflow's empty schema: MLflow's and SQLAlchemy's versions and the names of MLflow's migration
    scripts (a development build of MLflow may add one under the same version)."""
    import mlflow
    import sqlalchemy
    from mlflow.store import db_migrations

    scripts = sorted(os.listdir(Path(db_migrations.__file__).parent / "versions"))
    digest = hashlib.sha256("\n".join(scripts).encode()).hexdigest()[:12]
    return f"mlflow-{mlflow.__version__}-sqlalchemy-{sqlalchemy.__version__}-{digest}"


def folder() -> Path:
    """Where the empty schema is kept: ``mlflow`` beside the compiled programs crux keeps per user."""
    from crux.compilation_cache import cache_home  # crux (and JAX) only in the commands that write runs

    return cache_home() / "mlflow"


def empty_schema() -> Path:
    """The file holding MLflow's empty schema for this process's MLflow, made now where absent (MLflow's own
    migrations into a file of the cache, its default experiment then taken out). Raises OSError, sqlite3.Error or
    MLflow's error where it cannot be made."""
    path = folder() / f"{schema_version()}.db"
    if has_every_table(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    made = _new_file(path)
    try:
        _migrated(made)  # an empty file, which MLflow takes for a store without tables
        with closing(sqlite3.connect(made)) as db, db:
            db.execute("DELETE FROM experiments WHERE experiment_id = ?", (DEFAULT_EXPERIMENT_ID,))
        os.replace(made, path)  # whole or not at all; a process that made it meanwhile made the same file
    finally:
        made.unlink(missing_ok=True)
    return path


def tracking_tables() -> set[str]:
    """The names of the tables MLflow's tracking store defines."""
    from mlflow.store.db.base_sql_model import Base
    from mlflow.store.tracking.dbmodels import models  # noqa: F401  (registers the tables)
    return set(Base.metadata.tables)


def has_every_table(path: Path) -> bool:
    """Whether the SQLite file at ``path`` holds every table MLflow's tracking store defines (MLflow's own test
    before it makes any), read-only; False for no file, a part of one, or a file of another kind."""
    try:
        with closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error:
        return False
    return tracking_tables() <= tables


def _new_file(beside: Path) -> Path:
    """A new empty file of a name of its own in the folder of ``beside``, with the permissions the user's umask
    gives a new file (as SQLite would give the store)."""
    while True:
        path = beside.with_name(f".{beside.name}.{secrets.token_hex(6)}")
        try:
            os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o666))
        except FileExistsError:
            continue
        return path


def _migrated(path: Path) -> None:
    """MLflow's tables made in the SQLite file ``path`` by MLflow's own store, its connections closed after."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = SqlAlchemyStore(f"sqlite:///{path}", path.parent.as_uri())
    store.engine.dispose()


def place(path: Path) -> bool:
    """Give the SQLite store at ``path``, a file that does not exist yet, MLflow's empty schema; False (and the
    store left to MLflow) where the schema or the copy cannot be made, or another process made the file
    meanwhile. The copy is written beside ``path`` and linked to it whole: no process sees a part of it."""
    try:
        schema = empty_schema()
        copy = _new_file(path)
    except Exception as error:  # noqa: BLE001 - MLflow then makes the store as it always does
        log.debug("MLflow makes the new store %s itself: its empty schema could not be had (%s)", path, error)
        return False
    try:
        shutil.copyfile(schema, copy)
        os.link(copy, path)
    except OSError as error:  # FileExistsError: another process made the store; else MLflow makes it
        log.debug("MLflow makes the new store %s itself: the copy of its empty schema was not placed (%s)",
                  path, error)
        return False
    finally:
        copy.unlink(missing_ok=True)
    return True
