"""A sweep composes each job's config once: the launcher gets the check's composition, with what the sweep
set for every job since, equal to Hydra's own; a job that differs from another only in values is that job's
composition with its values set, equal to Hydra's own; the compositions read each config file once."""
from __future__ import annotations

from pathlib import Path

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.config_repository import ConfigRepository
from hydra._internal.utils import create_config_search_path
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from cruxlab.commands.sweep import available, register
from cruxlab.config import CONFIG_PACKAGE
from cruxlab.runtime.composed import compose_once
from cruxlab.runtime.multirun import planned_jobs, set_for_every_job

try:  # what joblib's workers are sent with: a package of its own from joblib 1.6, joblib's own before
    import cloudpickle
except ImportError:
    from joblib.externals import cloudpickle

JOB = ["memory=b8", "solver.seed=1"]


@pytest.fixture
def composing(monkeypatch) -> list[list[str]]:
    """The overrides of every composition Hydra's loader makes, as they happen."""
    made: list[list[str]] = []
    real = ConfigLoaderImpl.load_configuration

    def counted(self, config_name, overrides, *args, **kwargs):
        made.append(list(overrides))
        return real(self, config_name, overrides, *args, **kwargs)
    monkeypatch.setattr(ConfigLoaderImpl, "load_configuration", counted)
    return made


def plain_loader() -> ConfigLoaderImpl:
    """Hydra's loader of crux's configs as Hydra makes it: what a sweep's compositions must equal."""
    return ConfigLoaderImpl(config_search_path=create_config_search_path(f"pkg://{CONFIG_PACKAGE}"))


def multirun(tmp_path: Path) -> tuple[ConfigLoaderImpl, DictConfig]:
    loader = plain_loader()
    config = loader.load_configuration("config", overrides=[f"hydra.sweep.dir={tmp_path}", "hydra.mode=MULTIRUN"],
                                       run_mode=RunMode.MULTIRUN)
    return loader, config


def test_a_job_composed_again_after_keys_set_for_every_job_is_hydras_composition_made_once(tmp_path, composing):
    loader, config = multirun(tmp_path)
    compose = compose_once(loader)
    checked = compose(config, JOB)
    with read_write(checked), open_dict(checked):  # what the sweep's check does with its copy
        del checked["hydra"]
    set_for_every_job(config, "hydra.sweep.dir", str(tmp_path / "pinned"))
    set_for_every_job(config, "hydra.job.env_set.CRUX_PARENT", "it's quoted")
    del composing[:]
    launched = loader.load_sweep_config(config, JOB)  # as a launcher calls it
    assert composing == []
    expected = plain_loader().load_sweep_config(config, JOB)
    assert OmegaConf.to_container(launched) == OmegaConf.to_container(expected)
    assert launched.hydra.sweep.dir == str(tmp_path / "pinned")
    assert launched.hydra.job.env_set.CRUX_PARENT == "it's quoted"
    assert launched.solver.seed == 1 and launched.hydra.overrides.hydra[-1].startswith("++hydra.job.env_set")


def test_a_job_is_composed_anew_when_the_hydra_overrides_changed_otherwise_or_it_was_launched(tmp_path, composing):
    loader, config = multirun(tmp_path)
    compose = compose_once(loader)
    del composing[:]
    compose(config, JOB)
    config.hydra.overrides.hydra.append("hydra/launcher=basic")  # not a value set for every job: Hydra composes
    compose(config, JOB)
    assert len(composing) == 2
    compose(config, JOB)  # the launch takes that composition
    assert len(composing) == 2
    compose(config, JOB)  # a second launch of the job composes again
    assert len(composing) == 3


def test_a_loader_sent_to_a_worker_process_leaves_its_compositions_behind(tmp_path, composing):
    loader, config = multirun(tmp_path)
    del composing[:]
    compose_once(loader)(config, JOB)
    worker = cloudpickle.loads(cloudpickle.dumps(loader))  # as joblib's launcher sends it
    assert worker.repository._read == {} and loader.repository._read
    worker.load_sweep_config(config, JOB)
    assert len(composing) == 2
    assert compose_once(worker) is worker.load_sweep_config  # made once a loader


def test_the_jobs_compositions_read_each_config_file_once(tmp_path, monkeypatch):
    read: list[str] = []
    real = ConfigRepository.load_config
    monkeypatch.setattr(ConfigRepository, "load_config", lambda self, config_path: read.append(config_path)
                        or real(self, config_path))
    loader, config = multirun(tmp_path)
    compose = compose_once(loader)
    del read[:]
    made = {memory: compose(config, [f"memory={memory}"]) for memory in ("b8", "b32", "b8_acc4")}
    assert "config" in read and len(read) == len(set(read))
    for memory, cfg in made.items():  # each a composition of its own, as Hydra makes it
        expected = plain_loader().load_sweep_config(config, [f"memory={memory}"])
        assert OmegaConf.to_container(cfg) == OmegaConf.to_container(expected)


QUICK = ("accumulation", "resume", "substeps")
"""Sweeps whose jobs differ in values (``repeat``), in a config group of a package of its own, in lists; the
others compose in the slow run."""


@pytest.mark.parametrize("name", [name if name in QUICK else pytest.param(name, marks=pytest.mark.slow)
                                  for name in sorted(available())])
def test_every_job_of_a_built_in_sweep_is_hydras_composition_and_value_siblings_are_not_composed(name, tmp_path,
                                                                                                 composing):
    register(available()[name], f"crux-sweep {name}")
    loader = ConfigLoaderImpl(config_search_path=create_config_search_path(f"pkg://{CONFIG_PACKAGE}"))
    config = loader.load_configuration("config", overrides=[f"hydra.sweep.dir={tmp_path}", f"+sweeps={name}"],
                                       run_mode=RunMode.MULTIRUN)
    jobs = planned_jobs(config, OverridesParser.create(config_loader=loader))
    compose = compose_once(loader)
    del composing[:]
    made = [compose(config, job) for job in jobs]
    composed = len(composing)
    plain = plain_loader()
    for job, cfg in zip(jobs, made):
        expected = plain.load_sweep_config(config, job)
        assert OmegaConf.to_container(cfg) == OmegaConf.to_container(expected), job
    groups = {tuple(o for o in job if o.split("=")[0] in config.hydra.runtime.choices or "@" in o) for job in jobs}
    if name in ("accumulation", "checkpoint"):  # jobs that differ only in `repeat`: one composition a memory
        assert composed == len(groups) < len(jobs)
