"""A store packed as files (crux.report.packed): unpacked where it was made, its artifacts beside it, never over a
store crux did not unpack. A real sweep packed and reported: tests/test_report_comparison_stores.py."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from crux.report.packed import UNPACKED, made_in, packed_path, unpack
from crux.tracking.store import StoreError
from crux_testing import pack


@pytest.fixture
def made(tmp_path, empty_store) -> Path:
    """A store made in ``tmp_path/made``: an experiment whose artifacts go beside it, one artifact logged."""
    folder = tmp_path / "made"
    folder.mkdir()
    shutil.copy(empty_store, folder / "mlflow.db")
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    experiment = client.create_experiment("accumulation", (folder / "mlartifacts" / "accumulation").as_uri())
    run = client.create_run(experiment)
    (tmp_path / "config.yaml").write_text("solver:\n  epochs: 5\n")
    client.log_artifact(run.info.run_id, str(tmp_path / "config.yaml"))
    return folder


def test_a_packed_store_opens_where_it_was_made_with_its_artifacts(tmp_path, made):
    packed = pack(made, tmp_path / "docs", "reports.tgz")
    artifacts = sorted(p.relative_to(made) for p in (made / "mlartifacts").rglob("*") if p.is_file())
    shutil.rmtree(made)  # another machine: nothing where the store was made
    assert packed_path(f"sqlite:///{packed}") == packed and packed_path(str(packed)) == packed
    assert packed_path(f"sqlite:///{made / 'mlflow.db'}") is None and packed_path("http://host:5000/x.gz") is None
    uri = unpack(packed)
    assert uri == f"sqlite:///{made / 'mlflow.db'}"
    assert sorted(p.relative_to(made) for p in (made / "mlartifacts").rglob("*") if p.is_file()) == artifacts
    assert MlflowClient(uri).get_experiment_by_name("accumulation") is not None
    assert made_in(made / "mlflow.db") == made
    assert unpack(packed) == uri  # unpacked once: the second time finds it there


def test_a_store_crux_did_not_unpack_is_never_overwritten(tmp_path, made, empty_store):
    packed = pack(made, tmp_path / "docs")
    shutil.copy(empty_store, made / "mlflow.db")  # a store of its own where the packed one was made
    with pytest.raises(StoreError, match=rf"was made in {made}, where another store is, {made / 'mlflow.db'}, which "
                                         rf"crux did not unpack: move it away"):
        unpack(packed)
    assert (made / "mlflow.db").read_bytes() == empty_store.read_bytes()
    (made / "mlflow.db").unlink()
    unpack(packed)
    assert (made / UNPACKED).is_file()
    (made / "mlartifacts" / "kept.txt").write_text("here before")
    other = pack(made, tmp_path / "other")  # another packed store made there replaces the one crux unpacked
    unpack(other)
    assert (made / "mlartifacts" / "kept.txt").read_text() == "here before"


def test_a_file_that_is_not_a_packed_store_says_so(tmp_path):
    (tmp_path / "mlflow.db.gz").write_bytes(b"not gzip")
    with pytest.raises(StoreError, match="could not be unpacked"):
        unpack(tmp_path / "mlflow.db.gz")
    with pytest.raises(StoreError, match="no packed store at"):
        unpack(tmp_path / "absent.db.gz")
