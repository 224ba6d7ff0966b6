"""What a sweep's run records is its own job's: the command and overrides in its ``environment.json``, whichever
launcher ran it and however fast its jobs follow each other (the basic launcher writes a job's files while the next
job sets up; joblib runs jobs side by side and hands their results to the sweep's process), and each job's own log
holds its result line, naming its run, once."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cruxlab.store import contract
from crux_testing import launch, runs_by_role

pytestmark = pytest.mark.integration  # sweeps in subprocesses

FAST = ["solver.epochs=300", "model.width=8", "problem.n_interior=64", "gradient_draws=0"]


def recorded_jobs(folder: Path, sweep: str) -> tuple[dict, list[tuple[dict, list[str], dict]]]:
    """The parent's tags, and per child run its tags (with its ``run_id``), the overrides its job was planned with
    (the parent's ``planned_jobs.json``) and its ``environment.json``."""
    client, roles = runs_by_role(folder, sweep)
    (parent,) = roles[contract.PARENT]
    plan_file = Path(client.download_artifacts(parent.info.run_id, contract.PLANNED_JOBS, str(folder)))
    plan = {str(entry["job"]): entry["overrides"] for entry in json.loads(plan_file.read_text())}
    children = []
    for run in roles[contract.CHILD]:
        path = client.download_artifacts(run.info.run_id, contract.ENVIRONMENT, str(folder / run.info.run_id))
        tags = {**run.data.tags, "run_id": run.info.run_id}
        children.append((tags, plan[run.data.tags[contract.JOB]], json.loads(Path(path).read_text())))
    return parent.data.tags, children


@pytest.mark.parametrize("sweep, launcher", [("accumulation", []),
                                             ("offload", ["hydra/launcher=joblib", "hydra.launcher.n_jobs=2"])],
                         ids=["accumulation-basic", "offload-joblib"])
def test_every_run_records_its_own_jobs_command_and_overrides(store, sweep, launcher):
    done = launch(store, "cruxlab.commands.sweep", sweep, *FAST, *launcher)
    assert done.returncode == 0, done.stderr[-3000:]
    parent, children = recorded_jobs(store, sweep)
    assert len(children) == int(parent[contract.PLANNED_JOB_COUNT]) >= 6
    assert len({json.dumps(planned) for _, planned, _ in children}) == len(children)  # every job its own overrides
    said = [line for line in (done.stdout + done.stderr).splitlines() if "final loss" in line and "; run " in line]
    assert len(said) == len(children)  # once each on the console
    for tags, planned, environment in children:
        assert environment.get("overrides") == planned, (tags[contract.JOB], environment.get("overrides"), planned)
        assert environment["command"] == parent[contract.COMMAND], tags[contract.JOB]
        (log,) = store.glob(f"multirun/{tags[contract.JOB]}/crux.log")
        lines = [line for line in log.read_text().splitlines() if "final loss" in line]
        assert len(lines) == 1 and f"; run {tags['run_id']} in " in lines[0], (tags[contract.JOB], lines)


def test_a_checkpointed_job_runs_the_form_of_the_least_memory_its_forms_compared(store):
    """A job is evidence on the checkpoint claim: its solve compares the forms, as where memory decides, though its
    update needs a sliver of the host's memory (a bare solve() would keep the likely form uncompared)."""
    done = launch(store, "cruxlab.commands.experiment", "memory=checkpoint", "solver.epochs=2", "model.width=8",
                  "model.depth=4", "problem.n_interior=64", "gradient_draws=0")
    assert done.returncode == 0, done.stderr[-3000:]
    _, roles = runs_by_role(store, "crux")
    (run,) = [run for runs in roles.values() for run in runs]
    assert run.data.metrics["memory/checkpoint_compared"] == 1.0
    assert run.data.metrics["memory/capacity_bytes"] > 1000 * run.data.metrics["memory/temp_bytes"]
    assert run.data.tags[contract.CHECKPOINT_FORM] in ("plain", "layers", "whole", "unrolled")
