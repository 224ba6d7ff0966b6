"""The inner_steps and resume sweeps: their jobs compose into the settings their checks pair, whatever the epochs."""
from __future__ import annotations

import pytest
from hydra import compose, initialize_config_module
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig

from cruxlab import config
from cruxlab.config import CONFIG_PACKAGE
from cruxlab.config.settings import phase_calls
from cruxlab.store import contract
from crux_testing import launch, runs_by_role, selected


def jobs(sweep: str, *overrides: str) -> list[DictConfig]:
    """Every job of ``sweep`` (repeats aside) composed with ``overrides``, as ``crux-sweep sweep overrides`` runs it."""
    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        base = selected(sweep)
        swept = compose("config", overrides=base, return_hydra_config=True).hydra.sweeper.params
        params = [f"{k}={v}" for k, v in swept.items() if k != "repeat"]
        (split,) = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(params), None)
        return [compose("config", overrides=base + list(job) + list(overrides)) for job in split]


@pytest.mark.parametrize("epochs", [30, 100, 1000])
def test_every_inner_steps_job_divides_its_epochs_and_one_job_runs_them_all_in_one_call(epochs):
    composed = jobs("inner_steps", f"solver.epochs={epochs}")
    settings = {(cfg.memory.batchsize, cfg.memory.accumulation_steps, cfg.solver.inner_steps) for cfg in composed}
    assert settings == {(batchsize, accumulation, k) for batchsize, accumulation in ((None, 1), (8, 4))
                        for k in (1, 10, epochs)}
    for cfg in composed:
        assert all(phase.epochs % cfg.solver.inner_steps == 0 for phase in config.training_phases(cfg))


def test_every_resume_job_trains_600_epochs_with_one_optimizer_in_one_or_three_calls():
    calls = {}
    for cfg in jobs("resume"):
        plan = phase_calls(cfg)
        assert not any(phase.fresh for phase in plan[1:]), "a later call would start a fresh optimizer"
        assert cfg.memory.batchsize == 32 and cfg.schedule.total == 600
        calls[cfg.variant] = [phase.epochs for phase in plan]
    assert calls == {"600": [600], "200+200+200": [200, 200, 200], "100+300+200": [100, 300, 200]}


@pytest.mark.integration
def test_inner_steps_sweep_with_other_epochs_runs_every_job(store):
    """K = solver.epochs follows the override: no job is refused for a K that does not divide the epochs. (The
    fused jobs' paired timing, which this does not judge, gets a second instead of the sweep's minute; the full
    batch only: whether K divides the epochs does not depend on the batch.)"""
    done = launch(store, "cruxlab.commands.sweep", "inner_steps", "solver.epochs=100", "repeat=0", "memory=full",
                  "model.width=4", "model.depth=1", "problem.n_interior=64", "timing.budget_seconds=1")
    assert done.returncode == 0, done.stderr[-3000:]
    client, roles = runs_by_role(store, "inner_steps")
    (parent,) = roles["parent"]
    assert parent.info.status == contract.FINISHED and parent.data.metrics["failed_jobs"] == 0
    children = roles["child"]
    assert len(children) == parent.data.metrics["jobs"] == 3
    assert all(child.info.status == contract.FINISHED for child in children)
    assert sorted({child.data.params["solver.inner_steps"] for child in children}) == ["1", "10", "100"]
