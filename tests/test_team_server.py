"""A team's tracking server: MLflow on PostgreSQL, on 127.0.0.1 (scripts/postgres.sh and scripts/mlflow_server.sh).

crux-sweep and crux-report work against it unchanged, through the server
(``MLFLOW_TRACKING_URI=http://...``) and straight on the database (``postgresql://...``),
with the verdicts and the very numbers of a sweep on SQLite; several sweeps at once,
on joblib and on a Ray cluster, lose nothing in it (cruxlab.measure.load_test, small).
"""
from __future__ import annotations

import os
import subprocess
import sys

import pytest

from scale_out import assert_same_as_reference, sweep_and_report

from cruxlab.measure import load_test

pytestmark = pytest.mark.integration  # starts PostgreSQL, an MLflow server, a Ray cluster, sweeps in subprocesses


@pytest.mark.parametrize("entry_point", ["cruxlab.commands.experiment", "cruxlab.report"])
def test_crux_loads_mlflow_without_its_telemetry_thread(entry_point):
    """That thread, where it cannot reach the internet, removes an environment variable while a REST call may
    be reading the environment: one job in 128 of the load test failed so (KeyError
    '_MLFLOW_TELEMETRY_SESSION_ID'). The process gets a bare environment: MLflow also keeps telemetry off on
    its own under pytest or CI variables, which would hide the failure."""
    code = f"import {entry_point}; from mlflow.telemetry.client import get_telemetry_client; " \
           f"print(get_telemetry_client())"
    done = subprocess.run([sys.executable, "-c", code], env={"PATH": os.environ["PATH"], "HOME": os.environ["HOME"]},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.splitlines()[-1] == "None"


def test_sweep_and_report_through_a_postgres_backed_server_are_those_of_sqlite(team_server, reference, tmp_path):
    assert_same_as_reference(sweep_and_report(tmp_path, team_server, "basic"), reference)


@pytest.mark.slow  # the direct history path on PostgreSQL is test_tracking_history's; this is the whole sweep
def test_sweep_and_report_on_a_postgresql_uri_are_those_of_sqlite(postgres_store, reference, tmp_path):
    """The jobs write their histories with crux's direct SQL insert (test_tracking_history proves it on
    PostgreSQL), the rest through MLflow's SQL store."""
    assert_same_as_reference(sweep_and_report(tmp_path, postgres_store, "basic"), reference)


def test_sweeps_at_once_on_joblib_and_ray_into_the_server_lose_nothing(team_server, ray_cluster, ray_python,
                                                                       tmp_path):
    """Two sweeps with two parallel joblib jobs each and one on the Ray cluster, started together into one
    experiment: every parent holds exactly its jobs, every history every point, every run its artifacts."""
    small = dict(repeats=1, epochs=30, memory=("b8", "b8_acc4"), extra=("model.width=8", "problem.n_interior=64"))
    sweeps = [load_test.SweepSpec("joblib", parallel=2, **small), load_test.SweepSpec("joblib", parallel=2, **small),
              load_test.SweepSpec("ray", python=ray_python, **small)]
    outcome = load_test.run_at_once(sweeps, team_server, "load", tmp_path, timeout=1500, env=ray_cluster)
    assert outcome.returncodes == [0, 0, 0], [log[-2000:] for log in outcome.logs]
    counts = load_test.count(sweeps, team_server, "load", outcome.folders)
    assert counts.problems == []
    assert counts.found == counts.expected == {
        "runs in the experiment": 9, "parent runs FINISHED": 3, "parent 'jobs' metrics": 6, "child runs": 6,
        "child runs FINISHED": 6, "artifacts": 30, "epochs in stats.npz": 6 * 30,
        "metric points": 6 * 4 * 30}  # 30 epochs: each sent to MLflow (up to tracking.history_points)
    assert len(load_test.tracking_shares(outcome.folders)) == 6  # every job timed inside its own process
