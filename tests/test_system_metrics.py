"""MLflow's system-metrics monitor as a job's run stops it: its last samples logged, and a monitor that does not
stop (its store does not answer) not waited for beyond the bound."""
import logging
import threading

from cruxlab.runtime import system_metrics
from cruxlab.runtime.system_metrics import SystemMetrics


class Monitor:
    """What SystemMetrics calls of MLflow's monitor, recorded; ``finish`` waits for ``released``."""

    def __init__(self, released: threading.Event):
        self.released, self.calls = released, []
        self.mlflow_logger = self

    def finish(self):
        self.released.wait()
        self.calls.append("finish")

    def collect_metrics(self):
        self.calls.append("collect")

    def aggregate_metrics(self):
        return {"cpu_utilization_percentage": 50.0}

    def publish_metrics(self, metrics):
        self.calls.append(("publish", metrics))

    def flush(self):
        self.calls.append("flush")


def test_stopping_takes_a_last_sample_and_logs_it_with_those_not_logged_yet():
    released = threading.Event()
    released.set()
    metrics, monitor = SystemMetrics(), Monitor(released)
    metrics.monitor = monitor
    metrics.stop()
    assert monitor.calls == ["finish", "collect", ("publish", {"cpu_utilization_percentage": 50.0}), "flush"]
    assert metrics.monitor is None


def test_a_monitor_that_does_not_stop_is_left_behind_with_a_warning(monkeypatch, caplog):
    monkeypatch.setattr(system_metrics, "STOP_SECONDS", 0)
    released = threading.Event()
    metrics, monitor = SystemMetrics(), Monitor(released)
    metrics.monitor = monitor
    with caplog.at_level(logging.WARNING, logger=system_metrics.__name__):
        metrics.stop()
    assert "did not stop within 0 s (the store does not answer)" in caplog.text and monitor.calls == []
    released.set()  # the monitor's thread ends
