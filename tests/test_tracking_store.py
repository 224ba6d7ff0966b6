"""A store is checked before a sweep or a job writes to it, and what keeps it from taking runs is one line naming
the store and the fix; a new SQLite store gets its tables once however many processes open it; a deleted
experiment stays deleted."""
from __future__ import annotations

import random
import sqlite3
import subprocess
import sys
from contextlib import closing

import pytest
from mlflow.tracking import MlflowClient

from cruxlab.store import connection as store_module
from cruxlab.store import empty_schema
from cruxlab.store.connection import StoreError, ensure_experiment, writable_store


def refusal(uri: str) -> str:
    with pytest.raises(StoreError) as refused:
        writable_store(uri)
    (line,) = str(refused.value).splitlines()
    return line


def test_a_store_in_a_folder_that_cannot_hold_it_is_refused_before_anything_is_created(tmp_path):
    (tmp_path / "a-file").write_text("")
    assert refusal(f"sqlite:///{tmp_path / 'a-file' / 'mlflow.db'}") == (
        f"the tracking store at sqlite:///{tmp_path / 'a-file' / 'mlflow.db'} cannot be written: {tmp_path / 'a-file'} "
        f"is not a folder; point MLFLOW_TRACKING_URI / tracking.uri= at a store this command can write "
        f"(sqlite:///PATH/mlflow.db or http://HOST:PORT)")
    assert f"its folder {tmp_path / 'absent'} does not exist" in refusal(f"sqlite:///{tmp_path / 'absent' / 'x.db'}")
    assert not (tmp_path / "absent").exists()


@pytest.mark.parametrize("content, says", [
    (random.Random(0).randbytes(8192), "(DatabaseError: file is not a database)"),
    (None, "(OperationalError: no such table: alembic_version)"),  # another application's SQLite database
], ids=["random-bytes", "another-database"])
def test_a_file_that_is_not_an_mlflow_store_is_refused_and_left_as_it_was(tmp_path, content, says):
    path = tmp_path / "mlflow.db"
    if content is None:
        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE notes (text TEXT)")
    else:
        path.write_bytes(content)
    before = path.read_bytes()
    assert refusal(f"sqlite:///{path}") == (
        f"sqlite:///{path} is not a readable MLflow store {says}: point MLFLOW_TRACKING_URI / tracking.uri= at a "
        f"store this command can write (sqlite:///PATH/mlflow.db or http://HOST:PORT), or restore the file from a "
        f"backup")
    assert path.read_bytes() == before


def test_the_file_store_mlflow_3_no_longer_writes_is_refused_naming_the_database_instead(tmp_path):
    line = refusal(f"file://{tmp_path / 'mlruns'}")
    assert line.startswith(f"the tracking store at file://{tmp_path / 'mlruns'} could not be written (MlflowException: ")
    assert line.endswith("point MLFLOW_TRACKING_URI / tracking.uri= at a store this command can write "
                         "(sqlite:///PATH/mlflow.db or http://HOST:PORT)")


@pytest.mark.integration  # starts processes
def test_processes_opening_a_new_store_at_once_create_its_tables_once(tmp_path):
    """Without the lock on the store's folder the second of them meets a half-made schema (alembic: "0 found")."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    code = ("import sys; from cruxlab.store.connection import writable_store; "
            "print(writable_store(sys.argv[1]).create_experiment(sys.argv[2]))")
    processes = [subprocess.Popen([sys.executable, "-c", code, uri, f"e{k}"], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for k in range(3)]
    outcomes = [(p.wait(timeout=600), p.stdout.read(), p.stderr.read()) for p in processes]
    assert [code for code, _, _ in outcomes] == [0, 0, 0], [err[-2000:] for _, _, err in outcomes]
    names = {e.name for e in MlflowClient(uri).search_experiments()}
    assert names == {"Default", "e0", "e1", "e2"}


def test_a_store_without_one_of_mlflows_tables_is_no_whole_store(tmp_path):
    """A store caught half-made (another process creating its tables, with experiments and alembic_version already
    there) is judged under the folder's lock, where MLflow completes it: skipping the lock there let two sweeps
    starting at once both create the table that was still missing ("table secrets already exists")."""
    path = tmp_path / "mlflow.db"
    uri = f"sqlite:///{path}"
    writable_store(uri)
    assert empty_schema.has_every_table(path)
    with closing(sqlite3.connect(path)) as db:
        db.execute("DROP TABLE secrets")
        db.commit()
        assert {"experiments", "alembic_version"} <= {name for (name,) in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert not empty_schema.has_every_table(path)


def test_a_deleted_experiment_stays_deleted_and_a_new_sweep_of_its_name_starts_a_new_one(store, caplog):
    uri = f"sqlite:///{store / 'mlflow.db'}"
    client = MlflowClient(uri)
    old = ensure_experiment(client, "accumulation", uri, "a claim")
    run = client.create_run(old).info.run_id
    client.delete_experiment(old)

    new = ensure_experiment(client, "accumulation", uri, "a claim")
    assert new != old and client.get_experiment(new).lifecycle_stage == "active"
    kept = client.get_experiment(old)
    assert kept.lifecycle_stage == "deleted" and kept.name == f"accumulation (deleted, id {old})"
    assert client.get_run(run).info.experiment_id == old
    assert client.search_runs([new]) == []
    assert f"experiment 'accumulation' (id {old}) was deleted: it stays deleted" in caplog.text
    assert ensure_experiment(client, "accumulation", uri, "a claim") == new


@pytest.mark.integration
def test_the_commands_leave_sqlalchemy_to_the_stores_that_need_it():
    """MLflow's SQL store imports SQLAlchemy; crux-sweep and crux-run import nothing of it themselves, so that a
    tracking server's client goes without it."""
    imported = ("import sys, cruxlab.commands.sweep, cruxlab.commands.experiment, cruxlab.report.claims; "
                "print(sorted(name for name in sys.modules if name.partition('.')[0] == 'sqlalchemy'))")
    done = subprocess.run([sys.executable, "-c", imported], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "[]\n"
