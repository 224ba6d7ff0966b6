"""Services and sweeps for the tests of sweeps beyond one process.

Each service is started by the project's own script (scripts/postgres.sh,
mlflow_server.sh, ray_head.sh, slurm.sh) in a temporary folder and stopped at the
end of the session; the tests that need one are skipped, with the script's own
words, where it cannot start here (not root, no package manager, no extra
installed). Sweeps go through cruxlab.measure.load_test, whose count checks every run,
parent link, status, metric point and artifact. conftest.py imports the fixtures
for every session, so MLflow and the load test are imported only when a test runs.
"""
from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest
from cruxlab.store import contract

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"
RAY_VENV = ROOT / ".venv-ray"
"""Where the tests make an environment with crux's [ray] extra when the running one lacks it: the Ray launcher
caps cloudpickle below 3 and jNO needs 3 or later, so ``.[ray]`` and ``.[jno]`` cannot share one."""
# The accumulation sweep, small: one job per memory setting, 20 epochs (as in test_report_mlflow).
SMALL = dict(repeats=1, epochs=20, memory=("b8", "b32", "b8_acc4"), extra=("model.width=8", "problem.n_interior=64"),
             timed=False)


def start(script: str, folder: Path, *args: str, cwd: Path | None = None, timeout: float = 600,
          python: str = sys.executable) -> str:
    """``bash scripts/<script> start <folder> <args>``'s output, run with ``PYTHON=python``; the calling test is
    skipped when it fails."""
    if os.geteuid() != 0 and script in ("postgres.sh", "slurm.sh"):
        pytest.skip(f"scripts/{script} needs root (it installs packages and starts daemons as their users)")
    done = subprocess.run(["bash", str(SCRIPTS / script), "start", str(folder), *args], cwd=cwd, timeout=timeout,
                          capture_output=True, text=True, env={**os.environ, "PYTHON": python})
    if done.returncode != 0:
        pytest.skip(f"scripts/{script} could not start here: {done.stderr.strip()[-2000:]}")
    return done.stdout.strip()


def stop(script: str, folder: Path) -> None:
    subprocess.run(["bash", str(SCRIPTS / script), "stop", str(folder)], timeout=180, check=True)


@contextlib.contextmanager
def service(script: str, *args: str, cwd: Path | None = None,
            python: str = sys.executable) -> Iterator[tuple[Path, str]]:
    """A service started by ``scripts/<script>`` in a new folder, and that script's output; stopped and removed
    afterwards. The folder is made in the system's temporary folder rather than pytest's, which is closed to
    other users: PostgreSQL and munge run as users of their own."""
    folder = Path(tempfile.mkdtemp(prefix=f"crux-test-{script.removesuffix('.sh')}-"))
    try:
        output = start(script, folder, *args, cwd=cwd, python=python)
        try:
            yield folder, output
        finally:
            stop(script, folder)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def exported(line: str) -> dict[str, str]:
    """``export A=1 B=2`` -> ``{"A": "1", "B": "2"}``."""
    words = shlex.split(line)
    assert words[0] == "export", line
    return dict(word.split("=", 1) for word in words[1:])


@dataclass(frozen=True)
class Postgres:
    """A PostgreSQL server of scripts/postgres.sh; ``database(name)`` adds one and returns its URI."""

    folder: Path
    uri: str

    def database(self, name: str, template: str | None = None) -> str:
        """A new database ``name``, a copy of database ``template`` if given; its URI."""
        done = subprocess.run(["bash", str(SCRIPTS / "postgres.sh"), "database", str(self.folder), name,
                               *([template] if template else [])], capture_output=True, text=True, timeout=60)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    pytest.importorskip("psycopg", reason='MLflow needs a PostgreSQL driver: pip install -e ".[postgres]"')
    with service("postgres.sh") as (folder, uri):
        yield Postgres(folder, uri)


@pytest.fixture(scope="session")
def empty_postgres_store(postgres) -> str:
    """The name of a database holding MLflow's empty tables, to copy: creating them costs seconds (25 s on a
    busy 2-core machine). Made in another process, so that no connection to it stays open (PostgreSQL copies
    only a database nobody uses)."""
    uri = postgres.database("empty_store")
    subprocess.run([sys.executable, "-c", f"from mlflow.tracking import MlflowClient; "
                    f"MlflowClient({uri!r}).search_experiments()"], check=True, capture_output=True, timeout=600)
    return "empty_store"


@pytest.fixture
def postgres_store(postgres, empty_postgres_store) -> str:
    """The ``postgresql://`` URI of a new store of MLflow's (a database of its own) on ``postgres``."""
    return postgres.database(f"store_{uuid.uuid4().hex[:12]}", template=empty_postgres_store)


@pytest.fixture(scope="session")
def team_server(postgres, empty_postgres_store) -> Iterator[str]:
    """The URL of an MLflow server on 127.0.0.1 whose runs live in a database of its own on ``postgres``."""
    with service("mlflow_server.sh", postgres.database("team", template=empty_postgres_store), "2") as (_, url):
        yield url


@pytest.fixture(scope="session")
def ray_python() -> str:
    """A Python with this checkout's crux and its [ray] extra: the running one where it has them, else that of
    :data:`RAY_VENV`, made (minutes) where it is missing or holds another checkout's crux."""
    if importlib.util.find_spec("hydra_plugins.hydra_ray_launcher"):
        return sys.executable
    python = RAY_VENV / "bin" / "python"
    ready = (f"import sys, hydra_plugins.hydra_ray_launcher, crux; "
             f"sys.exit(not crux.__file__.startswith({str(ROOT)!r}))")
    if python.exists() and subprocess.run([str(python), "-c", ready], capture_output=True).returncode == 0:
        return str(python)
    for step in ([sys.executable, "-m", "venv", "--clear", str(RAY_VENV)],
                 [str(python), "-m", "pip", "install", "--quiet", "-e", f"{ROOT}[ray]"]):
        done = subprocess.run(step, capture_output=True, text=True, timeout=1800)
        if done.returncode != 0:
            pytest.skip(f"an environment with crux[ray] could not be made in {RAY_VENV}: {done.stderr[-2000:]}")
    return str(python)


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory, ray_python) -> Iterator[dict[str, str]]:
    """The environment that points Ray at a one-node cluster on 127.0.0.1, started from a folder of its own: its
    jobs run there, not where the sweep was typed."""
    with service("ray_head.sh", cwd=tmp_path_factory.mktemp("ray-cwd"), python=ray_python) as (_, exports):
        yield exported(exports)


@pytest.fixture(scope="session")
def slurm() -> Iterator[dict[str, str]]:
    """The environment that points Slurm's commands (and submitit) at a one-node cluster on this machine."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason='pip install -e ".[slurm]"')
    with service("slurm.sh") as (_, exports):
        yield exported(exports)


@dataclass(frozen=True)
class Judged:
    """A small accumulation sweep read back: its verdicts (without run ids) and, per job, the bytes of its
    final parameters and of its loss history."""

    verdicts: list[dict]
    results: dict[str, bytes]


def sweep_and_report(folder: Path, uri: str, launcher: str, env: dict[str, str] | None = None,
                     python: str = sys.executable) -> Judged:
    """Run the small accumulation sweep on ``launcher`` (from ``python``'s environment) into ``uri``, check that the store holds all of it
    (load_test.count), and judge it with ``crux-report`` run as a user would (``MLFLOW_TRACKING_URI=uri``)."""
    from mlflow.tracking import MlflowClient

    from cruxlab.measure import load_test

    spec = load_test.SweepSpec(launcher=launcher, python=python, **SMALL)
    experiment = f"accumulation-{launcher}"
    outcome = load_test.run_at_once([spec], uri, experiment, folder, timeout=900, env=env)
    assert outcome.returncodes == [0], outcome.logs[0][-3000:]
    counts = load_test.count([spec], uri, experiment, outcome.folders)
    assert not counts.problems, counts.problems
    out = folder / "report"
    done = subprocess.run([sys.executable, "-m", "cruxlab.report", experiment, "--claim", "accumulation", "--out",
                           str(out)], env={**os.environ, **(env or {}), "MLFLOW_TRACKING_URI": uri},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    verdicts = json.loads((out / "verdicts.json").read_text())
    client = MlflowClient(uri)
    results = {}
    for run in client.search_runs([client.get_experiment_by_name(experiment).experiment_id],
                                  contract.tag_filter(contract.ROLE, contract.CHILD)):
        path = client.download_artifacts(run.info.run_id, contract.PARAMS, str(folder / run.info.run_id))
        with np.load(path) as params:
            final = b"".join(params[key].tobytes() for key in sorted(params.files) if key.startswith("final/"))
        history = [m.value for m in sorted(client.get_metric_history(run.info.run_id, "loss/total"),
                                           key=lambda m: m.step)]
        results[run.data.tags[contract.VARIANT]] = final + np.array(history).tobytes()
    return Judged([{k: v for k, v in verdict.items() if k != "runs"} for verdict in verdicts], results)


def assert_same_as_reference(judged: Judged, reference: Judged) -> None:
    """The same verdicts (all holding) and, job by job, the same bits."""
    assert judged.verdicts == reference.verdicts
    assert {verdict["verdict"] for verdict in judged.verdicts} == {"holds"}
    assert judged.results.keys() == reference.results.keys() == {"b8", "b32", "b8_acc4"}
    for variant, result in judged.results.items():
        assert result == reference.results[variant], f"{variant}: other numbers than the reference's"


@pytest.fixture(scope="session")
def reference(tmp_path_factory) -> Judged:
    """The small sweep on the default launcher (every job in one process) into a SQLite store."""
    folder = tmp_path_factory.mktemp("reference")
    return sweep_and_report(folder, f"sqlite:///{folder / 'mlflow.db'}", "basic")
