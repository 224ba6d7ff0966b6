"""crux-report end to end: a real (small) accumulation sweep through crux-sweep and MLflow, read back and judged.

One sweep of three 20-epoch jobs feeds every test here; the store is a SQLite
file in a temporary folder, so nothing touches the project's mlflow.db. One more
sweep goes through an MLflow tracking server, as a team sharing one would run it.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest
from mlflow.tracking import MlflowClient

from cruxlab.report import HOLDS, load_sweep, main
from cruxlab.store import contract
from mlflow_server import mlflow_server

pytestmark = pytest.mark.integration  # runs sweeps in subprocesses and an MLflow server

SWEEP_OVERRIDES = ["solver.epochs=20", "model.width=8", "problem.n_interior=64", "memory=b8,b32,b8_acc4",
                   "repeat=0"]


def run_sweep(folder: Path, uri: str) -> None:
    """``crux-sweep accumulation`` with ``SWEEP_OVERRIDES``, logging to ``uri``, Hydra's folders in ``folder``."""
    command = [sys.executable, "-m", "cruxlab.commands.sweep", "accumulation", *SWEEP_OVERRIDES,
               f"hydra.sweep.dir={folder / 'multirun'}"]
    done = subprocess.run(command, cwd=folder, env={**os.environ, "MLFLOW_TRACKING_URI": uri},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """A tracking URI holding one finished accumulation sweep."""
    folder = tmp_path_factory.mktemp("sweep")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    run_sweep(folder, uri)
    return uri


@pytest.fixture
def tracking_server(tmp_path, empty_store) -> Iterator[str]:
    """The URI of an ``mlflow server`` on an empty store, serving artifacts from ``tmp_path``."""
    with mlflow_server(tmp_path, empty_store) as uri:
        yield uri


def report(out: Path, uri: str, monkeypatch, *extra: str) -> tuple[str, list[dict]]:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    assert main(["accumulation", "--out", str(out), *extra]) == 0
    return (out / "report.md").read_text(), json.loads((out / "verdicts.json").read_text())


def test_accumulation_report_from_mlflow_holds_and_shows_its_evidence(store, tmp_path, monkeypatch, capsys):
    text, verdicts = report(tmp_path / "r", store, monkeypatch)
    by_id = {v["id"]: v for v in verdicts}
    assert by_id["accumulation.effective_batch[b8_acc4]"]["verdict"] == HOLDS
    assert by_id["accumulation.memory[b8_acc4]"]["verdict"] == HOLDS
    sweep = load_sweep("accumulation", uri=store)
    assert {r.label for r in sweep.records} == {"b8", "b32", "b8_acc4"}
    assert set(by_id["accumulation.effective_batch[b8_acc4]"]["runs"]) == {r.run_id for r in sweep.records}
    assert (tmp_path / "r" / "accumulation_b8_acc4.png").stat().st_size > 10_000
    assert "![" in text and "accumulation_b8_acc4.png" in text
    printed = capsys.readouterr().out
    assert "holds         accumulation.effective_batch[b8_acc4]" in printed
    assert f"parent run {sweep.parent_id} (started {sweep.started}): complete: 3 of 3 planned jobs finished" in printed


def test_report_is_byte_identical_for_the_same_runs(store, tmp_path, monkeypatch):
    first_text, _ = report(tmp_path / "a", store, monkeypatch)
    parent = load_sweep("accumulation", uri=store).parent_id
    second_text, _ = report(tmp_path / "b", store, monkeypatch, "--run", parent)
    assert first_text == second_text
    assert (tmp_path / "a" / "verdicts.json").read_bytes() == (tmp_path / "b" / "verdicts.json").read_bytes()


def test_report_lists_environment_commit_configs_and_commands(store, tmp_path, monkeypatch):
    text, _ = report(tmp_path / "r", store, monkeypatch)
    sweep = load_sweep("accumulation", uri=store)
    environment = sweep.records[0].environment
    assert f'"device_kind": "{environment["device_kind"]}"' in text
    assert environment["git_commit"] is None and "- the folder was not in a git repository" in text  # a tmp folder
    assert f"from a checkout at commit `{environment['crux_commit']}`" in text  # the tests' editable crux
    assert f"matmul precision {environment['matmul_precision']}" in text
    assert "crux-sweep accumulation " + " ".join(SWEEP_OVERRIDES) in text
    assert f"crux-report accumulation --run {sweep.parent_id}" in text
    # the resolved config once, and what each run set apart from it
    assert "The entries of config.yaml that every run resolved alike:" in text and "  n_interior: 64\n" in text
    assert "`memory.accumulation_steps` = 4" in text and "`memory.batchsize` = 32" in text


def test_report_of_an_unknown_sweep_exits_with_a_message(store, monkeypatch, capsys, tmp_path):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", store)
    assert main(["no-such-sweep", "--out", str(tmp_path)]) == 2
    assert "no experiment named 'no-such-sweep'" in capsys.readouterr().err


def test_report_never_creates_a_tracking_store(tmp_path, monkeypatch, capsys):
    missing = tmp_path / "absent.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{missing}")
    assert main(["accumulation", "--out", str(tmp_path / "r")]) == 2
    assert "no tracking store at" in capsys.readouterr().err
    assert not missing.exists()


@pytest.mark.parametrize("store_kind", ["server down", "random bytes"])
def test_crux_report_on_a_store_it_cannot_read_prints_one_line_and_exits_2(tmp_path, store_kind):
    """The console command itself: no traceback, no log lines, only crux-report's own line."""
    uri = "http://127.0.0.1:9"
    if store_kind == "random bytes":
        (tmp_path / "mlflow.db").write_bytes(os.urandom(32 * 1024))
        uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {key: value for key, value in os.environ.items() if not key.startswith("MLFLOW_HTTP_REQUEST_")}
    done = subprocess.run([sys.executable, "-m", "cruxlab.report", "accumulation", "--out", str(tmp_path / "r")],
                          env={**env, "MLFLOW_TRACKING_URI": uri}, capture_output=True, text=True, timeout=600)
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"crux-report: ") and uri in line
    assert not (tmp_path / "r").exists()


@pytest.mark.slow  # test_team_server runs the same through a server on PostgreSQL
def test_a_sweep_logged_to_a_tracking_server_is_complete_and_judged_like_one_in_sqlite(
        tracking_server, tmp_path, monkeypatch):
    """Through the REST API every history takes log_batch (not the direct SQL path) and artifacts are
    uploaded to the server: all of it must reach the store and the report's verdicts."""
    run_sweep(tmp_path, tracking_server)
    client = MlflowClient(tracking_server)
    experiment = client.get_experiment_by_name("accumulation")
    children = client.search_runs([experiment.experiment_id], contract.tag_filter(contract.ROLE, contract.CHILD))
    assert sorted(run.data.tags[contract.VARIANT] for run in children) == ["b32", "b8", "b8_acc4"]
    for run in children:
        assert run.info.status == contract.FINISHED
        assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "loss/total")) == list(range(20))
        assert {a.path for a in client.list_artifacts(run.info.run_id)} == {
            contract.HISTORY_PLOT, contract.STATS, contract.PARAMS, contract.CONFIG, contract.ENVIRONMENT,
            contract.MODEL}
    _, verdicts = report(tmp_path / "r", tracking_server, monkeypatch)
    by_id = {v["id"]: v for v in verdicts}
    assert by_id["accumulation.effective_batch[b8_acc4]"]["verdict"] == HOLDS
    assert by_id["accumulation.memory[b8_acc4]"]["verdict"] == HOLDS
    assert set(by_id["accumulation.effective_batch[b8_acc4]"]["runs"]) == {run.info.run_id for run in children}
