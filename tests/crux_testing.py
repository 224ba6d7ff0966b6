"""Small problems and comparisons shared by the tests."""
from __future__ import annotations

import functools
import gzip
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax

import crux
from crux.solver import Machinery

EPS32 = float(np.finfo(np.float32).eps)  # 1.19e-7: float32 round-off unit
REPO = Path(__file__).resolve().parent.parent
PACKAGE_SOURCES = ("pyproject.toml", "README.md", "crux", "cruxlab", "conf", "sweeps", "hydra_plugins")
"""What crux's wheel is built from."""


def dependencies_pth() -> str:
    """A ``.pth`` file's text that gives another environment this one's packages: every site-packages folder on this
    interpreter's path, its environment's own and those a ``.pth`` file there added (a venv sharing another venv's
    packages that way). A ``.pth`` line only puts its folder on ``sys.path``: the ``.pth`` files there are not run."""
    return "".join(f"{folder}\n" for folder in sys.path if Path(folder).name in ("site-packages", "dist-packages"))


def copy_of_checkout(destination: Path, *extra: str) -> Path:
    """:data:`PACKAGE_SOURCES` and the ``extra`` paths of the checkout copied into ``destination`` (made): a wheel
    built there leaves no build/ or egg-info, and a script writes no .wheels/, in the checkout."""
    destination.mkdir(parents=True, exist_ok=True)
    for name in PACKAGE_SOURCES + extra:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, destination / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO / name, destination / name)
    return destination


def flat(params) -> np.ndarray:
    """All parameter leaves as one float64 vector."""
    return np.concatenate([np.ravel(np.asarray(leaf, np.float64)) for leaf in jax.tree.leaves(params)])


def poisson(optimizer=optax.sgd, lr: float | crux.Schedule = 1e-3, n: int = 256, hidden=(16, 16), seed: int = 0,
            **kwargs) -> crux.problems.Problem:
    """The seed Poisson problem, small: 256 interior points, 2 boundary points."""
    problem = crux.problems.poisson1d(n_interior=n, hidden=hidden, seed=seed, **kwargs)
    problem.models["u"].optimizer(optimizer).scale(lr if isinstance(lr, crux.Schedule) else crux.lrs(lr))
    return problem


def with_probes(problem: crux.problems.Problem, *sizes: int) -> crux.problems.Problem:
    """``problem`` (with a model ``u`` of one input) plus, per size, a constraint pinning ``u`` to sin(pi x) on
    that many points of [0.05, 0.95]: small constraints of any size beside the interior. The last one's residual
    is a vector of two components, so that the mean over components is exercised too."""
    import jax.numpy as jnp

    for i, n in enumerate(sizes):
        points = np.linspace(0.05, 0.95, n, dtype=np.float32)[:, None] + np.float32(1e-3 * i)
        misfit = lambda net, x: net.u(x) - jnp.sin(jnp.pi * x[0])
        residual = (lambda net, x: jnp.stack([misfit(net, x), 0.5 * misfit(net, x)])) if i == len(sizes) - 1 \
            else misfit
        problem.constraints.append(crux.Constraint(f"probe{n}", residual, points))
    return problem


def mixed(optimizer=optax.adamw, lr: float = 1e-3, n: int = 64, hidden=(8, 8)) -> crux.problems.Problem:
    """The two-network problem, small: constraint 0 reaches only q, 1 reaches u and q, 2 reaches only u.
    Every model trains with ``optimizer`` at ``lr``."""
    problem = crux.problems.mixed_poisson1d(n_interior=n, hidden=hidden)
    for model in problem.models.values():
        model.optimizer(optimizer).scale(crux.lrs(lr))
    return problem


def train(problem: crux.problems.Problem, epochs: int, machinery: Machinery = Machinery(),
          **options) -> tuple[np.ndarray, np.ndarray, crux.Statistics]:
    """Solve with ``machinery`` and return (initial parameters, final parameters, statistics)."""
    solver = problem.solver()
    solver.machinery = machinery
    initial = flat(solver.params)
    stats = solver.solve(epochs, **options)
    return initial, flat(solver.params), stats


def only(verdicts, prefix: str):
    """The one verdict whose id starts with ``prefix``."""
    found = [v for v in verdicts if v.id.startswith(prefix)]
    assert len(found) == 1, [v.id for v in verdicts]
    return found[0]


def relative(a: np.ndarray, b: np.ndarray, scale: float) -> float:
    return float(np.linalg.norm(a - b) / scale)


class CompileStages:
    """Counts JAX's compile stages while active: tracing to a jaxpr, lowering to StableHLO, XLA compiling.

        with CompileStages() as stages: ...
        stages.traced, stages.lowered, stages.compiled
    """

    EVENTS = {"/jax/core/compile/jaxpr_trace_duration": "traced",
              "/jax/core/compile/jaxpr_to_mlir_module_duration": "lowered",
              "/jax/core/compile/backend_compile_duration": "compiled"}

    def __init__(self):
        self.traced = self.lowered = self.compiled = 0

    def _listen(self, event: str, seconds: float, **_) -> None:
        if event in self.EVENTS:
            setattr(self, self.EVENTS[event], getattr(self, self.EVENTS[event]) + 1)

    def __enter__(self) -> "CompileStages":
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        return self

    def __exit__(self, *_) -> None:
        jax.monitoring.unregister_event_duration_listener(self._listen)


def mlflow_run(run_id: str, status: str, tags: dict[str, str] | None = None, start_time: int = 0):
    """An MLflow run entity as a search returns it."""
    from mlflow.entities import Run, RunData, RunInfo, RunTag  # only the tests of the report need MLflow

    info = RunInfo(run_id, "1", "user", status, start_time, None, "active")
    return Run(info, RunData(tags=[RunTag(key, value) for key, value in (tags or {}).items()]))


# -- the pipeline's commands, for the tests that run them -----------------------------------------------------
def launch(tmp_path: Path, module: str, *args: str) -> subprocess.CompletedProcess:
    """Run ``python -m module args`` logging into ``tmp_path/mlflow.db``, Hydra's folders in ``tmp_path``."""
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    return subprocess.run([sys.executable, "-m", module, *args, f"hydra.sweep.dir={tmp_path / 'multirun'}",
                           f"hydra.run.dir={tmp_path / 'outputs'}"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def runs_by_role(tmp_path: Path, experiment: str) -> tuple[Any, dict[str, list]]:
    """The MLflow client of ``tmp_path/mlflow.db`` and the runs of ``experiment`` by their role tag."""
    from mlflow.tracking import MlflowClient  # MLflow only for the tests that read a store

    from cruxlab.store import contract

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"experiment {experiment!r} was not created"
    roles: dict[str, list] = {}
    for run in client.search_runs([found.experiment_id]):
        roles.setdefault(run.data.tags[contract.ROLE], []).append(run)
    return client, roles


def run_opened(uri: str, experiment: str, job: str) -> bool:
    """Whether the store at ``uri`` holds a run of ``job`` in ``experiment``: a sweep's writer creates it behind
    the previous job's writes, while the job trains."""
    from mlflow.tracking import MlflowClient

    from cruxlab.store import contract

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    return found is not None and bool(client.search_runs([found.experiment_id], contract.tag_filter(contract.JOB, job)))


def until_run_opened(process, seen: list[str], uri: str, experiment: str, job: str) -> None:
    """Wait, while the sweep ``process`` (its output read into ``seen``) runs, until the store at ``uri`` holds the
    run of ``job`` in ``experiment`` (:func:`run_opened`); a sweep that ends first fails the test with its output."""
    import time

    while not run_opened(uri, experiment, job):
        assert process.poll() is None, "".join(seen)[-4000:]
        time.sleep(0.05)


def selected(name: str) -> list[str]:
    """The overrides that select built-in sweep ``name`` once it is registered, as crux-sweep does."""
    from cruxlab.commands.sweep import available, register  # Hydra only for the tests that compose configs

    register(available()[name], f"crux-sweep {name}")
    return [f"+sweeps={name}"]


@functools.cache
def planned_job_configs() -> tuple[tuple[str, tuple[str, ...], Any], ...]:
    """Each job that each built-in sweep plans, composed as that job composes it: ``(sweep, the job's overrides,
    its config)``, the first repeat only (a repeat changes nothing else). Composed once a session (some 55
    compositions) for the tests that check every job; Hydra initialised on crux's configs (``hydra_configs``)."""
    from hydra import compose  # Hydra only for the tests that compose configs

    from cruxlab.commands.sweep import available
    from cruxlab.runtime.sweep_parent import planned_jobs

    composed = []
    for name in available():
        sweep = compose("config", overrides=selected(name), return_hydra_config=True)
        for job in planned_jobs(sweep):
            if not any(o.startswith("repeat=") and o != "repeat=0" for o in job):
                composed.append((name, tuple(job), compose("config", overrides=job)))
    return tuple(composed)


def pack(made: Path, into: Path, archive: str = "mlartifacts.tgz", store: str = "mlflow.db.gz") -> Path:
    """The SQLite store made in folder ``made`` packed as scripts/device_check.sh returns one (or, with
    ``store="mlflow.db.xz"`` and ``archive="mlartifacts.tar.xz"``, as docs/ keeps one): its mlflow.db compressed
    into ``into``, its mlartifacts/ archived beside it (as ``./mlartifacts/...`` in a ``reports.tgz``); the packed
    file."""
    into.mkdir(parents=True, exist_ok=True)
    opener = lzma.open if store.endswith(".xz") else gzip.open
    with open(made / "mlflow.db", "rb") as source, opener(into / store, "wb") as target:
        shutil.copyfileobj(source, target)
    with tarfile.open(into / archive, "w:xz" if archive.endswith(".xz") else "w:gz") as tar:
        tar.add(made / "mlartifacts", arcname="./mlartifacts" if archive == "reports.tgz" else "mlartifacts")
    return into / store
