"""jNO on a problem of one's own (examples/own_problem/nonlinear_poisson_jno.py): checked before any job as a
crux problem is, built into a jno.core crux trains, and swept on both backends into one side-by-side report."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from hydra import compose, initialize_config_module
from mlflow.tracking import MlflowClient

from cruxlab import config
from cruxlab.config import CONFIG_PACKAGE, ModelConfig
from cruxlab.config.backend_choice import backend_refusals
from cruxlab.store.contract import FINISHED

pytest.importorskip("jno", reason='the jNO backend needs the jno extra: pip install -e ".[jno]"')

import equinox as eqx  # noqa: E402 - comes with the jno extra

from cruxlab.backends.jno import own  # noqa: E402 - imports jNO

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "own_problem"
JNO_PROBLEM = ["backend=jno", "problem=unit_square_jno"]
TINY = ["model.width=4", "model.depth=1"]


@pytest.fixture
def example(monkeypatch) -> None:
    """The example's folder on the import path, as crux-run puts the working directory."""
    monkeypatch.syspath_prepend(str(EXAMPLE))


def composed(*overrides: str):
    with initialize_config_module(CONFIG_PACKAGE, version_base="1.3"):
        return compose("config", overrides=[f"hydra.searchpath=[file://{EXAMPLE / 'conf'}]", *overrides])


def faults(*overrides: str) -> list[str]:
    """What crux-run and crux-sweep refuse in the job before any run (the backend, then the problem)."""
    cfg = composed(*overrides)
    return backend_refusals(cfg) + config.problem_faults(cfg)


def test_a_jno_problem_of_ones_own_passes_the_checks_a_crux_one_does(example):
    assert faults(*JNO_PROBLEM) == []


def test_a_misspelt_field_or_a_missing_module_is_one_line_naming_it_and_the_fix(example):
    assert faults(*JNO_PROBLEM, "+problem.n_interor=10") == [
        "problem.n_interor: nonlinear_poisson_jno.unit_square has no parameter 'n_interor'; its fields are "
        "n_interior, n_edge, source: write problem.n_interior=10"]
    assert faults(*JNO_PROBLEM, "problem._target_=nosuchmodule.unit_square") == [
        "problem._target_=nosuchmodule.unit_square: No module named 'nosuchmodule'; a problem's module is imported "
        "from the working directory or from an installed package"]
    assert faults(*JNO_PROBLEM, "backend.batching=samples") == [
        "backend.batching=samples: a jNO problem of your own is batched over its points; write "
        "backend.batching=points (in the accumulation sweep backend.batching_forms=points)"]


def test_a_misspelt_field_stops_the_sweep_in_one_line_before_any_run(tmp_path, monkeypatch, capsys):
    from cruxlab.commands.sweep import main

    shutil.copytree(EXAMPLE, tmp_path / "project", ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.chdir(tmp_path / "project")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    with pytest.raises(SystemExit) as stopped:
        main(["unit_square_accumulation.yaml", "--config-dir", "conf", *JNO_PROBLEM, "problem.n_interor=10"])
    assert stopped.value.code not in (0, None)
    assert str(stopped.value.code).startswith("crux-sweep: problem.n_interor: nonlinear_poisson_jno.unit_square has "
                                              "no parameter 'n_interor'")
    assert "Traceback" not in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "project" / "multirun").exists()


def test_the_example_builds_a_core_on_the_crux_problems_points_and_moves_a_twin_by_one_ulp(example):
    model, node = ModelConfig(width=4, depth=1, activation="tanh"), composed(*JNO_PROBLEM).problem
    built, twin = own.build_own(node, model, 3, 0), own.build_own(node, model, 3, 1)
    assert built.names == ["pde", "edge"] and set(built.networks) == {"u"}
    assert built.population == 256 and built.exact == {} and built.predict == {}  # no exact solution
    crux_points = config.problem(composed("problem=unit_square", "solver.seed=3", *TINY)).constraints[0].points
    np.testing.assert_array_equal(np.asarray(built.core.domain.context["interior"])[0, 0], crux_points)
    start, moved = (jax.tree.leaves(eqx.filter(b.networks["u"].module, eqx.is_array)) for b in (built, twin))
    for a, b in zip(map(np.asarray, start), map(np.asarray, moved)):  # nonzero entries one ulp up or down
        one_ulp = (b == np.nextafter(a, np.inf)) | (b == np.nextafter(a, -np.inf))
        assert np.all(np.where(a == 0, b == 0, one_ulp))


def test_a_crux_problem_under_backend_jno_is_one_line_saying_what_to_write(example):
    node = composed("backend=jno", "problem=unit_square").problem
    with pytest.raises(TypeError, match=r"^problem: nonlinear_poisson.unit_square returned Problem, not a "
                                        r"cruxlab.backends.jno.OwnProblem: backend=jno trains a problem written in "
                                        r"jNO's terms .*; choose backend=crux for this one$"):
        own.build_own(node, ModelConfig(width=4, depth=1, activation="tanh"), 0, 0)


def test_an_exact_solution_needs_its_prediction_and_test_points():
    with pytest.raises(ValueError, match=r"jNO problem: exact solution for \['u'\] without predict"):
        own.OwnProblem({"pde": object()}, {"u": object()}, exact={"u": np.sin}, test_points=np.zeros((2, 1)))
    with pytest.raises(ValueError, match="needs at least one constraint"):
        own.OwnProblem({}, {"u": object()})


SWEEP = ["memory=b8,b8_acc4", "solver.epochs=10", "gradient_draws=8", *TINY]
ROW = re.compile(r"^\| (b8|b8_acc4) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \| ([0-9.]+) \|$", re.M)


@pytest.mark.integration
def test_the_example_swept_on_both_backends_is_reported_side_by_side(tmp_path):
    """The commands of docs/usage.md ("jNO on a problem of your own"), cut to 2 jobs of 10 epochs each."""
    project = tmp_path / "project"
    shutil.copytree(EXAMPLE, project, ignore=shutil.ignore_patterns("__pycache__"))
    uri = f"sqlite:///{project / 'mlflow.db'}"
    environment = {**os.environ, "MLFLOW_TRACKING_URI": uri}
    for backend in ([], JNO_PROBLEM):
        done = subprocess.run([sys.executable, "-m", "cruxlab.commands.sweep", "unit_square_accumulation.yaml", "--config-dir",
                               "conf", *backend, *SWEEP], cwd=project, capture_output=True, text=True,
                              env=environment, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    done = subprocess.run([sys.executable, "-m", "cruxlab.report", "unit_square_accumulation", "--out", "report"],
                          cwd=project, capture_output=True, text=True, env=environment, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    text = (project / "report" / "report.md").read_text()
    assert "# crux claim report: unit_square_accumulation, crux vs jno" in text
    assert "| setting | crux steps/s | jno steps/s | crux compile s | jno compile s |" in text
    rows = {match[0]: [float(v) for v in match[1:]] for match in ROW.findall(text)}
    assert set(rows) == {"b8", "b8_acc4"}, text
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("unit_square_accumulation")
    runs = client.search_runs([experiment.experiment_id], "tags.`crux.backend` = 'jno' and params.variant = 'b8'")
    (jno_run,) = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    assert jno_run.data.params["problem._target_"] == "nonlinear_poisson_jno.unit_square"
    assert jno_run.info.status == FINISHED and jno_run.data.metrics["gradient_noise/population"] == 256
    # the table's jNO figure is that run's, as the table prints it (3 significant figures, or whole above 100)
    steps = jno_run.data.metrics["steps_per_second"]
    assert rows["b8"][1] == pytest.approx(steps, rel=5e-3 if steps < 100 else 0.5 / steps)
