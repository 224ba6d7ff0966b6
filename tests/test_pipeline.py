"""The experiment pipeline: configs compose and are checked, multiruns log the run tree docs/CONTRACT.md fixes.

The multirun tests run the real console entry points (``python -m cruxlab.commands.sweep``,
``python -m cruxlab.commands.experiment``) in subprocesses against a SQLite store in a
temporary folder, with tiny networks and 20 epochs.
"""
from __future__ import annotations

import getpass
import json
from importlib.resources import files
from pathlib import Path

import jax
import numpy as np
import pytest
from hydra import compose
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import ConfigCompositionException
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError

from crux.roundoff import roundoff_twin
from crux.stats import Statistics, fingerprint
from cruxlab import config
from cruxlab.commands.sweep import available, check_claims
from cruxlab.config import CONFIG_PACKAGE
from cruxlab.runtime.sweep_parent import planned_jobs
from cruxlab.store import contract
from cruxlab.store.history import history_series, thinned
from crux_testing import launch, planned_job_configs, runs_by_role, selected

TINY = ["model.width=8", "model.depth=1", "solver.epochs=20"]
HISTORY_POINTS = 320  # conf/tracking/mlflow.yaml: the epochs of each history sent to MLflow as metrics
ARTIFACTS = {contract.HISTORY_PLOT, contract.STATS, contract.PARAMS, contract.CONFIG, contract.ENVIRONMENT,
             contract.MODEL}


def history(client: MlflowClient, run_id: str, key: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) of a logged metric, in step order."""
    points = sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)
    return np.array([m.step for m in points]), np.array([m.value for m in points])


def check_complete_child(client: MlflowClient, run, epochs: int, folder: Path) -> None:
    """Everything a finished job must have logged: histories, summary, params, the five artifacts."""
    run_id, metrics = run.info.run_id, run.data.metrics
    local = Path(client.download_artifacts(run_id, "", str(folder)))
    stats = Statistics.load(local / contract.STATS)
    assert stats.names == ["pde", "bc"] and stats.losses.shape == (epochs, 2)
    np.testing.assert_array_equal(stats.epoch, np.arange(epochs))
    # MLflow holds evenly spaced epochs of every history (all of them up to tracking.history_points), exactly
    sent, exact = thinned(stats.epoch, history_series(stats), HISTORY_POINTS)
    assert run.data.tags[contract.HISTORY_POINTS] == f"{len(sent)} of {epochs}"
    for key in ("loss/total", "loss/pde", "loss/bc", "lr/u"):
        steps, values = history(client, run_id, key)
        np.testing.assert_array_equal(steps, sent, err_msg=key)
        np.testing.assert_array_equal(values, exact[key].astype(np.float64), err_msg=key)
        assert np.all(np.isfinite(values)), key
    for key in ("compile_seconds", "run_seconds", "median_step_seconds", "steps_per_second", "final_loss",
                "memory/temp_bytes", "memory/argument_bytes", "memory/output_bytes", "error/u", "param_distance/u"):
        assert np.isfinite(metrics[key]), key
    assert metrics["memory/temp_bytes"] > 0 and metrics["param_distance/u"] > 0
    assert run.data.params["solver.epochs"] == str(epochs)
    assert {a.path for a in client.list_artifacts(run_id)} == ARTIFACTS

    assert metrics["final_loss"] == pytest.approx(float(stats.total_loss[-1]), rel=1e-6)
    with np.load(local / contract.PARAMS) as params:
        leaves = sorted(k.split("/", 2)[2] for k in params.files if k.startswith("final/u/"))
        assert leaves and leaves == sorted(k.split("/", 2)[2] for k in params.files if k.startswith("initial/u/"))
        distance = np.sqrt(sum(np.sum((params[f"final/u/{i}"] - params[f"initial/u/{i}"]) ** 2) for i in leaves))
    assert metrics["param_distance/u"] == pytest.approx(float(distance), rel=1e-5)
    resolved = OmegaConf.load(local / contract.CONFIG)
    assert resolved.solver.epochs == epochs
    assert run.data.params.get("memory.batchsize") == (None if resolved.memory.batchsize is None
                                                       else str(resolved.memory.batchsize))
    env = json.loads((local / contract.ENVIRONMENT).read_text())
    assert env["versions"]["jax"] and env["backend"] == jax.default_backend() and env["cpu"] and "git_commit" in env


@pytest.mark.integration
def test_sweep_logs_one_closed_parent_and_a_complete_child_per_job(store):
    """crux-sweep accumulation, cut to 3 jobs of 20 epochs, on the joblib launcher (jobs in other processes)."""
    done = launch(store, "cruxlab.commands.sweep", "accumulation", *TINY, "memory=full,b8,b8_acc4", "repeat=0",
                  "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    assert done.returncode == 0, done.stderr[-3000:]

    client, roles = runs_by_role(store, "accumulation")
    (parent,) = roles[contract.PARENT]
    children = roles[contract.CHILD]
    claim = available()["accumulation"].claim
    assert parent.info.status == contract.FINISHED and parent.data.tags[contract.CLAIM] == claim
    assert parent.data.metrics["jobs"] == 3 and parent.data.metrics["failed_jobs"] == 0
    assert parent.data.tags[contract.PLANNED_JOB_COUNT] == "3"
    for run in (parent, *children):  # as mlflow.start_run tags its runs, in the jobs' own processes too
        assert (run.data.tags[contract.USER], run.data.tags[contract.SOURCE_NAME]) == (getpass.getuser(), "crux-sweep")
    plan = json.loads((Path(client.download_artifacts(parent.info.run_id, contract.PLANNED_JOBS, str(store)))
                       ).read_text())
    assert [entry["job"] for entry in plan] == [0, 1, 2]
    assert sorted(c.data.tags[contract.VARIANT] for c in children) == ["b8", "b8_acc4", "full"]
    assert sorted(c.data.tags[contract.JOB] for c in children) == ["0", "1", "2"]
    batchsize = {"full": None, "b8": "8", "b8_acc4": "8"}  # a full batch has no batch size
    accumulation = {"full": "1", "b8": "1", "b8_acc4": "4"}
    for child in children:
        tags, params = child.data.tags, child.data.params
        assert child.info.status == contract.FINISHED
        assert tags[contract.PARENT_ID] == parent.info.run_id
        assert tags[contract.SWEEP] == "accumulation" and tags[contract.CLAIM] == claim
        assert child.info.run_name == tags[contract.VARIANT]  # repeat=0 on the command line: nothing repeats
        assert params.get("memory.batchsize") == batchsize[tags[contract.VARIANT]]
        assert params["memory.accumulation_steps"] == accumulation[tags[contract.VARIANT]]
        assert params["optimizer.name"] == "sgd" and params["model.width"] == "8"
        assert f"memory={tags[contract.VARIANT]}" in plan[int(tags[contract.JOB])]["overrides"]  # job n ran plan n
        check_complete_child(client, child, 20, store / tags[contract.VARIANT])


@pytest.mark.integration
def test_a_diverging_job_is_failed_with_its_history_and_the_others_complete(store):
    """SGD at a learning rate of 1e12 turns the loss non-finite within a few epochs: that child FAILED with the
    error and the history up to it, the other complete, the parent FAILED, exit status 1."""
    done = launch(store, "cruxlab.commands.experiment", "--multirun", *TINY, "optimizer=sgd",
                  "schedule.value=1e-3,1e12")
    assert done.returncode == 1
    assert "1 of the 2 jobs did not finish (job 1)" in done.stderr.splitlines()[-1]

    client, roles = runs_by_role(store, "crux")
    (parent,) = roles[contract.PARENT]
    assert parent.info.status == contract.FAILED
    assert parent.data.metrics["jobs"] == 2 and parent.data.metrics["failed_jobs"] == 1
    children = {c.data.tags[contract.VARIANT]: c for c in roles[contract.CHILD]}
    assert set(children) == {"value=0.001", "value=1000000000000.0"}
    failed, finished = children["value=1000000000000.0"], children["value=0.001"]
    assert failed.info.status == contract.FAILED
    assert failed.data.tags[contract.ERROR_TYPE] == "FloatingPointError"
    assert "became non-finite at epoch" in failed.data.tags[contract.ERROR_MESSAGE]
    # what was logged before the failure is kept: params, the config and the history up to the failing epoch
    assert failed.data.params["schedule.value"] == "1000000000000.0"
    steps, _ = history(client, failed.info.run_id, "loss/total")
    assert 0 < len(steps) < 20
    np.testing.assert_array_equal(steps, np.arange(len(steps)))
    assert finished.info.status == contract.FINISHED
    check_complete_child(client, finished, 20, store / "finished")


@pytest.mark.integration
def test_phases_run_on_one_solver_with_their_own_optimizers(store):
    """The documented Adam(warmup_cosine) -> L-BFGS(1.0) -> SOAP(1e-5) plan, cut to 6 + 3 + 3 epochs by phase name,
    on mini-batches: params.npz holds the parameters after each phase, and each phase moved them."""
    done = launch(store, "cruxlab.commands.experiment", *TINY, "solver.epochs=6", "schedule=warmup_cosine", "memory=b8",
                  "schedule.warmup=2", "phases=lbfgs_soap", "phases.lbfgs.epochs=3", "phases.soap.epochs=3")
    assert done.returncode == 0, done.stderr[-3000:]

    client, roles = runs_by_role(store, "crux")
    (run,) = roles["run"]
    assert run.info.status == contract.FINISHED and contract.PARENT_ID not in run.data.tags
    assert run.data.params["phases.lbfgs.optimizer.name"] == "lbfgs" and run.data.params["phases.soap.epochs"] == "3"
    steps, lr = history(client, run.info.run_id, "lr/u")
    np.testing.assert_array_equal(steps, np.arange(12))
    assert lr[0] == 0 and lr[2] == pytest.approx(1e-3)  # warm-up over 2 epochs, then cosine decay
    np.testing.assert_allclose(lr[6:9], 1.0, rtol=1e-6)
    np.testing.assert_allclose(lr[9:], 1e-5, rtol=1e-6)
    local = Path(client.download_artifacts(run.info.run_id, "", str(store / "artifacts")))
    stats = Statistics.load(local / contract.STATS)
    assert stats.phases == [0, 6, 9]
    with np.load(local / contract.PARAMS) as params:
        stages = ["initial", "phase0", "phase1", "phase2", "final"]
        assert {key.split("/")[0] for key in params.files} == set(stages)
        leaves = sorted({key.split("/", 1)[1] for key in params.files})
        snapshot = {stage: np.concatenate([params[f"{stage}/{leaf}"].ravel() for leaf in leaves]) for stage in stages}
    np.testing.assert_array_equal(snapshot["phase2"], snapshot["final"])
    for before, after in zip(stages, stages[1:4]):
        assert not np.array_equal(snapshot[before], snapshot[after]), f"{after} did not move the parameters"
    # each phase's fingerprints: it started from the snapshot before it and ended at the one after it, to the bit
    assert [list(pair) for pair in stats.fingerprints] == [[fingerprint(snapshot[before]), fingerprint(snapshot[after])]
                                                           for before, after in zip(stages, stages[1:4])]


def test_the_plan_lists_each_job_as_the_basic_sweeper_numbers_them(tmp_path):
    """The sweep file's params first, the command line after and winning (repeat=0 stops the repeats); a
    ``glob`` over a config group's options is expanded with the config loader, as crux's sweeper does."""
    config = OmegaConf.create({"hydra": {"sweeper": {"params": {"memory": "b8,b32", "repeat": "0,1"}},
                                         "overrides": {"task": ["+sweeps=accumulation", "repeat=0",
                                                                "solver.epochs=20"]}}})
    assert planned_jobs(config) == [["memory=b8", "repeat=0", "+sweeps=accumulation", "solver.epochs=20"],
                                    ["memory=b32", "repeat=0", "+sweeps=accumulation", "solver.epochs=20"]]
    config.hydra.sweeper.params.memory = "glob(b*)"
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(f"pkg://{CONFIG_PACKAGE}"))
    assert [job[0] for job in planned_jobs(config, OverridesParser.create(config_loader=loader))] == [
        "memory=b16", "memory=b32", "memory=b8", "memory=b8_acc4", "memory=b8_d2"]


def test_a_phase_is_shortened_by_name_in_every_job_of_the_phases_sweep(hydra_configs):
    """Phases are keyed by name, so one override reaches the same phase in every job; a name the job does not
    have is refused with Hydra's message naming the key."""
    parser = OverridesParser.create()
    base = selected("phases")
    shorter = ["solver.epochs=30", "phases.lbfgs.epochs=20", "phases.soap.epochs=10"]
    sweep = compose("config", overrides=base, return_hydra_config=True)
    params = [f"{k}={v}" for k, v in sweep.hydra.sweeper.params.items()]
    (jobs,) = BasicSweeper.split_arguments(parser.parse_overrides(params), None)
    for job in jobs:
        phases = config.training_phases(compose("config", overrides=base + list(job) + shorter))
        assert [(p.optimizer.name, p.epochs) for p in phases] == [("adam", 30), ("lbfgs", 20), ("soap", 10)]
    with pytest.raises(ConfigCompositionException, match="Could not override 'phases.soap.epochs'"):
        compose("config", overrides=["phases=lbfgs", "phases.soap.epochs=10"])


@pytest.mark.integration
def test_a_wrong_type_is_refused_before_any_run_is_created(tmp_path):
    done = launch(tmp_path, "cruxlab.commands.experiment", "solver.epochs=many")
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["crux-run: solver.epochs=many: solver.epochs takes an integer >= 1; write "
                                        "e.g. solver.epochs=1000"]
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "outputs").exists()


def test_unknown_keys_are_refused_in_groups_and_in_phases(hydra_configs):
    with pytest.raises(ConfigCompositionException, match="optimizer.b3"):
        compose("config", overrides=["optimizer.b3=0.9"])
    with pytest.raises(ConfigCompositionException, match="problem.nu"):  # heat1d's key, not poisson1d's
        compose("config", overrides=["problem.nu=0.1"])
    cfg = compose("config", overrides=["phases=lbfgs_soap", "+phases.soap.optimizer.momentum=0.9"])
    with pytest.raises(ConfigKeyError, match="Key 'momentum' not in 'SoapConfig'"):
        config.training_phases(cfg)


def test_a_round_off_twin_starts_one_ulp_up_or_down_from_the_configured_parameters(hydra_configs):
    """roundoff_twin=k moves every nonzero initial parameter one ulp, in directions drawn with seed k; zeros stay."""
    plain, first, second = (config.problem(compose("config", overrides=["model.width=8", f"roundoff_twin={k}"]))
                            for k in (0, 1, 2))
    start = np.concatenate([np.ravel(leaf) for leaf in jax.tree.leaves(plain.models["u"].params)])
    assert np.any(start == 0)
    directions = []
    for twin in (first, second):
        moved = np.concatenate([np.ravel(leaf) for leaf in jax.tree.leaves(twin.models["u"].params)])
        up, down = moved == np.nextafter(start, np.inf), moved == np.nextafter(start, -np.inf)
        np.testing.assert_array_equal(moved[start == 0], 0)
        assert np.all((up | down)[start != 0])
        assert 0.4 < up[start != 0].mean() < 0.6  # no common direction: not a rescaling of the network
        directions.append(up)
    assert not np.array_equal(*directions)  # each twin is another draw
    with pytest.raises(ValueError, match="roundoff_twin must be >= 0, got -1"):
        roundoff_twin(plain.models["u"].params, -1)


def test_every_config_option_composes(hydra_configs):
    conf = Path(str(files(CONFIG_PACKAGE)))
    groups = [d for d in conf.iterdir() if d.is_dir() and d.name != "__pycache__"]
    assert {d.name for d in groups} >= {"problem", "model", "optimizer", "schedule", "solver", "memory",
                                         "tracking", "phases"}
    for group in groups:
        for option in sorted(group.glob("*.yaml")):
            cfg = compose("config", overrides=[f"{group.name}={option.stem}"])
            phases = config.training_phases(cfg)
            assert phases[0].epochs == cfg.solver.epochs
    for option in (conf / "memory").glob("*.yaml"):  # whole combinations, nothing left to a default
        content = OmegaConf.load(option)
        memory = content.memory if "memory" in content else content  # `# @package _global_` also sets solver.*
        assert set(memory) == {"batchsize", "accumulation_steps", "checkpoint_gradients", "offload_data"}, option.name
        if "memory" in content:
            assert set(content) <= {"memory", "solver"}, option.name


def test_every_job_of_every_sweep_composes(hydra_configs):
    """Each Cartesian job of each sweep (repeats aside: they change nothing but a tag)."""
    sweeps = available()
    assert set(sweeps) >= {"accumulation", "inner_steps", "checkpoint", "offload", "substeps", "phases"}
    for name, sweep_file in sweeps.items():
        sweep = compose("config", overrides=selected(name), return_hydra_config=True)
        assert sweep_file.claim and sweep.claim == sweep_file.claim, name
        check_claims(sweep_file)  # raises for a check crux-report does not have
        assert list(sweep.claims) == sweep_file.claims and sweep_file.claims, name
        assert str(sweep.hydra.mode) == "RunMode.MULTIRUN", name
    jobs = planned_job_configs()
    assert all(sum(swept == name for swept, _, _ in jobs) > 1 for name in sweeps)
    for name, job, cfg in jobs:
        assert config.out_of_range(cfg) == [], (name, job)


@pytest.mark.integration
def test_mlflow_gets_evenly_spaced_epochs_of_each_history_and_the_report_reads_every_epoch(store):
    """tracking.history_points=7 sends 7 epochs of a 30-epoch history, the first and the last among them, with
    the values training recorded; null sends all 30; crux-report reads all 30 from stats.npz either way."""
    from cruxlab.report.sweep_reader import load_sweep
    done = launch(store, "cruxlab.commands.experiment", "--multirun", *TINY[:2], "solver.epochs=30",
                  "tracking.history_points=7,null", "tracking.experiment=thinned")
    assert done.returncode == 0, done.stderr[-3000:]
    client, roles = runs_by_role(store, "thinned")
    sent = {}
    for run in roles[contract.CHILD]:
        stats = Statistics.load(client.download_artifacts(run.info.run_id, contract.STATS, str(store)))
        steps, values = history(client, run.info.run_id, "loss/pde")
        np.testing.assert_array_equal(values, stats.losses[steps, 0].astype(np.float64))
        sent[run.data.tags[contract.HISTORY_POINTS]] = steps.tolist()
    assert sent == {"7 of 30": [0, 5, 10, 14, 19, 24, 29], "30 of 30": list(range(30))}

    sweep = load_sweep("thinned", uri=f"sqlite:///{store / 'mlflow.db'}")
    for record in sweep.records:
        np.testing.assert_array_equal(record.histories["loss/pde"], record.stats.losses[:, 0].astype(np.float64))
        assert len(record.histories["lr/u"]) == 30
