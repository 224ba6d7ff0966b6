"""``crux-sweep capacity``: one job per memory option, each shown at the size the run without it does not fit a
declared budget, judged by ``crux-report capacity``; a checkpointing planted to save nothing turns its verdict."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cruxlab.config import effective_settings
from cruxlab.config.refusals import refusals
from cruxlab.store import contract
from crux_testing import launch, runs_by_role
from test_sweeps import jobs

# a 1 MiB budget, networks 16 wide, batches of 64 for offload_data, depth over 512 points (as tests/test_capacity.py)
SMALL = ["capacity.cpu_budget_bytes=1048576", "capacity.width=16", "capacity.start=256", "capacity.offload_batch=64",
         "capacity.depth_points=512"]
OPTIONS = {"batchsize", "accumulation_steps", "checkpoint_gradients", "offload_data"}
# the sweep's process with checkpointing that saves nothing: every form applies the plain network
PLANTED = ("import sys; from crux.model import Model; Model.applied = lambda self, form='plain': self.apply; "
           "from cruxlab.commands.sweep import main; sys.argv[0] = 'crux-sweep'; main()")


def environment(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}


def report(tmp_path: Path) -> dict[str, dict]:
    """``crux-report capacity`` of the store in ``tmp_path``: its verdicts by claim."""
    done = subprocess.run([sys.executable, "-m", "cruxlab.report", "capacity", "--out", str(tmp_path / "report")],
                          cwd=tmp_path, env=environment(tmp_path), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "could not be read" not in done.stdout  # a capacity run logs sizes, not histories
    (verdicts,) = (tmp_path / "report").rglob("verdicts.json")
    return {v["id"]: v for v in json.loads(verdicts.read_text())}


@pytest.mark.integration
def test_every_option_is_shown_where_the_run_without_it_does_not_fit(tmp_path):
    done = launch(tmp_path, "cruxlab.commands.sweep", "capacity", *SMALL)
    assert done.returncode == 0, done.stderr[-3000:]
    client, roles = runs_by_role(tmp_path, "capacity")
    children = roles["child"]
    assert {run.data.params[contract.CAPACITY_OPTION] for run in children} == OPTIONS
    for run in children:
        assert run.info.status == contract.FINISHED
        assert run.data.metrics["capacity/budget_bytes"] == 2 ** 20
        (tmp_path / run.info.run_id).mkdir()
        sizes = json.loads(Path(client.download_artifacts(run.info.run_id, contract.CAPACITY_SIZES,
                                                          str(tmp_path / run.info.run_id))).read_text())
        fitting = [a for a in sizes["attempts"] if a["refused"] is None and a["needed"] <= 2 ** 20]
        assert fitting and len(fitting) < len(sizes["attempts"])  # sizes that fit, and the one that does not
        assert run.data.metrics["capacity/needed_bytes"] > 2 ** 20 >= run.data.metrics["capacity/option_peak_bytes"]
        # only checkpointing's run records a form, and one that rematerialises: the plain update did not fit
        checkpointing = run.data.params[contract.CAPACITY_OPTION] == "checkpoint_gradients"
        form = run.data.tags.get(contract.CHECKPOINT_FORM)
        assert (form is not None) == checkpointing and form != "plain"
        assert sizes["form"] == form  # capacity.json names the same form
    verdicts = report(tmp_path)
    assert {claim: v["verdict"] for claim, v in verdicts.items()} == {f"capacity.{o}": "holds" for o in OPTIONS}


@pytest.mark.integration
def test_a_checkpointing_that_saves_nothing_fails_its_capacity_claim(tmp_path):
    done = subprocess.run([sys.executable, "-c", PLANTED, "capacity", "capacity.option=checkpoint_gradients", *SMALL,
                           f"hydra.sweep.dir={tmp_path / 'multirun'}"], cwd=tmp_path, env=environment(tmp_path),
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]  # not fitting is evidence, not a failed job
    verdicts = report(tmp_path)
    assert list(verdicts) == ["capacity.checkpoint_gradients"]
    assert verdicts["capacity.checkpoint_gradients"]["verdict"] == "fails"
    assert "does not train within the budget" in verdicts["capacity.checkpoint_gradients"]["summary"]
    assert "in the plain form" in verdicts["capacity.checkpoint_gradients"]["summary"]  # what decided it


def test_the_sweep_runs_one_capacity_job_per_option_and_a_training_job_records_no_capacity_settings():
    composed = jobs("capacity")
    assert {cfg.capacity.option for cfg in composed} == OPTIONS
    assert all(refusals(cfg) == [] for cfg in composed)  # the sweep declares a budget for a CPU
    assert "capacity" in effective_settings(composed[0])
    assert "capacity" not in effective_settings(jobs("offload")[0])


@pytest.mark.parametrize("overrides, refused", [
    (["capacity.cpu_budget_bytes=null"], "capacity.option=batchsize needs a budget to fit in, and this device reports "
                                         "no memory limit (a CPU): declare one, e.g. capacity.cpu_budget_bytes=4194304"),
    (["capacity.option=batch"], "capacity.option=batch: must be one of batchsize, accumulation_steps, "
                                "checkpoint_gradients, offload_data (did you mean batchsize?)"),
    (["capacity.width=0"], "capacity.width=0: must be >= 1"),
    (["backend=jno"], "capacity.option=batchsize shows crux's own solver, not backend=jno: leave backend=crux"),
])
def test_a_capacity_job_that_cannot_run_is_refused_before_any_compute(overrides, refused):
    (cfg, *_) = jobs("capacity", "capacity.option=batchsize", *overrides)
    assert refused in refusals(cfg)
