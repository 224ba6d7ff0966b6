"""solve(devices=D): each update's micro-batches split over D devices, the gradients summed inside the call.

The same point stream on D devices gives what one device gives with the batch of all of them: the numbers
differ only in the order of the gradient's sum (the devices add their partial sums), so the parameters of
T updates drift apart by float32 round-off of that sum, at most about T * D * eps of the distance travelled.
A plain batch of B on one device (what a broken split would train) is four orders of magnitude further.
The multi-device runs need devices before JAX starts: they run in a process of their own on forced host
devices (XLA_FLAGS=--xla_force_host_platform_device_count).
"""
from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from cruxlab import config
from cruxlab.config.backend_choice import backend_refusals
from cruxlab.store import contract
from crux_testing import EPS32, poisson
from test_backend_choice import composed
from crux_testing import launch, runs_by_role

TESTS = Path(__file__).resolve().parent
DEVICES, EPOCHS = 4, 20  # more devices than CI has cores: they need not be real
ROUND_OFF = EPOCHS * DEVICES * EPS32  # the parameters' drift bound, relative to the distance travelled
CASES = ["poisson/sgd", "heat/adam"]  # tests/devices_run.py runs the other two pairs as well


def test_more_devices_than_there_are_is_refused_naming_the_flag():
    solver = poisson().solver()
    with pytest.raises(ValueError, match=r"devices=2, but JAX sees 1 device.*xla_force_host_platform_device_count"):
        solver.solve(10, batchsize=8, devices=2)
    assert solver.history is None  # nothing trained


@pytest.mark.parametrize("devices", [0, -1, 1.5])
def test_a_device_count_that_is_not_a_positive_integer_is_refused(devices):
    with pytest.raises((TypeError, ValueError), match="devices"):
        poisson().solver().solve(10, batchsize=8, devices=devices)


def test_the_jno_backend_refuses_several_devices():
    assert backend_refusals(composed("backend=jno", "solver.devices=2")) == [
        "solver.devices=2: the jNO backend trains on one device; drop the override or choose backend=crux"]
    assert backend_refusals(composed("backend=jno")) == []


@pytest.fixture(scope="module")
def on_devices() -> dict[str, dict[str, float]]:
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={DEVICES}", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "devices_run.py", str(DEVICES), str(EPOCHS), ",".join(CASES)], cwd=TESTS,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    line = next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES)
def test_devices_times_batch_is_one_device_with_the_whole_batch(on_devices, case):
    result = on_devices[case]
    assert result["one_device_batch"] <= ROUND_OFF
    assert result["loss_one_device_batch"] <= ROUND_OFF
    assert result["plain_batch"] > 1e3 * ROUND_OFF  # the check can tell a batch of B from one of D*B


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES)
def test_devices_are_accumulation_over_as_many_micro_batches(on_devices, case):
    assert on_devices[case]["accumulation"] <= ROUND_OFF
    assert on_devices[case]["devices_accumulation_batch"] <= 2 * ROUND_OFF  # 2 micro-batches on each


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("option", ["offload", "fused", "checkpointed"])
def test_the_other_options_compose_with_devices(on_devices, case, option):
    assert on_devices[case][option] <= ROUND_OFF


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES)
def test_substeps_on_devices_are_substeps_with_the_whole_batch(on_devices, case):
    assert on_devices[case]["substeps_batch"] <= 2 * ROUND_OFF  # two updates an epoch


@pytest.mark.integration
@pytest.mark.parametrize("case", CASES)
def test_a_full_batch_split_over_devices_is_the_unsplit_one(on_devices, case):
    assert on_devices[case]["full_batch"] <= ROUND_OFF


@pytest.mark.integration
def test_two_processes_train_what_one_process_with_two_devices_trains(tmp_path):
    """jax.distributed on 127.0.0.1: each process holds one device of the mesh and computes the same update."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    workers = [subprocess.Popen([sys.executable, "processes_run.py", str(tmp_path / f"process{i}.npy"),
                                 "distributed", str(port), str(i)], cwd=TESTS, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    local = subprocess.run([sys.executable, "processes_run.py", str(tmp_path / "local.npy"), "local"], cwd=TESTS,
                           env={**env, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"},
                           capture_output=True, text=True, timeout=600)
    assert local.returncode == 0, local.stderr[-3000:]
    for worker in workers:
        output = worker.communicate(timeout=600)[0]
        assert worker.returncode == 0, output[-3000:]
    (start, one), first, second = (np.load(tmp_path / f"{name}.npy") for name in ("local", "process0", "process1"))
    assert np.linalg.norm(one - start) > 0
    np.testing.assert_array_equal(first, second)  # every process ends with the same parameters ...
    np.testing.assert_array_equal(first[1], one)  # ... those of one process with two devices, bit for bit


def devices_claim() -> dict[str, dict[str, str]]:
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2", "JAX_PLATFORMS": "cpu"}
    done = subprocess.run([sys.executable, "devices_claims_run.py"], cwd=TESTS, env=env, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(next(l for l in done.stdout.splitlines() if l.startswith("RESULT "))[len("RESULT "):])


@pytest.mark.integration
def test_the_devices_check_holds_on_crux_and_fails_when_each_device_keeps_its_own_gradient():
    found = devices_claim()
    assert found["crux"]["verdict"] == "holds", found["crux"]["summary"]
    assert found["own_gradient_only"]["verdict"] == "fails", found["own_gradient_only"]["summary"]
    assert found["crux"]["id"] == found["own_gradient_only"]["id"] == "devices.one_batch[b4_d2]"


@pytest.mark.integration
def test_the_devices_sweep_runs_on_two_host_devices_and_its_report_judges_it(tmp_path):
    done = launch(tmp_path, "cruxlab.commands.sweep", "devices", "solver.epochs=40", "repeat=0,1", "model.width=8",
                  "problem.n_interior=64")
    assert done.returncode == 0, done.stderr[-3000:]
    _, roles = runs_by_role(tmp_path, "devices")
    children = roles[contract.CHILD]
    assert all(child.info.status == contract.FINISHED for child in children)
    assert sorted((c.data.params["memory.batchsize"], c.data.params["solver.devices"]) for c in children) == \
        sorted([("8", "1"), ("16", "1"), ("8", "2")] * 2)
    store = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    report = subprocess.run([sys.executable, "-m", "cruxlab.report", "devices", "--out", str(tmp_path / "report")],
                            cwd=tmp_path, env=store, capture_output=True, text=True, timeout=600)
    assert report.returncode == 0, report.stderr[-3000:]
    (verdict,) = json.loads((tmp_path / "report" / "verdicts.json").read_text())
    assert (verdict["id"], verdict["verdict"]) == ("devices.one_batch[b8_d2]", "holds"), verdict["summary"]
    assert "time_ratio_median" in verdict["evidence"]


def crux_run(folder: Path, *overrides: str, env: dict[str, str]) -> subprocess.Popen:
    """``crux-run`` of a small 2-device job in ``folder``, logging into ``folder/mlflow.db`` (a ``--multirun``
    among ``overrides`` goes first, as Hydra needs)."""
    folder.mkdir(exist_ok=True)
    job = [o for o in overrides if o.startswith("--")] + ["memory=b8", "solver.epochs=20", "model.width=8", "problem.n_interior=64", "solver.devices=2",
           f"hydra.run.dir={folder / 'outputs'}", *(o for o in overrides if not o.startswith("--"))]
    return subprocess.Popen([sys.executable, "-m", "cruxlab.commands.experiment", *job], cwd=folder, text=True,
                            env={**env, "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}"},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def final_parameters(folder: Path) -> tuple[int, dict[str, np.ndarray]]:
    """How many runs ``folder``'s store holds, and the final parameters its one job logged."""
    from mlflow.tracking import MlflowClient
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    (job,) = [run for run in runs if run.data.tags.get(contract.ROLE) != contract.PARENT]
    saved = np.load(client.download_artifacts(job.info.run_id, contract.PARAMS, str(folder)))
    return len(runs), {key: saved[key] for key in saved.files if key.startswith("final/")}


@pytest.mark.integration
def test_a_job_of_two_processes_trains_what_one_process_with_two_devices_trains_and_logs_once(tmp_path):
    """crux-run as two processes on 127.0.0.1 (jax.processes=2): one run in the store, the parameters of one
    process with two host devices bit for bit."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    together = [crux_run(tmp_path / "processes", "jax.processes=2", f"jax.coordinator=127.0.0.1:{port}",
                         f"jax.process_id={i}", env=env) for i in range(2)]
    alone = crux_run(tmp_path / "one", env={**env, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    for job in (*together, alone):
        output = job.communicate(timeout=600)[0]
        assert job.returncode == 0, output[-3000:]
    (runs, distributed), (_, local) = final_parameters(tmp_path / "processes"), final_parameters(tmp_path / "one")
    assert runs == 1  # process 1 trained beside process 0 without a run of its own
    assert distributed.keys() == local.keys() and distributed
    for key in local:
        np.testing.assert_array_equal(distributed[key], local[key], err_msg=key)


def test_processes_that_cannot_each_hold_devices_of_the_job_are_refused():
    assert "solver.devices=3 must be a multiple of 2" in " ".join(
        config.out_of_range(composed("jax.processes=2", "solver.devices=3")))
    assert config.out_of_range(composed("jax.processes=2", "solver.devices=2")) == []
    assert backend_refusals(composed("backend=jno", "jax.processes=2"))[0].startswith("jax.processes=2: the jNO")


@pytest.mark.integration  # starts a Slurm cluster
def test_a_slurm_job_of_two_tasks_trains_as_one_process_with_two_devices(slurm, tmp_path):
    """The sweep path on Slurm: one job of two tasks (hydra.launcher.tasks_per_node=2), each task a process of
    the job, the coordinator and each task's number taken from Slurm's environment."""
    env = {**os.environ, **slurm, "JAX_PLATFORMS": "cpu"}
    env.pop("XLA_FLAGS", None)
    sweep = crux_run(tmp_path / "slurm", "--multirun", "hydra/launcher=submitit_slurm",
                     "hydra.launcher.tasks_per_node=2", "jax.processes=2", f"hydra.sweep.dir={tmp_path / 'multirun'}",
                     env=env)
    alone = crux_run(tmp_path / "one", env={**env, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"})
    for job in (sweep, alone):
        output = job.communicate(timeout=600)[0]
        assert job.returncode == 0, output[-3000:]
    (runs, distributed), (_, local) = final_parameters(tmp_path / "slurm"), final_parameters(tmp_path / "one")
    assert runs == 2  # the sweep's parent and its one job's run: the second task logged nothing
    for key in local:
        np.testing.assert_array_equal(distributed[key], local[key], err_msg=key)
