"""A sweep composes each job's config once: the launcher gets the check's composition, with what the sweep
set for every job since, equal to Hydra's own; a job that differs from another only in values is that job's
composition with its values set, equal to Hydra's own; the compositions read each config file once."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Iterator

import pytest
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra._internal.config_repository import ConfigRepository
from hydra._internal.hydra import Hydra
from hydra._internal.utils import create_config_search_path
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import ConfigCompositionException
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from cruxlab.commands.sweep import available, register
from cruxlab.config import CONFIG_PACKAGE
from cruxlab.runtime.composed import compose_once, mode_composition_kept
from cruxlab.runtime.sweep_parent import planned_jobs, set_for_every_job

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


@pytest.fixture
def started_hydra() -> Iterator[Callable[[], Hydra]]:
    """Start a Hydra application on crux's configs as ``hydra.main`` starts it; cleared afterwards."""
    yield lambda: Hydra.create_main_hydra2(task_name="crux-run", config_search_path=create_config_search_path(
        f"pkg://{CONFIG_PACKAGE}"))
    GlobalHydra.instance().clear()


def test_the_command_lines_config_is_composed_once_for_its_mode_and_its_run(tmp_path, composing, started_hydra):
    overrides = [f"hydra.sweep.dir={tmp_path}", "hydra.mode=MULTIRUN", "memory=b8,b32"]
    with mode_composition_kept():
        hydra = started_hydra()
        assert hydra.get_mode(config_name="config", overrides=overrides) == RunMode.MULTIRUN
        cfg = hydra.compose_config("config", overrides, run_mode=RunMode.MULTIRUN)  # as Hydra.multirun composes
        assert len(composing) == 1
        again = hydra.compose_config("config", overrides, run_mode=RunMode.MULTIRUN)  # answered once: composed
    assert len(composing) == 2
    expected = plain_loader().load_configuration("config", overrides, run_mode=RunMode.MULTIRUN)
    assert OmegaConf.to_container(cfg) == OmegaConf.to_container(expected) == OmegaConf.to_container(again)
    assert Hydra.get_mode is vars(Hydra)["get_mode"] and "crux" not in Hydra.get_mode.__module__


def test_the_kept_composition_validates_its_overrides_as_hydra_does(tmp_path, composing, started_hydra):
    overrides = [f"hydra.sweep.dir={tmp_path}", "hydra.mode=MULTIRUN", "hydra.job.chdir=true,false"]
    with mode_composition_kept():
        hydra = started_hydra()
        hydra.get_mode(config_name="config", overrides=overrides)
        with pytest.raises(ConfigCompositionException, match="Sweeping over Hydra's configuration"):
            hydra.compose_config("config", overrides, run_mode=RunMode.MULTIRUN)
        hydra.get_mode(config_name="config", overrides=["solver.epochs=3"])
        run = hydra.compose_config("config", ["solver.epochs=3"], run_mode=RunMode.RUN)  # another mode: composed
    assert len(composing) == 3 and run.solver.epochs == 3


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


AS_TYPED = [
    ["hydra.sweep.subdir=${hydra.job.override_dirname}", "solver.epochs=10,20"],
    ["solver.inner_steps=${solver.epochs}", "solver.epochs=10,20"],
    ["tracking.experiment='my sweep, quoted'", "claim='a \\'quoted\\' claim'", "solver.seed=0,1"],
    ["solver.substeps=[[0],[1]],[[1],[0]]"],
    ["phases=lbfgs", "~phases.lbfgs", "solver.seed=0,1"],
    ["+hydra.job.env_set.MY_VARIABLE=1", "++problem.laplacian_mode=forward", "++solver.seed=3", "memory=b8,b32"],
    ["++tracking.experiment=x", "solver.seed=range(0,2)", "memory=glob(b8*)"],
    ["solver.seed=choice(1,2)", "schedule.value=1e-3,${solver.epochs}"],
]
"""Command lines whose overrides Hydra's basic sweeper takes as typed: interpolations (resolved by each job,
also where the value holds a ``=``), quoted strings, lists, deletions, additions, sweeps of every form."""


@pytest.mark.parametrize("command_line", AS_TYPED, ids=[" ".join(line) for line in AS_TYPED])
def test_crux_plans_and_composes_every_job_as_hydras_basic_sweeper_does(command_line, tmp_path):
    loader = plain_loader()
    config = loader.load_configuration("config", overrides=[f"hydra.sweep.dir={tmp_path}", *command_line],
                                       run_mode=RunMode.MULTIRUN)
    parser = OverridesParser.create(config_loader=loader)
    typed = OmegaConf.to_container(config.hydra.overrides.task)  # the basic sweeper's arguments
    expected = [list(job) for batch in BasicSweeper.split_arguments(parser.parse_overrides(typed), None)
                for job in batch]
    jobs = planned_jobs(config, parser)
    assert jobs == expected and len(jobs) >= 2
    compose, plain = compose_once(loader), plain_loader()
    for job in jobs:
        made, hydras = compose(config, job), plain.load_sweep_config(config, job)
        assert OmegaConf.to_container(made) == OmegaConf.to_container(hydras), job
        assert made.hydra.job.override_dirname == hydras.hydra.job.override_dirname  # a sweep.subdir may name it
        made_job = {key: made[key] for key in made if key != "hydra"}
        assert OmegaConf.to_container(OmegaConf.create(made_job), resolve=True) == OmegaConf.to_container(
            OmegaConf.create({key: hydras[key] for key in hydras if key != "hydra"}), resolve=True)


@pytest.mark.integration
def test_a_sweep_names_its_job_folders_by_their_overrides_and_resolves_interpolations_per_job(store):
    """Hydra's documented pattern, on crux's sweeper: each job's folder named by its overrides, and an override
    that refers to a swept key taking each job's value."""
    from crux_testing import launch, runs_by_role

    done = launch(store, "cruxlab.commands.experiment", "-m", "hydra.sweep.subdir=${hydra.job.override_dirname}",
                  "solver.inner_steps=${solver.epochs}", "solver.epochs=4,8", "model.width=4", "model.depth=1",
                  "problem.n_interior=16")
    assert done.returncode == 0, done.stderr[-3000:]
    folders = sorted(path.name for path in (store / "multirun").iterdir() if path.is_dir())
    assert folders == [f"model.depth=1,model.width=4,problem.n_interior=16,solver.epochs={epochs},"
                       r"solver.inner_steps=$\{solver.epochs\}" for epochs in (4, 8)]  # Hydra's escaping
    _, roles = runs_by_role(store, "crux")
    ran = sorted((run.data.params["solver.epochs"], run.data.params["solver.inner_steps"]) for run in roles["child"])
    assert ran == [("4", "4"), ("8", "8")]
