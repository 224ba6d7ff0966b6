"""Sweeps started at once into one new SQLite store keep to themselves: each parent holds exactly its own jobs,
whole, and the store comes out sound.

Two sweeps started in the same second used to share Hydra's sweep folder
(``multirun/<date>/<time>``) and the file in it that told jobs their parent; here the
three sweeps are given one folder outright, so the test does not depend on when each
process gets to it. The store does not exist beforehand: the three processes meet
while creating MLflow's tables."""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from mlflow.tracking import MlflowClient
from cruxlab.store import contract

pytestmark = pytest.mark.integration  # three sweeps in subprocesses

TINY = ["solver.epochs=20", "model.width=8", "problem.n_interior=64", "repeat=0"]
SWEEPS = [("accumulation", "full,b8"), ("accumulation", "b32,b8_acc4"), ("offload", "b8,offload_b8")]
HISTORIES = ("loss/total", "loss/pde", "loss/bc", "lr/u")


def test_three_sweeps_at_once_into_a_new_store_each_hold_exactly_their_own_complete_jobs(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    started = [subprocess.Popen([sys.executable, "-m", "cruxlab.commands.sweep", name, f"memory={memory}", *TINY,
                                 f"hydra.sweep.dir={tmp_path / 'multirun'}"], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for name, memory in SWEEPS]
    outputs = [process.communicate(timeout=900)[0] for process in started]
    assert [process.returncode for process in started] == [0, 0, 0], [out[-3000:] for out in outputs]

    client = MlflowClient(uri)
    parents = {}
    for name in ("accumulation", "offload"):
        experiment = client.get_experiment_by_name(name).experiment_id
        every_run = client.search_runs([experiment])
        for parent in (run for run in every_run if run.data.tags[contract.ROLE] == contract.PARENT):
            memory = next(o for o in parent.data.tags[contract.OVERRIDES].split() if o.startswith("memory="))
            parents[memory] = parent
            children = [run for run in every_run if run.data.tags.get(contract.PARENT_ID) == parent.info.run_id]
            planned = [f"memory={option}" for option in memory.removeprefix("memory=").split(",")]
            assert parent.info.status == contract.FINISHED and parent.data.tags[contract.PLANNED_JOB_COUNT] == "2"
            assert sorted(run.data.tags[contract.JOB] for run in children) == ["0", "1"]
            for child in children:
                assert child.info.status == contract.FINISHED and child.data.tags[contract.SWEEP] == name
                assert f"memory={child.data.tags[contract.VARIANT]}" == planned[int(child.data.tags[contract.JOB])]
                for key in HISTORIES:
                    assert sorted(m.step for m in client.get_metric_history(child.info.run_id, key)) == list(range(20))
                with np.load(client.download_artifacts(child.info.run_id, contract.PARAMS, str(tmp_path / "read"))) as p:
                    assert all(np.all(np.isfinite(p[key])) for key in p.files)  # every member reads back whole
        assert len(every_run) == sum(1 + 2 for run in every_run if run.data.tags[contract.ROLE] == contract.PARENT)
    assert sorted(parents) == sorted(f"memory={memory}" for _, memory in SWEEPS)
