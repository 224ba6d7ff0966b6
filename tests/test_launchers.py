"""A claim sweep on each of Hydra's launchers beyond the default: every job a child of the sweep's parent, and the
same crux-report verdicts as the default launcher gives.

The jobs of every launcher run the same XLA programs on the same machine, so their
results must be the same bits as the default launcher's (which runs them all in one
process), not merely close: a difference would mean that a launcher changed a job's
config or environment. The Ray cluster is started from a folder of its own, as a
cluster someone else started would be, so its jobs run in another working directory
and without the sweep command's environment.
"""
from __future__ import annotations

import pytest

from scale_out import assert_same_as_reference, sweep_and_report

pytestmark = pytest.mark.integration  # starts a Ray cluster, a Slurm cluster, sweeps in subprocesses


def test_ray_sweep_on_a_cluster_started_elsewhere_gives_the_default_launchers_verdicts(ray_cluster, reference,
                                                                                         tmp_path):
    assert_same_as_reference(sweep_and_report(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}", "ray", ray_cluster),
                             reference)


def test_submitit_local_sweep_gives_the_default_launchers_verdicts(reference, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason='pip install -e ".[slurm]"')
    assert_same_as_reference(sweep_and_report(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}", "submitit_local"),
                             reference)


def test_slurm_sweep_through_submitit_gives_the_default_launchers_verdicts(slurm, reference, tmp_path):
    assert_same_as_reference(sweep_and_report(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}", "submitit_slurm",
                                              slurm), reference)
