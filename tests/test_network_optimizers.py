"""What each network of a job trains with: its problem's own optimizer and schedule kept, the config's where it
has none or where they were chosen explicitly (the command line, a sweep's params or file), every later phase's
for all; said in one line per network replaced, and recorded per network and phase in the run's params."""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import optax
import pytest
from hydra import compose
from omegaconf import OmegaConf

import crux
from crux.optim import soap
from crux.problems import Problem
from cruxlab import config
from cruxlab.commands.sweep import available, find_sweep, register
from cruxlab.config.attachments import call_words, explicit_choices, training_plan
from cruxlab.report import RunRecord, SolveOptions
from cruxlab.report.document import trained_with
from cruxlab.report.sweep_reader import config_from_params
from cruxlab.store import contract
from cruxlab.store.params import as_requested, flatten
from crux_testing import launch, runs_by_role

TINY = ["model.width=8", "model.depth=1", "solver.epochs=4"]

PROBLEM_MODULE = '''
import numpy as np
import optax

import crux
from crux.problems import Problem


def two(n_interior, lr_w, hidden, activation, seed) -> Problem:
    """u' = w, w' = -pi^2 u on [0, 1], u(0) = 0: u as crux gives it, w with its own Adam at lr_w."""
    xs = np.linspace(0.0, 1.0, n_interior, dtype=np.float32)[:, None]
    u = crux.mlp(1, 1, hidden, activation, seed=seed)
    w = crux.mlp(1, 1, hidden, activation, seed=seed + 1).optimizer(optax.adam).scale(crux.lrs(lr_w))
    constraints = [crux.Constraint("du", lambda net, x: crux.grad(net.u)(x)[0] - net.w(x), xs),
                   crux.Constraint("dw", lambda net, x: crux.grad(net.w)(x)[0] + np.pi ** 2 * net.u(x), xs),
                   crux.Constraint("start", lambda net, x: net.u(x), np.zeros((1, 1), np.float32))]
    return Problem("two", constraints, {"u": u, "w": w}, seed=seed)
'''


def two_networks(w_optimizer=optax.adam, w_rate: float | None = 3e-3) -> Problem:
    """u without an optimizer (crux gives it Adam at 1e-3), w with its own."""
    points = np.linspace(0, 1, 8, dtype=np.float32)[:, None]
    w = crux.mlp(1, 1, (4,), seed=1).optimizer(w_optimizer)
    if w_rate is not None:
        w.scale(crux.lrs(w_rate))
    return Problem("two", [crux.Constraint("fit", lambda net, x: net.u(x) + net.w(x) - x[0], points)],
                   {"u": crux.mlp(1, 1, (4,)), "w": w})


def phases_of(overrides: list[str]) -> list[config.Phase]:
    return config.training_phases(compose("config", overrides=overrides))


def test_a_problem_says_which_models_it_gave_the_default_optimizer():
    problem = two_networks()
    assert problem.defaulted == {"u"}
    assert problem.models["u"].attached_optimizer is optax.adam and problem.models["u"].schedule.value == 1e-3
    assert problem.models["w"].schedule.value == 3e-3
    problem.models["u"].scale(crux.lrs(2e-3))  # set by the problem's function after it built the Problem: its own
    assert problem.defaulted == frozenset()


def test_by_default_each_network_keeps_its_problems_own_and_the_config_fills_the_others(hydra_configs):
    problem = two_networks()
    w = problem.models["w"]
    version = w.optimizer_version
    plan = training_plan(problem, phases_of(["optimizer=sgd", "schedule.value=0.02"]), {})
    (first,) = plan.phases
    assert (first["u"].words, first["w"].words) == ("sgd at constant(0.02)", "adam at constant(0.003)")
    assert plan.replaced == ()
    plan.attach(0, problem.models)
    assert w.optimizer_version == version and w.attached_optimizer is optax.adam  # nothing of its own was touched
    assert problem.models["u"].schedule.value == 0.02
    assert plan.params() == {"network.u.optimizer": "sgd", "network.u.schedule": "constant(0.02)",
                             "network.w.optimizer": "adam", "network.w.schedule": "constant(0.003)"}


def test_an_explicit_optimizer_or_schedule_replaces_every_networks_with_a_line_each(hydra_configs):
    phases = phases_of(["optimizer=sgd", "schedule.value=0.02"])
    plan = training_plan(two_networks(), phases, {"optimizer": "optimizer=sgd"})
    assert {name: a.words for name, a in plan.phases[0].items()} == {"u": "sgd at constant(0.02)",
                                                                     "w": "sgd at constant(0.003)"}
    assert plan.replaced == ("network w: the problem's adam at constant(0.003) replaced by the config's optimizer "
                             "(optimizer=sgd): it trains with sgd at constant(0.003)",)
    assert plan.tags() == {contract.CHOSEN: "optimizer: optimizer=sgd"}
    assert training_plan(two_networks(), phases, {}).tags() == {}
    problem = two_networks()
    plan = training_plan(problem, phases, {"schedule": "schedule.value=0.02"})
    assert plan.phases[0]["w"].words == "adam at constant(0.02)"
    assert plan.replaced == ("network w: the problem's adam at constant(0.003) replaced by the config's schedule "
                             "(schedule.value=0.02): it trains with adam at constant(0.02)",)
    plan.attach(0, problem.models)
    assert problem.models["w"].attached_optimizer is optax.adam and problem.models["w"].schedule.value == 0.02
    both = training_plan(two_networks(), phases, {"optimizer": "optimizer=sgd", "schedule": "the sweep file s sets "
                                                                                             "schedule"})
    assert both.replaced[0].endswith("replaced by the config's optimizer and schedule (optimizer=sgd and the sweep file "
                                     "s sets schedule): it trains with sgd at constant(0.02)")


def test_an_own_optimizer_is_named_with_its_bound_arguments_and_keeps_its_factorys_rate(hydra_configs):
    problem = two_networks(functools.partial(optax.adamw, weight_decay=1e-4), None)
    assert call_words(problem.models["w"].attached_optimizer) == "adamw(weight_decay=0.0001)"
    assert call_words(soap(1)) == "an optax transform"
    plan = training_plan(problem, phases_of([]), {})
    assert plan.phases[0]["w"].words == "adamw(weight_decay=0.0001) at the optimizer's own learning rate"
    # the config's optimizer, explicit, needs a schedule: the config's, where the network had none of its own
    plan = training_plan(problem, phases_of(["optimizer=sgd"]), {"optimizer": "optimizer=sgd"})
    assert plan.phases[0]["w"].words == "sgd at constant(0.001)"


def test_each_later_phase_trains_every_network_with_its_own_or_goes_on_with_what_each_had(hydra_configs):
    phases = phases_of(["phases=lbfgs", "phases.lbfgs.epochs=3"])
    problem = two_networks()
    plan = training_plan(problem, phases, {}, ["lbfgs"])
    assert [{n: a.words for n, a in phase.items()} for phase in plan.phases] == [
        {"u": "adam at constant(0.001)", "w": "adam at constant(0.003)"},
        {"u": "lbfgs at constant(1)", "w": "lbfgs at constant(1)"}]
    assert plan.params()["network.w.phases.lbfgs.optimizer"] == "lbfgs"
    plan.attach(1, problem.models)
    assert problem.models["w"].schedule.value == 1.0
    # a later phase equal to the previous one resumes: each network goes on with its own, and is recorded so
    (first,) = phases_of([])
    plan = training_plan(two_networks(), [first, config.Phase(first.optimizer, first.schedule, 2)], {}, ["second"])
    assert plan.phases[1]["w"].words == "adam at constant(0.003)" and plan.phases[1]["w"].attach is None
    assert plan.params()["network.w.phases.second.schedule"] == "constant(0.003)"


def test_what_is_explicit_is_told_from_the_jobs_overrides_and_its_sweep_file(hydra_configs):
    for name in ("accumulation", "resume", "precision"):
        register(available()[name], f"crux-sweep {name}")

    def explicit(*overrides: str) -> dict[str, str]:
        return explicit_choices(compose("config", overrides=list(overrides), return_hydra_config=True).hydra)

    assert explicit() == {} and explicit("memory=b8") == {} and explicit_choices(None) == {}
    assert explicit("optimizer=sgd", "schedule.value=1e-5") == {"optimizer": "optimizer=sgd",
                                                                "schedule": "schedule.value=1e-5"}
    assert explicit("+sweeps=accumulation") == {"optimizer": "the sweep file accumulation sets optimizer"}
    assert explicit("+sweeps=resume") == {"schedule": "the sweep file resume sets schedule"}
    assert explicit("+sweeps=precision") == {}  # its L-BFGS phase is a later phase: the first keeps the problem's
    assert explicit("+sweeps=accumulation", "optimizer=adam") == {"optimizer": "optimizer=adam"}


def test_a_sweeps_own_group_file_that_sets_a_schedule_makes_it_explicit(hydra_configs, tmp_path):
    """A sweep file's sub-folder is a group of its own (sweeps/rates), chosen per job with @_global_."""
    (tmp_path / "rates").mkdir()
    (tmp_path / "rates" / "slow.yaml").write_text("# @package _global_\nschedule:\n  value: 1.0e-5\n")
    (tmp_path / "rates" / "plain.yaml").write_text("# @package _global_\nsolver:\n  epochs: 7\n")
    (tmp_path / "mine.yaml").write_text("claim: mine\n")
    register(find_sweep(str(tmp_path / "mine.yaml")), "crux-sweep mine.yaml")
    for option, expected in (("slow", {"schedule": "the sweep file slow sets schedule"}), ("plain", {})):
        cfg = compose("config", overrides=["+sweeps=mine", f"+sweeps/rates@_global_={option}"],
                      return_hydra_config=True)
        assert explicit_choices(cfg.hydra) == expected


def test_the_recorded_networks_are_no_setting_of_the_config_read_back(hydra_configs):
    params = flatten(config.effective_settings(compose("config", overrides=["memory=b8"])))
    read = config_from_params({**params, "network.u.optimizer": "adam", "network.u.schedule": "constant(0.001)"})
    assert read.memory.batchsize == 8 and "network" not in OmegaConf.to_container(read)
    assert as_requested({**params, "network.u.optimizer": "adam"}) == params


@pytest.fixture
def own_problem(store: Path) -> Path:
    (store / "two_nets.py").write_text(PROBLEM_MODULE)
    (store / "conf" / "problem").mkdir(parents=True)
    (store / "conf" / "problem" / "two.yaml").write_text("_target_: two_nets.two\nn_interior: 16\nlr_w: 0.003\n")
    return store


def lr_history(client, run, network: str) -> list[float]:
    return [m.value for m in sorted(client.get_metric_history(run.info.run_id, f"lr/{network}"), key=lambda m: m.step)]


@pytest.mark.integration
def test_crux_run_trains_each_network_with_its_problems_own_rate_and_records_it(own_problem):
    done = launch(own_problem, "cruxlab.commands.experiment", "--config-dir", str(own_problem / "conf"),
                  "problem=two", *TINY, "phases=lbfgs", "phases.lbfgs.epochs=2")
    assert done.returncode == 0, done.stderr[-3000:]
    client, roles = runs_by_role(own_problem, "crux")
    (run,) = roles["run"]
    np.testing.assert_allclose(lr_history(client, run, "w"), [3e-3] * 4 + [1.0] * 2, rtol=1e-6)
    np.testing.assert_allclose(lr_history(client, run, "u"), [1e-3] * 4 + [1.0] * 2, rtol=1e-6)
    params = run.data.params
    assert (params["network.w.optimizer"], params["network.w.schedule"]) == ("adam", "constant(0.003)")
    assert (params["network.u.optimizer"], params["network.u.schedule"]) == ("adam", "constant(0.001)")
    assert params["network.w.phases.lbfgs.optimizer"] == "lbfgs" and params["problem.lr_w"] == "0.003"
    assert contract.ADJUSTED not in run.data.tags and contract.CHOSEN not in run.data.tags
    assert "replaced" not in done.stderr


@pytest.mark.integration
def test_a_sweep_file_that_sets_the_optimizer_replaces_it_under_the_joblib_launcher_and_says_so(own_problem):
    done = launch(own_problem, "cruxlab.commands.sweep", "accumulation", "--config-dir", str(own_problem / "conf"),
                  "problem=two", *TINY, "memory=full", "repeat=0", "gradient_draws=0", "problem.n_interior=16",
                  "hydra/launcher=joblib", "hydra.launcher.n_jobs=2")
    assert done.returncode == 0, done.stderr[-3000:]
    client, roles = runs_by_role(own_problem, "accumulation")
    (run,) = roles[contract.CHILD]
    line = ("network w: the problem's adam at constant(0.003) replaced by the config's optimizer (the sweep file "
            "accumulation sets optimizer): it trains with sgd at constant(0.003)")
    assert run.data.tags[contract.ADJUSTED] == line and line in done.stdout + done.stderr, done.stdout[-3000:]
    assert run.data.tags[contract.CHOSEN] == "optimizer: the sweep file accumulation sets optimizer"
    assert (run.data.params["network.w.optimizer"], run.data.params["network.u.optimizer"]) == ("sgd", "sgd")
    np.testing.assert_allclose(lr_history(client, run, "w"), [3e-3] * 4, rtol=1e-6)



def test_the_report_says_once_what_each_network_trained_with_and_what_the_config_replaced():
    line = ("network w: the problem's adam at constant(0.003) replaced by the config's optimizer (the sweep file "
            "accumulation sets optimizer): it trains with sgd at constant(0.003)")

    def record(variant: str, w_optimizer: str) -> RunRecord:
        params = {"network.u.optimizer": "sgd", "network.u.schedule": "constant(0.001)",
                  "network.w.optimizer": w_optimizer, "network.w.schedule": "constant(0.003)",
                  "network.w.phases.lbfgs.optimizer": "lbfgs", "memory.batchsize": "8"}
        return RunRecord(variant, SolveOptions(epochs=4), {}, {}, {}, variant=variant, params=params,
                         tags={contract.ADJUSTED: f"memory.batchsize=8 is at least the points of bc; {line}",
                               contract.CHOSEN: "optimizer: the sweep file accumulation sets optimizer"})

    assert trained_with([record("b8", "sgd"), record("b32", "sgd")]) == [
        f"Each network trained with (first phase): u sgd at constant(0.001); w sgd at constant(0.003). Chosen for "
        f"every network: optimizer: the sweep file accumulation sets optimizer. The config replaced a problem's own: "
        f"{line}.", ""]
    assert trained_with([record("b8", "sgd"), record("b32", "adam")])[0].startswith(
        "Each network trained with (first phase): u sgd at constant(0.001); w adam at constant(0.003) (b32) or sgd at "
        "constant(0.003) (b8).")
    assert trained_with([RunRecord("old", SolveOptions(epochs=4), {}, {}, {})]) == []
