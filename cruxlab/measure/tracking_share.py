"""What MLflow tracking adds to real jobs: a sweep of crux-run jobs in this process, every tracking part timed.

    python scripts/measure_tracking.py [--jobs N] [--uri URI] [overrides...]   # 3 jobs, solver.epochs=5000

Runs ``crux-run --multirun`` over ``repeat=0..N-1`` (the default poisson1d job
unless the overrides say otherwise) in this process, as crux-sweep runs a sweep's
jobs with Hydra's basic launcher, into ``URI`` (default: a new SQLite file made
beforehand in another process, as an existing mlflow.db is; a tracking server's
``http://127.0.0.1:PORT``; a ``postgresql://`` store). For each job it prints
the tracking share as the store sees it, (run duration - training - compile) /
run duration, from the run's start and end and its ``run_seconds`` and
``compile_seconds`` (with a sweep's ``gradient_draws``, the draws' own
``gradient_noise/run_seconds`` and ``gradient_noise/compile_seconds`` count as
training and compilation: solver work, not tracking), then the seconds of each tracking part: those on the job's
own path, and those of the process's background writer, which overlap the next
job's training (:mod:`cruxlab.runtime.writer`). The first job's parts include the
first use of MLflow's SQL store and of matplotlib, each import timed apart. The
last line gives the sweep's wall time against its jobs' training and compilation.

:class:`cruxlab.measure.tracking_timer.JobTimer` times the parts in the job's process.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from mlflow.tracking import MlflowClient

from cruxlab.measure.tracking_timer import TIMING_FILE, writer_seconds
from cruxlab.store.contract import CHILD, JOB, ROLE, tag_filter


def run_sweep(count: int, overrides: list[str], uri: str | None, folder: Path) -> tuple[str, float]:
    """Run the sweep of ``count`` jobs into ``uri`` (a new SQLite store in ``folder`` if None); the URI and the
    sweep's wall time."""
    import cruxlab.commands.experiment

    if uri is None:
        uri = f"sqlite:///{folder}/mlflow.db"
        subprocess.run([sys.executable, "-c", f"from mlflow.tracking import MlflowClient; "
                        f"MlflowClient({uri!r}).search_experiments()"], check=True, capture_output=True)
    os.environ["MLFLOW_TRACKING_URI"] = uri
    sys.argv = ["crux-run", "--multirun", f"repeat={','.join(map(str, range(count)))}", *overrides,
                f"tracking.experiment=measure-{int(time.time())}", f"hydra.sweep.dir={folder}/multirun",
                "+hydra.callbacks.timer._target_=cruxlab.measure.tracking_timer.JobTimer"]
    begin = time.perf_counter()
    cruxlab.commands.experiment.main()
    return uri, time.perf_counter() - begin


def store_shares(uri: str, experiment: str) -> list[dict[str, Any]]:
    """Per child run, in job order: its duration, training and compile seconds (the gradient draws' included)
    and tracking share."""
    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    runs = client.search_runs([found.experiment_id], tag_filter(ROLE, CHILD))
    shares = []
    for run in sorted(runs, key=lambda run: int(run.data.tags[JOB])):
        duration = (run.info.end_time - run.info.start_time) / 1000
        metrics = run.data.metrics
        training = metrics["run_seconds"] + metrics.get("gradient_noise/run_seconds", 0.0)
        compiling = metrics["compile_seconds"] + metrics.get("gradient_noise/compile_seconds", 0.0)
        shares.append({"duration": duration, "training": training, "compile": compiling,
                       "share": (duration - training - compiling) / duration, "status": run.info.status,
                       "run_id": run.info.run_id})
    return shares


def _parts_line(parts: dict[str, float]) -> str:
    return ", ".join(f"{label} {seconds:.3f}" for label, seconds in sorted(parts.items(), key=lambda kv: -kv[1])
                     if seconds >= 0.0005) or "none"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=3, help="jobs of the sweep, one after another (3)")
    parser.add_argument("--uri", help="the store: a tracking server's http://127.0.0.1:PORT, postgresql://..., "
                                      "sqlite:///... (default: a new SQLite file)")
    parser.add_argument("overrides", nargs="*", default=["solver.epochs=5000"])
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs {args.jobs}: at least one job")
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        uri, wall = run_sweep(args.jobs, args.overrides, args.uri, folder)
        experiment = next(a for a in sys.argv if a.startswith("tracking.experiment=")).split("=", 1)[1]
        shares = store_shares(uri, experiment)
        timings = [json.loads(path.read_text()) for path in
                   sorted(folder.glob(f"multirun/*/{TIMING_FILE}"), key=lambda p: int(p.parent.name))]
    print(f"load average at the end {os.getloadavg()[0]:.1f}; {len(shares)} runs "
          f"({', '.join(sorted({share['status'] for share in shares}))})")
    for number, (share, timing) in enumerate(zip(shares, timings)):
        print(f"job {number}: run {share['duration']:.2f} s, training {share['training']:.2f} s, compile "
              f"{share['compile']:.2f} s, tracking share {100 * share['share']:.1f}%; on the job's path "
              f"{timing['tracking']:.2f} s: {_parts_line(timing['parts'])}")
        written = writer_seconds().get(share["run_id"], {})
        total = sum(seconds for label, seconds in written.items() if not label.startswith("import"))
        print(f"    in the background writer {total:.2f} s: {_parts_line(written)}")
    median = float(np.median([share["share"] for share in shares]))
    busy = sum(share["training"] + share["compile"] for share in shares)
    print(f"median tracking share {100 * median:.1f}%; the sweep: {wall:.2f} s wall, its jobs' training and "
          f"compilation {busy:.2f} s (the rest: Hydra, the process's imports, the sweep's parent run, tracking, "
          f"the last job's writes)")


if __name__ == "__main__":
    main()
