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

from pathlib import Path

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.utils import setup_globals
from hydra.types import RunMode

from cruxlab.config import CONFIG_PACKAGE
from cruxlab.runtime.sweep_parent import pin_sweep_dir
from scale_out import assert_same_as_reference, sweep_and_report


def config_loader() -> ConfigLoaderImpl:
    """Hydra's config loader on the project's configs: what every launcher builds a job's config with."""
    setup_globals()  # the ${now:...} resolver of the default sweep folder
    return ConfigLoaderImpl(config_search_path=create_config_search_path(f"pkg://{CONFIG_PACKAGE}"))


def test_every_job_gets_the_sweep_folder_of_the_command_whatever_its_working_directory(tmp_path, monkeypatch):
    """Launchers build each job's config again from the files and the multirun's hydra overrides, with the
    loader used here; Hydra's default sweep folder is relative, so a job running elsewhere (a Ray cluster's
    worker) would look for its parent run in another folder unless the sweep folder travels as an absolute
    path."""
    loader = config_loader()
    command, worker = tmp_path / "command", tmp_path / "worker"
    command.mkdir(), worker.mkdir()
    monkeypatch.chdir(command)
    multirun = loader.load_configuration("config", overrides=["memory=b8,b32"], run_mode=RunMode.MULTIRUN)
    relative = multirun.hydra.sweep.dir
    assert not Path(relative).is_absolute()

    assert pin_sweep_dir(multirun) == command / relative
    monkeypatch.chdir(worker)
    job = loader.load_sweep_config(multirun, ["memory=b8"])
    assert job.hydra.sweep.dir == str(command / relative)
    assert job.memory.batchsize == 8


@pytest.mark.integration  # starts a Ray cluster and sweeps in subprocesses
def test_ray_sweep_on_a_cluster_started_elsewhere_gives_the_default_launchers_verdicts(ray_cluster, ray_python,
                                                                                         reference, tmp_path):
    assert_same_as_reference(sweep_and_report(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}", "ray", ray_cluster,
                                              ray_python), reference)


@pytest.mark.integration
@pytest.mark.slow  # submitit's machinery, which test_slurm_sweep_through_submitit runs on a real Slurm cluster
def test_submitit_local_sweep_gives_the_default_launchers_verdicts(reference, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason='pip install -e ".[slurm]"')
    assert_same_as_reference(sweep_and_report(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}", "submitit_local"),
                             reference)


@pytest.mark.integration  # starts a Slurm cluster
def test_slurm_sweep_through_submitit_gives_the_default_launchers_verdicts(slurm, reference, tmp_path):
    assert_same_as_reference(sweep_and_report(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}", "submitit_slurm",
                                              slurm), reference)
