"""What counts as a store fault, and how a write waits for the store (cruxlab.store.faults), without a store."""
from __future__ import annotations

import errno
import os
import sqlite3

import pytest
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import PERMISSION_DENIED, RESOURCE_DOES_NOT_EXIST, TEMPORARILY_UNAVAILABLE
from requests.exceptions import ConnectionError as RequestsConnectionError
from requests.exceptions import Timeout
from sqlalchemy import exc as sql

from cruxlab.store import faults
from cruxlab.store.connection import HTTP_LIMITS, bounded_http, request_deadline
from cruxlab.store.faults import (RETRY_SECONDS, PatientClient, StoreFault, is_store_fault, patiently, record_fault,
                                  recorded_fault)


@pytest.mark.parametrize("error, fault", [
    (RequestsConnectionError("refused"), True),
    (MlflowException("API request to http://h/api failed with exception Max retries exceeded"), True),
    (MlflowException("db restarting", error_code=TEMPORARILY_UNAVAILABLE), True),
    (sqlite3.OperationalError("database or disk is full"), True),
    (sql.OperationalError("SELECT 1", {}, Exception("server closed the connection")), True),
    (sql.DBAPIError("SELECT 1", {}, Exception("connection reset"), connection_invalidated=True), True),
    (sql.IntegrityError("INSERT", {}, Exception("duplicate key")), False),
    (OSError(errno.ENOSPC, "No space left on device"), True),
    (MlflowException("Run 'x' not found", error_code=RESOURCE_DOES_NOT_EXIST), False),
    (MlflowException("API request failed with error code 403 != 200", error_code=PERMISSION_DENIED), False),
    (ValueError("bad value"), False),
])
def test_store_faults_are_told_from_request_errors(error, fault):
    assert is_store_fault(error) is fault


class Flaky:
    """Fails with ``error`` ``failures`` times, then answers 42."""

    def __init__(self, error: Exception, failures: int):
        self.error, self.failures, self.calls = error, failures, 0

    def __call__(self) -> int:
        self.calls += 1
        if self.calls <= self.failures:
            raise self.error
        return 42


def test_a_write_waits_for_the_store_within_the_budget(monkeypatch):
    monkeypatch.setenv(RETRY_SECONDS, "30")  # the pauses before the third try: 0.5 + 1 s
    flaky = Flaky(RequestsConnectionError("refused"), failures=2)
    assert patiently(flaky, "log_batch") == 42 and flaky.calls == 3


class Clock:
    """``time`` for cruxlab.store.faults: ``sleep`` only moves ``monotonic`` on, and is noted."""

    def __init__(self):
        self.now, self.pauses = 0.0, []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.pauses.append(seconds)
        self.now += seconds


def test_the_pauses_double_up_to_their_cap_and_the_last_ends_at_the_budget(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(faults, "time", clock)
    monkeypatch.setenv(RETRY_SECONDS, "30")
    with pytest.raises(StoreFault):
        patiently(Flaky(RequestsConnectionError("refused"), failures=100), "log_batch")
    assert clock.pauses == [0.5, 1.0, 2.0, 4.0, faults.LONGEST_PAUSE, faults.LONGEST_PAUSE, 6.5]  # 30 s in all


def test_past_the_budget_it_is_a_store_fault_naming_what_failed(monkeypatch):
    monkeypatch.setenv(RETRY_SECONDS, "0")
    with pytest.raises(StoreFault, match=r"^log_batch failed for 0 s \(tracking.retry_seconds 0 s, each try given "
                                         r"up after [\d.]+ s at most\): .*refused"):
        patiently(Flaky(RequestsConnectionError("[Errno 111] Connection refused"), failures=10), "log_batch")


def test_a_store_that_does_not_answer_is_a_fault_within_the_budget_plus_one_request(monkeypatch):
    """Each try waits a request's whole deadline for an answer that does not come (a server whose processes are
    stopped): the budget counts from the start of the first, so the fault comes at most one deadline past it,
    stating how long it waited."""
    clock = Clock()
    monkeypatch.setattr(faults, "time", clock)
    monkeypatch.setenv(RETRY_SECONDS, "30")
    for key, value in {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                       "MLFLOW_HTTP_REQUEST_TIMEOUT": "10"}.items():
        monkeypatch.setenv(key, value)
    assert request_deadline() == 3 * 10 + 2  # three tries of 10 s; no pause before the first retry, 2 s before the next

    def unanswered() -> None:
        clock.now += request_deadline()
        raise Timeout("HTTPConnectionPool(host='h', port=1): Read timed out. (read timeout=10)")

    with pytest.raises(StoreFault) as fault:
        patiently(unanswered, "log_batch")
    assert 30 <= clock.now <= 30 + request_deadline()
    assert str(fault.value) == (f"log_batch failed for {clock.now:.0f} s (tracking.retry_seconds 30 s, each try "
                                f"given up after 32 s at most): no answer within 10 s")


def test_any_other_error_is_raised_at_once(monkeypatch):
    monkeypatch.setenv(RETRY_SECONDS, "30")
    flaky = Flaky(ValueError("bad value"), failures=10)
    with pytest.raises(ValueError):
        PatientClient(type("Client", (), {"log_batch": lambda self: flaky()})()).log_batch()
    assert flaky.calls == 1


def test_a_recorded_fault_keeps_every_run_it_left_open(tmp_path):
    assert recorded_fault(tmp_path) is None
    record_fault(tmp_path, "run1", "log_batch failed")
    record_fault(tmp_path, "parent", "closing failed")
    assert recorded_fault(tmp_path) == {"message": "log_batch failed",
                                        "runs": {"run1": "log_batch failed", "parent": "closing failed"}}


def test_mlflows_http_limits_are_bounded_only_where_the_user_set_none(monkeypatch):
    first, *others = HTTP_LIMITS
    monkeypatch.setenv(first, "7")
    for key in others:
        monkeypatch.delenv(key, raising=False)
    with bounded_http():
        assert os.environ[first] == "7"
        assert all(os.environ[key] == HTTP_LIMITS[key] for key in others)
    assert os.environ[first] == "7" and not any(key in os.environ for key in others)  # put back as found


def test_a_full_disk_is_named_by_the_file_written_a_copys_target_not_its_source(tmp_path):
    """A copy that meets a full disk (an artifact copied into its store) names the disk of the file it wrote, not
    of the file it read; an error naming no file falls back to the folder being written."""
    copied = OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "staged.npz"), None,
                     str(tmp_path / "store" / "params.npz"))
    assert faults.full_disk(copied).startswith(f"the disk holding {tmp_path / 'store' / 'params.npz'} is full (")
    bare = OSError(errno.ENOSPC, "No space left on device")
    assert faults.full_disk(bare, folder=tmp_path).startswith(f"the disk holding {tmp_path} is full (")
