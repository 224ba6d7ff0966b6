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

:class:`JobTimer` is the Hydra callback that times the parts in a job's process;
scripts/load_test.py uses it too.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import inspect
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from hydra.experimental.callback import Callback
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig

from cruxlab.store.contract import CHILD, ENVIRONMENT, HISTORY_PLOT, JOB, PARAMS, ROLE, STATS, tag_filter

if __name__ == "__main__":  # Hydra instantiates the callback by this module's name: one module, one set of figures
    sys.modules.setdefault("measure_tracking", sys.modules[__name__])

TIMING_FILE = "tracking_seconds.json"
WRITER = "writer"
"""The key of the parts that the background writer ran (with the basic launcher, beside the next job)."""
FIRST_IMPORTS = {"create_run": "mlflow.store.tracking.sqlalchemy_store", HISTORY_PLOT: "matplotlib.figure"}
"""A part's label -> the module its first use imports (timed apart, once a process): the store's in the writer,
which creates a sweep job's run while the job trains (a lone crux-run opens the store in "run create")."""


def _parts() -> dict[str, tuple[Any, str]]:
    """Label -> (owner, attribute) of every timed tracking call (imports crux's pipeline: in a job's process)."""
    import cruxlab.commands.experiment
    from crux.stats import Statistics
    from cruxlab.runtime import job

    parts = {"run create": (job.JobRun, "start"), ENVIRONMENT: (job, "environment"),
             "history": (job, "log_history"), HISTORY_PLOT: (Statistics, "plot"),
             STATS: (Statistics, "save"), PARAMS: (np, "savez"),
             "artifacts": (MlflowClient, "log_artifacts"), "artifact": (MlflowClient, "log_artifact"),
             "run close": (MlflowClient, "set_terminated"),
             "relative_l2": (cruxlab.commands.experiment.Problem, "relative_l2"),
             "parameter copies": (cruxlab.commands.experiment, "parameter_leaves"), "training": (cruxlab.commands.experiment, "train")}
    try:  # a version of crux with a background writer (the script also times the versions before it)
        from cruxlab.runtime import writer
        parts["waiting for the writer"] = (writer.Writer, "drain")
        parts["create_run"] = (job.JobRun, "_create")
    except ImportError:
        pass
    return parts


JOB_SECONDS: dict[str, float] = defaultdict(float)
"""Part label -> seconds on the job's own path (the main thread), since the job started."""
WRITER_SECONDS: dict[Any, dict[str, float]] = defaultdict(lambda: defaultdict(float))
"""JobRun -> part label -> seconds that the background writer spent on its run's writes (by the JobRun: its run
may not exist yet, the writer creates it)."""
_writing = threading.local()  # the run whose write the writer thread is doing


def _seconds() -> dict[str, float]:
    """Where the calling thread's parts go: the job's, or those of the run the writer is writing."""
    if threading.current_thread() is threading.main_thread():
        return JOB_SECONDS
    return WRITER_SECONDS[getattr(_writing, "job_run", None)]


def run_id_of(job_run: Any) -> str:
    """The id of a JobRun's run, without waiting for it: read from the instance, where a version of crux whose
    writer creates the run keeps it (``_run_id``, None until created) or an older one holds it (``run_id``)."""
    state = vars(job_run) if job_run is not None else {}
    return state.get("_run_id") or state.get("run_id") or "not created"


def writer_seconds() -> dict[str, dict[str, float]]:
    """Run id -> part label -> seconds the writer spent on that run so far."""
    return {run_id_of(job_run): dict(parts) for job_run, parts in WRITER_SECONDS.items()}


def writing_for_its_run(owner: Any, name: str) -> None:
    """Wrap ``owner.name``, a method of a JobRun that the writer runs, so that the parts timed within it count
    for that run."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        _writing.job_run = self
        return original(self, *args, **kwargs)
    setattr(owner, name, wrapper)


def timed(owner: Any, name: str, label: str) -> None:
    """Replace ``owner.name`` by a wrapper adding its seconds to ``label`` in :func:`_seconds`; the part's
    first-use import (``FIRST_IMPORTS``) is done first and timed apart too."""
    original = inspect.getattr_static(owner, name)
    wrapped = original.__func__ if isinstance(original, classmethod) else original

    @functools.wraps(wrapped)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        begin = time.perf_counter()
        seconds = _seconds()
        try:
            module = FIRST_IMPORTS.get(label)
            if module is not None and module not in sys.modules:
                importlib.import_module(module)
                seconds[f"import {module}"] += time.perf_counter() - begin
            return wrapped(*args, **kwargs)
        finally:
            seconds[label] += time.perf_counter() - begin
    setattr(owner, name, classmethod(wrapper) if isinstance(original, classmethod) else wrapper)


def _log_batch_label(kwargs: dict[str, Any]) -> str:
    return "params" if kwargs.get("params") else "summary" if kwargs.get("metrics") else "tags"


def time_log_batch() -> None:
    """``MlflowClient.log_batch`` timed as params, summary metrics or tags, by what it carries."""
    original = MlflowClient.log_batch

    @functools.wraps(original)
    def wrapper(self: MlflowClient, run_id: str, **kwargs: Any) -> Any:
        begin = time.perf_counter()
        try:
            return original(self, run_id, **kwargs)
        finally:
            _seconds()[_log_batch_label(kwargs)] += time.perf_counter() - begin
    MlflowClient.log_batch = wrapper


class JobTimer(Callback):
    """Times crux's tracking parts inside each job (in the job's process, whichever launcher runs it) and writes
    ``{"job": seconds, "training": seconds, "tracking": seconds on the job's path, "parts": {part: seconds},
    "writer": {run id: {part: seconds}}}`` into the job's output folder; ``writer`` holds what the background
    writer did so far in this process, per run (with the basic launcher a job's results are written while the
    next job trains; the last job's after the sweep's last timing file: :data:`WRITER_SECONDS`)."""

    patched = False

    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        if not JobTimer.patched:  # a worker process may run several jobs
            for label, (owner, name) in _parts().items():
                timed(owner, name, label)
            time_log_batch()
            from cruxlab.runtime.job import JobRun
            for name in ("_create", "_attempt", "_close"):
                if hasattr(JobRun, name):
                    writing_for_its_run(JobRun, name)
            JobTimer.patched = True
        JOB_SECONDS.clear()
        self._start = time.perf_counter()

    def on_job_end(self, config: DictConfig, **kwargs: Any) -> None:
        job = dict(JOB_SECONDS)
        training = job.pop("training", 0.0)
        seconds = {"job": time.perf_counter() - self._start, "training": training,
                   "tracking": sum(value for key, value in job.items()
                                   if key not in ("relative_l2", "parameter copies") and not key.startswith("import")),
                   "parts": job,
                   WRITER: writer_seconds()}
        (Path(config.hydra.runtime.output_dir) / TIMING_FILE).write_text(json.dumps(seconds))


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
                "+hydra.callbacks.timer._target_=measure_tracking.JobTimer"]
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


def main(argv: list[str]) -> None:
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
    main(sys.argv[1:])
