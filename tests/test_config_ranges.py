"""Values of the right type that no run could use are named in the command line's terms before anything runs
(cruxlab.config.out_of_range, gathered with the backend's and the problem's refusals by
cruxlab.config.refusals); the shipped configs have none."""
from __future__ import annotations

from typing import Iterator

import pytest
from hydra import compose, initialize_config_module

from cruxlab import config
from cruxlab.config import CONFIG_PACKAGE
from cruxlab.config.ranges import Choice, Range
from cruxlab.config.refusals import refusals


@pytest.fixture
def hydra_configs() -> Iterator[None]:
    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        yield


@pytest.mark.parametrize("overrides, problems", [
    (["solver.epochs=-1"], ["solver.epochs=-1: must be >= 1"]),
    (["model.width=0", "model.depth=0"], ["model.width=0: must be >= 1", "model.depth=0: must be >= 1"]),
    (["optimizer.b1=2", "optimizer.b2=1.0", "optimizer.eps=-1e-8"],
     ["optimizer.b1=2.0: must be in [0, 1)", "optimizer.b2=1.0: must be in [0, 1)", "optimizer.eps=-1e-08: must be >= 0"]),
    (["schedule.value=0"], ["schedule.value=0.0: must be > 0"]),
    (["schedule=warmup_cosine", "schedule.peak=-1", "schedule.warmup=-5"],
     ["schedule.warmup=-5: must be >= 0", "schedule.peak=-1.0: must be > 0"]),
    (["memory=b8", "memory.batchsize=0", "memory.accumulation_steps=0"],
     ["memory.batchsize=0: must be >= 1", "memory.accumulation_steps=0: must be >= 1"]),
    (["model.activation=swish", "problem.laplacian_mode=backward"],
     ["problem.laplacian_mode=backward: must be one of taylor, forward, reverse",
      "model.activation=swish: must be one of tanh, sin, gelu, silu, softplus, relu"]),
    (["problem=heat1d", "problem.nu=0", "problem.n_boundary=0"],
     ["problem.n_boundary=0: must be >= 1", "problem.nu=0.0: must be > 0"]),
    (["solver.seed=-3", "repeat=-1"], ["solver.seed=-3: must be in [0, 4294967296)", "repeat=-1: must be >= 0"]),
    (["solver.seed=4294967296"], ["solver.seed=4294967296: must be in [0, 4294967296)"]),
    (["solver.precision=higest"], ["solver.precision=higest: must be one of default, high, highest (did you mean "
                                   "highest?)"]),
    (["solver.precision=bfloat16"], ["solver.precision=bfloat16: must be one of default, high, highest (did you mean "
                                     "default?)"]),  # JAX's name for it: solve() says the same
    (["solver.epochs=10", "solver.inner_steps=3"],
     ["solver.inner_steps=3 must divide solver.epochs=10; choose one of [1, 2, 5, 10]"]),
    (["phases=lbfgs_soap", "phases.lbfgs.epochs=0", "+phases.soap.optimizer.b2=1.5"],
     ["phases.lbfgs.epochs=0: must be >= 1", "phases.soap.optimizer.b2=1.5: must be in [0, 1)"]),
    (["phases=lbfgs", "solver.inner_steps=4", "solver.epochs=1000", "phases.lbfgs.epochs=10"],
     ["solver.inner_steps=4 must divide phases.lbfgs.epochs=10; choose one of [1, 2, 5, 10]"]),
    (["memory.batchsize=null", "memory.offload_data=true"],
     ["memory.offload_data=true streams mini-batches, so it needs a memory.batchsize smaller than the largest "
      "constraint's points; got memory.batchsize=null. Set one, or memory.offload_data=false"]),
    (["memory.accumulation_steps=4"],
     ["memory.accumulation_steps=4 ignored: with memory.batchsize=null every update already sees every point, so "
      "there is nothing to accumulate (set a memory.batchsize below the largest constraint's points, or "
      "memory.accumulation_steps=1)"]),  # crux's rule, in the command line's terms
    (["memory=b8_acc4", "+solver.substeps=[[0],[1]]"],
     ["solver.substeps makes each substep an update of its own, so memory.accumulation_steps=4 and "
      "solver.inner_steps=1 must both be 1"]),
    (["solver.inner_steps=2", "solver.substeps=[[0],[1]]"],
     ["solver.substeps makes each substep an update of its own, so memory.accumulation_steps=1 and "
      "solver.inner_steps=2 must both be 1"]),
    (["problem=mixed_poisson1d", "solver.substeps=[[0],[1,1]]"],
     ["solver.substeps[1] repeats a constraint index: [1, 1]"]),  # crux's refusal, in the command line's terms
])
def test_each_value_out_of_range_is_named_as_it_was_typed(hydra_configs, overrides, problems):
    assert config.out_of_range(compose("config", overrides=overrides)) == problems


def test_one_call_gathers_the_refusals_of_every_kind_in_order(hydra_configs):
    """What crux-run and crux-sweep refuse: a value out of range, then the backend's, then the problem's."""
    cfg = compose("config", overrides=["solver.epochs=-1", "backend.batching=samples",
                                       "problem._target_=nosuchmodule.unit_square"])
    assert refusals(cfg) == [
        "solver.epochs=-1: must be >= 1",
        "backend.batching=samples: crux batches over points; the samples form is jNO's (backend=jno)",
        "problem._target_=nosuchmodule.unit_square: No module named 'nosuchmodule'; a problem's module is imported "
        "from the working directory or from an installed package"]


def test_a_range_says_its_bounds_and_lets_them_in_or_out_as_declared():
    assert [Range(1).refusal(v) for v in (0, 1)] == ["must be >= 1", None]
    assert [Range(0, low_open=True).refusal(v) for v in (0.0, 1e-30)] == ["must be > 0", None]
    assert [Range(0, 1).refusal(v) for v in (-0.1, 0.0, 0.999, 1.0)] == [
        "must be in [0, 1)", None, None, "must be in [0, 1)"]
    assert Choice(("a", "b")).refusal("c") == "must be one of a, b" and Choice(("a", "b")).refusal("b") is None


def test_every_option_of_every_group_is_in_range(hydra_configs):
    """The shipped configs, each option on its own (every job of every sweep: tests/test_pipeline.py)."""
    from importlib.resources import files
    from pathlib import Path

    conf = Path(str(files(CONFIG_PACKAGE)))
    for group in (d for d in conf.iterdir() if d.is_dir() and d.name != "__pycache__"):
        for option in sorted(group.glob("*.yaml")):
            assert config.out_of_range(compose("config", overrides=[f"{group.name}={option.stem}"])) == [], option
