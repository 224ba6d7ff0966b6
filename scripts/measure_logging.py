"""What logging a 5000-epoch history to MLflow costs, into a fresh SQLite store, both ways.

    python scripts/measure_logging.py [epochs]

Prints the seconds for the history alone (``loss/total``, ``loss/pde``, ``loss/bc``,
``lr/u`` at every epoch) through ``MlflowClient.log_batch`` and through the direct
SQL path crux-run uses (crux.tracking.history), and for everything a job logs after
training (history, summary metrics, history.png, stats.npz, params.npz).
"""
from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from mlflow.tracking import MlflowClient

from crux import problems
from crux.stats import Statistics
from crux.tracking.history import history_metrics, log_history
from crux.tracking.job import JobRun, history_series, parameter_leaves


def synthetic_history(epochs: int) -> Statistics:
    rng = np.random.default_rng(0)
    losses = np.exp(-np.linspace(0, 10, epochs))[:, None] * rng.uniform(0.5, 1.5, (epochs, 2))
    return Statistics(names=["pde", "bc"], losses=losses.astype(np.float32), epoch=np.arange(epochs),
                      lr={"u": np.full(epochs, 1e-3, np.float32)}, compile_seconds=1.0, run_seconds=5.0,
                      step_seconds=np.full(10, 1e-3), memory={"temp_bytes": 1, "argument_bytes": 1,
                                                              "output_bytes": 1})


def main(epochs: int) -> None:
    stats = synthetic_history(epochs)
    problem = problems.poisson1d(hidden=(8,))
    initial = parameter_leaves(problem.models)
    with tempfile.TemporaryDirectory() as folder:
        client = MlflowClient(f"sqlite:///{folder}/mlflow.db")
        experiment = client.create_experiment("measure", artifact_location=Path(folder, "artifacts").as_uri())

        now, series = int(time.time() * 1000), history_series(stats)
        metrics = history_metrics(stats.epoch, series, now)
        seconds, logged = {}, {}
        for way, log in (("log_batch", lambda run_id: client.log_batch(run_id, metrics=metrics)),
                         ("direct SQL", lambda run_id: log_history(client, run_id, stats.epoch, series, now))):
            run_id = client.create_run(experiment).info.run_id
            start = time.perf_counter()
            log(run_id)
            seconds[way] = time.perf_counter() - start
            logged[way] = len(client.get_metric_history(run_id, "loss/total"))

        job = JobRun(client, client.create_run(experiment).info.run_id, Path(folder, "job"))
        start = time.perf_counter()
        job.log_results(problem, stats, initial)
        results_seconds = time.perf_counter() - start
    print(f"{epochs} epochs x {len(metrics) // epochs} series = {len(metrics)} values")
    for way in seconds:
        print(f"history via {way + ':':<22}{seconds[way]:.2f} s  ({logged[way]} read back for loss/total)")
    print(f"everything after training (job):  {results_seconds:.2f} s  (history, summary, plot, npz artifacts)")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 5000)
