"""Several sweeps at once into one tracking store, then every run, parent link, status, metric point and artifact
counted back through the store's API (MLflow's REST API for a server).

    python scripts/load_test.py --tracking-uri http://127.0.0.1:PORT                  # 4 sweeps x 8 jobs x 2000 epochs
    python scripts/load_test.py --tracking-uri sqlite:///$PWD/load.db                # the same on the embedded store
    python scripts/load_test.py --tracking-uri URI --launcher ray                    # jobs on $RAY_ADDRESS's cluster
    python scripts/load_test.py --tracking-uri URI --sweeps 2 --repeats 1 --epochs 50  # smaller

Each sweep is ``crux-sweep accumulation`` (memory full, b8, b32, b8_acc4 x ``--repeats``) with
``--parallel`` jobs at a time on the chosen launcher, all sweeps started together, each in its own
folder, all into one new experiment. Afterwards each sweep's parent must hold exactly its own jobs,
all FINISHED, each with its variant and repeat once; every run's ``stats.npz`` must hold every epoch, and
MLflow the evenly spaced epochs of each history the job sends, with the values of ``stats.npz``; every run
must have its five artifacts; the
experiment must hold no other run. Prints what was found against what was expected, jobs per
minute (all jobs over the wall time from the first start to the last exit), and each job's tracking
share: the seconds in crux's tracking calls over the job's seconds, timed inside the job by
:class:`cruxlab.measure.tracking_timer.JobTimer`, a Hydra callback the sweeps load. Services:
scripts/postgres.sh, scripts/mlflow_server.sh and scripts/ray_head.sh (docs/scaling.md). Exits 1
when anything is missing, duplicated or misplaced.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from crux.stats import Statistics
from cruxlab.store.connection import child_runs
from cruxlab.store.contract import (CONFIG, ENVIRONMENT, FINISHED, HISTORY_PLOT, HISTORY_POINTS, PARAMS, PARENT, REPEAT,
                                    ROLE, STATS, SWEEP_DIR, VARIANT)
from cruxlab.measure.tracking_timer import TIMING_FILE
from cruxlab.store.history import history_series, thinned

HISTORY_KEYS = ("loss/total", "loss/pde", "loss/bc", "lr/u")
ARTIFACTS = {HISTORY_PLOT, STATS, PARAMS, CONFIG, ENVIRONMENT}


@dataclass(frozen=True)
class SweepSpec:
    """One ``crux-sweep accumulation``: ``len(memory) * repeats`` jobs of ``epochs`` epochs on ``launcher``
    (basic, joblib, ray, submitit_local or submitit_slurm), ``extra`` overrides for every job, each job timed by
    :class:`cruxlab.measure.tracking_timer.JobTimer` when ``timed``. joblib runs ``parallel`` jobs of the sweep at
    a time; on Ray every job takes one CPU of the cluster, so the cluster's CPUs bound the jobs running at once
    over all sweeps. ``python`` runs the sweep: for Ray, that of an environment with crux's [ray] extra."""

    launcher: str = "joblib"
    repeats: int = 2
    epochs: int = 2000
    parallel: int = 2
    memory: tuple[str, ...] = ("full", "b8", "b32", "b8_acc4")
    extra: tuple[str, ...] = ()
    timed: bool = True
    python: str = sys.executable

    @property
    def jobs(self) -> int:
        return len(self.memory) * self.repeats

    def launcher_overrides(self) -> list[str]:
        if self.launcher == "basic":
            return []
        if self.launcher == "joblib":
            return ["hydra/launcher=joblib", f"hydra.launcher.n_jobs={self.parallel}"]
        if self.launcher == "ray":
            # The launcher's default object store size is for a cluster it starts itself; Ray refuses it when
            # connecting to one.
            return ["hydra/launcher=ray", "+hydra.launcher.ray.init.object_store_memory=null"]
        if self.launcher in ("submitit_local", "submitit_slurm"):
            return [f"hydra/launcher={self.launcher}"]
        raise ValueError(f"launcher {self.launcher!r}: choose basic, joblib, ray, submitit_local or submitit_slurm")

    def command(self, sweep_dir: Path, experiment: str) -> list[str]:
        timer = ["+hydra.callbacks.tracking_timer._target_=cruxlab.measure.tracking_timer.JobTimer"] if self.timed \
            else []
        return [self.python, "-m", "cruxlab.commands.sweep", "accumulation", f"solver.epochs={self.epochs}",
                f"memory={','.join(self.memory)}", f"repeat={','.join(map(str, range(self.repeats)))}",
                f"tracking.experiment={experiment}", f"hydra.sweep.dir={sweep_dir}", *self.extra, *timer,
                *self.launcher_overrides()]


@dataclass
class Outcome:
    """The sweeps' folders and exit codes, the wall time from the first start to the last exit."""

    folders: list[Path]
    returncodes: list[int]
    seconds: float
    logs: list[str]


def run_at_once(sweeps: list[SweepSpec], uri: str, experiment: str, folder: Path, timeout: float,
                env: dict[str, str] | None = None) -> Outcome:
    """Start ``sweeps`` at once into ``uri`` (with ``env`` on top of this process's environment) from ``folder``,
    each in a folder of its own there, and wait for all of them (killed after ``timeout`` s)."""
    env = {**os.environ, **(env or {}), "MLFLOW_TRACKING_URI": uri}
    folders = [folder / f"sweep-{k}" for k in range(len(sweeps))]
    start = time.monotonic()
    processes = []
    for spec, sweep_dir in zip(sweeps, folders):
        sweep_dir.parent.mkdir(parents=True, exist_ok=True)
        log = open(f"{sweep_dir}.log", "w")
        processes.append((subprocess.Popen(spec.command(sweep_dir, experiment), cwd=folder, env=env, stdout=log,
                                           stderr=subprocess.STDOUT), log))
    codes = []
    for process, log in processes:
        try:
            codes.append(process.wait(timeout=max(1.0, timeout - (time.monotonic() - start))))
        except subprocess.TimeoutExpired:
            process.kill()
            codes.append(process.wait())
        log.close()
    seconds = time.monotonic() - start
    return Outcome(folders, codes, seconds, [Path(f"{d}.log").read_text() for d in folders])


@dataclass
class Counts:
    """What the store holds against what the load should have left there; ``problems`` lists every difference."""

    expected: dict[str, int] = field(default_factory=dict)
    found: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def add(self, what: str, expected: int, found: int) -> None:
        self.expected[what] = self.expected.get(what, 0) + expected
        self.found[what] = self.found.get(what, 0) + found


def count(sweeps: list[SweepSpec], uri: str, experiment: str, folders: list[Path]) -> Counts:
    """Read every sweep back from ``uri`` and compare it with its spec (see the module's docstring)."""
    client, counts = MlflowClient(uri), Counts()
    found = client.get_experiment_by_name(experiment)
    if found is None:
        counts.problems.append(f"no experiment {experiment!r}")
        return counts
    every_run = {run.info.run_id: run for run in _all_runs(client, found.experiment_id)}
    counts.add("runs in the experiment", sum(1 + spec.jobs for spec in sweeps), len(every_run))
    accounted = set()
    with tempfile.TemporaryDirectory() as scratch:
        for spec, sweep_dir in zip(sweeps, folders):
            wanted = Counter((memory, str(repeat)) for memory in spec.memory for repeat in range(spec.repeats))
            parents = [run for run in every_run.values() if run.data.tags.get(ROLE) == PARENT
                       and run.data.tags.get(SWEEP_DIR) == str(sweep_dir.resolve())]
            if len(parents) != 1:
                counts.problems.append(f"{sweep_dir}: {len(parents)} parent runs with this sweep folder")
                continue
            (parent,) = parents
            counts.add("parent runs FINISHED", 1, int(parent.info.status == FINISHED))
            accounted.add(parent.info.run_id)
            counts.add("parent 'jobs' metrics", spec.jobs, int(parent.data.metrics.get("jobs", -1)))
            children = list(child_runs(client, found.experiment_id, parent.info.run_id))
            accounted.update(run.info.run_id for run in children)
            counts.add("child runs", spec.jobs, len(children))
            counts.add("child runs FINISHED", spec.jobs, sum(run.info.status == FINISHED for run in children))
            variants = Counter((run.data.tags.get(VARIANT), run.data.tags.get(REPEAT))
                               for run in children)
            if variants != wanted:
                counts.problems.append(f"{sweep_dir.name}: jobs {dict(variants)} instead of {dict(wanted)}")
            for run in children:
                _check_run(client, run, spec.epochs, Path(scratch) / run.info.run_id, counts)
    strays = set(every_run) - accounted
    if strays:
        counts.problems.append(f"{len(strays)} runs under no sweep's parent: {sorted(strays)[:5]}")
    counts.problems += [f"{what}: {counts.found[what]} found, {expected} expected"
                        for what, expected in counts.expected.items() if counts.found[what] != expected]
    return counts


def _all_runs(client: MlflowClient, experiment_id: str) -> list[Run]:
    runs, token = [], None
    while True:
        page = client.search_runs([experiment_id], max_results=1000, page_token=token)
        runs += page
        token = page.token
        if not token:
            return runs


def _check_run(client: MlflowClient, run: Run, epochs: int, folder: Path, counts: Counts) -> None:
    """One child run: its artifacts, every epoch in its ``stats.npz``, and every point MLflow holds of each history:
    the evenly spaced epochs the job sends (``tracking.history_points``), with the values of ``stats.npz``."""
    run_id = run.info.run_id
    present = {artifact.path for artifact in client.list_artifacts(run_id)}
    counts.add("artifacts", len(ARTIFACTS), len(present & ARTIFACTS))
    if STATS not in present:
        return
    folder.mkdir(parents=True)
    stats = Statistics.load(client.download_artifacts(run_id, STATS, str(folder)))
    counts.add("epochs in stats.npz", epochs, stats.steps)
    points = int(run.data.tags.get(HISTORY_POINTS, f"{stats.steps} of").split(" of")[0])
    sent, expected = thinned(stats.epoch, history_series(stats), points)
    for key in HISTORY_KEYS:
        history = sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)
        counts.add("metric points", len(sent), len(history))
        if [m.step for m in history] != sent.tolist():
            counts.problems.append(f"{run_id} {key}: the steps are not the evenly spaced epochs the job sends")
        elif not np.array_equal([m.value for m in history], np.asarray(expected[key], np.float64)):
            counts.problems.append(f"{run_id} {key}: values differ from the run's stats.npz")


def timings(folders: list[Path]) -> list[dict[str, Any]]:
    """What :class:`cruxlab.measure.tracking_timer.JobTimer` wrote for each job of the sweeps in ``folders``."""
    return [json.loads(path.read_text()) for folder in folders for path in sorted(folder.glob(f"*/{TIMING_FILE}"))]


def tracking_shares(folders: list[Path]) -> list[float]:
    """Each job's tracking seconds over its seconds."""
    return [seconds["tracking"] / seconds["job"] for seconds in timings(folders)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tracking-uri", required=True, help="the store: http://host:port, postgresql://, sqlite:///")
    parser.add_argument("--sweeps", type=int, default=4, help="sweeps started at once (4)")
    parser.add_argument("--repeats", type=int, default=SweepSpec.repeats, help="repeats of the 4 memory settings (2)")
    parser.add_argument("--epochs", type=int, default=SweepSpec.epochs, help="epochs per job (2000)")
    parser.add_argument("--launcher", choices=["joblib", "ray"], default=SweepSpec.launcher)
    parser.add_argument("--python", default=sys.executable,
                        help="the Python that runs the sweeps (for --launcher ray, one with crux's [ray] extra)")
    parser.add_argument("--parallel", type=int, default=SweepSpec.parallel, help="joblib's jobs at a time per sweep (2)")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds before the sweeps are killed (3600)")
    parser.add_argument("--folder", type=Path, help="the sweeps' folders (default: a temporary one)")
    args = parser.parse_args(argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one bar per artifact read back
    for name in ("sweeps", "repeats", "epochs", "parallel"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} {getattr(args, name)}: at least 1")
    spec = SweepSpec(args.launcher, args.repeats, args.epochs, args.parallel, python=args.python)
    sweeps = [spec] * args.sweeps
    experiment = f"load-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
    # crux creates a new SQLite store's tables under a lock on its folder; a new database of a server's has its
    # tables created here, before the sweeps would race to create them.
    MlflowClient(args.tracking_uri).search_experiments()
    with tempfile.TemporaryDirectory(prefix="crux-load-") as scratch:
        folder = (args.folder or Path(scratch)).resolve()
        outcome = run_at_once(sweeps, args.tracking_uri, experiment, folder, args.timeout)
        counts = count(sweeps, args.tracking_uri, experiment, outcome.folders)
        jobs_timed = timings(outcome.folders)
    jobs = len(sweeps) * spec.jobs
    at_once = f"{spec.parallel} at a time per sweep" if spec.launcher == "joblib" else "one CPU each"
    print(f"{len(sweeps)} sweeps x {spec.jobs} jobs x {spec.epochs} epochs on {spec.launcher} ({at_once}) into "
          f"{args.tracking_uri.split('@')[-1]}, experiment {experiment}")
    print(f"exit codes {outcome.returncodes}; {jobs} jobs in {outcome.seconds:.0f} s = "
          f"{60 * jobs / outcome.seconds:.1f} jobs per minute")
    shares = [t["tracking"] / t["job"] for t in jobs_timed]
    if shares:
        print(f"tracking share of a job: median {100 * statistics.median(shares):.1f}%, "
              f"{100 * min(shares):.1f}-{100 * max(shares):.1f}% over {len(shares)} jobs; medians: job "
              f"{statistics.median(t['job'] for t in jobs_timed):.1f} s, tracking "
              f"{statistics.median(t['tracking'] for t in jobs_timed):.1f} s, of which")
        named = {part for t in jobs_timed for part in t["parts"]}  # a worker's first job has its imports
        parts = {part: statistics.median(t["parts"].get(part, 0.0) for t in jobs_timed) for part in named}
        print("  " + ", ".join(f"{part} {seconds:.2f} s" for part, seconds in
                               sorted(parts.items(), key=lambda item: -item[1]) if seconds >= 0.01))
    width = max(map(len, counts.expected))
    for what, expected in counts.expected.items():
        print(f"  {what:<{width}}  {counts.found[what]:>7} of {expected}")
    for problem in counts.problems:
        print(f"PROBLEM: {problem}")
    failed = [k for k, code in enumerate(outcome.returncodes) if code != 0]
    for k in failed:
        print(f"sweep {k} exited {outcome.returncodes[k]}; the end of its output:\n{outcome.logs[k][-2000:]}")
    return 1 if counts.problems or failed else 0


if __name__ == "__main__":
    sys.exit(main())
