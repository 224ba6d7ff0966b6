"""MLflow's system metrics (CPU, memory, disk, network, GPU: ``system/...``) beside a job's histories, where
``MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING`` (or ``mlflow.enable_system_metrics_logging()``) asks for them.

``mlflow.start_run`` starts MLflow's monitor for the runs it creates; crux creates its runs with
``MlflowClient.create_run`` (bounded retries, store faults said in one line), so it starts the same monitor,
:class:`mlflow.system_metrics.system_metrics_monitor.SystemMetricsMonitor`, for the time the job trains. MLflow's
sampling settings apply (``MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL``, 10 s by default, and
``MLFLOW_SYSTEM_METRICS_SAMPLES_BEFORE_LOGGING``); the samples taken since the last that MLflow logged are
logged when the job ends, so that a job shorter than the interval has its point too. A monitor that fails to
log (the store away) stops itself, as MLflow's does, and the run's closing waits for it :data:`STOP_SECONDS` at
most: the job's own writes, with their bounded retries, say the fault.
"""
from __future__ import annotations

import importlib.util
import logging
import threading
from typing import Any

from mlflow.environment_variables import MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING

log = logging.getLogger(__name__)

_said_missing = False


def wanted() -> bool:
    """Whether MLflow's switch asks for system metrics and psutil, which MLflow samples them with, is importable;
    where psutil is missing, a warning says so once a process."""
    global _said_missing
    if not MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING.get():
        return False
    if importlib.util.find_spec("psutil") is not None:
        return True
    if not _said_missing:
        log.warning("MLFLOW_ENABLE_SYSTEM_METRICS_LOGGING is on but psutil is not installed: no system metrics "
                    "(pip install psutil)")
        _said_missing = True
    return False


class SystemMetrics:
    """MLflow's system-metrics monitor for one run, sampling from :meth:`start` to :meth:`stop` where
    :func:`wanted`; else nothing."""

    def __init__(self) -> None:
        self.monitor: Any = None

    def start(self, run_id: str | None, tracking_uri: str) -> None:
        """Sample for run ``run_id`` (None: the run was not created) of the store at ``tracking_uri``."""
        if run_id is not None and self.monitor is None and wanted():
            from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor  # imports psutil

            self.monitor = SystemMetricsMonitor(run_id, tracking_uri=tracking_uri)
            self.monitor.start()

    def stop(self) -> None:
        """Stop sampling, take one sample more (the machine as the job ends), and log it with those taken since
        MLflow's monitor last logged, waiting :data:`STOP_SECONDS` at most (a store that does not answer keeps
        MLflow's monitor in its retries); a failure is said in one line and goes no further."""
        monitor, self.monitor = self.monitor, None
        if monitor is None:
            return
        stopping = threading.Thread(target=_last_samples, args=(monitor,), name="crux-system-metrics", daemon=True)
        stopping.start()
        stopping.join(STOP_SECONDS)
        if stopping.is_alive():
            log.warning("MLflow's system metrics did not stop within %d s (the store does not answer): the run's "
                        "last samples are not logged", STOP_SECONDS)


STOP_SECONDS = 30
"""How long the end of a job's run waits for MLflow's system-metrics monitor to stop and log its last samples."""


def _last_samples(monitor: Any) -> None:
    """Stop ``monitor``, then take a last sample and log it with those not logged yet."""
    try:
        monitor.finish()
        monitor.collect_metrics()
        monitor.publish_metrics(monitor.aggregate_metrics())
        monitor.mlflow_logger.flush()
    except Exception as error:  # noqa: BLE001 - the run's own writes meet the same store and say it
        log.warning("the last system metrics of a run could not be logged: %s",
                    " ".join(str(error).split()) or type(error).__name__)
