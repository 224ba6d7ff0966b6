"""A store packed as files (cruxlab.report.packed): read from a copy of its own, its artifacts unpacked where it was
made, nothing there overwritten. A real sweep packed and reported: tests/test_report_comparison_stores.py."""
from __future__ import annotations

import shutil
import sqlite3
import tempfile
from contextlib import closing
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from cruxlab.report import packed as packed_module
from cruxlab.report.packed import made_in, unpack
from cruxlab.report.results import sweep_names
from cruxlab.report.sweep_reader import open_client
from cruxlab.store.connection import StoreError
from cruxlab.store.kinds import packed_path
from crux_testing import pack


def make(folder: Path, empty_store: Path, experiment: str = "accumulation") -> Path:
    """A store made in ``folder`` (emptied first): an experiment whose artifacts go beside it, one artifact logged.
    The store is written at an address of its own first (MLflow keeps the database it opened at an address for
    the life of the process), then copied into ``folder``."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir()
    written = folder.parent / f"written-{experiment}"
    written.mkdir()
    shutil.copy(empty_store, written / "mlflow.db")
    client = MlflowClient(f"sqlite:///{written / 'mlflow.db'}")
    run = client.create_run(client.create_experiment(experiment, (folder / "mlartifacts" / experiment).as_uri()))
    (written / "config.yaml").write_text("solver:\n  epochs: 5\n")
    client.log_artifact(run.info.run_id, str(written / "config.yaml"))
    shutil.copy(written / "mlflow.db", folder / "mlflow.db")
    return folder


@pytest.fixture(autouse=True)
def scratch(tmp_path, monkeypatch) -> Path:
    """The temporary directory the stores are unpacked into, the test's own."""
    folder = tmp_path / "scratch"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


@pytest.fixture
def made(tmp_path, empty_store) -> Path:
    return make(tmp_path / "made", empty_store)


def test_a_packed_store_is_read_with_its_artifacts_where_it_was_made(tmp_path, made, scratch):
    packed = pack(made, tmp_path / "docs", "reports.tgz")
    artifacts = sorted(p.relative_to(made) for p in (made / "mlartifacts").rglob("*") if p.is_file())
    shutil.rmtree(made)  # another machine: nothing where the store was made
    assert packed_path(f"sqlite:///{packed}") == packed and packed_path(str(packed)) == packed
    assert packed_path(f"sqlite:///{made / 'mlflow.db'}") is None and packed_path("http://host:5000/x.gz") is None
    uri = unpack(packed)
    assert Path(uri.removeprefix("sqlite:///")).parent.parent == scratch
    assert sorted(p.relative_to(made) for p in (made / "mlartifacts").rglob("*") if p.is_file()) == artifacts
    assert not (made / "mlflow.db").exists()
    assert made_in(Path(uri.removeprefix("sqlite:///"))) == made
    assert unpack(packed) == uri  # unpacked once
    client, shown = open_client(str(packed.relative_to(Path.cwd())) if packed.is_relative_to(Path.cwd())
                                else str(packed))
    assert shown == f"sqlite:///{packed}"  # the store is named by its packed file
    (experiment,) = [e for e in client.search_experiments() if e.name == "accumulation"]
    (run,) = client.search_runs([experiment.experiment_id])
    assert Path(client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path))).read_text() == (
        "solver:\n  epochs: 5\n")


def test_each_version_of_mlflows_schema_reads_a_copy_of_its_own(tmp_path, made, monkeypatch):
    """A newer MLflow migrates a store that lacks one of its tables in place when it opens it: the copy it read
    is not the one an older MLflow then reads."""
    packed = pack(made, tmp_path / "docs", "reports.tgz")
    older = Path(unpack(packed).removeprefix("sqlite:///"))
    with monkeypatch.context() as patched:
        patched.setattr(packed_module, "schema_version", lambda: "mlflow-99-sqlalchemy-9-000000000000")
        newer = Path(unpack(packed).removeprefix("sqlite:///"))
    assert newer != older
    with closing(sqlite3.connect(newer)) as db, db:
        db.execute("UPDATE alembic_version SET version_num = 'a later revision'")  # as a newer MLflow leaves it
    assert Path(unpack(packed).removeprefix("sqlite:///")) == older
    with closing(sqlite3.connect(older)) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone() != ("a later revision",)


def test_a_store_packed_with_xz_is_read_as_one_packed_with_gzip(tmp_path, made, scratch):
    """docs/ keeps stores packed with xz (half gzip's size for the database, a quarter for the artifacts)."""
    packed = pack(made, tmp_path / "docs", "mlartifacts.tar.xz", "mlflow.db.xz")
    original = (made / "mlflow.db").read_bytes()
    shutil.rmtree(made)
    assert packed_path(f"sqlite:///{packed}") == packed and packed_path(str(packed)) == packed
    uri = unpack(packed)
    assert Path(uri.removeprefix("sqlite:///")).read_bytes() == original
    assert (made / "mlartifacts").is_dir() and next((made / "mlartifacts").rglob("config.yaml")).read_text() == (
        "solver:\n  epochs: 5\n")
    assert sweep_names(str(packed)) == ["accumulation"]
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "mlflow.db.xz").write_bytes(b"not xz")
    with pytest.raises(StoreError, match="could not be unpacked"):
        unpack(tmp_path / "broken" / "mlflow.db.xz")


def test_nothing_where_a_store_was_made_is_overwritten(tmp_path, made, empty_store):
    packed = pack(made, tmp_path / "docs")
    shutil.copy(empty_store, made / "mlflow.db")  # a store of its own where the packed one was made
    (made / "mlartifacts" / "accumulation" / "kept.txt").write_text("here before")
    config = next((made / "mlartifacts").rglob("config.yaml"))
    config.write_text("changed since")
    unpack(packed)
    assert (made / "mlflow.db").read_bytes() == empty_store.read_bytes()
    assert config.read_text() == "changed since"
    assert (made / "mlartifacts" / "accumulation" / "kept.txt").read_text() == "here before"


def test_the_stores_of_several_calls_made_in_one_folder_are_read_side_by_side(tmp_path, empty_store):
    """A device check's calls each make their store in the same folder: each is read as itself in one process,
    the artifacts of all of them side by side where they were made."""
    folder = tmp_path / "made"
    first = pack(make(folder, empty_store, "accumulation"), tmp_path / "call1")
    second = pack(make(folder, empty_store, "inner_steps"), tmp_path / "call2")
    shutil.rmtree(folder)
    assert sweep_names(str(first)) == ["accumulation"]
    assert sweep_names(str(second)) == ["inner_steps"]
    assert sweep_names(str(first)) == ["accumulation"]
    assert {p.name for p in (folder / "mlartifacts").iterdir()} == {"accumulation", "inner_steps"}


def test_a_file_that_is_not_a_packed_store_says_so(tmp_path):
    (tmp_path / "mlflow.db.gz").write_bytes(b"not gzip")
    with pytest.raises(StoreError, match="could not be unpacked"):
        unpack(tmp_path / "mlflow.db.gz")
    assert not [p for p in (tmp_path / "scratch").rglob("*") if p.is_file()]  # no half store left behind
    with pytest.raises(StoreError, match="no packed store at"):
        unpack(tmp_path / "absent.db.gz")
