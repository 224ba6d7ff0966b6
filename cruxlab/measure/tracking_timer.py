"""The seconds crux's tracking costs inside a job: :class:`JobTimer`, a Hydra callback that times each tracking
part in the job's own process, whichever launcher runs it, and writes them into the job's folder
(``TIMING_FILE``).

Its parts: those on the job's own path (the main thread) and those of the process's background writer, which
overlap the next job's training (:mod:`cruxlab.runtime.writer`), each run's by its run. The first job's parts
include the first use of MLflow's SQL store and of matplotlib, each import timed apart. A sweep loads it with
``+hydra.callbacks.timer._target_=cruxlab.measure.tracking_timer.JobTimer``
(:mod:`cruxlab.measure.tracking_share`, :mod:`cruxlab.measure.load_test`).
"""
from __future__ import annotations

import functools
import importlib
import inspect
import json
import sys
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from hydra.experimental.callback import Callback
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig

from cruxlab.store.contract import ENVIRONMENT, HISTORY_PLOT, PARAMS, STATS

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
    from cruxlab.runtime import job, run_writes, writer

    return {"run create": (job.JobRun, "start"), ENVIRONMENT: (job, "written_environment"),
            "history": (run_writes, "log_history"), HISTORY_PLOT: (Statistics, "plot"),
            STATS: (Statistics, "save"), PARAMS: (np, "savez"),
            "artifacts": (MlflowClient, "log_artifacts"), "artifact": (MlflowClient, "log_artifact"),
            "run close": (MlflowClient, "set_terminated"),
            "relative_l2": (cruxlab.commands.experiment.Problem, "relative_l2"),
            "parameter copies": (cruxlab.commands.experiment, "parameter_leaves"),
            "training": (cruxlab.commands.experiment, "train"),
            "waiting for the writer": (writer.Writer, "drain"), "create_run": (job.JobRun, "_create")}


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
