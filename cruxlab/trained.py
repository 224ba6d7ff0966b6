"""A finished run's networks back, ready to evaluate: the problem its config names, built as its job built it, its
models holding the parameters the run logged.

    problem = load_run("runs:/<run id>")          # or a run id, or a folder holding config.yaml and params.npz
    problem.models["u"](points)                    # (N, 1)
    problem.relative_l2()                          # the run's error/u, to the bit on the machine it ran on

Every crux-run job also logs its networks as an MLflow model (:mod:`cruxlab.store.model`), whose loader is this
module: ``mlflow.pyfunc.load_model("runs:/<run id>/model").predict(points)`` gives a table of the problem's fields
at the points (:class:`TrainedModel`).
"""
from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pandas as pd
from mlflow.exceptions import MlflowException
from omegaconf import OmegaConf

from crux.params_file import load_params
from crux.problems import Problem
from cruxlab.config import ModelConfig, build_problem, import_from_working_directory
from cruxlab.report.sweep_reader import open_client
from cruxlab.store.connection import READING, bounded_http, store_errors
from cruxlab.store.contract import CONFIG, FINAL, PARAMS

RUN_ID = re.compile(r"[0-9a-f]{32}")


def load_run(run: str | os.PathLike, tracking_uri: str | None = None, when: str = FINAL) -> Problem:
    """The problem a crux-run job trained, its models holding the parameters of snapshot ``when``.

    Args:
        run: ``runs:/<run id>`` (``runs:/<run id>/model``: the run's MLflow model folder), a run id, or a folder
            holding a run's ``config.yaml`` and ``params.npz`` (its artifacts, downloaded).
        tracking_uri: the store that holds the run: by default ``$MLFLOW_TRACKING_URI``, else ``mlflow.db`` in the
            working directory (as crux-run).
        when: the snapshot: ``final``, ``initial`` (before training) or ``phase<k>`` (after the k-th phase, from
            0).

    Returns:
        The :class:`crux.problems.Problem` of the run's config (its ``problem._target_`` called as the job called
        it), its ``models`` set to the run's parameters.

    Raises:
        StoreError: the store cannot be read.
        ValueError: no such run or folder, a run that trained nothing crux can load (a jNO run, a capacity job, a
            run that failed before training), or parameters of another network than the config builds.
    """
    if Path(run).is_dir():
        return trained_problem(Path(run), when)
    run_id, _, path = str(run).removeprefix("runs:/").partition("/")
    if not RUN_ID.fullmatch(run_id):
        raise ValueError(f"load_run: {str(run)!r} is neither a folder nor a run (runs:/<run id>, or the run id's "
                         f"32 hexadecimal digits)")
    with bounded_http():
        client, uri = open_client(tracking_uri)
        with store_errors(uri, READING), tempfile.TemporaryDirectory(prefix="crux-load-") as folder:
            try:
                client.get_run(run_id)
            except MlflowException as error:
                if error.error_code != "RESOURCE_DOES_NOT_EXIST":
                    raise
                raise ValueError(f"load_run: no run {run_id} in {uri}; pass tracking_uri= (or set "
                                 f"MLFLOW_TRACKING_URI) to the store that holds it") from None
            path = path.strip("/")
            logged = {entry.path for entry in client.list_artifacts(run_id, path or None)}
            for name in (CONFIG, PARAMS):
                artifact = f"{path}/{name}" if path else name
                if artifact not in logged:
                    raise ValueError(f"load_run: run {run_id} logged no {artifact}: {_why_none(client, run_id)}")
                downloaded = Path(client.download_artifacts(run_id, artifact, folder)).parent
            return trained_problem(downloaded, when)


def _why_none(client: mlflow.MlflowClient, run_id: str) -> str:
    """Why a run has no parameters to load, from its params and status."""
    run = client.get_run(run_id)
    if run.data.params.get("backend.name", "crux") != "crux":
        return f"it trained on {run.data.params['backend.name']}, whose networks crux does not build"
    if "capacity.option" in run.data.params:
        return "a capacity job trains nothing"
    return f"it closed {run.info.status} before it trained" if run.info.status != "RUNNING" else "it is still running"


def trained_problem(folder: Path, when: str = FINAL) -> Problem:
    """The problem a job's folder holds, built as the job built it.

    Args:
        folder: a folder holding a job's resolved ``config.yaml`` and its ``params.npz``.
        when: the snapshot, as :func:`load_run` takes it.

    Returns:
        The problem of ``config.yaml``, its models set to snapshot ``when`` of ``params.npz``.

    Raises:
        ValueError: a file missing, a run trained on another library, or as :func:`crux.load_params` raises.
    """
    for name in (CONFIG, PARAMS):
        if not (folder / name).is_file():
            raise ValueError(f"load_run: {folder} holds no {name}; a run's folder holds its config.yaml and "
                             f"params.npz")
    cfg = OmegaConf.load(folder / CONFIG)
    if OmegaConf.select(cfg, "backend.name", default="crux") != "crux":
        raise ValueError(f"load_run: {folder / CONFIG} trained on {cfg.backend.name}, whose networks crux does "
                         f"not build")
    import_from_working_directory()  # a problem of one's own, as crux-run finds it
    model = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(ModelConfig), cfg.model))
    problem = build_problem(cfg.problem, model, cfg.solver.seed)
    load_params(folder / PARAMS, problem.models, when)
    return problem


class TrainedModel:
    """A run's trained problem as MLflow's ``python_function`` model: :meth:`predict` evaluates it."""

    def __init__(self, problem: Problem):
        self.problem = problem

    def predict(self, model_input: Any, params: dict[str, Any] | None = None) -> pd.DataFrame:
        """The problem's fields at some points.

        Args:
            model_input: the points: an array, list or table of ``(N, in_dim)`` coordinates.
            params: MLflow's inference parameters (unused).

        Returns:
            A table of one row per point and a column per field (``u``; a problem without ``predict`` fields: a
            column per model output, ``<model>`` or ``<model>[j]``).
        """
        points = np.asarray(model_input.to_numpy() if isinstance(model_input, pd.DataFrame) else model_input,
                            np.float32)
        if self.problem.predict:
            return pd.DataFrame({name: np.asarray(field(self.problem.models, points))
                                 for name, field in self.problem.predict.items()})
        columns = {}
        for name, network in self.problem.models.items():
            values = np.asarray(network(points))
            columns.update({name if values.shape[1] == 1 else f"{name}[{j}]": values[:, j]
                            for j in range(values.shape[1])})
        return pd.DataFrame(columns)


def _load_pyfunc(path: str) -> TrainedModel:
    """MLflow's entry point for the model folder at ``path`` (:mod:`cruxlab.store.model`)."""
    return TrainedModel(trained_problem(Path(path)))
