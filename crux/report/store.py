"""Reading a sweep back from MLflow into run records (the layout of docs/CONTRACT.md).

The solve options, the phase plan and the models each constraint reaches are
read from the run's resolved ``config.yaml`` through the pipeline's own schema
(``crux.config``), so the report judges what was actually configured rather
than re-parsing flattened params.
"""
from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from mlflow.entities import Run
from mlflow.tracking import MlflowClient
from omegaconf import DictConfig, OmegaConf

from crux import config as crux_config
from crux.report.records import PhasePlan, RunRecord, SolveOptions, normalise_substeps
from crux.stats import Statistics
from crux.tracking.store import SQLITE, child_runs, tracking_uri

HISTORY_PREFIXES = ("loss/", "lr/")
# Config keys that are the solve options under test, or only tell repeated jobs apart (a repeat may be a
# round-off twin): runs that differ in nothing else belong to one group and may be paired.
NOT_GROUP = ("memory", "solver.inner_steps", "solver.substeps", "repeat", "roundoff_twin", "variant", "tracking",
             "jax")


@dataclass(frozen=True)
class FailedRun:
    """A job of the sweep that did not finish: listed in the report, never judged."""

    run_id: str
    variant: str
    status: str
    error: str


@dataclass(frozen=True)
class Sweep:
    """A multirun read back: its parent run, its finished runs as records, its failed jobs."""

    name: str
    uri: str
    experiment_id: str
    parent_id: str
    parent_tags: dict[str, str]
    records: list[RunRecord]
    failed: list[FailedRun] = field(default_factory=list)

    @property
    def statement(self) -> str:
        """What the sweep set out to check, in its own words (the sweep file's ``claim``)."""
        return self.parent_tags.get("crux.claim", "")

    @property
    def overrides(self) -> list[str]:
        """The command-line overrides the sweep ran with, without the sweep selection crux-sweep adds."""
        return [o for o in self.parent_tags.get("crux.overrides", "").split() if not o.startswith("+sweeps=")]


def open_client(uri: str | None = None) -> tuple[MlflowClient, str]:
    """A client on ``uri``, else the pipeline's URI (``$MLFLOW_TRACKING_URI``, else mlflow.db at the project root).

    Raises LookupError for a SQLite store that does not exist: opening it would create an empty one.
    """
    resolved = tracking_uri(uri)
    if resolved.startswith(SQLITE) and not Path(resolved[len(SQLITE):]).exists():
        raise LookupError(f"no tracking store at {resolved}: run a sweep first (crux-sweep NAME), or point "
                          f"MLFLOW_TRACKING_URI / --tracking-uri at the store that holds it")
    return MlflowClient(resolved), resolved


def load_sweep(name: str, parent_run_id: str | None = None, uri: str | None = None) -> Sweep:
    """The runs of sweep ``name``: children of ``parent_run_id``, else of its latest parent run.

    Raises LookupError naming what is missing (experiment, parent run, runs).
    """
    client, resolved = open_client(uri)
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        known = sorted(e.name for e in client.search_experiments())
        raise LookupError(f"no experiment named {name!r} at {resolved}; experiments there: {known}. "
                          f"Run `crux-sweep {name}` first, or set MLFLOW_TRACKING_URI")
    if parent_run_id is None:
        parents = client.search_runs([experiment.experiment_id], "tags.`crux.role` = 'parent'",
                                     order_by=["attributes.start_time DESC"], max_results=1)
        if not parents:
            raise LookupError(f"experiment {name!r} has no parent run (tag crux.role=parent): was it run as a sweep?")
        parent = parents[0]
    else:
        parent = client.get_run(parent_run_id)
        if parent.info.experiment_id != experiment.experiment_id:
            raise LookupError(f"run {parent_run_id} belongs to another experiment than {name!r}")
    records, failed = [], []
    with tempfile.TemporaryDirectory(prefix="crux-report-") as scratch:
        for run in child_runs(client, experiment.experiment_id, parent.info.run_id):
            if run.info.status == "FINISHED":
                records.append(load_record(client, run, Path(scratch) / run.info.run_id))
            else:
                tags = run.data.tags
                error = ": ".join(t for t in (tags.get("crux.error_type"), tags.get("crux.error_message")) if t)
                failed.append(FailedRun(run.info.run_id, tags.get("crux.variant", ""), run.info.status,
                                        error or "no error recorded"))
    if not records and not failed:
        raise LookupError(f"parent run {parent.info.run_id} of {name!r} has no child runs")
    records.sort(key=lambda r: (r.label, r.repeat, r.run_id))
    failed.sort(key=lambda f: (f.variant, f.run_id))
    return Sweep(name, resolved, experiment.experiment_id, parent.info.run_id, dict(parent.data.tags), records,
                 failed)


def load_record(client: MlflowClient, run: Run, folder: Path) -> RunRecord:
    """One finished child run as a record: histories from the metric store, arrays from its artifacts."""
    run_id = run.info.run_id
    folder.mkdir(parents=True, exist_ok=True)
    names = {"config.yaml", "environment.json", "stats.npz", "params.npz"}
    present = {a.path for a in client.list_artifacts(run_id)}
    for artifact in sorted(names & present):
        client.download_artifacts(run_id, artifact, str(folder))
    if "config.yaml" not in present or "params.npz" not in present:
        raise LookupError(f"run {run_id} lacks config.yaml or params.npz; it was not written by crux-run")
    config_text = (folder / "config.yaml").read_text()
    # Typed by the pipeline's schema, as crux-run saw it (crux.config builds objects from typed nodes only).
    cfg = OmegaConf.merge(OmegaConf.structured(crux_config.Config), OmegaConf.create(config_text))
    with np.load(folder / "params.npz") as arrays:
        snapshots = {key: arrays[key] for key in arrays.files}
    stats = Statistics.load(folder / "stats.npz") if "stats.npz" in present else None
    environment = json.loads((folder / "environment.json").read_text()) if "environment.json" in present else {}
    histories = {key: _history(client, run_id, key) for key in sorted(run.data.metrics)
                 if key.startswith(HISTORY_PREFIXES)}
    options = solve_options(cfg)
    tags = dict(run.data.tags)
    return RunRecord(run_id=run_id, options=options, histories=histories, metrics=dict(run.data.metrics),
                     snapshots=snapshots, stats=stats, reach=_reach(cfg) if options.substeps else None,
                     phases=phase_plan(cfg), group=group_of(cfg), repeat=int(tags.get("crux.repeat", 0)),
                     roundoff_twin=int(cfg.roundoff_twin),
                     variant=tags.get("crux.variant", ""), tags=tags, params=dict(run.data.params),
                     environment=environment, config=config_text)


def solve_options(cfg: DictConfig) -> SolveOptions:
    """The solve() options of a resolved crux-run config."""
    return SolveOptions(epochs=int(cfg.solver.epochs), batchsize=cfg.memory.batchsize,
                        accumulation_steps=int(cfg.memory.accumulation_steps),
                        inner_steps=int(cfg.solver.inner_steps),
                        checkpoint_gradients=bool(cfg.memory.checkpoint_gradients),
                        offload_data=bool(cfg.memory.offload_data),
                        substeps=normalise_substeps(OmegaConf.to_container(cfg.solver.substeps)
                                                    if cfg.solver.substeps is not None else None))


def phase_plan(cfg: DictConfig) -> tuple[PhasePlan, ...]:
    """Every training phase as configured. crux-run attaches a fresh optimizer when a phase's optimizer or
    schedule differs from the previous phase's, and lets the solver resume otherwise."""
    plan, previous = [], None
    for phase in crux_config.training_phases(cfg):
        fresh = (phase.optimizer, phase.schedule) != previous
        plan.append(PhasePlan(phase.epochs, phase.optimizer.name, phase.schedule.build(phase.epochs), fresh))
        previous = (phase.optimizer, phase.schedule)
    return tuple(plan)


def group_of(cfg: DictConfig) -> str:
    """The configuration apart from the options claims vary: runs with equal groups may be paired."""
    rest: dict[str, Any] = OmegaConf.to_container(cfg, resolve=True)
    for dotted in NOT_GROUP:
        *path, last = dotted.split(".")
        node = rest
        for key in path:
            node = node.get(key, {})
        node.pop(last, None)
    return json.dumps(rest, sort_keys=True)


def _reach(cfg: DictConfig) -> tuple[tuple[str, ...], ...]:
    """Per constraint, the models its residual reaches: traced on the configured problem (no training)."""
    solver = crux_config.problem(cfg).solver()
    return tuple(tuple(sorted(models)) for models in solver.reach)


def _history(client: MlflowClient, run_id: str, key: str) -> np.ndarray:
    """Values of ``key`` in step (epoch) order."""
    points = sorted(client.get_metric_history(run_id, key), key=lambda m: (m.step, m.timestamp))
    return np.array([m.value for m in points], np.float64)
