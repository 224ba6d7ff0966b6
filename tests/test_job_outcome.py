"""What a job prints when it ends, and how a store's address is shown."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import crux
from crux.failures import failure_line

from cruxlab.runtime.job import outcome_line
from cruxlab.store.secrets import masked
from crux_testing import poisson


@pytest.mark.parametrize("uri, shown", [
    ("postgresql://crux:s3cret@db.example:5432/mlflow", "postgresql://crux:***@db.example:5432/mlflow"),
    ("http://alice:p%40ss@tracking.example/", "http://alice:***@tracking.example/"),
    ("http://tracking.example:5000", "http://tracking.example:5000"),
    ("sqlite:////home/me/mlflow.db", "sqlite:////home/me/mlflow.db"),
])
def test_a_password_in_a_store_address_is_masked(uri, shown):
    assert masked(uri) == shown


def test_the_last_line_gives_the_final_losses_the_errors_and_the_run():
    problem = poisson(n=16, hidden=(4,))
    stats = problem.solver().solve(3)
    line = outcome_line(stats, {"u": 0.25}, "abc123", "sqlite:///x.db")
    total, (pde, bc) = stats.total_loss[-1], stats.losses[-1]
    assert line == (f"final loss {total:.4g} ({stats.names[0]} {pde:.4g}, {stats.names[1]} {bc:.4g}), "
                    f"error/u 0.25; run abc123 in sqlite:///x.db")


@pytest.mark.parametrize("run_id", ["abc123", None], ids=["recorded", "store-failed"])
def test_the_last_line_masks_a_password_in_the_stores_address(run_id):
    stats = poisson(n=16, hidden=(4,)).solver().solve(1)
    line = outcome_line(stats, {}, run_id, "http://user:s3cr3t@tracking.example:5000")
    assert "s3cr3t" not in line and "http://user:***@tracking.example:5000" in line


def users_code(values):
    return values["missing"]  # the line failure_line names


def test_a_failure_names_the_innermost_line_of_the_users_code_it_passed_through():
    with pytest.raises(KeyError) as raised:
        crux.Crux([crux.Constraint("c", lambda net, x: users_code({}), np.zeros((4, 1), np.float32))],
                  {"u": crux.mlp(1, 1, (4,), seed=0)}).solve(1)
    line = users_code.__code__.co_firstlineno + 1
    assert failure_line(raised.value) == f"KeyError: 'missing' ({Path(__file__).relative_to(Path.cwd())}:{line})"
    with pytest.raises(ValueError) as refused:  # crux refusing what the user's line asked for
        crux.lrs.warmup_cosine(10, 20, 1e-3, 1e-5)
    assert failure_line(refused.value).endswith(f"({Path(__file__).relative_to(Path.cwd())}:{line + 10})")  # the call above
    assert failure_line(ValueError("memory.batchsize=0:\n  must be >= 1")) == "memory.batchsize=0: must be >= 1"


def test_jax_platform_probe_is_kept_quiet_and_its_warnings_are_not(caplog):
    import logging

    from cruxlab.commands.experiment import PLATFORM_PROBE, platform_probe_quiet

    probe = logging.getLogger(PLATFORM_PROBE)
    probe.addFilter(platform_probe_quiet)
    try:
        with caplog.at_level(logging.INFO, logger=PLATFORM_PROBE):
            probe.info("Unable to initialize backend 'tpu': INTERNAL: Failed to open libtpu.so: libtpu.so: cannot "
                       "open shared object file: No such file or directory")
            probe.info("Unable to initialize backend 'cuda': module 'jaxlib.xla_extension' has no attribute")
            probe.warning("An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib is not installed.")
            probe.info("another line of the platform set-up")
    finally:
        probe.removeFilter(platform_probe_quiet)
    assert [record.getMessage()[:30] for record in caplog.records] == ["An NVIDIA GPU may be present o",
                                                                      "another line of the platform s"]


@pytest.mark.integration  # a sweep in a subprocess
def test_every_job_of_a_sweep_on_the_default_launcher_says_its_own_result_line(tmp_path):
    """Eight short jobs in one process, each written by the writer while the next trains: each job's log and the
    console hold its line, naming its own run."""
    import os
    import subprocess
    import sys

    from mlflow.tracking import MlflowClient

    from cruxlab.store import contract

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    done = subprocess.run([sys.executable, "-m", "cruxlab.commands.sweep", "accumulation", "solver.epochs=20",
                           "model.width=8", "problem.n_interior=64", "repeat=0,1,2,3", "memory=b8,b32",
                           "gradient_draws=0"], cwd=tmp_path, env={**os.environ, "MLFLOW_TRACKING_URI": store},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    client = MlflowClient(store)
    runs = client.search_runs([client.get_experiment_by_name("accumulation").experiment_id],
                              contract.tag_filter(contract.ROLE, contract.CHILD))
    run_of = {int(run.data.tags[contract.JOB]): run.info.run_id for run in runs}
    assert sorted(run_of) == list(range(8))
    said = [line for line in (done.stdout + done.stderr).splitlines() if "final loss" in line and "; run " in line]
    assert sorted(line.split("; run ")[1].split()[0] for line in said) == sorted(run_of.values())
    for number, run_id in run_of.items():
        (log,) = tmp_path.glob(f"multirun/*/*/{number}/crux.log")
        lines = [line for line in log.read_text().splitlines() if "final loss" in line]
        assert len(lines) == 1 and f"; run {run_id} in " in lines[0], (number, lines)
