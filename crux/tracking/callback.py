"""The parent run of a multirun, opened before its jobs and closed after them, whatever happened.

Hydra calls ``on_multirun_end`` only when every job succeeded (FACTS.md), so the
close is also registered with ``atexit``; it reads the jobs' outcomes from the
store, because with a launcher such as joblib ``on_job_end`` runs in the
workers, not here.
"""
from __future__ import annotations

import atexit
import logging
import time
from pathlib import Path
from typing import Any

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.experimental.callback import Callback
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from crux.tracking.store import Destination, child_runs, ensure_experiment, experiment_name, tracking_uri

log = logging.getLogger(__name__)


def swept_keys(config: DictConfig) -> list[str]:
    """The keys that differ between the jobs: swept in ``hydra.sweeper.params`` or on the command line.

    As in Hydra's basic sweeper, the command line comes last and wins (``repeat=0`` stops a file's repeats).
    """
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    overrides = [f"{key}={value}" for key, value in params.items()] + list(config.hydra.overrides.task)
    last = {o.key_or_group: o for o in OverridesParser.create().parse_overrides(overrides)}
    return sorted(key for key, override in last.items() if override.is_sweep_override())


class SweepCallback(Callback):
    """Opens the parent run (tags ``crux.sweep``, ``crux.claim``, ``crux.role=parent``) and closes it
    FINISHED when every child run finished, FAILED otherwise."""

    def __init__(self) -> None:
        self._sweep: Destination | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        uri = tracking_uri(config.tracking.uri)
        client = MlflowClient(uri)
        name = experiment_name(config.tracking.experiment, config.hydra.runtime.choices)
        experiment_id = ensure_experiment(client, name, uri)
        sweep_dir = Path(config.hydra.sweep.dir).resolve()
        tags = {"crux.sweep": name, "crux.claim": config.claim, "crux.role": "parent",
                "crux.backend": config.backend.name, "crux.sweep_dir": str(sweep_dir),
                "crux.overrides": " ".join(config.hydra.overrides.task)}
        run = client.create_run(experiment_id, run_name=f"{name} {time.strftime('%Y-%m-%d %H:%M:%S')}", tags=tags)
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
