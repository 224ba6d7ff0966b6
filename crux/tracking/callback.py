"""The parent run of a multirun, opened before its jobs and closed after them, whatever happened.

Hydra 1.3 calls ``on_multirun_end`` only when every job succeeded (a failed job
makes it re-raise after the batch instead), so the close is also registered with
``atexit``; it reads the jobs' outcomes from the store, because with a launcher
such as joblib ``on_job_end`` runs in the workers, not here.

The parent also records the jobs it plans (tag ``crux.planned_jobs`` and the
artifact ``planned_jobs.json``), so that a reader can tell a complete sweep from
one whose jobs never ran (docs/CONTRACT.md).

Every launcher builds each job's config again from the files and the
multirun's ``hydra.overrides.hydra`` (in the job's process for joblib and
submitit, in this one for Ray), so that list is how something decided here
reaches every job: the sweep folder goes into it as an absolute path. A
relative one would be resolved in each job's working directory, which on a
Ray cluster started elsewhere is the cluster's, not this command's.
"""
from __future__ import annotations

import atexit
import json
import logging
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from hydra.experimental.callback import Callback
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from crux.tracking.descriptions import COMMAND, NOTE, runs_page, sweep_description
from crux.tracking.store import Destination, child_runs, ensure_experiment, experiment_name, tracking_uri

log = logging.getLogger(__name__)

PLANNED_JOBS = "planned_jobs.json"
BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"


def _sweep_overrides(config: DictConfig) -> list[str]:
    """What Hydra's basic sweeper expands: ``hydra.sweeper.params``, then the command line (which wins)."""
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    return [f"{key}={value}" for key, value in params.items()] + list(config.hydra.overrides.task)


def swept_keys(config: DictConfig) -> list[str]:
    """The keys that differ between the jobs: swept in ``hydra.sweeper.params`` or on the command line.

    As in Hydra's basic sweeper, the command line comes last and wins (``repeat=0`` stops a file's repeats).
    """
    last = {o.key_or_group: o for o in OverridesParser.create().parse_overrides(_sweep_overrides(config))}
    return sorted(key for key, override in last.items() if override.is_sweep_override())


def pin_sweep_dir(config: DictConfig) -> Path:
    """Make ``hydra.sweep.dir`` absolute, in the multirun's config and in every job's (the last override of a
    key wins), and return it."""
    sweep_dir = Path(config.hydra.sweep.dir).resolve()
    quoted = "'" + str(sweep_dir).replace("'", "\\'") + "'"
    with read_write(config.hydra), open_dict(config.hydra):
        config.hydra.sweep.dir = str(sweep_dir)
        config.hydra.overrides.hydra.append(f"hydra.sweep.dir={quoted}")
    return sweep_dir


def planned_jobs(config: DictConfig) -> list[list[str]] | None:
    """Each job's overrides, in the order Hydra's basic sweeper numbers the jobs (``hydra.job.num``).

    None when another sweeper runs the multirun (it may choose its jobs as it goes), or when the sweep
    needs what only the sweeper itself can expand (``glob(...)`` over a config group's options).
    """
    if OmegaConf.select(config, "hydra.sweeper._target_", default=None) != BASIC_SWEEPER:
        return None
    try:
        overrides = OverridesParser.create().parse_overrides(_sweep_overrides(config))
        batches = BasicSweeper.split_arguments(overrides, None)
    except HydraException as error:
        log.warning("the jobs of this sweep cannot be listed before it runs (%s); its report will count only the "
                    "jobs that started", error)
        return None
    return [list(job) for batch in batches for job in batch]


def _log_plan(client: MlflowClient, run_id: str, jobs: list[list[str]]) -> None:
    """``planned_jobs.json``: ``[{"job": number, "overrides": [...]}, ...]``, the job number being ``crux.job``."""
    with tempfile.TemporaryDirectory(prefix="crux-plan-") as folder:
        path = Path(folder) / PLANNED_JOBS
        path.write_text(json.dumps([{"job": number, "overrides": overrides} for number, overrides in enumerate(jobs)],
                                   indent=1))
        client.log_artifact(run_id, str(path))


class SweepCallback(Callback):
    """Opens the parent run (tags ``crux.sweep``, ``crux.claim``, ``crux.claims``, ``crux.command``,
    ``crux.role=parent``, ``crux.planned_jobs``, described by ``command``; artifact ``planned_jobs.json``) and
    closes it FINISHED when every child run finished, FAILED otherwise.

    ``command`` is the command line that ran the multirun (crux-sweep gives its
    own); by default ``crux-run`` with this process's arguments.
    """

    def __init__(self, command: str | None = None) -> None:
        self._sweep: Destination | None = None
        self._command = command or shlex.join(["crux-run", *sys.argv[1:]])

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        uri = tracking_uri(config.tracking.uri)
        client = MlflowClient(uri)
        name = experiment_name(config.tracking.experiment, config.hydra.runtime.choices)
        experiment_id = ensure_experiment(client, name, uri, config.claim)
        sweep_dir = pin_sweep_dir(config)
        tags = {"crux.sweep": name, "crux.claim": config.claim, "crux.claims": json.dumps(list(config.claims)),
                "crux.role": "parent", "crux.backend": config.backend.name, "crux.sweep_dir": str(sweep_dir),
                "crux.overrides": " ".join(config.hydra.overrides.task), COMMAND: self._command,
                NOTE: sweep_description(self._command)}
        jobs = planned_jobs(config)
        if jobs is not None:
            tags["crux.planned_jobs"] = str(len(jobs))
        run = client.create_run(experiment_id, run_name=f"{name} {time.strftime('%Y-%m-%d %H:%M:%S')}", tags=tags)
        if jobs is not None:
            _log_plan(client, run.info.run_id, jobs)
        self._sweep = Destination(uri, experiment_id, run.info.run_id, name, config.claim, swept_keys(config))
        self._sweep.save(sweep_dir)
        atexit.register(self.close)
        log.info("MLflow: experiment %r, parent run %s at %s", name, run.info.run_id, uri)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.close()

    def close(self) -> None:
        """Close the parent run once; its status and job counts come from the child runs in the store."""
        if self._sweep is None:
            return
        sweep, self._sweep = self._sweep, None
        client = MlflowClient(sweep.uri)
        statuses = [run.info.status for run in child_runs(client, sweep.experiment_id, sweep.parent_run_id)]
        failed = sum(status != "FINISHED" for status in statuses)
        now = int(time.time() * 1000)
        client.log_batch(sweep.parent_run_id,
                         metrics=[Metric("jobs", len(statuses), now, 0), Metric("failed_jobs", failed, now, 0)])
        client.set_terminated(sweep.parent_run_id, "FINISHED" if statuses and not failed else "FAILED")
        served = sweep.uri.startswith(("http://", "https://"))
        log.info("MLflow: the sweep's runs at %s%s", runs_page(sweep.uri, sweep.experiment_id),
                 "" if served else f" once `mlflow ui --backend-store-uri {sweep.uri}` serves them")
