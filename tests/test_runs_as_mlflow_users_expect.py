"""What a Hydra and MLflow user expects of crux-run's runs, through the commands and a SQLite store: runs named after
what they change and tagged as ``mlflow.start_run`` tags them, MLflow's system metrics on its switch, one store
wherever Hydra runs the job, the settings filterable as the YAML spells them, and what a job returns to a sweeper."""
import getpass
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from mlflow.tracking import MlflowClient

from cruxlab.store import contract

pytestmark = pytest.mark.integration

TESTS = Path(__file__).parent
OVERRIDES = ["solver.epochs=5", "problem.n_interior=64", "model.hidden=[8,4]", "optimizer.b1=0.8"]


def crux(folder: Path, module: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    """``python -m module args`` in ``folder``, its store MLflow's default there (no URI set), the tests' Hydra
    callbacks importable."""
    environment = {key: value for key, value in os.environ.items() if key != "MLFLOW_TRACKING_URI"}
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, (str(TESTS), os.environ.get("PYTHONPATH"))))
    return subprocess.run([sys.executable, "-m", module, *args], cwd=folder, env={**environment, **env},
                          capture_output=True, text=True, timeout=600)


def only_run(folder: Path, experiment: str = "crux"):
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    (run,) = client.search_runs([client.get_experiment_by_name(experiment).experiment_id])
    return client, run


@pytest.fixture(scope="module")
def lone_run(tmp_path_factory):
    """One ``crux-run`` in a git checkout, Hydra running it in its output folder (``hydra.job.chdir=True``), with
    a primary config of the user's own (``--config-name``) and MLflow's system metrics switched on."""
    folder = tmp_path_factory.mktemp("checkout")
    git = lambda *args: subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True,  # noqa: E731
                                       text=True).stdout.strip()
    git("init", "-q")
    (folder / "conf").mkdir()
    (folder / "conf" / "mine.yaml").write_text("defaults:\n  - config\n  - _self_\n")
    git("add", "conf")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "config")
    done = crux(folder, "cruxlab.commands.experiment", "--config-dir", "conf", "--config-name", "mine", *OVERRIDES,
                "hydra.job.chdir=True", MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING="true")
    assert done.returncode == 0, done.stderr
    return folder, git("rev-parse", "HEAD")


def test_a_lone_run_is_named_after_its_overrides_and_tagged_with_them_and_its_config(lone_run):
    folder, _ = lone_run
    _, run = only_run(folder)
    assert run.info.run_name == "epochs=5,n_interior=64,hidden=[8, 4],b1=0.8"
    assert run.data.tags[contract.VARIANT] == run.info.run_name
    assert run.data.tags[contract.OVERRIDES] == " ".join(OVERRIDES)
    assert run.data.tags[contract.CONFIG_NAME] == "mine"


def test_a_run_has_the_tags_mlflow_start_run_gives_its_runs(lone_run):
    folder, commit = lone_run
    _, run = only_run(folder)
    tags = run.data.tags
    assert tags[contract.USER] == run.info.user_id == getpass.getuser()
    assert (tags[contract.SOURCE_NAME], tags[contract.SOURCE_TYPE]) == ("crux-run", "LOCAL")  # run by python -m
    assert tags[contract.GIT_COMMIT] == commit


def test_mlflows_switch_logs_system_metrics_beside_the_histories(lone_run):
    pytest.importorskip("psutil", reason="MLflow samples system metrics with psutil (an install of crux[jno] has it)")
    folder, _ = lone_run
    client, run = only_run(folder)
    assert {"system/cpu_utilization_percentage", "system/system_memory_usage_megabytes"} <= run.data.metrics.keys()
    assert len(client.get_metric_history(run.info.run_id, "system/cpu_utilization_percentage")) >= 1


def test_a_job_hydra_runs_in_its_output_folder_logs_to_the_store_of_the_commands_folder(lone_run):
    folder, _ = lone_run
    assert (folder / "mlflow.db").is_file() and (folder / "mlartifacts").is_dir()
    assert [path.relative_to(folder) for path in folder.rglob("mlflow.db")] == [Path("mlflow.db")]


def test_a_booleans_param_is_found_by_the_filter_the_yaml_spells_and_hidden_layers_build_the_model(lone_run):
    folder, _ = lone_run
    client, run = only_run(folder)
    experiment = run.info.experiment_id
    assert [r.info.run_id for r in client.search_runs([experiment], "params.`problem.hard_boundary` = 'false'")] \
        == [run.info.run_id]
    assert run.data.params["model.hidden"] == "[8, 4]" and "model.width" not in run.data.params
    with np.load(client.download_artifacts(run.info.run_id, contract.PARAMS, str(folder))) as params:
        weights = [params[key].shape[-2:] for key in params.files if key.startswith("final/u/")
                   and params[key].ndim == 3]  # (1, fan-in, fan-out) beside the biases
    assert sorted(weights) == [(1, 8), (4, 1), (8, 4)]


def test_each_job_of_hydras_basic_sweeper_is_named_by_its_overrides_and_returns_its_objective(tmp_path):
    returned = tmp_path / "returned.jsonl"
    done = crux(tmp_path, "cruxlab.commands.experiment", "-m", "hydra/sweeper=basic",
                "objective=final_loss,error,run_seconds", "solver.epochs=5", "problem.n_interior=64",
                "+hydra.callbacks.returned._target_=job_returns.Returned",
                f"+hydra.callbacks.returned.path={returned}")
    assert done.returncode == 0, done.stderr
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    (parent,), runs = search_runs(client)
    assert set(runs) == {f"objective={name},epochs=5,n_interior=64" for name in ("final_loss", "error", "run_seconds")}
    for run in runs.values():
        assert run.info.status == contract.FINISHED and run.data.tags[contract.OVERRIDES].startswith("objective=")
        assert run.data.tags[contract.PARENT_ID] == parent.info.run_id
    assert (parent.info.status, parent.data.metrics["jobs"], parent.data.metrics["failed_jobs"]) == (
        contract.FINISHED, 3, 0)
    metric = {"final_loss": "final_loss", "error": "error/u", "run_seconds": "run_seconds"}
    for line in returned.read_text().splitlines():
        job = json.loads(line)
        objective = job["overrides"][0].split("=")[1]
        run = runs[f"objective={objective},epochs=5,n_interior=64"]
        assert job["returned"] == run.data.metrics[metric[objective]]


def search_runs(client: MlflowClient) -> tuple[list, dict]:
    """The parent runs of another sweeper's multiruns in experiment ``crux``, and its job runs by name."""
    runs = client.search_runs([client.get_experiment_by_name("crux").experiment_id])
    return ([run for run in runs if run.data.tags[contract.ROLE] == contract.SEARCH],
            {run.info.run_name: run for run in runs if run.data.tags[contract.ROLE] == contract.SINGLE})


def test_a_multirun_of_another_sweeper_whose_job_is_refused_closes_its_parent_failed(tmp_path):
    done = crux(tmp_path, "cruxlab.commands.experiment", "-m", "hydra/sweeper=basic", "solver.epochs=5,0",
                "problem.n_interior=64")
    assert done.returncode == 1 and "crux-run: solver.epochs=0: must be >= 1" in done.stderr
    (parent,), runs = search_runs(MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}"))
    assert [(name, run.info.status) for name, run in runs.items()] == [("epochs=5,n_interior=64", contract.FINISHED)]
    assert (parent.info.status, parent.data.metrics["jobs"]) == (contract.FAILED, 1)


def test_crux_sweep_refuses_another_sweeper_in_one_line_saying_what_works(tmp_path):
    done = crux(tmp_path, "cruxlab.commands.sweep", "accumulation", "hydra/sweeper=optuna")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "crux-sweep: hydra/sweeper=optuna: crux-sweep runs a claim's sweep with crux's own sweeper; to search "
        "with another sweeper run `crux-run -m hydra/sweeper=optuna ...`, each job returning what "
        "objective=final_loss|error|run_seconds names (docs/usage.md)"]
    assert not (tmp_path / "mlflow.db").exists()


def test_removing_a_key_of_the_schema_says_how_to_give_it_its_default(tmp_path):
    done = crux(tmp_path, "cruxlab.commands.experiment", "~optimizer.b1")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "crux-run: ~optimizer.b1: optimizer.b1 is a key of crux's schema, which every job's config keeps (null where "
        "the library's default applies); write optimizer.b1=null for its default, or optimizer.b1=VALUE")
    assert not (tmp_path / "mlflow.db").exists()


def test_an_error_objective_for_a_problem_without_an_exact_solution_is_refused_before_any_run(tmp_path):
    example = TESTS.parent / "examples" / "own_problem"
    done = crux(example, "cruxlab.commands.experiment", "--config-dir", "conf", "problem=unit_square",
                "objective=error", f"hydra.run.dir={tmp_path / 'outputs'}",
                MLFLOW_TRACKING_URI=f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "crux-run: objective=error: problem unit_square has no exact solution to measure an error against; choose "
        "objective=final_loss or objective=run_seconds")
    assert not (tmp_path / "mlflow.db").exists()


def test_hidden_layers_of_several_widths_are_refused_on_jno_before_any_run(tmp_path):
    done = crux(tmp_path, "cruxlab.commands.experiment", "backend=jno", "model.hidden=[8,4]")
    assert done.returncode == 1
    assert done.stderr.strip().splitlines()[-1] == (
        "crux-run: model.hidden=[8,4]: the jNO backend builds hidden layers of one width (foundax.mlp); write "
        "model.width and model.depth, or choose backend=crux")
    assert not (tmp_path / "mlflow.db").exists()
