"""A user's own problem (a Hydra ``_target_``) and own sweep (a file anywhere), and the params a job logs:
how they are found, checked and composed, without running a job (tests/test_install.py runs them)."""
from __future__ import annotations

import inspect
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from hydra import compose, initialize_config_module
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

import crux
from crux.problems import Problem
from cruxlab import config
from cruxlab.config import settings
from cruxlab.commands import sweep as sweep_command
from cruxlab.commands.sweep import available, find_sweep, main, register
from cruxlab.config import CONFIG_PACKAGE, ModelConfig, build_problem, effective_settings
from cruxlab.config.keys import refused_override
from cruxlab.store import contract
from cruxlab.store.params import flatten

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "own_problem"
received: dict = {}


def recording_problem(n_points: int, scale: float, hidden, activation, seed) -> Problem:
    """A problem function that keeps what it was called with."""
    received.update(n_points=n_points, scale=scale, hidden=hidden, activation=activation, seed=seed)
    points = np.linspace(0, 1, n_points, dtype=np.float32)[:, None]
    return Problem("recording", [crux.Constraint("fit", lambda net, x: net.u(x) - scale * x[0], points)],
                   {"u": crux.mlp(1, 1, hidden, activation, seed=seed)})


def problem_node(**fields) -> OmegaConf:
    return OmegaConf.create({"_target_": f"{__name__}.recording_problem", **fields})


def test_a_problem_function_receives_its_fields_the_model_settings_and_the_seed():
    built = build_problem(problem_node(n_points=5, scale=2.0), ModelConfig(width=16, depth=2, activation="sin"), 7)
    assert received == {"n_points": 5, "scale": 2.0, "hidden": (16, 16), "activation": "sin", "seed": 7}
    assert built.name == "recording" and [c.name for c in built.constraints] == ["fit"]


def test_a_problem_config_is_checked_against_its_function_before_it_is_called(module_failing_on_import):
    received.clear()
    model = ModelConfig(width=8, depth=1, activation="tanh")
    with pytest.raises(TypeError, match=r"^problem.n_pts: \S+recording_problem has no parameter 'n_pts'; its fields "
                                        r"are n_points, scale: write problem.n_points=5$"):
        build_problem(problem_node(n_pts=5, scale=2.0), model, 0)
    with pytest.raises(TypeError, match=r"problem.colour: .* its fields are n_points, scale: set one of them, or add "
                                        r"a parameter 'colour' to the function"):  # like no field: no suggestion
        build_problem(problem_node(n_points=5, scale=2.0, colour="red"), model, 0)
    with pytest.raises(TypeError, match=r"missing a required argument: 'scale'; set it in the problem config \(its "
                                        r"fields are n_points, scale\)"):
        build_problem(problem_node(n_points=5), model, 0)
    with pytest.raises(TypeError, match=r"must take hidden, activation, seed .* it lacks \['hidden', 'activation', 'seed'\]"):
        build_problem(OmegaConf.create({"_target_": "numpy.linspace", "start": 0, "stop": 1}), model, 0)
    with pytest.raises(ValueError, match="problem.seed: set by model.width/depth/activation and solver.seed"):
        build_problem(problem_node(n_points=5, scale=2.0, seed=1), model, 0)
    with pytest.raises(ValueError, match="problem._target_=nowhere.at_all: No module named 'nowhere'; .* working "
                                         "directory"):
        build_problem(OmegaConf.create({"_target_": "nowhere.at_all"}), model, 0)
    with pytest.raises(ValueError, match="problem._target_=crux.problems.poisson2d: no function 'poisson2d' in "
                                         "module crux.problems"):
        build_problem(OmegaConf.create({"_target_": "crux.problems.poisson2d"}), model, 0)
    with pytest.raises(ValueError, match="no _target_"):
        build_problem(OmegaConf.create({"n_points": 5}), model, 0)
    with pytest.raises(ValueError, match=r"problem._target_=crux_problem_import_fails.f: importing "
                                         r"crux_problem_import_fails failed: NameError: name 'undefined' is not "
                                         r"defined \(\S*crux_problem_import_fails.py:1\)"):
        build_problem(OmegaConf.create({"_target_": "crux_problem_import_fails.f"}), model, 0)
    assert received == {}  # refused before the function ran


@pytest.fixture
def module_failing_on_import(tmp_path, monkeypatch):
    (tmp_path / "crux_problem_import_fails.py").write_text("undefined\n")
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.parametrize("module, source, said", [
    ("crux_problem_needs_more", "import math\n\nimport crux_no_such_dependency\n",
     "at crux_problem_needs_more.py:3 (`import crux_no_such_dependency`): no module named 'crux_no_such_dependency' is "
     "installed here: fix the import there, or install crux_no_such_dependency where crux runs"),
    # a misspelt import: the installed module it most likely meant, not "install it"
    ("crux_problem_misspelt", "import math\nimport nmupy as np\n",
     "at crux_problem_misspelt.py:2 (`import nmupy as np`): no module named 'nmupy' is installed; did you mean "
     "numpy? fix the import there"),
], ids=["missing", "misspelt"])
def test_a_failed_import_inside_the_users_module_is_said_to_be_there_with_its_line(tmp_path, monkeypatch, module,
                                                                                     source, said):
    (tmp_path / f"{module}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError) as refused:
        config.problem_function(f"{module}.heat")
    assert str(refused.value) == (f"problem._target_={module}.heat: {module} was found, but the error is inside "
                                  f"it, {said}")


def test_a_problem_module_that_is_not_there_is_said_to_be_missing():
    with pytest.raises(ValueError, match=r"^problem._target_=crux_problem_not_here.heat: No module named "
                                         r"'crux_problem_not_here'; a problem's module is imported from the working"):
        config.problem_function("crux_problem_not_here.heat")  # the module itself: not found, said as such


def test_a_jobs_problem_is_checked_without_calling_its_function():
    received.clear()

    def job(**fields):
        return OmegaConf.create({"problem": problem_node(**fields), "solver": {"seed": 0},
                                 "model": OmegaConf.structured(ModelConfig(width=8, depth=1, activation="tanh"))})

    assert config.problem_faults(job(n_points=5, scale=2.0)) == []
    (fault,) = config.problem_faults(job(n_point=5, scale=2.0))
    assert fault.startswith("problem.n_point: ") and fault.endswith("write problem.n_points=5")
    assert received == {}


def test_hydras_could_not_override_a_problem_field_is_said_as_a_field_the_function_lacks():
    refusal = ConfigCompositionException("Could not override 'problem.n_pts'.\nTo append to your config use "
                                         "+problem.n_pts=7")
    composed_without = []

    def compose_without(key):
        composed_without.append(key)
        return OmegaConf.create({"problem": {"_target_": f"{__name__}.recording_problem", "n_points": 5}})

    assert refused_override(refusal, compose_without) == (
        f"problem.n_pts: {__name__}.recording_problem has no parameter 'n_pts'; its fields are n_points, scale: "
        f"write problem.n_points=7")
    assert composed_without == ["problem.n_pts"]
    other = ConfigCompositionException("Could not override 'solver'.\nTo append to your config use +solver=7")
    assert refused_override(other, compose_without) is None  # not a key of a node: Hydra says it
    assert config.overrides_without(["problem=line", "+problem.n_pts=7", "problem.n_points=5,6"],
                                    "problem.n_pts") == ["problem=line", "problem.n_points=5,6"]


def test_a_problem_without_an_exact_solution_has_no_errors_and_an_exact_one_needs_its_prediction():
    received.clear()
    problem = recording_problem(4, 1.0, (4,), "tanh", 0)
    assert problem.relative_l2() == {}
    with pytest.raises(ValueError, match=r"exact solution for \['u'\] without predict"):
        Problem("p", problem.constraints, problem.models, exact={"u": lambda xs: xs[:, 0]})
    with pytest.raises(ValueError, match="needs test_points"):
        Problem("p", problem.constraints, problem.models, predict={"u": lambda models, xs: xs[:, 0]},
                exact={"u": lambda xs: xs[:, 0]})


def test_the_problem_docstring_states_the_signature_crux_run_calls():
    """docs/usage.md points here: the call it documents is the one build_problem makes."""
    assert "hidden=(model.width,) * model.depth" in Problem.__doc__ and "seed=solver.seed" in Problem.__doc__
    assert config.PROBLEM_ARGUMENTS == ("hidden", "activation", "seed")
    assert set(config.PROBLEM_ARGUMENTS) <= set(inspect.signature(crux.problems.poisson1d).parameters)


def write_sweep(folder: Path, name: str, claims: str = "[accumulation]") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.yaml"
    path.write_text(f"claim: mine\nclaims: {claims}\nhydra:\n  sweeper:\n    params:\n      memory: b8,b8_acc4\n")
    return path


def test_a_sweep_is_found_by_path_anywhere_or_by_name_in_a_sweeps_folder(tmp_path, capsys):
    path = write_sweep(tmp_path / "elsewhere", "my_sweep")
    by_path = find_sweep(str(path))
    assert by_path.name == "my_sweep" and by_path.source == str(path) and by_path.claims == ["accumulation"]
    folder = tmp_path / "sweeps"
    write_sweep(folder, "accumulation", "[]")  # a folder's sweep wins over the built-in one of its name
    write_sweep(folder, "mine")
    found = available([folder])
    assert found["accumulation"].source == str(folder / "accumulation.yaml")
    assert found["mine"].claims == ["accumulation"] and "inner_steps" in found
    assert available()["accumulation"].source == "crux.sweeps/accumulation.yaml"
    main(["--list", "--sweeps-dir", str(folder)])
    listed = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    assert listed["mine"] == "mine" and listed["phases"].startswith("solve() called again resumes")


@pytest.mark.parametrize("arguments, message", [
    (["no_such_sweep"], "unknown sweep 'no_such_sweep'; choose one of accumulation"),
    (["accumulaton"], "unknown sweep 'accumulaton' (did you mean accumulation?); choose one of accumulation"),
    (["missing.yaml"], "no sweep file missing.yaml"),
    (["accumulation", "--config-dir", "no/such/folder"], "--config-dir no/such/folder: no such folder"),
    (["--sweeps-dir", "no/such/folder", "x"], "--sweeps-dir no/such/folder: no such folder"),
])
def test_crux_sweep_refuses_what_it_cannot_find_before_running(arguments, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(arguments)
    said = capsys.readouterr().err
    assert exit_.value.code == 2 and said.startswith("crux-sweep: ") and message in said
    assert len(said.splitlines()) == 1  # one line, as every refusal before a run: no usage to read past


def test_a_sweep_naming_an_unknown_check_or_no_list_is_refused_before_running(tmp_path, capsys):
    for claims, message in (("[acumulation]", "claims: no check named 'acumulation' (did you mean accumulation?); "
                                              "choose from ['accumulation'"),
                            ("accumulation", "claims: 'accumulation' is not a list; write e.g. `claims: [")):
        path = write_sweep(tmp_path, "typo", claims)
        with pytest.raises(SystemExit):
            main([str(path)])
        assert f"{path}: {message}" in capsys.readouterr().err


def test_a_sweep_found_by_name_reads_that_built_in_file_only_and_every_file_of_its_folders(tmp_path, monkeypatch):
    read: list[str] = []
    real = sweep_command.read_sweep
    monkeypatch.setattr(sweep_command, "read_sweep", lambda name, *rest: read.append(name) or real(name, *rest))
    assert find_sweep("accumulation").source == "crux.sweeps/accumulation.yaml" and read == ["accumulation"]
    folder = tmp_path / "sweeps"
    write_sweep(folder, "accumulation", "[]")
    write_sweep(folder, "mine")
    del read[:]
    assert find_sweep("mine", [folder]).source == str(folder / "mine.yaml")
    assert read == ["accumulation", "mine"]  # the folder's files, each; no built-in sweep is named mine
    with pytest.raises(ValueError, match="unknown sweep 'accumulaton' .did you mean accumulation.*inner_steps"):
        find_sweep("accumulaton", [folder])


def test_the_claims_a_sweep_may_name_are_the_checks_crux_report_has():
    from cruxlab.report import CHECKS

    assert sorted(contract.CHECKED_CLAIMS) == sorted(CHECKS)


def test_the_example_sweep_composes_with_its_problem_from_its_config_folder(tmp_path, monkeypatch):
    """examples/own_problem as a user runs it: crux-sweep unit_square_accumulation.yaml --config-dir conf
    (Hydra's --config-dir puts the folder first on the search path, as hydra.searchpath does here)."""
    shutil.copytree(EXAMPLE, tmp_path / "project")
    monkeypatch.chdir(tmp_path / "project")
    config.import_from_working_directory()
    sweep = find_sweep("unit_square_accumulation.yaml")
    register(sweep, "crux-sweep unit_square_accumulation.yaml --config-dir conf")
    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        overrides = [f"hydra.searchpath=[file://{Path('conf').resolve()}]", "+sweeps=unit_square_accumulation"]
        cfg = compose("config", overrides=overrides + ["memory=b8_acc4"], return_hydra_config=True)
    assert cfg.problem._target_ == "nonlinear_poisson.unit_square" and cfg.optimizer.name == "sgd"
    assert list(cfg.claims) == ["accumulation"] and cfg.memory.accumulation_steps == 4
    assert cfg.hydra.sweeper.command == "crux-sweep unit_square_accumulation.yaml --config-dir conf"
    problem = config.problem(cfg)
    assert [c.name for c in problem.constraints] == ["pde", "edge"] and problem.relative_l2() == {}
    edge = np.asarray(problem.constraints[1].points)
    assert edge.shape == (64, 2) and np.all(np.min(np.minimum(edge, 1 - edge), axis=1) == 0)  # on an edge


def test_params_are_the_settings_the_job_ran_with_and_never_empty():
    """Optimizer fields left null show optax's defaults, a schedule spanning its phase shows its length, nothing
    unset (null, an empty mapping) and nothing that describes the sweep (its claim) is a param."""
    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        cfg = compose("config", overrides=["schedule=warmup_cosine", "solver.epochs=300", "phases=lbfgs_soap",
                                           "claim=a sentence", "claims=[accumulation]"])
        plain = compose("config")
    params = flatten(effective_settings(cfg))
    assert {params[k] for k in ("optimizer.b1", "optimizer.b2", "optimizer.eps")} == {"0.9", "0.999", "1e-08"}
    assert params["schedule.total"] == "300" and params["schedule.name"] == "warmup_cosine"
    assert params["phases.lbfgs.optimizer.memory_size"] == "10"
    assert params["phases.soap.optimizer.b1"] == "0.95" and params["phases.soap.optimizer.precondition_frequency"] == "10"
    assert params["problem._target_"] == "crux.problems.poisson1d"
    assert not {key for key in params if key.split(".")[0] in ("claim", "claims", "tracking")}
    assert all(value not in ("None", "", "{}", "[]") for value in params.values()), params
    plain_params = flatten(effective_settings(plain))
    assert "memory.batchsize" not in plain_params and not any(k.startswith("phases") for k in plain_params)
    assert json.loads(flatten({"solver": {"substeps": [[0], [[1, 2], 2]]}})["solver.substeps"]) == [[0], [[1, 2], 2]]


def ran_otherwise(sizes: dict[str, int], **keywords) -> tuple[dict, list[str]]:
    """What a job records of these options on constraints of ``sizes`` points, its solver resolving them."""
    requested = crux.SolveOptions(10, **keywords)
    solver = crux.Crux([crux.Constraint(name, lambda net, x: net.u(x), np.linspace(0, 1, n)[:, None])
                        for name, n in sizes.items()], {"u": crux.mlp(1, 1, (2,))})
    return settings.ran_otherwise(requested, solver.resolve(options=requested), sizes)


def test_a_batch_size_is_recorded_as_the_solver_applies_it_to_the_problems_points():
    assert ran_otherwise({"pde": 1024, "bc": 2}) == ({}, [])
    assert ran_otherwise({"pde": 1024, "bc": 8}, batchsize=8, accumulation_steps=4) == (
        {}, ["memory.batchsize=8 is at least the points of bc (8 points): every update took all of them"])
    assert ran_otherwise({"pde": 1152, "bc": 64}, batchsize=100000) == (
        {"memory.batchsize": 1152}, ["memory.batchsize=100000 is at least every constraint's points (the largest, "
                                     "pde, has 1152): every update saw every point, as with memory=full"])
    assert ran_otherwise({"pde": 1152}, batchsize=1152)[0] == {}  # as requested: nothing to record otherwise
    applied, lines = ran_otherwise({"pde": 3000, "bc": 2}, batchsize=5000, accumulation_steps=4)
    assert applied == {"memory.batchsize": 3000, "memory.accumulation_steps": 1}  # one update of the whole set ran
    assert lines[1] == ("memory.accumulation_steps=4 ran as 1: each micro-batch would have been the whole set "
                        "again, so one update of the whole set ran")
    # any other option the solver ran otherwise is recorded alike, in the command line's terms
    assert settings.ran_otherwise(crux.SolveOptions(10), crux.SolveOptions(10, precision="high"), {"pde": 8}) == (
        {"solver.precision": "high"}, ["solver.precision=highest ran as high"])


def logged_params(store: Path, cfg) -> tuple[dict[str, str], dict[str, str]]:
    """The params and tags a job of ``cfg`` logs before it trains, its problem's solver resolving its options."""
    from mlflow.tracking import MlflowClient

    from cruxlab.runtime.job import JobRun

    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    run_id = client.create_run(client.create_experiment("e")).info.run_id
    with JobRun(client, run_id, "default", 0) as run:
        solver = config.problem(cfg).solver()
        run.log_config(cfg, *settings.ran_otherwise(*settings.job_options(cfg, solver),
                                                    {c.name: c.size for c in solver.constraints}))
    logged = client.get_run(run_id).data
    return logged.params, logged.tags


def test_a_setting_that_ran_otherwise_is_logged_as_it_ran_beside_the_request(store, hydra_configs):
    from cruxlab.store.params import as_requested

    cfg = compose("config", overrides=["memory.batchsize=100000", "memory.accumulation_steps=4", "model.width=4"])
    params, tags = logged_params(store, cfg)
    assert params["memory.batchsize"] == "1024" and params["memory.batchsize_requested"] == "100000"
    assert (params["memory.accumulation_steps"], params["memory.accumulation_steps_requested"]) == ("1", "4")
    assert tags[contract.ADJUSTED] == (
        "memory.batchsize=100000 is at least every constraint's points (the largest, pde, has 1024): every update "
        "saw every point, as with memory=full; memory.accumulation_steps=4 ran as 1: each micro-batch would have "
        "been the whole set again, so one update of the whole set ran")
    assert as_requested(params) == {**flatten(effective_settings(cfg)), "variant": "default"}


def test_the_params_record_the_options_as_the_library_resolves_them(store, hydra_configs, monkeypatch):
    """A resolution planted in crux (precision taken as "high") is what the params record: the job asks the
    solver, it does not work the options out again."""
    import dataclasses

    import crux.solver

    resolved = crux.solver.resolved
    monkeypatch.setattr(crux.solver, "resolved", lambda *args: dataclasses.replace(resolved(*args), precision="high"))
    cfg = compose("config", overrides=["memory=b8", "model.width=4"])
    params, tags = logged_params(store, cfg)
    assert (params["solver.precision"], params["solver.precision_requested"]) == ("high", "highest")
    assert params["memory.batchsize"] == "8" and "memory.batchsize_requested" not in params
    assert tags[contract.ADJUSTED] == ("memory.batchsize=8 is at least the points of bc (2 points): every update took "
                                       "all of them; solver.precision=highest ran as high")


@pytest.mark.parametrize("overrides, refusal", [
    (["solver.devices=2"], "solver.devices=2, but JAX sees 1 device(s) (jax.devices()); use solver.devices=1 or "
                           "fewer. On a CPU, XLA_FLAGS=--xla_force_host_platform_device_count=2 (set before JAX "
                           "starts) makes 2 host devices"),
    (["memory=offload_b8", "memory.batchsize=2000"],
     "memory.offload_data=true streams mini-batches, so it needs a memory.batchsize smaller than the largest "
     "constraint (1024 points); got memory.batchsize=2000. Pass a smaller memory.batchsize or set "
     "memory.offload_data=false"),
    (["problem=mixed_poisson1d", "solver.substeps=[[0],[3]]"],
     "solver.substeps[1] names constraint 3, but indices run from 0 to 2 (the order of the constraints given to "
     "crux.Crux)"),
])
def test_what_the_solver_refuses_a_job_says_in_the_command_lines_terms(hydra_configs, overrides, refusal):
    cfg = compose("config", overrides=overrides + ["model.width=4"])
    with pytest.raises(ValueError) as refused:
        settings.job_options(cfg, config.problem(cfg).solver())
    assert str(refused.value) == refusal


def test_a_built_in_sweep_says_which_fields_of_a_chosen_problem_it_sets():
    from cruxlab.commands.sweep import problem_note

    sweeps = available()
    assert problem_note(sweeps["accumulation"], ["problem=heat2d", "solver.epochs=30"]) == (
        "accumulation sets problem.n_interior=1024 in every job, over problem=heat2d's own value; give "
        "problem.n_interior=... on the command line to choose another")
    assert problem_note(sweeps["accumulation"], ["problem=heat2d", "problem.n_interior=512"]) is None  # typed
    assert problem_note(sweeps["accumulation"], ["solver.epochs=30"]) is None  # the sweep's own problem
    assert {name for name, sweep in sweeps.items() if sweep.problem_fields} == {"accumulation", "devices"}


def test_the_usage_guide_says_what_every_built_in_sweep_does_to_a_problem_of_ones_own():
    """docs/usage.md's paragraph on the built-in sweeps names each of them, and the problem fields each sets."""
    guide = (Path(__file__).resolve().parent.parent / "docs" / "usage.md").read_text()
    paragraph = guide.split("Built-in sweeps on your problem:")[1].split("\n\n")[0]
    sweeps = available()
    assert {name for name in sweeps if f"`{name}`" in paragraph} == set(sweeps)
    for sweep in sweeps.values():
        for field, value in sweep.problem_fields.items():
            assert f"`{field}={value}`" in paragraph
    assert "`problem=poisson1d,heat1d`" in paragraph and sweeps["precision"].config.hydra.sweeper.params.problem == (
        "poisson1d,heat1d")
