"""Where runs go: one absolute tracking URI for every job, experiments created once, the parent run handed on.

As MLflow's own default, the store is ``mlflow.db`` in the working directory;
but jobs of a sweep may start elsewhere (other processes, other nodes), so the
URI is made absolute once and every job receives it with the parent run
(:class:`Destination`).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

from mlflow.entities import Run
from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from crux.tracking.descriptions import experiment_tags

SQLITE = "sqlite:///"
SWEEP_FILE = "crux_mlflow.json"


def tracking_uri(configured: str | None) -> str:
    """``configured``, else ``$MLFLOW_TRACKING_URI``, else ``mlflow.db`` in the working directory.

    A relative SQLite path is made absolute against the working directory of the command that was typed.
    """
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI") or f"{SQLITE}mlflow.db"
    if uri.startswith(SQLITE):
        return f"{SQLITE}{Path(uri[len(SQLITE):]).resolve()}"
    return uri


def experiment_name(configured: str | None, choices: Mapping[str, str | None]) -> str:
    """``configured``, else the sweep's name (Hydra's choice of ``sweeps``), else ``crux``."""
    return configured or choices.get("sweeps") or "crux"


def ensure_experiment(client: MlflowClient, name: str, uri: str, claim: str = "") -> str:
    """The id of experiment ``name``, created (artifacts in ``mlartifacts/`` beside a SQLite store) if absent,
    tagged as training runs described by ``claim`` (:func:`crux.tracking.descriptions.experiment_tags`).

    A multirun calls this once before its jobs; a concurrent creation elsewhere
    (two plain crux-runs) is met by reading the winner's experiment back.
    """
    found = client.get_experiment_by_name(name)
    tags = experiment_tags(claim)
    if found is None:
        location = None
        if uri.startswith(SQLITE):
            location = (Path(uri[len(SQLITE):]).parent / "mlartifacts" / name).as_uri()
        try:
            return client.create_experiment(name, artifact_location=location, tags=tags)
        except MlflowException:
            found = client.get_experiment_by_name(name)
            if found is None:
                raise
    if found.lifecycle_stage == "deleted":  # deleted in the UI: logging into it would fail
        client.restore_experiment(found.experiment_id)
    for key, value in tags.items():
        if found.tags.get(key) != value:
            client.set_experiment_tag(found.experiment_id, key, value)
    return found.experiment_id


def child_runs(client: MlflowClient, experiment_id: str, parent_run_id: str) -> Iterator[Run]:
    """Every run whose ``mlflow.parentRunId`` is ``parent_run_id``, page by page."""
    token = None
    while True:
        page = client.search_runs([experiment_id], f"tags.mlflow.parentRunId = '{parent_run_id}'",
                                  max_results=1000, page_token=token)
        yield from page
        token = page.token
        if not token:
            return


@dataclass
class Destination:
    """Where a job logs: the store, the experiment, the parent run (None for a lone crux-run), and what the
    sweep is (its name, claim and swept keys).

    A multirun keeps it as a file in the sweep's folder, not an environment
    variable: launchers run jobs in fresh processes or on other machines, but
    all of them write into the sweep folder.
    """

    uri: str
    experiment_id: str
    parent_run_id: str | None
    sweep: str
    claim: str
    swept: list[str] = field(default_factory=list)

    def save(self, sweep_dir: Path) -> None:
        sweep_dir.mkdir(parents=True, exist_ok=True)
        (sweep_dir / SWEEP_FILE).write_text(json.dumps(asdict(self), indent=1))

    @staticmethod
    def load(sweep_dir: Path) -> "Destination | None":
        path = sweep_dir / SWEEP_FILE
        return Destination(**json.loads(path.read_text())) if path.exists() else None
