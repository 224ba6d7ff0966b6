"""cruxlab.store.history writes histories into MLflow's SQL store directly: MLflow's read API must not tell the
result from ``MlflowClient.log_batch``'s.

Each test logs the same histories to two runs of a store, one each way, and compares
what ``get_metric_history`` and ``get_run`` give back; each runs on SQLite and on
PostgreSQL (a server of its own, scripts/postgres.sh).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from cruxlab.store.history import history_metrics, log_history, thinned

EPOCHS = 600  # 4 series x 601 values: log_batch needs three store calls, the direct path one transaction
TIME = 1_700_000_000_000
STEPS = np.r_[np.arange(1, EPOCHS), EPOCHS - 1, 0]
"""The last step twice (with two values: the larger is the latest), then step 0: the last logged is not the
latest."""


def series() -> dict[str, np.ndarray]:
    """Histories with a NaN, +inf, -inf, float32 values, a NaN latest value, and a series whose largest value is
    logged last (at step 0)."""
    position = np.arange(STEPS.size)
    total = np.exp(-position / 100)
    total[10], total[20] = np.nan, np.inf
    bc = (position % 7).astype(np.float32)
    bc[-2] = -np.inf
    lr = 1e-3 * (1 + np.cos(np.pi * position / STEPS.size)) / 2
    lr[-1] = 2e-3
    nan_last = np.linspace(1, 2, STEPS.size)
    nan_last[-3], nan_last[-2] = np.nan, -1.0  # at the same step: NaN, stored as 0, is the latest
    return {"loss/total": total, "loss/bc": bc, "lr/u": lr, "nan_last": nan_last}


def read_back(client: MlflowClient, run_id: str) -> tuple[dict[str, list], dict[str, str]]:
    """Every key's history as sorted (step, timestamp, value) and the run's latest values (``repr``, so that
    NaN equals NaN)."""
    run = client.get_run(run_id)
    histories = {key: sorted((m.step, m.timestamp, repr(m.value)) for m in client.get_metric_history(run_id, key))
                 for key in run.data.metrics}
    return histories, {key: repr(value) for key, value in run.data.metrics.items()}


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.integration)])
def client(request, store: Path) -> MlflowClient:
    """A client on a new store: a SQLite file, or a database on a PostgreSQL server (scripts/postgres.sh)."""
    if request.param == "sqlite":
        return MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    return MlflowClient(request.getfixturevalue("postgres_store"))


@pytest.fixture
def runs(client: MlflowClient) -> tuple[str, str]:
    """Two runs of one experiment: the reference (log_batch) and the direct one."""
    experiment = client.create_experiment("history")
    return client.create_run(experiment).info.run_id, client.create_run(experiment).info.run_id


def direct_only(client: MlflowClient, monkeypatch) -> None:
    """Make ``client.log_batch`` fail, so that a test passes only if the direct path wrote everything."""
    def refuse(*args, **kwargs):
        raise AssertionError("log_batch was called: the direct path fell back")
    monkeypatch.setattr(client, "log_batch", refuse)


def test_direct_path_reads_back_like_log_batch(client, runs, monkeypatch):
    reference, direct = runs
    client.log_batch(reference, metrics=history_metrics(STEPS, series(), TIME))
    direct_only(client, monkeypatch)
    log_history(client, direct, STEPS, series(), TIME)

    histories, latest = read_back(client, direct)
    assert (histories, latest) == read_back(client, reference)
    assert len(histories["loss/total"]) == STEPS.size
    assert (STEPS[10], TIME, "nan") in histories["loss/total"]
    assert (STEPS[20], TIME, repr(1.7976931348623157e308)) in histories["loss/total"]
    values = series()
    assert latest["loss/total"] == repr(float(values["loss/total"][-3]))
    assert latest["loss/bc"] == repr(float(values["loss/bc"][-3]))  # not -inf, logged at the same step
    assert latest["lr/u"] == repr(float(values["lr/u"][-3])) and latest["nan_last"] == "nan"


def test_later_values_update_the_latest_ones_and_earlier_ones_leave_them(client, runs, monkeypatch):
    """A second call meets the run's stored latest values: a later step replaces one, an earlier step (even at a
    later time) does not, a new key gets one."""
    later = ([EPOCHS], {"loss/total": [5.0], "new": [1.0]}, TIME)
    earlier = ([0], {"lr/u": [7.0]}, TIME + 1)
    reference, direct = runs
    for steps, values, timestamp in (STEPS, series(), TIME), later, earlier:
        client.log_batch(reference, metrics=history_metrics(steps, values, timestamp))
    direct_only(client, monkeypatch)
    for steps, values, timestamp in (STEPS, series(), TIME), later, earlier:
        log_history(client, direct, steps, values, timestamp)

    histories, latest = read_back(client, direct)
    assert (histories, latest) == read_back(client, reference)
    assert latest["loss/total"] == "5.0" and latest["lr/u"] != "7.0" and latest["new"] == "1.0"


def test_values_stored_already_or_repeated_are_skipped_as_log_batch_skips_them(client, runs):
    reference, direct = runs
    head = {key: values[:100] for key, values in series().items()}
    repeated = ([3, 3], {"repeated": [2.0, 2.0]}, TIME)
    for run_id in runs:
        client.log_batch(run_id, metrics=history_metrics(STEPS[:100], head, TIME))
    for steps, values, timestamp in (STEPS, series(), TIME), repeated:
        client.log_batch(reference, metrics=history_metrics(steps, values, timestamp))
        log_history(client, direct, steps, values, timestamp)
    assert read_back(client, direct) == read_back(client, reference)
    assert len(client.get_metric_history(direct, "repeated")) == 1


def test_a_finished_run_takes_histories_and_a_deleted_one_refuses_them_as_with_log_batch(client, runs,
                                                                                         monkeypatch):
    """MLflow checks a run's lifecycle stage, not its status: logging after set_terminated works, after
    delete_run it is refused."""
    finished, deleted = runs
    client.set_terminated(finished)
    client.delete_run(deleted)
    with pytest.raises(MlflowException, match="must be in the 'active' state") as refused:
        client.log_batch(deleted, metrics=history_metrics(STEPS, series(), TIME))
    direct_only(client, monkeypatch)
    with pytest.raises(MlflowException) as also_refused:
        log_history(client, deleted, STEPS, series(), TIME)
    assert str(also_refused.value) == str(refused.value)
    assert client.get_run(deleted).data.metrics == {}
    log_history(client, finished, STEPS, series(), TIME)
    assert len(client.get_metric_history(finished, "loss/total")) == STEPS.size


def test_invalid_histories_are_refused_before_anything_is_written(client, runs, monkeypatch):
    reference, direct = runs
    with pytest.raises(MlflowException, match="Timestamp must be a nonnegative"):
        client.log_batch(reference, metrics=history_metrics(STEPS, series(), -1))
    direct_only(client, monkeypatch)
    with pytest.raises(MlflowException, match="Timestamp must be a nonnegative"):
        log_history(client, direct, STEPS, series(), -1)
    with pytest.raises(ValueError, match="loss/total: 599 values for 601 steps"):
        log_history(client, direct, STEPS, {"loss/total": np.zeros(EPOCHS - 1)}, TIME)
    assert client.get_run(direct).data.metrics == {}



def test_a_history_of_no_epochs_writes_nothing(client, runs, monkeypatch):
    _, direct = runs
    direct_only(client, monkeypatch)
    log_history(client, direct, [], {"loss/total": []}, TIME)
    assert client.get_run(direct).data.metrics == {}

def test_any_other_store_takes_log_batch(tmp_path, monkeypatch):
    """A file store (as a tracking server would) gets the history through the public log_batch."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    client = MlflowClient((tmp_path / "mlruns").as_uri())
    run_id = client.create_run(client.create_experiment("history")).info.run_id
    calls = []
    log_batch = client.log_batch
    monkeypatch.setattr(client, "log_batch", lambda *args, **kwargs: calls.append(log_batch(*args, **kwargs)))
    log_history(client, run_id, STEPS, series(), TIME)
    assert len(calls) == 1
    histories, latest = read_back(client, run_id)
    assert len(histories["loss/total"]) == STEPS.size and latest["nan_last"] == "nan"


@pytest.mark.parametrize("epochs, points", [(1000, 7), (10, 3), (5, 5)])
def test_a_thinned_history_keeps_the_first_and_the_last_epoch_evenly_spaced(epochs, points):
    steps, series = thinned(np.arange(epochs), {"loss/total": np.arange(epochs) * 0.5}, points)
    assert steps[0] == 0 and steps[-1] == epochs - 1 and len(steps) == min(points, epochs)
    assert np.ptp(np.diff(steps)) <= 1  # as even as whole epochs allow
    np.testing.assert_array_equal(series["loss/total"], steps * 0.5)  # each value with its own epoch
