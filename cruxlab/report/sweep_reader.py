"""Reading a sweep back from MLflow: which sweep, what became of its jobs, each finished run as a record.

Which sweep: the one asked for, else the newest *complete* one (:mod:`cruxlab.report.jobs`),
else the newest. The solve options, the phase plan and the models each constraint
reaches are read from a run's resolved ``config.yaml`` through the pipeline's own
schema (``cruxlab.config``), so the report judges what was actually configured. An
artifact that cannot be read is recorded on the run's record, never raised: only
the verdicts that need it lose it. A run whose ``config.yaml`` cannot be read is
placed by its params (the same config, flattened), so that the verdicts that
would use it can say they lack it.

Reading writes one thing only: runs left RUNNING by a process that is gone (killed,
or lost with its machine) are closed KILLED first, as crux-sweep does
(:mod:`cruxlab.runtime.liveness`), so that an interrupted sweep is told from a running
one. A SQLite file is checked read-only before MLflow opens it (MLflow would give a
file that is not yet a store a fresh schema), and a tracking server that does not
answer is given up within seconds (:data:`cruxlab.store.connection.HTTP_LIMITS`).
Whatever keeps the store, the sweep or the run asked for from being read raises
:class:`StoreError`, whose message names the store and the fix.
"""
from __future__ import annotations

import json
import logging
import tempfile
import time
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, TypeVar

import numpy as np
import yaml
from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException, ValidationError
from requests.exceptions import RequestException

from crux.stats import Statistics
from cruxlab import config as crux_config
from cruxlab.config.settings import configuration
from cruxlab.report.jobs import JobAccount, MissingJob, account, plan_from_artifact
from cruxlab.report.packed import unpack
from cruxlab.report.run_records import RunRecord
from cruxlab.runtime.liveness import close_orphans
from cruxlab.store.connection import (READING, StoreError, bounded_http, brief, check_server, check_sqlite,
                                      child_runs, move_store_credentials, store_error_types, store_errors, tracking_uri)
from cruxlab.store.contract import (BACKEND, CAPACITY_OPTION, CAPACITY_SIZES, CLAIM, CONFIG, ENVIRONMENT, FINISHED,
                                    OVERRIDES, PARAMS, PARENT, PARENT_ID, PLANNED_JOBS, PLANNED_JOB_COUNT, REPEAT, ROLE,
                                    STATS, VARIANT, tag_filter)
from cruxlab.store.secrets import masked
from cruxlab.store.history import history_series
from cruxlab.store.params import as_requested
from cruxlab.store.kinds import packed_path, sqlite_file, sqlite_uri

log = logging.getLogger(__name__)

HISTORY_PREFIXES = ("loss/", "lr/", "timing/")  # timing/: a paired timing's chunks, by pair (cruxlab/runtime/paired_timing.py)
ARTIFACTS = (CONFIG, PARAMS, STATS, ENVIRONMENT)
CAPACITY_ARTIFACTS = (CONFIG, ENVIRONMENT, CAPACITY_SIZES)
"""What a capacity job's run logs instead: sizes, not training."""
# What reading a damaged file raises: a truncated zip, a bad CRC, broken YAML or JSON, a config that does not fit
# the schema, a missing array, JSON of another shape.
READ_ERRORS = (OSError, EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile, zlib.error, yaml.YAMLError,
               OmegaConfBaseException)
FETCH_ERRORS = (MlflowException, RequestException)
T = TypeVar("T")


@dataclass(frozen=True)
class Unreadable:
    """An artifact of a sweep's run that could not be read (or was never logged), and what was wrong.
    ``judged`` is False when the run could not even be placed in the sweep, so it is left out."""

    run_id: str
    label: str
    artifact: str
    problem: str
    judged: bool = True


@dataclass(frozen=True)
class OtherSweep:
    """Another sweep of the same name, newer than the one judged."""

    parent_id: str
    started: str
    status: str
    complete: bool
    finished: int
    planned: int


@dataclass(frozen=True)
class Sweep:
    """A multirun read back: its parent run, its finished runs as records, and what it lacks.

    ``jobs`` accounts for every planned job (None: records made by hand, taken as complete);
    ``newer`` lists the sweeps of the same name started after this one (by default
    crux-report judges the newest complete sweep, so these are the incomplete ones it
    passed over), ``none_complete`` that the default choice found no complete sweep;
    ``unreadable`` lists the artifacts of finished runs that could not be read, but for those of ``elsewhere``:
    the artifact URIs of the finished runs none of whose artifacts is there, and of the parent run where its plan
    is gone with them (:attr:`artifacts_elsewhere`).
    """

    name: str
    uri: str
    experiment_id: str
    parent_id: str
    parent_tags: dict[str, str]
    records: list[RunRecord]
    jobs: JobAccount | None = None
    started: str = ""
    newer: tuple[OtherSweep, ...] = ()
    none_complete: bool = False
    unreadable: tuple[Unreadable, ...] = ()
    elsewhere: tuple[str, ...] = ()

    @property
    def artifacts_elsewhere(self) -> str:
        """One line for the runs none of whose artifacts is where the store says (a server restarted with another
        artifact root, an artifact store that lost them): how many, the root their URIs lie under, what to do;
        empty where there are none."""
        if not self.elsewhere:
            return ""
        roots = sorted({masked(uri.rsplit("/", 2)[0]) for uri in self.elsewhere})  # less <run id>/artifacts
        count = len(self.elsewhere)
        parent = " (its parent run among them)" if any(f"/{self.parent_id}/" in uri for uri in self.elsewhere) else ""
        return (f"{count} run{'s' if count > 1 else ''} of the sweep{parent} wrote {'their' if count > 1 else 'its'} "
                f"artifacts before closing, but none of them is under {' or '.join(roots)} now: the artifact store "
                f"lost them, or its server keeps another artifact root now (started again with another "
                f"--artifacts-destination); verdicts that need them are inconclusive. Serve the root they were "
                f"written to again (`bash scripts/mlflow_server.sh restart DIR` restarts a server on its own root) "
                f"and run crux-report again")

    @property
    def statement(self) -> str:
        """What the sweep set out to check, in its own words (the sweep file's ``claim``)."""
        return self.parent_tags.get(CLAIM, "")

    @property
    def backend(self) -> str:
        """The library the sweep trained with (its parent run's ``crux.backend``)."""
        return self.parent_tags.get(BACKEND, DEFAULT_BACKEND)

    @property
    def overrides(self) -> list[str]:
        """The command-line overrides the sweep ran with, without the sweep selection crux-sweep adds."""
        return [o for o in self.parent_tags.get(OVERRIDES, "").split() if not o.startswith("+sweeps=")]

    @property
    def complete(self) -> bool:
        """Every planned job finished and its parent run FINISHED."""
        return self.jobs is None or self.jobs.complete

    @property
    def planned(self) -> int:
        return len(self.records) if self.jobs is None else self.jobs.planned

    @property
    def finished(self) -> int:
        return len(self.records) if self.jobs is None else len(self.jobs.finished)

    @property
    def missing(self) -> tuple[MissingJob, ...]:
        return () if self.jobs is None else self.jobs.missing

    @property
    def sound(self) -> bool:
        """Complete, and every artifact of every finished run was read."""
        return self.complete and not self.unreadable and not self.elsewhere


def open_client(uri: str | None = None) -> tuple[MlflowClient, str]:
    """A client on ``uri``, else the pipeline's URI (``$MLFLOW_TRACKING_URI``, else mlflow.db at the project root),
    and that URI resolved; a packed store (``mlflow.db.gz``) is read from a copy unpacked, its artifacts where it was
    made (:mod:`cruxlab.report.packed`), and keeps its packed file's URI.

    Raises StoreError for a SQLite store that does not exist (opening it would create an empty one) or that is
    not a readable MLflow store (MLflow would try to give it a schema).
    """
    move_store_credentials(uri)
    resolved = tracking_uri(uri)
    if (packed := packed_path(resolved)) is not None:
        unpacked = unpack(packed)
        check_sqlite(sqlite_file(unpacked), resolved, READING)
        with store_errors(resolved, READING):
            return MlflowClient(unpacked), sqlite_uri(packed.resolve())
    if (path := sqlite_file(resolved)) is not None:
        if not path.is_file():
            raise StoreError(f"no tracking store at {resolved}: run a sweep first (crux-sweep NAME), or point "
                             f"MLFLOW_TRACKING_URI / --tracking-uri at the store that holds it")
        check_sqlite(path, resolved, READING)
    check_server(resolved, READING)
    with store_errors(resolved, READING):  # MLflow opens the store here
        return MlflowClient(resolved), resolved


def load_sweep(name: str, parent_run_id: str | None = None, uri: str | None = None,
               backend: str | None = None) -> Sweep:
    """A sweep read back from the store, its finished runs as records. Runs left RUNNING by processes that are
    gone are closed first (where the store may be written).

    Args:
        name: the sweep's name (its MLflow experiment).
        parent_run_id: the sweep's parent run; None: the newest complete sweep of ``name``, else its newest.
        uri: the store; None: ``$MLFLOW_TRACKING_URI``, else ``mlflow.db`` in the working directory.
        backend: only sweeps run on this library (the parent's tag ``crux.backend``); None: any.

    Returns:
        The :class:`Sweep`, with what it lacks (jobs that did not finish, unreadable artifacts).

    Raises:
        StoreError: naming what could not be read (the store, the experiment, the run).
    """
    with bounded_http():
        client, resolved = open_client(uri)
        with store_errors(resolved, READING, name):
            experiment = client.get_experiment_by_name(name)
            if experiment is None:
                known = sorted(e.name for e in client.search_experiments())
                raise StoreError(f"no experiment named {name!r} at {resolved}; experiments there: {known}. "
                                 f"Run `crux-sweep {name}` first, or set MLFLOW_TRACKING_URI")
            try:  # what a killed process left RUNNING is told from a sweep still running
                close_orphans(client, experiment.experiment_id, "crux-report")
            except store_error_types() as error:  # a store this user may only read: the runs stay as they are
                log.warning("runs left RUNNING by processes that are gone were not closed: %s", brief(error))
            parent, children, newer, none_complete = _sweeps(client, experiment.experiment_id, name,
                                                             parent_run_id, resolved, backend)
            return _read_sweep(client, name, resolved, experiment.experiment_id, parent, children, tuple(newer),
                               none_complete)


DEFAULT_BACKEND = "crux"
"""The library of a parent run without a ``crux.backend`` tag (logged before there was a choice)."""


def backend_of(parent: Run) -> str:
    """The library the sweep of ``parent`` trained with."""
    return parent.data.tags.get(BACKEND, DEFAULT_BACKEND)


def parents(client: MlflowClient, experiment_id: str, backend: str | None = None) -> Iterator[Run]:
    """The sweeps' parent runs (of ``backend`` only, when given), newest first, page by page."""
    token = None
    while True:
        page = client.search_runs([experiment_id], tag_filter(ROLE, PARENT),
                                  order_by=["attributes.start_time DESC"], max_results=200, page_token=token)
        yield from (run for run in page if backend is None or backend_of(run) == backend)
        token = page.token
        if not token:
            return


def _planned_count(parent: Run) -> int | None:
    """How many jobs the sweep of ``parent`` planned (its tag); None where it recorded no plan."""
    count = parent.data.tags.get(PLANNED_JOB_COUNT, "")
    return int(count) if count.isdigit() else None


def _sweeps(client: MlflowClient, experiment_id: str, name: str, chosen: str | None, uri: str,
            backend: str | None) -> tuple[Run, list[Run], list[OtherSweep], bool]:
    """The parent to judge (``chosen``, else the newest complete of ``backend``'s, else its newest), its
    children, the sweeps newer than it, and whether the default choice found none complete."""
    parent = _chosen_parent(client, experiment_id, name, chosen, uri) if chosen is not None else None
    newer: list[OtherSweep] = []
    newest: tuple[Run, list[Run]] | None = None
    for candidate in parents(client, experiment_id, None if chosen is not None else backend):
        children = list(child_runs(client, experiment_id, candidate.info.run_id))
        if parent is not None and candidate.info.run_id == parent.info.run_id:
            return parent, children, newer, False
        jobs = account(candidate, children, _planned_count(candidate), None)
        if parent is None and jobs.complete:
            return candidate, children, newer, False
        newest = newest or (candidate, children)
        newer.append(OtherSweep(candidate.info.run_id, started_at(candidate), candidate.info.status, jobs.complete,
                                len(jobs.finished), jobs.planned))
    if parent is not None:  # not among the listed parents: a run deleted in the UI
        return parent, list(child_runs(client, experiment_id, parent.info.run_id)), newer, False
    if newest is None:
        raise StoreError(f"experiment {name!r} has no parent run (tag {ROLE}={PARENT}): was it run as a sweep "
                         f"(crux-sweep {name})?")
    return newest[0], newest[1], [], True


def _chosen_parent(client: MlflowClient, experiment_id: str, name: str, run_id: str, uri: str) -> Run:
    """The parent run ``run_id`` of sweep ``name``, or a StoreError saying what it is instead."""
    try:
        run = client.get_run(run_id)
    except MlflowException as error:
        if error.error_code != "RESOURCE_DOES_NOT_EXIST":
            raise
        newest = [f"{p.info.run_id} ({started_at(p)}, {p.info.status})" for _, p in zip(range(3), parents(
            client, experiment_id))]
        raise StoreError(f"no run {run_id} at {uri}; the newest sweeps of {name!r} there: "
                         f"{', '.join(newest) or 'none'}. Pass one of them to --run, or leave --run out for the "
                         f"newest complete sweep") from None
    tags = run.data.tags
    if run.info.experiment_id != experiment_id:
        other = client.get_experiment(run.info.experiment_id).name
        raise StoreError(f"run {run_id} belongs to experiment {other!r}, not {name!r}: crux-report {other} --run "
                         f"{run_id}")
    if tags.get(ROLE) != PARENT:
        sweep = tags.get(PARENT_ID)
        raise StoreError(f"run {run_id} is " + (f"a job of the sweep {sweep}: pass --run {sweep}" if sweep else
                                                f"not a sweep's parent run (tag {ROLE}={PARENT})"))
    return run


def started_at(run: Run) -> str:
    """When ``run`` started, in UTC to the second."""
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime((run.info.start_time or 0) / 1000))


def _read_sweep(client: MlflowClient, name: str, uri: str, experiment_id: str, parent: Run, children: list[Run],
                newer: tuple[OtherSweep, ...], none_complete: bool) -> Sweep:
    unreadable: list[Unreadable] = []
    elsewhere: list[str] = []
    records: list[RunRecord] = []
    with tempfile.TemporaryDirectory(prefix="crux-report-") as scratch:
        plan = _read_plan(client, parent, Path(scratch) / "plan", unreadable)
        jobs = account(parent, children, _planned_count(parent), plan)
        for run in children:
            if run.info.run_id in jobs.finished:
                record = load_record(client, run, Path(scratch) / run.info.run_id, unreadable, elsewhere)
                if record is not None:
                    records.append(record)
    parent_id = parent.info.run_id
    if elsewhere and plan is None and _planned_count(parent) is not None and not client.list_artifacts(parent_id):
        elsewhere.append(parent.info.artifact_uri)  # its plan went where the jobs' artifacts went
        unreadable = [u for u in unreadable if u.run_id != parent_id]
    records.sort(key=lambda r: (r.label, r.repeat, r.run_id))
    unreadable.sort(key=lambda u: (u.label, u.run_id, u.artifact))
    return Sweep(name, uri, experiment_id, parent.info.run_id, dict(parent.data.tags), records, jobs,
                 started_at(parent), newer, none_complete, tuple(unreadable), tuple(sorted(elsewhere)))


def _read_plan(client: MlflowClient, parent: Run, folder: Path, unreadable: list[Unreadable]
          ) -> dict[int, tuple[str, ...]] | None:
    """The parent's ``planned_jobs.json`` as job number -> overrides; None where it recorded no plan."""
    if _planned_count(parent) is None:
        return None
    problems: dict[str, str] = {}
    plan = _read_artifact(client, parent.info.run_id, PLANNED_JOBS, folder,
                          lambda path: plan_from_artifact(json.loads(path.read_text())), problems)
    unreadable.extend(Unreadable(parent.info.run_id, "the sweep's parent run", artifact, problem)
                      for artifact, problem in problems.items())
    return plan


def _read_artifact(client: MlflowClient, run_id: str, artifact: str, folder: Path, parse: Callable[[Path], T],
                   problems: dict[str, str]) -> T | None:
    """``parse`` of the local copy of ``artifact``; None, with what was wrong in ``problems``, when it was not
    logged, could not be fetched or could not be parsed."""
    folder.mkdir(parents=True, exist_ok=True)
    try:
        path = Path(client.download_artifacts(run_id, artifact, str(folder)))
        if not path.is_file():
            raise FileNotFoundError(f"{artifact} was not logged")
        return parse(path)
    except FETCH_ERRORS as error:
        problems[artifact] = f"could not be fetched ({brief(error)})"
    except READ_ERRORS as error:
        problems[artifact] = brief(error)
    return None


def load_record(client: MlflowClient, run: Run, folder: Path, unreadable: list[Unreadable],
                elsewhere: list[str]) -> RunRecord | None:
    """One finished child run as a record: histories from the metric store, arrays from its artifacts.

    Each artifact that cannot be read is added to ``unreadable`` and to the record's own ``unreadable``; a FINISHED
    run none of whose artifacts is there adds its artifact URI to ``elsewhere`` instead (said once for the sweep:
    :attr:`Sweep.artifacts_elsewhere`). None when not even the run's configuration can be told (neither
    ``config.yaml`` nor its params).
    """
    run_id, tags = run.info.run_id, dict(run.data.tags)
    label = tags.get(VARIANT, "") + (f" r{tags[REPEAT]}" if REPEAT in tags else "")
    present = {a.path for a in client.list_artifacts(run_id)}
    expected = CAPACITY_ARTIFACTS if run.data.params.get(CAPACITY_OPTION, "None") != "None" else ARTIFACTS
    # a run closes FINISHED only once its artifacts are written: none there means they are elsewhere now
    gone = not present and run.info.status == FINISHED
    absent = "not in the artifact store, nor any of the run's artifacts: the report's top says why" if gone \
        else "not logged"
    problems = {artifact: absent for artifact in expected if artifact not in present}

    def read(artifact: str, parse: Callable[[Path], T]) -> T | None:
        return _read_artifact(client, run_id, artifact, folder, parse, problems) if artifact in present else None

    config_text = read(CONFIG, lambda path: path.read_text()) or ""
    configured = None
    if CONFIG not in problems:
        try:
            configured = configuration(_typed(OmegaConf.create(config_text)))
        except READ_ERRORS as error:
            problems[CONFIG] = brief(error)
    if configured is None:
        try:
            configured = configuration(config_from_params(run.data.params))
        except READ_ERRORS as error:
            unreadable.append(Unreadable(run_id, label, CONFIG, f"{problems[CONFIG]}; its params do "
                                         f"not give a configuration either ({brief(error)})", judged=False))
            return None
        config_text = ""
    snapshots = read(PARAMS, _arrays) or {}
    stats = read(STATS, Statistics.load)
    environment = read(ENVIRONMENT, lambda path: dict(json.loads(path.read_text()))) or {}
    if gone:
        elsewhere.append(run.info.artifact_uri)
    else:
        unreadable.extend(Unreadable(run_id, label, artifact, problem) for artifact, problem in sorted(problems.items()))
    histories = _histories(client, run, stats)
    return RunRecord(run_id=run_id, histories=histories, metrics=dict(run.data.metrics), snapshots=snapshots,
                     stats=stats, repeat=int(tags.get(REPEAT, 0)), variant=tags.get(VARIANT, ""),
                     tags=tags, params=dict(run.data.params), environment=environment, config=config_text,
                     unreadable=problems, **configured)


def _arrays(path: Path) -> dict[str, np.ndarray]:
    """Every array of an ``.npz`` file, read now (a damaged member fails here, not in a check)."""
    with np.load(path) as arrays:
        return {key: arrays[key] for key in arrays.files}


def _typed(node: DictConfig) -> DictConfig:
    """A resolved config typed by the pipeline's schema, as crux-run saw it (cruxlab.config builds objects from
    typed nodes only)."""
    return OmegaConf.merge(OmegaConf.structured(crux_config.Config), node)


def config_from_params(params: Mapping[str, str]) -> DictConfig:
    """A run's config back from its params (cruxlab.store.params flattens the settings the job ran with):
    dotted keys nest, JSON values (lists, numbers) parse, ``True``/``False`` are Python's, and a value the job
    left unset, which is not logged, is None again; what the job recorded of each network is no setting (left
    out). Typed by the pipeline's schema; raises as it does."""
    tree: dict[str, Any] = {}
    for key, text in as_requested(params).items():
        *path, last = key.split(".")
        node = tree
        for part in path:
            node = node.setdefault(part, {})
        node[last] = _param_value(text)
    cfg = _typed(OmegaConf.create(tree))
    while missing := sorted(OmegaConf.missing_keys(cfg)):
        key = missing[0]
        try:
            OmegaConf.update(cfg, key, None)
        except ValidationError:  # a node none of whose fields was set: its schema's defaults
            OmegaConf.update(cfg, key, {})
    return cfg


def _param_value(text: str) -> Any:
    if text in ("None", "True", "False"):
        return {"None": None, "True": True, "False": False}[text]
    try:
        return json.loads(text)
    except ValueError:
        return text


def _histories(client: MlflowClient, run: Run, stats: Statistics | None) -> dict[str, np.ndarray]:
    """The run's series by step: every epoch of its loss and learning-rate histories from ``stats.npz``, which
    holds them all (a job sends MLflow evenly spaced epochs of them, ``tracking.history_points``), or from the
    store's metrics where that file cannot be read; a paired timing's series (``timing/``) from the store."""
    from_stats = {} if stats is None else {key: np.asarray(values, np.float64)
                                           for key, values in history_series(stats).items()}
    return {**{key: _history(client, run.info.run_id, key) for key in sorted(run.data.metrics)
               if key.startswith(HISTORY_PREFIXES) and key not in from_stats}, **from_stats}


def _history(client: MlflowClient, run_id: str, key: str) -> np.ndarray:
    """Values of ``key`` in step (epoch) order."""
    points = sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
    return np.array([m.value for m in points], np.float64)
