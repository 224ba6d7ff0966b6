"""What of a job's histories goes to MLflow as metrics, and how it is written.

Every epoch of every loss and learning-rate history is in the run's ``stats.npz``,
which crux-report reads. MLflow gets evenly spaced epochs of each
(:func:`thinned`, ``tracking.history_points``): its charts fetch at most 320
points of a series, so 320 draw what they would draw from every epoch, at a
fraction of the cost (a tracking server stores each value as a row of its own;
docs/BENCHMARK.md has the figures).

Into MLflow's SQL store (SQLite, PostgreSQL) the values go straight, in one
transaction: one Core ``INSERT`` (executemany) into MLflow's own ``metrics`` table
and one ``latest_metrics`` row per key, instead of ``log_batch``'s 1000-value
store calls that validate each value and build an ORM object per value. This
relies on MLflow 3's SQL schema and store internals (its table objects,
``sanitize_metric_value``, ``_validate_metric``, the run lookup and its lifecycle
check); tests/test_tracking_history.py checks, on SQLite and on PostgreSQL, that
MLflow's read API sees the same histories and latest values either way. Any other
store (a tracking server, the file store), other MLflow versions, an active logged
model, or a value already stored (MLflow skips those) take ``log_batch``. A store that is away is waited for
(:func:`cruxlab.store.faults.patiently`); a failed insert rolls back whole, so trying again writes each value
once.
"""
from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING, Any, Callable, Mapping, NamedTuple, Sequence

import mlflow
import numpy as np
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from crux.stats import Statistics
from cruxlab.store.faults import patiently

if TYPE_CHECKING:
    from sqlalchemy import Table

log = logging.getLogger(__name__)

STORE_MODULE = "mlflow.store.tracking.sqlalchemy_store"
STORE_API = ("ManagedSessionMaker", "_get_run", "_check_run_is_active", "sanitize_metric_value")
"""The store members the direct path uses."""

Row = dict[str, Any]


class SqlTarget(NamedTuple):
    """MLflow's SQL store and the pieces of its internals the direct path writes with."""

    store: Any
    metrics: Table
    latest: Table
    validate: Callable[..., None]


def history_metrics(steps: Sequence[int], series: Mapping[str, Sequence[float]], timestamp: int) -> list[Metric]:
    """Every value of every series as a ``Metric`` at its step (what ``log_batch`` takes)."""
    steps, series = _numbers(steps, series)
    return [Metric(key, value, timestamp, step)
            for key, values in series.items() for step, value in zip(steps, values)]


def history_series(stats: Statistics) -> dict[str, np.ndarray]:
    """``loss/total``, ``loss/<constraint>`` and ``lr/<model>``, one value per epoch (``stats.epoch``)."""
    series = {"loss/total": stats.total_loss}
    series.update({f"loss/{name}": stats.losses[:, j] for j, name in enumerate(stats.names)})
    series.update({f"lr/{model}": values for model, values in stats.lr.items()})
    return series


def thinned(steps: Sequence[int], series: Mapping[str, Sequence[float]],
            points: int | None) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """At most ``points`` evenly spaced entries of ``steps`` and of each series, the first and the last among
    them; every entry for ``points=None`` or a history no longer than that."""
    steps = np.asarray(steps)
    series = {key: np.asarray(values) for key, values in series.items()}
    if points is None or len(steps) <= points:
        return steps, series
    keep = np.unique(np.round(np.linspace(0, len(steps) - 1, points)).astype(np.int64))
    return steps[keep], {key: values[keep] for key, values in series.items()}


def log_history(client: MlflowClient, run_id: str, steps: Sequence[int], series: Mapping[str, Sequence[float]],
                timestamp: int) -> None:
    """Log each of ``series`` (one value per entry of ``steps``) to run ``run_id`` as
    ``client.log_batch(run_id, metrics=history_metrics(steps, series, timestamp))`` does, in one transaction when
    the run lives in MLflow's SQL store."""
    steps, series = _numbers(steps, series)
    if not steps:
        return
    target = _sql_target(client)
    if target is None or mlflow.get_active_model_id() is not None or not patiently(
            lambda: _write(target, run_id, steps, series, timestamp), "the history insert", client.tracking_uri):
        client.log_batch(run_id, metrics=history_metrics(steps, series, timestamp))


def _numbers(steps: Sequence[int],
             series: Mapping[str, Sequence[float]]) -> tuple[list[int], dict[str, list[float]]]:
    """Steps as ints and values as floats (what MLflow stores), each series as long as ``steps``."""
    steps = np.asarray(steps, np.int64).tolist()
    numbers = {key: np.asarray(values, float).tolist() for key, values in series.items()}
    for key, values in numbers.items():
        if len(values) != len(steps):
            raise ValueError(f"{key}: {len(values)} values for {len(steps)} steps")
    return steps, numbers


def _sql_target(client: MlflowClient) -> SqlTarget | None:
    """The client's ``SqlAlchemyStore`` and MLflow's tables; None for any other store, or an MLflow whose
    internals may differ from those of MLflow 3 (which the tests check)."""
    if int(mlflow.__version__.split(".")[0]) < 3:
        return None
    try:
        store = client._tracking_client.store
    except AttributeError as error:
        log.debug("MlflowClient holds no store where expected (%r): histories go through log_batch", error)
        return None
    # A SqlAlchemyStore has imported its module; importing it for any other store would cost a second.
    module = sys.modules.get(STORE_MODULE)
    if module is None or not isinstance(store, getattr(module, "SqlAlchemyStore", ())):
        return None
    missing = [name for name in STORE_API if not hasattr(store, name)]
    try:
        from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric
        from mlflow.utils.validation import _validate_metric
    except ImportError as error:
        missing.append(repr(error))
    if missing:
        log.debug("MLflow's SQL store lacks %s: histories go through log_batch", missing)
        return None
    return SqlTarget(store, SqlMetric.__table__, SqlLatestMetric.__table__, _validate_metric)


def _write(target: SqlTarget, run_id: str, steps: list[int], series: dict[str, list[float]],
           timestamp: int) -> bool:
    """Insert the values and update the run's latest ones in one transaction; False (nothing written) when a
    value is stored already."""
    from sqlalchemy import insert, select, update  # imported by the store already: no other store needs them
    from sqlalchemy.exc import IntegrityError

    store, table = target.store, target.latest
    rows = _rows(target, run_id, steps, series, timestamp)
    latest = _latest(rows)
    with store.ManagedSessionMaker(read_only=False) as session:
        store._check_run_is_active(store._get_run(session=session, run_uuid=run_id))
        try:
            session.execute(insert(target.metrics), rows)
        except IntegrityError:
            session.rollback()
            return False
        of_run = table.c.run_uuid == run_id
        stored = {row["key"]: row for row in session.execute(
            select(table).where(of_run, table.c.key.in_(list(latest))).with_for_update()).mappings()}
        for key, row in latest.items():
            if key in stored and _order(row) > _order(stored[key]):
                session.execute(update(table).where(of_run, table.c.key == key).values(
                    {name: row[name] for name in ("value", "timestamp", "step", "is_nan")}))
        new = [row for key, row in latest.items() if key not in stored]
        if new:
            session.execute(insert(table), new)
    return True


def _rows(target: SqlTarget, run_id: str, steps: list[int], series: dict[str, list[float]],
          timestamp: int) -> list[Row]:
    """``metrics`` table rows, NaN and +-inf sanitized by the store. Values and steps are numbers by
    construction, so MLflow's checks need to run once a key (its name, the timestamp)."""
    rows = []
    for key, values in series.items():
        if steps:
            target.validate(key, values[0], timestamp, steps[0])
        for step, value in zip(steps, values):
            is_nan, value = target.store.sanitize_metric_value(value)
            rows.append({"run_uuid": run_id, "key": key, "value": value, "timestamp": timestamp, "step": step,
                         "is_nan": is_nan})
    return rows


def _order(row: Row) -> tuple[int, int, float]:
    """What makes a value the latest of its key for MLflow: the largest (step, timestamp, stored value)."""
    return row["step"], row["timestamp"], row["value"]


def _latest(rows: list[Row]) -> dict[str, Row]:
    """Each key's latest row; on a tie the first logged, as in MLflow."""
    latest: dict[str, Row] = {}
    for row in rows:
        if row["key"] not in latest or _order(row) > _order(latest[row["key"]]):
            latest[row["key"]] = row
    return latest
