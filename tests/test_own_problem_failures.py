"""A problem of one's own that cannot run, as a user meets it on the terminal: a misspelt field (with and
without ``+``), a module not found, a dependency its module lacks, and a problem its function cannot build (an
error in it, points with a NaN or of another dimension than the model takes) are one crux line before any job or
run exists, naming the user's file and line; an error in the user's code while a job runs is one line per job
naming the user's file and line, the run FAILED with it, the traceback in the job's log file (on the terminal
with ``HYDRA_FULL_ERROR=1``)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from cruxlab.store import contract

pytestmark = pytest.mark.integration  # crux-run and crux-sweep in subprocesses

MODULE = '''import numpy as np
import crux
from crux.problems import Problem


def line(n_interior, slope, hidden, activation, seed):
    points = np.linspace(0, 1, n_interior, dtype=np.float32)[:, None]
    return Problem("line", [crux.Constraint("fit", lambda net, x: net.u(x) - slope * x[0], points)],
                   {"u": crux.mlp(1, 1, hidden, activation, seed=seed)}, seed=seed)


def broken(n_interior, slope, hidden, activation, seed):
    return n_interior / 0


def holed(n_interior, slope, hidden, activation, seed):
    points = np.linspace(0, 1, n_interior)[:, None]
    points[3] = np.nan
    return Problem("holed", [crux.Constraint("fit", lambda net, x: net.u(x) - slope * x[0], points)],
                   {"u": crux.mlp(1, 1, hidden, activation, seed=seed)}, seed=seed)


def planar(n_interior, slope, hidden, activation, seed):
    points = np.linspace(0, 1, 2 * n_interior).reshape(n_interior, 2)
    return Problem("planar", [crux.Constraint("fit", lambda net, x: net.u(x) - slope, points)],
                   {"u": crux.mlp(1, 1, hidden, activation, seed=seed)}, seed=seed)


def unscored(n_interior, slope, hidden, activation, seed):
    points = np.linspace(0, 1, n_interior, dtype=np.float32)[:, None]
    return Problem("unscored", [crux.Constraint("fit", lambda net, x: net.u(x) - slope * x[0], points)],
                   {"u": crux.mlp(1, 1, hidden, activation, seed=seed)}, {"u": predicted}, {"u": lambda xs: xs[:, 0]},
                   points, seed=seed)


def predicted(models, xs):
    return np.asarray(models["u"](xs))[:, 0] * slope
'''
LINES = {"broken": 13, "holed": 19, "planar": 25, "predicted": 37}  # where MODULE's problems go wrong
SWEEP = "hydra:\n  sweeper:\n    params:\n      memory: full,b8\n"
TINY = ["solver.epochs=4", "model.width=4", "model.depth=1"]


@pytest.fixture
def project(tmp_path) -> Path:
    """A folder as a user makes it: a module with the problem functions, config groups, a sweep file."""
    (tmp_path / "mine.py").write_text(MODULE)
    (tmp_path / "conf" / "problem").mkdir(parents=True)
    (tmp_path / "needs.py").write_text("import numpy as np\nimport nosuchdependency\n")
    for name, target in (("line", "mine.line"), ("broken", "mine.broken"), ("lost", "nosuchmodule.line"),
                         ("needs", "needs.line"), ("holed", "mine.holed"), ("planar", "mine.planar"),
                         ("unscored", "mine.unscored")):
        (tmp_path / "conf" / "problem" / f"{name}.yaml").write_text(f"_target_: {target}\nn_interior: 16\n"
                                                                   f"slope: 2.0\n")
    (tmp_path / "two.yaml").write_text(SWEEP)
    return tmp_path


def run(folder: Path, module: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    environment = {key: value for key, value in os.environ.items() if key != "HYDRA_FULL_ERROR"}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=folder, capture_output=True, text=True,
                          timeout=300, env={**environment, "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}",
                                            **env})


@pytest.mark.parametrize("override", ["problem.n_interor=10", "+problem.n_interor=10"])
def test_a_misspelt_field_is_one_line_naming_the_fields_and_nothing_runs(project, override):
    done = run(project, "cruxlab.commands.sweep", "two.yaml", "--config-dir", "conf", "problem=line", override, *TINY)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith("crux-sweep: problem.n_interor: mine.line has no parameter 'n_interor'; its fields are "
                           "n_interior, slope: write problem.n_interior=10"), line
    assert "Traceback" not in done.stdout and "+problem" not in line
    assert not (project / "mlflow.db").exists() and not (project / "multirun").exists()


def test_a_module_not_found_is_one_line_and_nothing_runs(project):
    done = run(project, "cruxlab.commands.sweep", "two.yaml", "--config-dir", "conf", "problem=lost", *TINY)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "crux-sweep: problem._target_=nosuchmodule.line: No module named 'nosuchmodule'; a problem's module is "
        "imported from the working directory or from an installed package (in every job); nothing was run"]
    assert "Traceback" not in done.stdout and not (project / "mlflow.db").exists()
    done = run(project, "cruxlab.commands.experiment", "--config-dir", "conf", "problem=line", "problem.slop=1", *TINY)
    assert done.returncode == 1
    assert done.stderr.splitlines() == ["crux-run: problem.slop: mine.line has no parameter 'slop'; its fields are "
                                        "n_interior, slope: write problem.slope=1"]
    assert not (project / "mlflow.db").exists()
    done = run(project, "cruxlab.commands.experiment", "--config-dir", "conf", "problem=needs", *TINY)
    assert done.returncode == 1
    assert done.stderr.splitlines() == [
        "crux-run: problem._target_=needs.line: needs was found, but the error is inside it, at needs.py:2 (`import "
        "nosuchdependency`): no module named 'nosuchdependency' is installed here: fix the import there, or install "
        "nosuchdependency where crux runs"]
    assert not (project / "mlflow.db").exists()


@pytest.mark.parametrize("name, said", [
    ("broken", f"ZeroDivisionError: division by zero (mine.py:{LINES['broken']})"),
    ("holed", f"ValueError: Constraint 'fit': points contain NaN or inf (first at row 3); remove or fix them before "
              f"building the solver (mine.py:{LINES['holed']})"),
    ("planar", f"Constraint 'fit': model 'u' takes one point of shape (1,), and the residual passed it shape (2,) "
               f"(mine.py:{LINES['planar']}); the constraint's points have 2 coordinates"),
])
def test_a_problem_that_cannot_be_built_is_one_line_naming_the_users_line_before_any_run(project, name, said):
    done = run(project, "cruxlab.commands.sweep", "two.yaml", "--config-dir", "conf", f"problem={name}", *TINY)
    assert done.returncode == 1
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"crux-sweep: problem._target_=mine.{name}: {said}") and line.endswith(
        "(in every job); nothing was run"), line
    assert "Launching" not in done.stdout and "Traceback" not in done.stdout
    assert not (project / "mlflow.db").exists() and not (project / "multirun").exists()  # no run, no job folder
    single = run(project, "cruxlab.commands.experiment", "--config-dir", "conf", f"problem={name}", *TINY)
    assert single.returncode == 1
    assert single.stderr.splitlines()[-1].startswith(f"crux-run: problem._target_=mine.{name}: {said}")
    assert not (project / "mlflow.db").exists() and not (project / "outputs").exists()


def test_an_error_in_the_users_code_while_a_job_runs_is_one_line_with_its_file_and_line_and_the_run_failed(project):
    done = run(project, "cruxlab.commands.sweep", "two.yaml", "--config-dir", "conf", "problem=unscored", *TINY)
    assert done.returncode == 1
    said = f"failed: NameError: name 'slope' is not defined (mine.py:{LINES['predicted']}); traceback in "
    failures = [line for line in done.stdout.splitlines() if said in line]
    assert len(failures) == 2 and "Traceback" not in done.stdout + done.stderr
    for failure in failures:  # each job's log holds its traceback, down to the user's line
        log = Path(failure.split("traceback in ")[1]).read_text()
        assert "Traceback" in log and f'mine.py", line {LINES["predicted"]}, in predicted' in log
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("two").experiment_id], contract.tag_filter(contract.ROLE, contract.CHILD))
    assert len(runs) == 2 and {r.info.status for r in runs} == {contract.FAILED}
    assert {r.data.tags[contract.ERROR_MESSAGE] for r in runs} == {f"NameError: name 'slope' is not defined "
                                                                 f"(mine.py:{LINES['predicted']})"}


def test_a_single_run_says_it_in_one_line_and_hydra_full_error_shows_the_traceback(project):
    done = run(project, "cruxlab.commands.experiment", "--config-dir", "conf", "problem=unscored", *TINY)
    assert done.returncode == 1 and "Traceback" not in done.stdout + done.stderr
    assert "Unable to initialize backend" not in done.stdout + done.stderr  # JAX's platform probe, kept quiet
    last = done.stderr.splitlines()[-1]
    assert last.startswith(f"crux-run: NameError: name 'slope' is not defined (mine.py:{LINES['predicted']}); "
                           f"traceback in ")
    assert "Traceback" in Path(last.split("traceback in ")[1]).read_text()
    shown = run(project, "cruxlab.commands.experiment", "--config-dir", "conf", "problem=broken", *TINY,
                HYDRA_FULL_ERROR="1")
    assert shown.returncode == 1 and f'mine.py", line {LINES["broken"]}, in broken' in shown.stderr
