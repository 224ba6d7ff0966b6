"""A key crux's schema lacks is refused however it was written (``key=``, ``+key=``, ``++key=``, a config group
file of one's own), in one line naming it, the closest key and how to write it; a problem's own fields are its
function's. A value of the wrong type is one line naming the key, its type and a value to write."""
from __future__ import annotations

import pytest
from hydra import compose
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from cruxlab import config
from cruxlab.commands.sweep import find_sweep, register
from cruxlab.config import keys
from cruxlab.config.refusals import refusals

MISSPELT = {
    "solver.epoch=100": "solver.epoch: not a key of solver; did you mean solver.epochs? write solver.epochs=100",
    "model.widht=8": "model.widht: not a key of model; did you mean model.width? write model.width=8",
    "schedule.valu=0.01": "schedule.valu: not a key of schedule; did you mean schedule.value? write "
                          "schedule.value=0.01",
    "tracking.urii=x": "tracking.urii: not a key of tracking; did you mean tracking.uri? write tracking.uri=x",
    "jax.procesess=2": "jax.procesess: not a key of jax; did you mean jax.processes? write jax.processes=2",
    "memory.batchsze=8": "memory.batchsze: not a key of memory; did you mean memory.batchsize? write "
                         "memory.batchsize=8",
    "gradient_draw=4": "gradient_draw: not a key of the config; did you mean gradient_draws? write gradient_draws=4",
    "optimizer.lr=0.1": "optimizer.lr: not a key of optimizer; the learning rate is the schedule's: write "
                        "schedule.value=0.1 (schedule=constant) or schedule.peak (schedule=warmup_cosine)",
    "optimizer.bb1=0.9": "optimizer.bb1: not a key of optimizer; did you mean optimizer.b1? write optimizer.b1=0.9",
    "solver.zzz=1": "solver.zzz: not a key of solver; its keys are epochs, inner_steps, substeps, seed, devices, "
                    "precision: remove it or set one of them",
}


@pytest.mark.parametrize("spelling", ["+", "++"])
@pytest.mark.parametrize("override", MISSPELT)
def test_a_key_the_schema_lacks_is_refused_when_appended(hydra_configs, override, spelling):
    assert refusals(compose("config", [spelling + override])) == [MISSPELT[override]]


@pytest.mark.parametrize("override", ["solver.epoch=100", "schedule.valu=0.01"])
def test_hydras_advice_to_append_is_replaced_by_the_key_to_write(hydra_configs, override):
    with pytest.raises(ConfigCompositionException) as refused:
        compose("config", [override])
    assert "+" + override in str(refused.value)  # Hydra's advice, which only moves the refusal
    assert keys.refused_override(refused.value, lambda key: compose("config", [])) == MISSPELT[override]


def test_a_later_phase_is_checked_against_the_schema_its_name_selects(hydra_configs):
    cfg = compose("config", ["phases=lbfgs", "+phases.lbfgs.epoch=3", "+phases.lbfgs.optimizer.memory_sise=3"])
    assert refusals(cfg) == [
        "phases.lbfgs.optimizer.memory_sise: not a key of phases.lbfgs.optimizer; did you mean "
        "phases.lbfgs.optimizer.memory_size? write phases.lbfgs.optimizer.memory_size=3",
        "phases.lbfgs.epoch: not a key of phases.lbfgs; did you mean phases.lbfgs.epochs? write phases.lbfgs.epochs=3"]


def test_a_config_group_file_of_ones_own_is_held_to_the_schema(hydra_configs, tmp_path):
    (tmp_path / "solver").mkdir()
    (tmp_path / "solver" / "short.yaml").write_text("defaults:\n  - default\nepoch: 100\n")
    with pytest.raises(ConfigCompositionException) as refused:
        compose("config", ["solver=short", f"hydra.searchpath=[file://{tmp_path}]"])
    assert keys.refused_override(refused.value, lambda key: compose("config", [])) == (
        "solver.epoch (in solver/short.yaml): not a key of solver; did you mean solver.epochs? write epochs: there")


def test_keys_of_ones_own_stay_free_where_the_schema_names_none(hydra_configs):
    register(find_sweep("accumulation"), "crux-sweep accumulation")
    cfg = compose("config", ["+timing.against.batchsize=8", "+sweeps=accumulation"])
    assert keys.unknown_keys(cfg) == []
    assert keys.schema_fields(cfg.problem, "problem") is None  # its function's parameters say


MISTYPED = {
    ("memory.batchsize=abc",): "memory.batchsize=abc: memory.batchsize takes an integer >= 1 or null; write e.g. "
                               "memory.batchsize=16",  # memory=full sets none: the first of crux's memory options
    ("memory=b8", "memory.batchsize=abc"): "memory.batchsize=abc: memory.batchsize takes an integer >= 1 or null; "
                                           "write e.g. memory.batchsize=8",  # the value it has without the override
    ("memory.accumulation_steps=2.5",): "memory.accumulation_steps=2.5: memory.accumulation_steps takes an integer "
                                        ">= 1; write e.g. memory.accumulation_steps=2",
    ("memory.accumulation_steps=0.5",): "memory.accumulation_steps=0.5: memory.accumulation_steps takes an integer "
                                        ">= 1; write e.g. memory.accumulation_steps=1",
    ("solver.epochs=null",): "solver.epochs=null: solver.epochs takes an integer >= 1, not null; write e.g. "
                             "solver.epochs=1000",
    ("memory.offload_data=maybe",): "memory.offload_data=maybe: memory.offload_data takes true or false; write e.g. "
                                    "memory.offload_data=false",
    ("optimizer.b1=abc",): "optimizer.b1=abc: optimizer.b1 takes a number in [0, 1) or null; write e.g. "
                           "optimizer.b1=0.5",
    ("phases=lbfgs", "phases.lbfgs.epochs=abc"): "phases.lbfgs.epochs=abc: phases.lbfgs.epochs takes an integer >= 1; "
                                                 "write e.g. phases.lbfgs.epochs=500",
    ("solver.substeps=3",): "solver.substeps=3: solver.substeps takes a list or null",
}


@pytest.mark.parametrize("overrides", MISTYPED)
def test_a_value_of_the_wrong_type_is_one_line_naming_the_key_its_type_and_an_example(hydra_configs, overrides):
    with pytest.raises(ConfigCompositionException) as refused:
        compose("config", list(overrides))
    without = lambda key: compose("config", config.overrides_without(list(overrides), key))  # noqa: E731
    assert keys.refused_override(refused.value, without) == MISTYPED[overrides]


def test_a_problem_parameter_its_config_file_leaves_at_its_default_is_added_with_a_plus(tmp_path, monkeypatch):
    (tmp_path / "crux_problem_with_default.py").write_text(
        "def wave(n, hidden, activation, seed, kind='plain'):\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    refused = ConfigCompositionException("Could not override 'problem.kind'.\nTo append to your config use "
                                         "+problem.kind=dim3")
    composed = OmegaConf.create({"problem": {"_target_": "crux_problem_with_default.wave", "n": 4}})
    assert keys.refused_override(refused, lambda key: composed) == (
        "problem.kind: crux_problem_with_default.wave takes kind (default 'plain'), but the problem's config file "
        "does not set it, so there is no problem.kind to override: write +problem.kind=dim3 (or add `kind: ...` to "
        "the file)")
