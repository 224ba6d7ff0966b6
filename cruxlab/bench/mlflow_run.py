"""A bench run as one MLflow run in experiment ``bench`` (``--mlflow``): a metric per variant and ratio, the files
as artifacts, in the store crux-run writes to (:mod:`cruxlab.store.connection`)."""
from __future__ import annotations

import re
from pathlib import Path

import jax
import mlflow
import numpy as np

from cruxlab.store.connection import ensure_experiment, move_store_credentials, tracking_uri
from cruxlab.store.contract import BENCH, ROLE, SWEEP


def metric_name(text: str) -> str:
    """``text`` with what MLflow refuses in a metric's name replaced by ``_``."""
    return re.sub(r"[^0-9A-Za-z_\-./ ]", "_", text).replace("=", "_")


def log_mlflow(report: dict, out: Path) -> str:
    """One MLflow run in experiment ``bench``: a metric per variant and ratio, the files as artifacts."""
    move_store_credentials(None)
    uri = tracking_uri(None)
    experiment_id = ensure_experiment(mlflow.tracking.MlflowClient(uri), "bench", uri)
    mlflow.set_tracking_uri(uri)
    with mlflow.start_run(experiment_id=experiment_id, run_name=f"bench{'-quick' if report['quick'] else ''}") as run:
        mlflow.set_tags({ROLE: BENCH, SWEEP: "bench"})
        mlflow.log_params({"problems": ",".join(report["problems"]), "quick": report["quick"],
                           "repeats": report["repeats"], "backend": jax.default_backend()})
        metrics = {}
        for name, p in report["problems"].items():
            for vname, r in p.get("variants", {}).items():
                base = metric_name(f"{name}/{vname}")
                metrics[f"{base}/steps_per_second"] = r["steps_per_second"]["median"]
                metrics[f"{base}/cpu_ms_per_step"] = r.get("cpu_ms_per_step", float("nan"))
                if np.isfinite(r.get("compile_seconds", float("nan"))):
                    metrics[f"{base}/compile_seconds"] = r["compile_seconds"]
            for key, value in p.get("ratios", {}).items():
                metrics[metric_name(f"{name}/ratio/{key}")] = value
            for row in p.get("per_update", []):
                metrics[f"{name}/k{row['k']}/us_per_update"] = row["us_per_update"]
                metrics[f"{name}/k{row['k']}/over_k1"] = row["over_k1"]
            for row in p.get("rows", []):
                base = f"{name}/n{row['points']}_w{row['width']}"
                if name == "throughput":
                    base += f"_{row['precision']}"
                    for family in ("crux", "hand"):
                        metrics[f"{base}/{family}_steps_per_second"] = row[family]["steps_per_second"]
                        metrics[f"{base}/{family}_tflops"] = row[family]["tflops"]
                    continue
                metrics[f"{base}/crux_steps_per_second"] = row["crux_steps_per_second"]
                metrics[f"{base}/hand_steps_per_second"] = row["hand_steps_per_second"]
        mlflow.log_metrics({k: float(v) for k, v in metrics.items() if v is not None and np.isfinite(v)})
        for path in sorted(out.iterdir()):
            if path.is_file():
                mlflow.log_artifact(str(path))
        return run.info.run_id
