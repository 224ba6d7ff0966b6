"""crux-sweep starts the device runtime beside its imports only where no job could ask JAX to start otherwise;
its refusals and its help import neither JAX nor MLflow."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from cruxlab.commands.sweep import builtin_sweeps, find_sweep, own_config_files
from cruxlab.device_start import why_not_early

ACCUMULATION_SWEEP = builtin_sweeps()["accumulation"]
ACCUMULATION = OmegaConf.to_container(ACCUMULATION_SWEEP.config, resolve=False)


def test_a_sweep_that_sets_nothing_of_jaxs_start_starts_the_runtime_early():
    assert why_not_early(ACCUMULATION, ["solver.epochs=10", "jax.compilation_cache_dir=/tmp/cache"], []) is None


@pytest.mark.parametrize("override", ["hydra.job.env_set.XLA_FLAGS=--xla_force_host_platform_device_count=2",
                                      "+hydra.job.env_set.JAX_ENABLE_X64=1", "hydra/launcher=joblib",
                                      "jax.processes=2"])
def test_an_override_that_could_set_jax_up_for_the_jobs_waits_for_them(override):
    assert why_not_early(ACCUMULATION, ["solver.epochs=10", override], []) == f"the override {override}"


def test_a_sweep_whose_jobs_set_jaxs_environment_waits_for_them():
    devices = OmegaConf.to_container(builtin_sweeps()["devices"].config, resolve=False)
    assert why_not_early(devices, [], []) == "the sweep's hydra.job.env_set"
    swept = {**ACCUMULATION, "hydra": {"sweeper": {"params": {"jax.processes": "1,2"}}}}
    assert why_not_early(swept, [], []) == "the sweep's hydra.sweeper.params jax.processes"


def test_config_files_of_ones_own_that_could_set_jax_up_wait_for_the_jobs(tmp_path):
    (tmp_path / "problem").mkdir()
    (tmp_path / "problem" / "mine.yaml").write_text("n_interior: 64\n")
    assert why_not_early(ACCUMULATION, ["problem=mine"], own_config_files(ACCUMULATION_SWEEP, tmp_path)) is None
    (tmp_path / "problem" / "wide.yaml").write_text("# @package _global_\nhydra:\n  job:\n    env_set:\n"
                                                    "      XLA_FLAGS: --xla_force_host_platform_device_count=2\n")
    assert why_not_early(ACCUMULATION, ["problem=mine"], own_config_files(ACCUMULATION_SWEEP, tmp_path)) == str(
        tmp_path / "problem" / "wide.yaml")


def test_the_groups_of_a_sweeps_own_folder_are_read_as_config_files_of_ones_own(tmp_path):
    """The built-in advise sweep chooses among its folder's group sweeps/advise_jobs, which sets nothing of JAX's
    start; a sweep file beside a group whose option sets the jobs' environment waits for its jobs."""
    advise = builtin_sweeps()["advise"]
    assert why_not_early(OmegaConf.to_container(advise.config, resolve=False), [], own_config_files(advise, None)) is None
    (tmp_path / "mine.yaml").write_text("hydra:\n  sweeper:\n    params:\n      sweeps/jobs@_global_: a\n")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "a.yaml").write_text("hydra:\n  job:\n    env_set:\n      JAX_ENABLE_X64: 'True'\n")
    mine = find_sweep(str(tmp_path / "mine.yaml"))
    assert why_not_early(OmegaConf.to_container(mine.config, resolve=False), [],
                         own_config_files(mine, None)) == str(tmp_path / "jobs" / "a.yaml")


def crux_sweep(tmp_path: Path, *args: str, before: str = "") -> subprocess.CompletedProcess:
    """crux-sweep ARGS in a process of its own, in ``tmp_path`` with its store there, after the Python ``before``."""
    code = (f"import sys\n{before}sys.argv = ['crux-sweep', *{list(args)!r}]\n"
            "from cruxlab.commands.sweep import main\nmain()\n")
    return subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"})


@pytest.mark.integration
@pytest.mark.parametrize("args", [["--help"], ["accumulation", "hydra/sweeper=basic"], ["typo.yaml"]])
def test_help_and_refusals_before_the_sweep_import_neither_jax_nor_mlflow(tmp_path, args):
    (tmp_path / "typo.yaml").write_text("claim: a typo\nclaims: [acumulation]\n")  # no check of crux-report's
    done = crux_sweep(tmp_path, *args, before="import atexit\natexit.register(lambda: print('IMPORTED', "
                                               "*sorted({'jax', 'mlflow'} & set(sys.modules)), file=sys.stderr))\n")
    assert done.returncode == (0 if args == ["--help"] else 2), done.stderr
    (line,) = [line for line in done.stderr.splitlines() if line.startswith("IMPORTED")]
    assert line == "IMPORTED"
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.integration
def test_a_sweeps_own_xla_flags_still_give_its_job_the_devices_they_ask_for(tmp_path):
    """The devices sweep's jobs ask for 2 host devices through their environment: a runtime started before
    the job would have one, and the job would be refused (solve(devices=2) on 1 device)."""
    done = crux_sweep(tmp_path, "devices", "memory=b8_d2", "repeat=0", "solver.epochs=2", "model.width=8",
                      "problem.n_interior=64")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "FINISHED" in done.stdout.splitlines()[-1]


@pytest.mark.integration
@pytest.mark.parametrize("sweep, early", [("accumulation", True), ("devices", False)])
def test_crux_sweep_starts_the_runtime_before_its_imports_only_where_no_job_sets_jax_up(tmp_path, sweep, early):
    """Refused once its jobs are composed (solver.epochs=-1), after the point where it would start the runtime."""
    done = crux_sweep(tmp_path, sweep, "solver.epochs=-1",
                      before="from cruxlab import device_start\nstart = device_start.start_beside\n"
                             "device_start.start_beside = lambda: print('STARTED EARLY', file=sys.stderr) or start()\n")
    assert done.returncode == 1 and "solver.epochs=-1: must be >= 1" in done.stderr, done.stderr[-2000:]
    assert ("STARTED EARLY" in done.stderr) == early
