"""A multirun of another Hydra sweeper than crux's (Optuna's search, Hydra's basic sweeper): a parent run that its
jobs' runs nest under, as a crux sweep's do.

crux's own sweeper opens its sweeps' parent runs itself (:mod:`cruxlab.runtime.sweep_parent`). Another sweeper knows
nothing of MLflow, so :class:`SearchParent`, a Hydra callback that crux's config installs
(``hydra.callbacks.search_parent``), opens the parent when such a multirun starts, in the process that sweeps,
hands its id to every job (the environment variable :data:`SEARCH_PARENT`, which the jobs' processes inherit) and
closes it when that process ends: FINISHED when every job's run is, else FAILED (Hydra never calls
``on_multirun_end`` after a job failed). The parent's role is ``crux.role=search``: crux-report judges crux's
sweeps, not these.
"""
from __future__ import annotations

import atexit
import logging
import os
import time
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from mlflow.entities import Metric
from omegaconf import DictConfig

from cruxlab.config.schema import CRUX_SWEEPER
from cruxlab.runtime.liveness import Heartbeat, process_tags
from cruxlab.runtime.provenance import checkout, invocation, mlflow_source
from cruxlab.runtime.writer import process_writer
from cruxlab.store.connection import (SEARCH_PARENT, WRITING, StoreError, child_runs, ensure_experiment,
                                      experiment_name, move_store_credentials, store_errors, tracking_uri,
                                      writable_store)
from cruxlab.store.contract import (COMMAND, FAILED, FINISHED, NOTE, OVERRIDES, ROLE, SEARCH, SWEEP, SWEEP_DIR,
                                    WORKING_DIR)
from cruxlab.store.descriptions import sweep_description
from cruxlab.store.faults import PatientClient, set_retry_budget
from cruxlab.store.secrets import masked

log = logging.getLogger(__name__)

class SearchParent(Callback):
    """Opens the parent run of a multirun that another sweeper than crux's runs, and closes it as its process ends."""

    def __init__(self) -> None:
        self.ended = False  # Hydra called on_multirun_end: no job raised out of its launcher

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if config.hydra.sweeper._target_ == CRUX_SWEEPER:
            return  # crux's sweeper opens its own
        set_retry_budget(config.tracking.retry_seconds)
        move_store_credentials(config.tracking.uri)
        uri = tracking_uri(config.tracking.uri)
        name = experiment_name(config.tracking.experiment, config.hydra.runtime.choices)
        invoked = invocation(config.hydra)
        command = invoked["command"]
        try:
            client = PatientClient(writable_store(uri))
            with store_errors(uri, WRITING, name):
                experiment_id = ensure_experiment(client, name, uri, config.claim)
                tags = {SWEEP: name, ROLE: SEARCH, COMMAND: command, NOTE: sweep_description(command),
                        OVERRIDES: " ".join(invoked["overrides"]), WORKING_DIR: os.getcwd(),
                        SWEEP_DIR: str(Path(config.hydra.sweep.dir).resolve()), **process_tags(),
                        **mlflow_source(command.split()[0], checkout(Path.cwd())["commit"])}
                run_id = client.create_run(experiment_id, run_name=f"{name} {time.strftime('%Y-%m-%d %H:%M:%S')}",
                                           tags=tags).info.run_id
        except StoreError as error:
            raise SystemExit(f"{command.split()[0]}: {error}") from None
        os.environ[SEARCH_PARENT] = run_id
        log.info("MLflow: experiment %r, the multirun's parent run %s at %s", name, run_id, masked(uri))
        heartbeat = Heartbeat(client, run_id).start()
        atexit.register(lambda: self.close(client, experiment_id, run_id, heartbeat))

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.ended = True

    def close(self, client: Any, experiment_id: str, run_id: str, heartbeat: Heartbeat) -> None:
        """Close the parent run ``run_id`` once this process's writes are done: FINISHED when the multirun ended
        (no job raised out of its launcher) with job runs, every one FINISHED; else FAILED. Metrics ``jobs`` and
        ``failed_jobs`` (the job runs not FINISHED). A store that fails here is said in one line."""
        heartbeat.stop()
        try:
            process_writer().drain()  # the last job's results, which Hydra's basic launcher leaves to this process
            runs = list(child_runs(client, experiment_id, run_id))
            failed = sum(run.info.status != FINISHED for run in runs)
            now = int(time.time() * 1000)
            client.log_batch(run_id, metrics=[Metric("jobs", len(runs), now, 0),
                                              Metric("failed_jobs", failed, now, 0)])
            client.set_terminated(run_id, FINISHED if self.ended and runs and not failed else FAILED)
        except Exception as error:  # noqa: BLE001 - the process is ending: one line; the run is left to
            log.error("the multirun's parent run %s could not be closed: %s", run_id, masked(str(error)))  # orphans
