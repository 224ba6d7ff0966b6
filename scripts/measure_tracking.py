"""What MLflow tracking adds to real jobs: crux-run in this process, every tracking step timed.

    python scripts/measure_tracking.py [--jobs N] [--uri URI] [overrides...]   # 3 jobs, solver.epochs=5000

Runs ``crux.commands.experiment.main`` (the default poisson1d job) ``N`` times, one after
another as a sweep's jobs run, against a SQLite store made beforehand in another
process (as an existing mlflow.db is), and prints the seconds of each tracking
step of the first job beside its wall time, then each job's share. The tracking
total over the rest of a job is what tracking adds beyond process start (the
imports at start are printed apart). Two steps import a module on first use, once
a process: MlflowClient on a SQL URI loads MLflow's SQL store, the first plot
loads matplotlib; those imports are timed on lines of their own, and the first
job's percentage is printed with and without them.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from typing import Any

start = time.perf_counter()
import numpy as np  # noqa: E402
from mlflow.tracking import MlflowClient  # noqa: E402

import crux.commands.experiment  # noqa: E402
from crux.problems import Problem  # noqa: E402
from crux.stats import Statistics  # noqa: E402
from crux.tracking import job  # noqa: E402

IMPORT_SECONDS = time.perf_counter() - start

SECONDS: dict[str, float] = defaultdict(float)
PLOT = "  Statistics.plot (history.png)"
PARTS_HISTORY = "  log_history (histories)"
TRAINING = "training"

STEPS = {  # what crux.commands.experiment.main calls; their sum is the tracking cost
    "JobRun.start": (job.JobRun, "start"),
    "JobRun.log_config": (job.JobRun, "log_config"),
    "JobRun.log_results": (job.JobRun, "log_results"),
    "JobRun.__exit__ (set_terminated)": (job.JobRun, "__exit__"),
    "parameter_leaves (initial, phase ends)": (crux.commands.experiment, "parameter_leaves"),
}
PARTS = {  # inside those steps
    "  ensure_experiment": (job, "ensure_experiment"),
    "  create_run": (MlflowClient, "create_run"),
    "  log_batch (params; summary)": (MlflowClient, "log_batch"),
    "  environment()": (job, "environment"),
    "  relative_l2 (error/<field>)": (Problem, "relative_l2"),
    PARTS_HISTORY: (job, "log_history"),
    PLOT: (Statistics, "plot"),
    "  Statistics.save (stats.npz)": (Statistics, "save"),
    "  np.savez (params.npz)": (np, "savez"),
    "  log_artifact": (MlflowClient, "log_artifact"),
    "  set_terminated": (MlflowClient, "set_terminated"),
}
FIRST_IMPORTS = {  # a step's label -> the module it imports on first use
    "JobRun.start": "mlflow.store.tracking.sqlalchemy_store",
    PLOT: "matplotlib.figure",
}


def importing(label: str) -> str:
    """The label of a step's first-use import."""
    return f"    of which importing {FIRST_IMPORTS[label]}"


def timed(owner: Any, name: str, label: str) -> None:
    """Replace ``owner.name`` by a wrapper adding its seconds to ``SECONDS[label]``; the step's first-use import
    (``FIRST_IMPORTS``) is done first and timed apart too."""
    original = inspect.getattr_static(owner, name)
    wrapped = original.__func__ if isinstance(original, classmethod) else original

    @functools.wraps(wrapped)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        begin = time.perf_counter()
        try:
            module = FIRST_IMPORTS.get(label)
            if module is not None and module not in sys.modules:
                importlib.import_module(module)
                SECONDS[importing(label)] += time.perf_counter() - begin
            return wrapped(*args, **kwargs)
        finally:
            SECONDS[label] += time.perf_counter() - begin
    setattr(owner, name, classmethod(wrapper) if isinstance(original, classmethod) else wrapper)


def run_jobs(count: int, overrides: list[str], uri: str | None) -> list[tuple[float, dict[str, float]]]:
    """Each job's wall time and the seconds of its steps, logged into ``uri`` (a new SQLite store if None)."""
    for label, (owner, name) in {**STEPS, **PARTS, TRAINING: (crux.commands.experiment, "train")}.items():
        timed(owner, name, label)
    jobs = []
    with tempfile.TemporaryDirectory() as folder:
        if uri is None:
            uri = f"sqlite:///{folder}/mlflow.db"
            subprocess.run([sys.executable, "-c", f"from mlflow.tracking import MlflowClient; "
                            f"MlflowClient({uri!r}).search_experiments()"], check=True, capture_output=True)
        os.environ["MLFLOW_TRACKING_URI"] = uri
        for number in range(count):
            SECONDS.clear()
            sys.argv = ["crux-run", *overrides, f"hydra.run.dir={folder}/outputs/{number}"]
            begin = time.perf_counter()
            crux.commands.experiment.main()
            jobs.append((time.perf_counter() - begin, dict(SECONDS)))
    return jobs


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3, help="jobs one after another in this process (3)")
    parser.add_argument("--uri", help="the store to log into, e.g. a tracking server's http://127.0.0.1:PORT "
                                      "(default: a new SQLite file)")
    parser.add_argument("overrides", nargs="*", default=["solver.epochs=5000"])
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: at least one job")
    jobs = run_jobs(args.jobs, args.overrides, args.uri)

    job_seconds, seconds = jobs[0]
    tracking = sum(seconds.get(label, 0.0) for label in STEPS)
    loading = sum(seconds.get(importing(label), 0.0) for label in FIRST_IMPORTS)
    rest = job_seconds - tracking
    lines = {"imports (process start, not counted)": f"{IMPORT_SECONDS:.2f} s",
             "job 0 (crux.commands.experiment.main)": f"{job_seconds:.2f} s, of which training {seconds[TRAINING]:.2f} s"}
    for label in [*STEPS, *PARTS]:
        for name in (label, importing(label) if label in FIRST_IMPORTS else None):
            if name in seconds:
                lines[name] = f"{seconds[name]:.3f} s"
    width = max(map(len, lines)) + 2
    for name, value in lines.items():
        print(f"{name:<{width}}{value}")
    print(f"job 0 tracking: {tracking:.2f} s = {100 * tracking / rest:.1f}% on top of the job's {rest:.2f} s "
          f"without it; without the first-use imports ({loading:.2f} s): {tracking - loading:.2f} s = "
          f"{100 * (tracking - loading) / rest:.1f}%")
    for number, (job_seconds, seconds) in enumerate(jobs[1:], 1):
        tracking = sum(seconds.get(label, 0.0) for label in STEPS)
        rest = job_seconds - tracking
        print(f"job {number} tracking: {tracking:.2f} s = {100 * tracking / rest:.1f}% on top of the job's "
              f"{rest:.2f} s without it (histories {seconds[PARTS_HISTORY]:.2f} s, "
              f"history.png {seconds[PLOT]:.2f} s)")


if __name__ == "__main__":
    main(sys.argv[1:])
