"""What logging a 5000-epoch history to MLflow costs, both ways, into a fresh SQLite store or a given one.

    python scripts/measure_logging.py [epochs] [--repeats N] [--tracking-uri URI]
    python scripts/measure_logging.py --tracking-uri "$(cat PGDIR/uri)"     # PostgreSQL (scripts/postgres.sh)

Prints the seconds for the history alone (``loss/total``, ``loss/pde``, ``loss/bc``,
``lr/u`` at every epoch) through ``MlflowClient.log_batch`` and through the path
crux-run takes (cruxlab.store.history: the direct SQL insert on a SQL store,
``log_batch`` on any other), each repeat logging once each way into new runs, in
turn; then the seconds of everything a job logs after training (history, summary
metrics, history.png, stats.npz, params.npz).
"""
from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
from mlflow.tracking import MlflowClient

from crux import problems
from crux.stats import Statistics
from cruxlab.runtime.job import JobRun, parameter_leaves
from cruxlab.store.history import _sql_target, history_metrics, log_history
from cruxlab.store.history import history_series


def synthetic_history(epochs: int) -> Statistics:
    rng = np.random.default_rng(0)
    losses = np.exp(-np.linspace(0, 10, epochs))[:, None] * rng.uniform(0.5, 1.5, (epochs, 2))
    return Statistics(names=["pde", "bc"], losses=losses.astype(np.float32), epoch=np.arange(epochs),
                      lr={"u": np.full(epochs, 1e-3, np.float32)}, compile_seconds=1.0, run_seconds=5.0,
                      step_seconds=np.full(10, 1e-3), memory={"temp_bytes": 1, "argument_bytes": 1,
                                                              "output_bytes": 1})


def main(epochs: int, repeats: int, uri: str | None) -> None:
    stats = synthetic_history(epochs)
    problem = problems.poisson1d(hidden=(8,))
    initial = parameter_leaves(problem.models)
    with tempfile.TemporaryDirectory() as folder:
        client = MlflowClient(uri or f"sqlite:///{folder}/mlflow.db")
        experiment = client.create_experiment(f"measure-logging-{time.time_ns()}",
                                               artifact_location=Path(folder, "artifacts").as_uri())
        crux_way = "direct SQL" if _sql_target(client) is not None else "log_batch (crux's fallback)"
        now, series = int(time.time() * 1000), history_series(stats)
        metrics = history_metrics(stats.epoch, series, now)
        seconds: dict[str, list[float]] = {"log_batch": [], crux_way: []}
        logged = {}
        for _ in range(repeats):
            for way, log in (("log_batch", lambda run_id: client.log_batch(run_id, metrics=metrics)),
                             (crux_way, lambda run_id: log_history(client, run_id, stats.epoch, series, now))):
                run_id = client.create_run(experiment).info.run_id
                start = time.perf_counter()
                log(run_id)
                seconds[way].append(time.perf_counter() - start)
                logged[way] = len(client.get_metric_history(run_id, "loss/total"))

        job = JobRun(client, client.create_run(experiment).info.run_id, "job", 0)
        start = time.perf_counter()
        job.log_results(problem, stats, initial)
        results_seconds = time.perf_counter() - start
    print(f"{epochs} epochs x {len(metrics) // epochs} series = {len(metrics)} values, {repeats} repeats, "
          f"store {type(client._tracking_client.store).__name__}")
    for way, values in seconds.items():
        print(f"history via {way + ':':<30}median {statistics.median(values):.2f} s, "
              f"{min(values):.2f}-{max(values):.2f} s  ({logged[way]} read back for loss/total)")
    ratios = [a / b for a, b in zip(seconds["log_batch"], seconds[crux_way])]
    print(f"log_batch / crux's way, per repeat: {', '.join(f'{r:.1f}' for r in ratios)}")
    print(f"everything after training (job): {results_seconds:.2f} s  (history, summary, plot, npz artifacts)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("epochs", nargs="?", type=int, default=5000)
    parser.add_argument("--repeats", type=int, default=3, help="histories logged each way, in turn (3)")
    parser.add_argument("--tracking-uri", help="an existing store (default: a fresh SQLite file)")
    args = parser.parse_args()
    if args.epochs < 1 or args.repeats < 1:
        parser.error("epochs and --repeats must be at least 1")
    main(args.epochs, args.repeats, args.tracking_uri)
