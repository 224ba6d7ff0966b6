"""crux installed from its wheel, as a user gets it: a fresh virtual environment, and the console scripts run
from a folder outside the checkout. Everything they write lands in that folder; nothing lands in the
installed package.

The fresh environment takes crux from the wheel (installed with ``--no-deps``) and
finds crux's dependencies in this test environment's site-packages folders through
``.pth`` lines: installing jax, mlflow and the rest into it would take minutes on a
small machine and is not what is tested. A ``.pth`` line naming a folder only puts
that folder on ``sys.path`` (the ``.pth`` files there are not run), so the editable
install's import hook there stays inactive and ``import crux`` finds the wheel's
crux, which comes first on the path (checked).
"""
from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import version
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from cruxlab.store import contract
from crux_testing import REPO, copy_of_checkout, dependencies_pth

pytestmark = pytest.mark.integration  # builds a wheel, makes a venv, runs sweeps in subprocesses

TINY = ["solver.epochs=20", "model.width=8", "problem.n_interior=64", "repeat=0"]


def files_under(folder: Path) -> dict[str, int]:
    """Every file under ``folder`` with its modification time (ns)."""
    return {str(path.relative_to(folder)): path.stat().st_mtime_ns for path in folder.rglob("*") if path.is_file()}


class Installed:
    """A fresh venv holding crux's wheel; ``run`` runs one of its console scripts in a folder."""

    def __init__(self, venv: Path, wheel: Path, cache: Path):
        self.venv, self.wheel, self.cache = venv, wheel, cache
        self.site_packages = Path(subprocess.run(
            [venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            capture_output=True, text=True, check=True).stdout.strip())

    def run(self, folder: Path, *command: str, timeout: int = 900) -> subprocess.CompletedProcess:
        env = {key: value for key, value in os.environ.items()
               if key not in ("MLFLOW_TRACKING_URI", "PYTHONPATH", "VIRTUAL_ENV")}
        env.update(PATH=f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}", XDG_CACHE_HOME=str(self.cache))
        done = subprocess.run([str(self.venv / "bin" / command[0]), *command[1:]], cwd=folder, env=env,
                              capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0, f"{' '.join(command)}:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
        return done


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Installed:
    """crux's wheel, built from a copy of the package's sources and installed into a fresh venv."""
    root = tmp_path_factory.mktemp("install")
    source = copy_of_checkout(root / "source")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(root / "wheels"), str(source)], check=True, capture_output=True, timeout=600)
    (wheel,) = (root / "wheels").glob("crux-*.whl")
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                    "--no-deps", "--no-index", str(wheel)], check=True, capture_output=True, timeout=600)
    found = Installed(venv, wheel, root / "cache")
    (found.site_packages / "test_environment.pth").write_text(dependencies_pth())
    where = subprocess.run([venv / "bin" / "python", "-c", "import crux; print(crux.__file__)"],
                           capture_output=True, text=True, check=True, cwd=root).stdout.strip()
    assert Path(where) == found.site_packages / "crux" / "__init__.py"
    return found


def test_the_wheel_carries_every_module_config_and_sweep_of_the_checkout(installed):
    inside = set(zipfile.ZipFile(installed.wheel).namelist())
    expected = {str(path.relative_to(REPO)) for package in ("crux", "cruxlab", "hydra_plugins")
                for path in (REPO / package).rglob("*.py")}
    expected |= {f"crux/{path.relative_to(REPO)}" for folder in ("conf", "sweeps")
                 for path in (REPO / folder).rglob("*") if path.suffix in (".yaml", ".py")}
    assert expected - inside == set(), "missing from the wheel: add the package to [tool.setuptools] packages"
    assert "crux/conf/problem/poisson1d.yaml" in inside and "crux/sweeps/accumulation.yaml" in inside


def test_installed_commands_write_only_into_the_folder_they_run_in(installed, tmp_path):
    """crux-sweep --list, crux-run, a short crux-sweep accumulation and crux-report accumulation from a folder
    outside the checkout (not a git repository): the store, Hydra's folders and the report land there, the
    compilation cache in $XDG_CACHE_HOME, and the installed package is left as it was."""
    work = tmp_path / "work"
    work.mkdir()
    package = files_under(installed.site_packages / "crux")

    listed = installed.run(work, "crux-sweep", "--list").stdout
    assert listed.startswith("accumulation  accumulation_steps=4 with batchsize=8")
    installed.run(work, "crux-run", "solver.epochs=5", "model.width=8")
    installed.run(work, "crux-sweep", "accumulation", *TINY)
    printed = installed.run(work, "crux-report", "accumulation").stdout

    assert sorted(path.name for path in work.iterdir()) == ["mlartifacts", "mlflow.db", "multirun", "outputs",
                                                            "reports"]
    (report,) = work.glob("reports/accumulation/*/report.md")
    verdicts = {v["id"]: v["verdict"] for v in json.loads((report.parent / "verdicts.json").read_text())}
    assert verdicts["accumulation.effective_batch[b8_acc4]"] == "holds" and f"report: {report}" in printed
    assert len(list(work.glob("multirun/*/*/*/.hydra/config.yaml"))) == 4
    assert len(list(work.glob("outputs/*/*/.hydra/config.yaml"))) == 1
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(name).experiment_id for name in ("crux", "accumulation")])
    assert len(runs) == 1 + 1 + 4  # the crux-run job, the sweep's parent and its jobs
    for run in runs:
        assert run.info.artifact_uri.startswith((work / "mlartifacts").as_uri())
    (environment,) = {p.read_text() for p in work.glob("mlartifacts/crux/*/artifacts/environment.json")}
    recorded = json.loads(environment)
    assert recorded["git_commit"] is None  # no repository here
    assert (recorded["crux_wheel"], recorded["crux_wheel_sha256"], recorded["crux_commit"]) == (
        installed.wheel.name, hashlib.sha256(installed.wheel.read_bytes()).hexdigest(), None)
    assert any((installed.cache / "crux" / "jax").iterdir())
    assert files_under(installed.site_packages / "crux") == package


def test_a_problem_and_a_sweep_of_ones_own_run_to_verdicts_through_the_installed_commands(installed, tmp_path):
    """examples/own_problem copied into a git repository outside the checkout: a 2-D problem with its own
    residual and no exact solution, its config folder and a sweep file that names its checks."""
    project = tmp_path / "project"
    shutil.copytree(REPO / "examples" / "own_problem", project, ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-c", "user.name=crux", "-c", "user.email=crux@localhost"]
    for command in (["init", "-q"], ["add", "."], ["commit", "-q", "-m", "a problem of one's own"]):
        subprocess.run(git + command, cwd=project, check=True, timeout=60)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=project, capture_output=True, text=True,
                            check=True).stdout.strip()

    installed.run(project, "crux-sweep", "unit_square_accumulation.yaml", "--config-dir", "conf", "solver.epochs=30")
    printed = installed.run(project, "crux-report", "unit_square_accumulation").stdout

    (report,) = project.glob("reports/unit_square_accumulation/*/verdicts.json")
    verdicts = {v["id"]: v["verdict"] for v in json.loads(report.read_text())}
    assert verdicts == {"accumulation.effective_batch[b8_acc4]": "holds", "accumulation.memory[b8_acc4]": "holds",
                        "accumulation.noise[b8_acc4]": "holds"}
    assert "holds         accumulation.effective_batch[b8_acc4]" in printed
    client = MlflowClient(f"sqlite:///{project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("unit_square_accumulation")
    runs = client.search_runs([experiment.experiment_id], contract.tag_filter(contract.ROLE, contract.CHILD))
    assert sorted(run.data.params["variant"] for run in runs) == ["b32", "b8", "b8_acc4", "full"]
    for run in runs:
        assert run.data.params["problem._target_"] == "nonlinear_poisson.unit_square"
        assert {"loss/pde", "loss/edge", "run_seconds"} <= set(run.data.metrics)
        assert not [key for key in run.data.metrics if key.startswith("error/")]  # no exact solution
    environment = json.loads(next(project.glob("mlartifacts/*/*/artifacts/environment.json")).read_text())
    assert environment["git_commit"] == commit and environment["git_dirty"] is False


def reproduce_commands(report: Path) -> tuple[str, list[str]]:
    """The words and the shell commands of a report's Reproduce section."""
    section = report.read_text().split("## Reproduce")[1].split("## Environment")[0]
    return section.split("```sh")[0], section.split("```sh\n")[1].split("```")[0].splitlines()


def final_losses(folder: Path, experiment: str) -> dict[str, float]:
    client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id],
                              contract.tag_filter(contract.ROLE, contract.CHILD))
    return {run.data.params["variant"]: run.data.metrics["final_loss"] for run in runs}


def test_a_reports_reproduce_section_rebuilds_its_runs_from_an_empty_folder(installed, tmp_path):
    """A problem of one's own run from the installed wheel in a folder outside git; a stranger follows the
    report's Reproduce section: checks the wheel against the recorded sha256, has the problem's file of the
    recorded sha256, runs the command in an empty folder of their own, and gets the same runs."""
    project = tmp_path / "project"
    project.mkdir()
    problem = REPO / "examples" / "own_problem"
    shutil.copy(problem / "nonlinear_poisson.py", project)
    shutil.copytree(problem / "conf", project / "conf")
    (project / "tiny.yaml").write_text("claim: two settings\nhydra:\n  sweeper:\n    params:\n"
                                       "      memory: full,b8_acc4\n")
    installed.run(project, "crux-sweep", "tiny.yaml", "--config-dir", "conf", "problem=unit_square",
                  "problem.n_interior=64", "solver.epochs=10", "model.width=8")
    installed.run(project, "crux-report", "tiny")
    (report,) = project.glob("reports/tiny/*/report.md")
    said, commands = reproduce_commands(report)
    digest = hashlib.sha256((project / "nonlinear_poisson.py").read_bytes()).hexdigest()
    assert f"- the problem's module `nonlinear_poisson`, file `nonlinear_poisson.py` of sha256 `{digest}`" in said
    assert "- the folder was not in a git repository" in said and "/path/to" not in said
    cd, check, install, pins, command, report_command = commands
    assert (cd, install, report_command) == (f"cd {project}", f"pip install {installed.wheel}", "crux-report tiny")
    assert pins == "pip install " + " ".join(f"{p}=={version(p)}" for p in ("jax", "jaxlib", "optax"))
    assert subprocess.run(check, shell=True, cwd=installed.wheel.parent, capture_output=True).returncode == 0
    assert subprocess.run(check.replace(check[6:10], "0000"), shell=True, cwd=installed.wheel.parent,
                          capture_output=True).returncode != 0  # another wheel would not pass

    stranger = tmp_path / "stranger"  # the stranger's own folder: the problem's file, config and sweep copied
    stranger.mkdir()
    for name in ("nonlinear_poisson.py", "tiny.yaml"):
        shutil.copy(project / name, stranger)
    shutil.copytree(project / "conf", stranger / "conf")
    installed.run(stranger, *shlex.split(command))
    assert final_losses(stranger, "tiny") == final_losses(project, "tiny")  # the same runs, to the bit


def fresh_venv(folder: Path) -> Path:
    """A fresh virtual environment with pip, finding crux's dependencies in this test environment's site-packages
    (``.pth`` lines, as :func:`installed` writes) so that installing crux downloads nothing; its ``bin``."""
    subprocess.run([sys.executable, "-m", "venv", str(folder)], check=True, capture_output=True, timeout=300)
    purelib = subprocess.run([folder / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()"
                              "['purelib'])"], capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "test_environment.pth").write_text(dependencies_pth())
    return folder / "bin"


def in_a_fresh_shell(lines: list[str], venv_bin: Path, cache: Path, **settings: str) -> subprocess.CompletedProcess:
    """``lines`` run one after another by a fresh ``bash``, stopping at the first that fails, with ``venv_bin``
    first on PATH (the venv active), ``settings`` in its environment and nothing of this test's store."""
    env = {key: value for key, value in os.environ.items()
           if key not in ("MLFLOW_TRACKING_URI", "PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PATH=f"{venv_bin}{os.pathsep}{env['PATH']}", VIRTUAL_ENV=str(venv_bin.parent),
               XDG_CACHE_HOME=str(cache), **settings)
    return subprocess.run(["bash", "-e", "-c", "\n".join(lines)], env=env, capture_output=True, text=True,
                          timeout=1800, cwd="/")


def verdicts_of(folder: Path, name: str) -> list[dict[str, str]]:
    """The verdicts of each report of sweep ``name`` in ``folder``, oldest first."""
    return [{v["id"]: v["verdict"] for v in json.loads((report / "verdicts.json").read_text())}
            for report in sorted(folder.glob(f"reports/{name}/*"))]


def reproduced(crux: Installed, tmp_path: Path, **settings: str) -> tuple[str, list[str], subprocess.CompletedProcess]:
    """A tiny accumulation sweep and its report run with ``crux`` in a project folder, then the report's Reproduce
    section run as printed in a fresh shell and venv (``settings`` in its environment): the section's words, its
    commands, and how the run went, which is checked to end well and to give the first sweep's verdicts."""
    project = tmp_path / "project"
    project.mkdir()
    crux.run(project, "crux-sweep", "accumulation", *TINY)
    crux.run(project, "crux-report", "accumulation")
    (report,) = project.glob("reports/accumulation/*/report.md")
    said, commands = reproduce_commands(report)
    done = in_a_fresh_shell(commands, fresh_venv(tmp_path / "fresh"), crux.cache, **settings)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    first, again = verdicts_of(project, "accumulation")
    assert again == first and "holds" in again.values()
    return said, commands, done


def test_the_reproduce_section_of_a_wheels_runs_runs_as_printed_and_gives_the_same_verdicts(installed, tmp_path):
    """crux installed from a wheel kept in a sub-folder of its own: the report's Reproduce section names that
    wheel where pip took it (its path and sha256 from pip's record), and, run line by line in a fresh shell and
    venv, installs that very wheel and runs the sweep again to the same verdicts."""
    _, commands, done = reproduced(installed, tmp_path, PIP_NO_INDEX="1")
    assert f"pip install {installed.wheel}" in commands and installed.wheel.parent.name == "wheels"
    assert f"{installed.wheel}: OK" in done.stdout  # the sha256 check passed
    assert (tmp_path / "fresh" / "bin" / "crux-sweep").is_file()


def test_the_reproduce_section_of_a_checkouts_runs_runs_as_printed_and_gives_the_same_verdicts(tmp_path):
    """crux installed (editable) from a checkout: the Reproduce section clones that checkout at its commit, and,
    run line by line in a fresh shell and venv, installs it and runs the sweep again to the same verdicts. (pip
    builds crux in an environment of its own, fetching setuptools from the package index.)"""
    checkout = tmp_path / "crux"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(checkout)], check=True, timeout=300)
    commit = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    developer = fresh_venv(tmp_path / "developer")
    subprocess.run([developer / "pip", "install", "-q", "-e", str(checkout)], check=True, capture_output=True,
                   timeout=900)  # its build environment from the package index, as a developer's is
    said, commands, _ = reproduced(Installed(developer.parent, checkout, tmp_path / "cache"), tmp_path)
    assert f"from a checkout at commit `{commit}` (`{checkout}`)" in said
    assert f'git clone --quiet {checkout} "$src" && git -C "$src" checkout --quiet {commit}' in commands[1]


WAVE = '''"""u_tt = u_xx on (0, 1) x (0, 1), u(x, 0) = sin(pi x), u_t(x, 0) = 0, u = 0 at x = 0 and 1."""
import jax.numpy as jnp
import numpy as np

import crux
from crux.problems import Problem


def wave(n_interior, n_edge, hidden, activation, seed):
    rng = np.random.default_rng(seed)
    inside = rng.uniform(0, 1, (n_interior, 2))
    start = np.stack([rng.uniform(0, 1, n_edge), np.zeros(n_edge)], axis=1)
    walls = np.stack([rng.integers(0, 2, n_edge), rng.uniform(0, 1, n_edge)], axis=1)
    constraints = [
        crux.Constraint("pde", lambda net, x: crux.partial(net.u, 1, 1)(x) - crux.partial(net.u, 0, 0)(x), inside),
        crux.Constraint("initial", lambda net, x: net.u(x) - jnp.sin(jnp.pi * x[0]), start),
        crux.Constraint("velocity", lambda net, x: crux.partial(net.u, 1)(x), start),
        crux.Constraint("walls", lambda net, x: net.u(x), walls),
    ]
    grid = np.stack(np.meshgrid(np.linspace(0, 1, 16), np.linspace(0, 1, 16)), -1).reshape(-1, 2)
    return Problem("wave", constraints, {"u": crux.mlp(2, 1, hidden, activation, seed=seed)},
                   {"u": lambda models, xs: np.asarray(models["u"](xs))[:, 0]},
                   {"u": lambda xs: np.sin(np.pi * xs[:, 0]) * np.cos(np.pi * xs[:, 1])}, grid, seed=seed)
'''
AXES = '''import sys
import crux
figure = crux.Statistics.load(sys.argv[1]).figure()
print(" ".join(axis.get_yscale() for axis in figure.axes))
print("|".join(text.get_text().strip() for text in figure.axes[1].texts))
'''


@pytest.mark.slow
def test_a_new_user_installs_the_wheel_writes_a_problem_sweeps_it_reports_and_reads_the_figures(installed, tmp_path):
    """A new user's first hour, from crux's wheel in a fresh venv and an empty folder: a problem of their own (a 1-D
    wave equation with its exact solution), the documented Adam -> L-BFGS -> SOAP sweep on it (shortened), its
    report, and the figures read back: the report's, and each run's history figure as the installed crux draws it
    from the run's recorded statistics, whose learning rates span decades and whose phases are marked."""
    work = tmp_path / "empty"
    work.mkdir()
    (work / "wave.py").write_text(WAVE)
    (work / "conf" / "problem").mkdir(parents=True)
    (work / "conf" / "problem" / "wave.yaml").write_text("_target_: wave.wave\nn_interior: 128\nn_edge: 16\n")

    installed.run(work, "crux-sweep", "phases", "--config-dir", "conf", "problem=wave", "model.width=8",
                  "solver.epochs=40", "schedule.warmup=4", "phases.lbfgs.epochs=10", "phases.soap.epochs=10")
    printed = installed.run(work, "crux-report", "phases").stdout

    (verdicts,) = work.glob("reports/phases/*/verdicts.json")
    assert {v["id"]: v["verdict"] for v in json.loads(verdicts.read_text())} == {
        "phases.resume": "holds", "phases.every_phase_moves": "holds", "phases.fresh_optimizer": "holds"}
    report = (verdicts.parent / "report.md").read_text()
    drawn = sorted(path.name for path in verdicts.parent.glob("*.png"))
    assert drawn == ["phases_b32.png", "phases_full.png"] and all(f"({name})" in report for name in drawn)
    assert f"report: {verdicts.parent / 'report.md'}" in printed
    client = MlflowClient(f"sqlite:///{work / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("phases").experiment_id],
                              contract.tag_filter(contract.ROLE, contract.CHILD))
    assert len(runs) == 2
    for run in runs:
        assert run.data.params["problem._target_"] == "wave.wave" and "error/u" in run.data.metrics
        artifacts = Path(run.info.artifact_uri.removeprefix("file://"))
        assert (artifacts / contract.HISTORY_PLOT).read_bytes()[:4] == b"\x89PNG"
        read = subprocess.run([installed.venv / "bin" / "python", "-c", AXES, str(artifacts / contract.STATS)],
                              capture_output=True, text=True, cwd=work, check=True).stdout.splitlines()
        # Adam's warm-up and cosine from 1e-3, L-BFGS at 1.0, SOAP at 1e-5: the learning rates on a log axis
        assert read == ["log log log", "phase 1|phase 2|phase 3"]
