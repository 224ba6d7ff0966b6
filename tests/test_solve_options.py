"""crux.SolveOptions: the one options type of solve(), from keyword arguments, built by hand or from a crux-run
config; equal options train bit for bit alike, and a bad value is refused when the options are built."""
import dataclasses
import pickle

import numpy as np
import pytest
from hydra import compose, initialize_config_module

import crux
from crux.options import OptionError
from cruxlab.config import CONFIG_PACKAGE, TIMED_OPTIONS, effective_settings, timing_refusals
from cruxlab.config import settings
from cruxlab.config.settings import OPTION_KEYS, group_of, solve_options
from cruxlab.report.sweep_reader import config_from_params
from cruxlab.store.params import flatten
from crux_testing import flat, mixed, poisson


def trained(problem: crux.problems.Problem, *arguments, **keywords) -> tuple[np.ndarray, np.ndarray]:
    """The loss history and the final parameters of one solve(*arguments, **keywords) on ``problem``."""
    solver = problem.solver()
    stats = solver.solve(*arguments, **keywords)
    return stats.losses, flat(solver.params)


@pytest.mark.parametrize("problem, keywords", [
    (lambda: poisson(n=32, hidden=(4,)), {"epochs": 6, "batchsize": 8, "accumulation_steps": 2, "inner_steps": 3}),
    (lambda: mixed(n=16, hidden=(4,)), {"epochs": 2, "substeps": [([0], 2), [1, 2]]}),
])
def test_options_train_as_the_keywords_do_bit_for_bit(problem, keywords):
    losses, params = trained(problem(), **keywords)
    for arguments, options in (((), {"options": crux.SolveOptions(**keywords)}),
                               ((keywords["epochs"],), {"options": crux.SolveOptions(**{**keywords, "epochs": 2 * keywords["epochs"]})})):
        other_losses, other_params = trained(problem(), *arguments, **options)  # the epochs given take its place
        np.testing.assert_array_equal(other_losses, losses)
        np.testing.assert_array_equal(other_params, params)


def test_a_keyword_takes_the_place_of_the_options_field():
    options = crux.SolveOptions(4, batchsize=8)
    one = trained(poisson(n=32, hidden=(4,)), 4, options, batchsize=16)
    other = trained(poisson(n=32, hidden=(4,)), 4, batchsize=16)
    np.testing.assert_array_equal(one[0], other[0])
    assert not np.array_equal(one[0], trained(poisson(n=32, hidden=(4,)), 4, options)[0])


def test_the_compiled_call_of_the_options_is_the_program_solve_runs():
    solver = poisson(n=32, hidden=(4,)).solver()
    solver.compiled_call(crux.SolveOptions(1000, batchsize=8, inner_steps=2))  # epochs: one call's, whatever given
    assert solver.solve(2, batchsize=8, inner_steps=2).compile_seconds == 0.0


@pytest.mark.parametrize("keywords, applied", [
    ({"batchsize": 100000}, {"batchsize": 256}),  # every point of every constraint: the largest's 256
    ({"batchsize": 100000, "accumulation_steps": 4}, {"batchsize": 256, "accumulation_steps": 1}),
    ({"accumulation_steps": 4}, {"accumulation_steps": 1}),  # batchsize=None: every update sees every point
    ({"batchsize": 256, "accumulation_steps": 2}, {"accumulation_steps": 1}),
    ({"batchsize": 8, "accumulation_steps": 4, "inner_steps": 2, "precision": "high"}, {}),  # as asked
])
def test_resolve_gives_the_options_solve_runs(keywords, applied):
    """resolve() says what solve() runs (Statistics.options), and running that as asked trains bit for bit
    alike: a request taken otherwise is the same training."""
    solver = poisson(n=256, hidden=(4,)).solver()
    resolved = solver.resolve(4, **keywords)
    assert resolved == crux.SolveOptions(4, **{**keywords, **applied})
    stats = solver.solve(4, **keywords)
    assert stats.options == [resolved]
    as_resolved = trained(poisson(n=256, hidden=(4,)), options=resolved)
    np.testing.assert_array_equal(as_resolved[0], stats.losses)
    np.testing.assert_array_equal(as_resolved[1], flat(solver.params))


@pytest.mark.parametrize("keywords", [{"devices": 2}, {"batchsize": 256, "offload_data": True},
                                      {"substeps": [[0], [2]]}, {"inner_steps": 3}])
def test_resolve_refuses_what_solve_refuses_in_the_same_words(keywords):
    solver = poisson(n=256, hidden=(4,)).solver()
    with pytest.raises(ValueError) as by_resolve:
        solver.resolve(4, **keywords)
    with pytest.raises(ValueError) as by_solve:
        solver.solve(4, **keywords)
    assert isinstance(by_resolve.value, OptionError) and str(by_resolve.value) == str(by_solve.value)
    assert solver.history is None


def test_a_refusal_of_options_says_itself_in_another_callers_terms():
    with pytest.raises(OptionError) as refused:
        crux.SolveOptions(4, offload_data=True)
    assert str(refused.value) == ("offload_data=True streams mini-batches, so it needs a batchsize smaller than the "
                                  "largest constraint's points; got batchsize=None. Set one, or offload_data=False")
    assert refused.value.spelt(lambda name: f"memory.{name}", lambda value: str(value).lower()) == (
        "memory.offload_data=true streams mini-batches, so it needs a memory.batchsize smaller than the largest "
        "constraint's points; got memory.batchsize=none. Set one, or memory.offload_data=false")
    assert str(pickle.loads(pickle.dumps(refused.value))) == str(refused.value)


@pytest.fixture
def hydra_configs():
    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        yield


def test_the_options_of_a_config_equal_those_of_its_keywords(hydra_configs):
    cfg = compose("config", overrides=["memory=b8_acc4", "solver.epochs=12", "solver.devices=1",
                                       "solver.precision=high"])
    assert solve_options(cfg) == crux.SolveOptions(epochs=12, batchsize=8, accumulation_steps=4, precision="high")
    cfg = compose("config", overrides=["problem=mixed_poisson1d", "solver.substeps=[[0],[[1,2],3]]"])
    assert solve_options(cfg) == crux.SolveOptions(epochs=cfg.solver.epochs, substeps=[[0], ([1, 2], 3)])
    assert solve_options(cfg).substeps == (((0,), 1), ((1, 2), 3))


def test_a_run_records_the_options_and_the_report_reads_them_back(hydra_configs):
    cfg = compose("config", overrides=["problem=mixed_poisson1d", "memory=b8_acc4", "solver.substeps=[[0],[[1,2],3]]",
                                       "solver.precision=high"])
    cfg.memory.accumulation_steps = 1  # substeps updates are single
    params = flatten(effective_settings(cfg))  # the run's params, as cruxlab.runtime logs them
    options = solve_options(cfg)
    assert {key: params[key] for key in OPTION_KEYS.values()} == {
        "solver.epochs": str(options.epochs), "memory.batchsize": "8", "memory.accumulation_steps": "1",
        "memory.checkpoint_gradients": "false", "memory.offload_data": "false", "solver.inner_steps": "1",
        "solver.substeps": "[[0], [[1, 2], 3]]", "solver.devices": "1", "solver.precision": "high"}
    assert solve_options(config_from_params(params)) == options


def test_runs_that_differ_in_options_but_not_epochs_share_a_group(hydra_configs):
    plain = group_of(compose("config", overrides=["solver.epochs=10"]))
    assert group_of(compose("config", overrides=["solver.epochs=10", "memory=b8_acc4", "solver.precision=high",
                                                 "solver.inner_steps=5"])) == plain
    assert group_of(compose("config", overrides=["solver.epochs=20"])) != plain


def test_an_option_without_a_config_key_is_named(monkeypatch):
    monkeypatch.setattr(settings, "OPTION_GROUPS", {"solver": settings.OPTION_GROUPS["solver"]})
    with pytest.raises(TypeError, match=r"^crux.SolveOptions.batchsize needs a field 'batchsize' in exactly one of "
                                        r"the schemas SolverConfig; found in \[\]"):
        settings._option_keys()


def test_the_timed_options_are_the_options_fields_but_epochs_and_substeps(hydra_configs):
    fields = [f.name for f in dataclasses.fields(crux.SolveOptions)]
    assert set(fields) - set(TIMED_OPTIONS) == {"epochs", "substeps"}
    cfg = compose("config", overrides=["+timing.against.precision=high"])
    assert timing_refusals(cfg) == []
    # what crux refuses of the options timed against is said in the command line's terms
    cfg = compose("config", overrides=["+timing.against.offload_data=true"])
    assert timing_refusals(cfg) == [
        "timing.against.offload_data=true streams mini-batches, so it needs a memory.batchsize smaller than the "
        "largest constraint's points; got memory.batchsize=null. Set one, or timing.against.offload_data=false"]
    cfg = compose("config", overrides=["solver.epochs=10", "+timing.against.inner_steps=3"])
    assert timing_refusals(cfg) == ["timing.against.inner_steps=3 must divide solver.epochs=10; choose one of "
                                    "[1, 2, 5, 10]"]


def test_options_are_frozen():
    options = crux.SolveOptions(10, batchsize=8)
    with pytest.raises(dataclasses.FrozenInstanceError):
        options.batchsize = 16
    assert options.batchsize == 8 and hash(options) == hash(crux.SolveOptions(10, batchsize=8))


@pytest.mark.parametrize("build, error, message", [
    (lambda: crux.SolveOptions(10, batchsize=0), ValueError, r"^batchsize must be >= 1, got 0; "),
    (lambda: crux.SolveOptions(10, inner_steps=3), ValueError, r"^inner_steps=3 must divide epochs=10; "),
    (lambda: crux.SolveOptions(10, offload_data="yes"), TypeError, r"^offload_data must be True or False"),
    (lambda: crux.SolveOptions(10, precision="higest"), ValueError, r"^precision='higest' .*did you mean 'highest'"),
    (lambda: crux.SolveOptions(10, substeps=[[0]], accumulation_steps=2), ValueError, r"^substeps makes each "),
    (lambda: dataclasses.replace(crux.SolveOptions(10), devices=0), ValueError, r"^devices must be >= 1, got 0"),
    (lambda: poisson().solver().compiled_call(offload_data=True, batchsize=8), ValueError,
     r"^compiled_call\(offload_data=True\): .* pass offload_data=False"),
    (lambda: poisson().solver().solve(10, 8), TypeError, r"options must be a crux.SolveOptions, got 8"),
    (lambda: poisson().solver().solve(10, batchsiz=8), TypeError, r"solve\(\) has no option 'batchsiz'; did you mean "
                                                                  r"batchsize\?"),
])
def test_a_bad_value_is_refused_when_the_options_are_built(build, error, message):
    with pytest.raises(error, match=message):
        build()
