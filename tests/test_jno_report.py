"""crux-sweep on both backends into one store, and crux-report setting them side by side.

One short accumulation sweep on crux and the same on jNO (3 jobs of 20 epochs each,
jNO's points form) feed every test here, through the real console entry points.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from crux.stats import Statistics
from cruxlab.report import HOLDS, load_sweep, main, results
from cruxlab.report.backends import load_sweeps
from cruxlab.store import contract

pytest.importorskip("jno", reason='the jNO backend needs the jno extra: pip install -e ".[jno]"')
pytestmark = pytest.mark.integration  # runs sweeps in subprocesses

SWEEP = ["solver.epochs=20", "model.width=8", "problem.n_interior=64", "memory=b8,b32,b8_acc4", "repeat=0",
         "gradient_draws=16"]
ARTIFACTS = {contract.HISTORY_PLOT, contract.STATS, contract.PARAMS, contract.CONFIG, contract.ENVIRONMENT}


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> tuple[str, Path]:
    """A tracking URI holding a crux and a jNO accumulation sweep, and the folder the sweeps ran in."""
    folder = tmp_path_factory.mktemp("sweeps")
    uri = f"sqlite:///{folder / 'mlflow.db'}"
    for name, backend in (("crux", []), ("jno", ["backend=jno", "backend.batching=points"])):
        done = subprocess.run([sys.executable, "-m", "cruxlab.commands.sweep", "accumulation", *SWEEP, *backend,
                               f"hydra.sweep.dir={folder / f'sweep-{name}'}"], cwd=folder, capture_output=True,
                              text=True,
                              env={**os.environ, "MLFLOW_TRACKING_URI": uri},
                              timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
    return uri, folder


def test_a_jno_job_logs_the_layout_of_a_crux_job(store, tmp_path):
    uri, folder = store
    sweep = load_sweeps("accumulation", None, uri)["jno"]
    assert sweep.parent_tags[contract.BACKEND] == "jno" and len(sweep.records) == 3
    client = MlflowClient(uri)
    record = next(r for r in sweep.records if r.label == "b8_acc4")
    run = client.get_run(record.run_id)
    assert run.data.tags[contract.BACKEND] == "jno" and run.info.status == contract.FINISHED
    for key in ("loss/total", "loss/pde", "loss/bc", "lr/u"):
        steps = sorted(m.step for m in client.get_metric_history(record.run_id, key))
        assert steps == list(range(20)), key
    metrics = run.data.metrics
    for key in ("compile_seconds", "run_seconds", "median_step_seconds", "steps_per_second", "final_loss",
                "error/u", "param_distance/u", "gradient_noise/variance", "gradient_noise/standard_error"):
        assert np.isfinite(metrics[key]) and metrics[key] > 0, key
    assert metrics["gradient_noise/draws"] == 16 and metrics["gradient_noise/population"] == 64
    assert {a.path for a in client.list_artifacts(record.run_id)} == ARTIFACTS
    local = Path(client.download_artifacts(record.run_id, "", str(tmp_path)))
    stats = Statistics.load(local / contract.STATS)
    assert stats.names == ["pde", "bc"] and stats.losses.shape == (20, 2)
    np.testing.assert_allclose(record.histories["loss/total"], stats.total_loss, rtol=1e-6)
    assert np.linalg.norm(record.snapshot("final") - record.snapshot("initial")) == pytest.approx(
        metrics["param_distance/u"], rel=1e-5)
    assert record.environment["versions"]["jax-numerical-operators"]
    assert len(list((folder / "sweep-jno").glob("*/jno/log.log"))) == 3, "jNO's own log belongs in each job's folder"


def test_the_report_sets_the_backends_side_by_side_and_never_pairs_across_them(store, tmp_path, monkeypatch,
                                                                                capsys):
    uri, _ = store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    out = tmp_path / "report"
    assert main(["accumulation", "--out", str(out)]) == 0
    text = (out / "report.md").read_text()
    assert "| claim | crux | jno |" in text
    assert "| accumulation.noise[b8_acc4] | **holds** | **holds** |" in text
    assert "| accumulation.effective_batch[b8_acc4] | **holds** | **–** |" in text  # crux's point stream only
    assert "| setting | crux steps/s | jno steps/s | crux compile s | jno compile s |" in text
    assert (out / "crux" / "report.md").exists() and (out / "jno" / "report.md").exists()
    printed = capsys.readouterr().out
    assert "accumulation.noise[b8_acc4]" in printed and "crux" in printed and "jno" in printed

    backend_of = {}
    for backend, sweep in load_sweeps("accumulation", None, uri).items():
        backend_of.update({r.run_id: backend for r in sweep.records})
    verdicts = json.loads((out / "verdicts.json").read_text())
    assert {v["backend"] for v in verdicts} == {"crux", "jno"}
    for v in verdicts:
        assert {backend_of[run] for run in v["runs"]} <= {v["backend"]}, v["id"]
    noise = {v["backend"]: v for v in verdicts if v["id"] == "accumulation.noise[b8_acc4]"}
    assert noise["crux"]["verdict"] == noise["jno"]["verdict"] == HOLDS


def test_one_parent_run_is_reported_alone(store, tmp_path, monkeypatch):
    uri, _ = store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    jno_parent = load_sweeps("accumulation", None, uri)["jno"].parent_id
    assert main(["accumulation", "--out", str(tmp_path), "--run", jno_parent]) == 0
    text = (tmp_path / "report.md").read_text()
    assert f"parent run `{jno_parent}`" in text and "| claim | crux | jno |" not in text
    assert {v["backend"] for v in json.loads((tmp_path / "verdicts.json").read_text())} == {"jno"}  # named alone


def test_crux_against_jno_compares_the_claims_both_judge(store, tmp_path):
    """crux-report NAME --against URI#jno: crux's newest sweep against jNO's in the same store, claim by claim, jNO's
    (the --against side) first."""
    uri, _ = store
    assert main(["accumulation", "--tracking-uri", uri, "--against", f"{uri}#jno", "--out", str(tmp_path)]) == 0
    comparison = json.loads((tmp_path / "comparison.json").read_text())
    assert (comparison["sides"]["before"]["library"], comparison["sides"]["after"]["library"]) == ("jno", "crux")
    rows = {row["id"]: row for row in comparison["rows"]}
    noise = rows["accumulation.noise[b8_acc4]"]
    assert noise["compared"] and noise["before"]["verdict"] == noise["after"]["verdict"] == HOLDS
    assert not rows["accumulation.effective_batch[b8_acc4]"]["compared"]  # judged on crux's point stream alone
    assert [test["test"] for test in noise["tests"]] == ["verdict", "standard errors"]
    memory = rows["accumulation.memory[b8_acc4]"]  # jNO reports no compiled memory: nothing to judge it by
    assert memory["changed"] and (memory["before"]["verdict"], memory["after"]["verdict"]) == ("inconclusive", HOLDS)


def test_the_results_table_has_a_row_per_library(store):
    """python -m cruxlab.report.results: crux's sweep and jNO's of one name are rows of their own."""
    uri, _ = store
    present = [[results.sweeps_in_store(uri)]]
    assert present == [[{"accumulation": ["crux", "jno"]}]]
    column = results.Column("CPU", (uri,))
    rows = [results.sweep_row("accumulation", backend, [column], present) for backend in ("crux", "jno")]
    lines = {line.split(" | ")[0]: line for line in results.table(rows, [column]) if line.startswith("| accumulation")}
    assert set(lines) == {"| accumulation", "| accumulation, jNO"}
    assert "effective_batch **holds**" in lines["| accumulation"] and "noise **holds**" in lines["| accumulation, jNO"]
