"""A new SQLite store made from crux's copy of MLflow's empty schema is the store MLflow makes, table for table and
row for row; the copy is made once, made again where it is damaged, and left out where it cannot be had."""
from __future__ import annotations

import os
import sqlite3
from contextlib import closing
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from cruxlab.store import empty_schema
from cruxlab.store.connection import writable_store
from cruxlab.store.kinds import sqlite_uri


def clauses(sql: str | None) -> list[str]:
    """The lines of a CREATE statement in any order: MLflow's migrations, run twice, give a table's constraints in
    either order (in the order of a set of Python's)."""
    return sorted(line.strip().rstrip(",").strip() for line in (sql or "").splitlines())


def contents(path: Path) -> tuple[list, dict]:
    """The schema (every object's SQL) and every table's rows of the SQLite file at ``path``, the default
    experiment's times left out (each store is made at its own time)."""
    with closing(sqlite3.connect(path)) as db:
        schema = sorted(((kind, name, table, clauses(sql)) for kind, name, table, sql in
                         db.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")), key=str)
        rows = {table: sorted(db.execute(f'SELECT * FROM "{table}"').fetchall(), key=str)
                for (table,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        columns = [c[1] for c in db.execute("PRAGMA table_info(experiments)")]
    rows["experiments"] = [tuple(v for c, v in zip(columns, row) if not c.endswith("_time"))
                           for row in rows["experiments"]]
    return schema, rows


def test_a_store_given_the_copy_is_the_store_mlflow_makes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MLflow's default experiment is located in the working directory
    own, given = tmp_path / "mlflow-made.db", tmp_path / "crux-made.db"
    MlflowClient(sqlite_uri(own)).search_experiments()
    writable_store(sqlite_uri(given))
    assert contents(given) == contents(own)
    (default,) = MlflowClient(sqlite_uri(given)).search_experiments()
    assert (default.experiment_id, default.name) == ("0", "Default")
    assert default.artifact_location == str(tmp_path / "mlruns" / "0")


def test_the_copy_is_made_once_and_again_where_it_was_damaged(tmp_path):
    schema = empty_schema.empty_schema()
    made = schema.stat().st_mtime_ns
    assert empty_schema.place(tmp_path / "a.db") and schema.stat().st_mtime_ns == made
    schema.write_bytes(schema.read_bytes()[:4096])  # a part of it, as a full disk could leave it
    assert not empty_schema.has_every_table(schema)
    assert empty_schema.place(tmp_path / "b.db")
    assert empty_schema.has_every_table(schema) and empty_schema.has_every_table(tmp_path / "b.db")


def test_a_store_file_has_the_permissions_of_any_new_file(tmp_path):
    umask = os.umask(0o027)
    try:
        writable_store(sqlite_uri(tmp_path / "mlflow.db"))
    finally:
        os.umask(umask)
    assert (tmp_path / "mlflow.db").stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["mlflow.db"]  # no copy left beside it


def test_without_a_cache_mlflow_makes_the_store(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "a file"))
    (tmp_path / "a file").write_text("")  # its crux/mlflow cannot be made
    path = tmp_path / "mlflow.db"
    assert not empty_schema.place(path) and not path.exists()
    client = writable_store(sqlite_uri(path))
    assert [e.name for e in client.search_experiments()] == ["Default"]


def test_an_existing_file_is_never_replaced(tmp_path):
    path = tmp_path / "mlflow.db"
    path.write_bytes(b"")
    assert not empty_schema.place(path)
    assert path.read_bytes() == b""


@pytest.mark.parametrize("part", ["mlflow", "sqlalchemy"])
def test_the_copy_is_kept_per_version_of_what_decides_the_schema(part, monkeypatch):
    module = __import__(part)
    before = empty_schema.schema_version()
    monkeypatch.setattr(module, "__version__", module.__version__ + ".post1")
    assert empty_schema.schema_version() != before
