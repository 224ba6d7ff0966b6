"""What MLflow's UI shows of a sweep, read the way the UI reads it: through the REST API of a live
``mlflow server``, after ``crux-sweep`` and then ``crux-report`` ran against it.

The UI opens an experiment on its runs when the experiment's kind says model
training, shows the tag ``mlflow.note.content`` as the description of an
experiment or a run, lists params as columns (and sorts, groups and charts by
them) and charts metric histories step by step.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

from cruxlab.commands.sweep import available
from cruxlab.store import contract
from mlflow_server import mlflow_server

pytestmark = pytest.mark.integration  # an MLflow server, a sweep and a report in subprocesses

SWEEP = ["accumulation", "solver.epochs=20", "model.width=8", "problem.n_interior=64", "memory=full,b8,b32,b8_acc4",
         "repeat=0"]
EPOCHS = 20
CHROMIUM = "/usr/bin/chromium"
SERVICES = Path(__file__).resolve().parents[1] / "scripts" / "services.sh"


def chromium() -> str:
    """Debian's Chromium, installed where missing (as root, with the project's service scripts' helper); the
    calling test is skipped where it cannot be."""
    if not Path(CHROMIUM).exists() and os.geteuid() == 0:
        subprocess.run(["bash", "-c", f"source {SERVICES} && install_packages chromium"], capture_output=True,
                       timeout=1200)
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no browser at {CHROMIUM}, and it could not be installed here (Debian: apt-get install chromium)")
    return CHROMIUM


class Rest:
    """MLflow's REST API at ``uri``, as the UI calls it."""

    def __init__(self, uri: str):
        self.uri = uri

    def get(self, endpoint: str, **query: str) -> dict[str, Any]:
        url = f"{self.uri}/api/2.0/mlflow/{endpoint}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=30) as answer:
            return json.load(answer)

    def post(self, endpoint: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(f"{self.uri}/api/2.0/mlflow/{endpoint}", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            return json.load(answer)

    def experiment(self, name: str) -> dict[str, Any]:
        return self.get("experiments/get-by-name", experiment_name=name)["experiment"]

    def runs(self, experiment_id: str) -> list[dict[str, Any]]:
        return self.post("runs/search", {"experiment_ids": [experiment_id], "max_results": 100})["runs"]


def tags(entity: dict[str, Any]) -> dict[str, str]:
    """An experiment's or a run's tags as a mapping (the API gives a list of key/value pairs)."""
    listed = entity["tags"] if "tags" in entity else entity["data"].get("tags", [])
    return {tag["key"]: tag["value"] for tag in listed}


def params(run: dict[str, Any]) -> dict[str, str]:
    return {param["key"]: param["value"] for param in run["data"].get("params", [])}


def by_role(runs: list[dict[str, Any]], role: str) -> list[dict[str, Any]]:
    return [run for run in runs if tags(run)[contract.ROLE] == role]


@dataclass
class Served:
    """A server holding one sweep judged by crux-report; ``before_report`` is the parent run's description as
    the sweep left it, ``sweep_output`` what crux-sweep printed."""

    rest: Rest
    experiment_id: str
    before_report: str
    folder: Path
    sweep_output: str


@pytest.fixture(scope="module")
def ui(tmp_path_factory, empty_store) -> Iterator[Served]:
    """An accumulation sweep of 4 jobs of 20 epochs logged to a live server, then judged by crux-report."""
    folder = tmp_path_factory.mktemp("ui")
    with mlflow_server(folder, empty_store) as uri:
        rest = Rest(uri)
        env = {**os.environ, "MLFLOW_TRACKING_URI": uri}
        sweep = subprocess.run([sys.executable, "-m", "cruxlab.commands.sweep", *SWEEP], cwd=folder, env=env,
                               capture_output=True, text=True, timeout=900)
        assert sweep.returncode == 0, sweep.stderr[-3000:]
        experiment_id = rest.experiment("accumulation")["experiment_id"]
        (parent,) = by_role(rest.runs(experiment_id), contract.PARENT)
        before_report = tags(parent)["mlflow.note.content"]
        done = subprocess.run([sys.executable, "-m", "cruxlab.report", "accumulation"], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
        yield Served(rest, experiment_id, before_report, folder, sweep.stdout + sweep.stderr)


def test_an_experiment_is_one_of_training_runs_described_by_the_sweeps_claim_and_its_runs_page_printed(ui):
    experiment = tags(ui.rest.experiment("accumulation"))
    assert experiment["mlflow.experimentKind"] == "custom_model_development"
    assert experiment["mlflow.note.content"] == " ".join(available()["accumulation"].claim.split())
    page = f"{ui.rest.uri}/#/experiments/{ui.experiment_id}/runs?workflowType=machine_learning"
    assert f"MLflow: the sweep's runs at {page}\n" in ui.sweep_output


def test_the_printed_page_shows_the_runs_and_the_claim_in_a_browser(ui):
    """MLflow's UI in Chromium: the page crux-sweep prints opens on the training runs (not the GenAI overview
    the experiment would open on), with the claim as the experiment's description."""
    sync_playwright = pytest.importorskip("playwright.sync_api").sync_playwright
    browser_path = chromium()
    claim_start = " ".join(available()["accumulation"].claim.split())[:40]
    (parent,) = by_role(ui.rest.runs(ui.experiment_id), contract.PARENT)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=browser_path, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(f"{ui.rest.uri}/#/experiments/{ui.experiment_id}/runs?workflowType=machine_learning")
            page.get_by_text(claim_start).first.wait_for(timeout=60_000)
            page.get_by_text(parent["info"]["run_name"]).first.wait_for(timeout=60_000)
            assert "/runs" in page.url and "workflowType=machine_learning" in page.url
        finally:
            browser.close()


def test_the_parent_run_is_described_by_its_command_then_by_its_verdicts(ui):
    command = "crux-sweep " + " ".join(SWEEP)
    assert ui.before_report == f"`{command}`"
    (parent,) = by_role(ui.rest.runs(ui.experiment_id), contract.PARENT)
    description = tags(parent)["mlflow.note.content"]
    lines = description.splitlines()
    assert lines[0] == f"`{command}`" and tags(parent)[contract.COMMAND] == command
    assert "| **holds** | accumulation.effective_batch[b8_acc4] |" in description
    assert "| **holds** | accumulation.memory[b8_acc4] |" in description
    (report,) = ui.folder.glob("reports/accumulation/*/report.md")
    assert lines[-1] == f"Report: `{report.resolve()}`"


def test_params_are_real_values_with_a_variant_and_no_claim(ui):
    children = by_role(ui.rest.runs(ui.experiment_id), contract.CHILD)
    assert sorted(run["info"]["run_name"] for run in children) == ["b32", "b8", "b8_acc4", "full"]
    for run in children:
        logged = params(run)
        assert logged["variant"] == tags(run)[contract.VARIANT] == run["info"]["run_name"]
        assert not {key for key in logged if key.split(".")[0] in ("claim", "claims", "tracking")}
        assert [key for key, value in logged.items() if value in ("", "None", "null", "{}", "[]")] == []
        assert logged["optimizer.name"] == "sgd" and logged["problem._target_"] == "crux.problems.poisson1d"
        assert logged["solver.epochs"] == str(EPOCHS) and logged["jax.compilation_cache_dir"].endswith("crux/jax")
    full = next(run for run in children if run["info"]["run_name"] == "full")
    assert "memory.batchsize" not in params(full)  # a full batch has no batch size


def test_a_job_is_described_by_its_training_and_compile_seconds_and_charts_its_loss_by_epoch(ui):
    for run in by_role(ui.rest.runs(ui.experiment_id), contract.CHILD):
        metrics = {metric["key"]: metric["value"] for metric in run["data"]["metrics"]}
        description = tags(run)["mlflow.note.content"]
        assert description.startswith(f"**{run['info']['run_name']}**, repeat 0")
        assert f"`run_seconds` = {metrics['run_seconds']:.3g} s" in description
        assert f"`compile_seconds` = {metrics['compile_seconds']:.3g} s" in description
        assert "Duration counts the whole job" in description
        history = ui.rest.get("metrics/get-history", run_id=run["info"]["run_id"], metric_key="loss/total")["metrics"]
        assert sorted(point["step"] for point in history) == list(range(EPOCHS))
        assert sorted(history, key=lambda p: p["step"])[-1]["value"] == pytest.approx(metrics["final_loss"],
                                                                                      rel=1e-6)
