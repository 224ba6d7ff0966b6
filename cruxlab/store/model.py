"""A job's trained networks as an MLflow model: the run's artifact folder ``model/``, of MLflow's
``python_function`` flavor, so that ``mlflow.pyfunc.load_model("runs:/<run id>/model")`` evaluates them.

The folder holds MLflow's ``MLmodel`` file, the job's resolved ``config.yaml`` and a ``params.npz`` of the final
parameters only (:mod:`crux.params_file`); the flavor's loader is :mod:`cruxlab.trained`, named here by its module
path (it builds the problem, which the store's layer does not import). Written with MLflow's own ``Model`` and
``mlflow.pyfunc.add_to_model``, not ``mlflow.pyfunc.log_model``: no environment is inferred (crux is what it
needs) and nothing is uploaded apart from the job's other artifacts.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from mlflow.models import Model

from crux.params_file import Snapshot, save_params
from cruxlab.store.contract import CONFIG, FINAL, MODEL_LOADER, PARAMS


def write_model(folder: Path, config: Path, final: Snapshot) -> None:
    """Write the model folder ``folder``: MLflow's ``MLmodel``, a copy of the job's ``config`` file and the
    ``final`` parameters (``{model: leaves}``)."""
    import mlflow.pyfunc  # 0.1 s of imports, paid by the writer once a job has trained, not by every start
    folder.mkdir()
    shutil.copyfile(config, folder / CONFIG)
    save_params(folder / PARAMS, {FINAL: final})
    model = Model()
    mlflow.pyfunc.add_to_model(model, loader_module=MODEL_LOADER)
    model.save(folder / "MLmodel")
