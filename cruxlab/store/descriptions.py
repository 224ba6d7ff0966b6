"""What the MLflow UI shows first: an experiment's kind and description, each run's description, and the
page that lists a sweep's runs.

MLflow keeps the description of an experiment or a run in its tag
``mlflow.note.content`` (Markdown), and an experiment's kind in its tag
``mlflow.experimentKind``: crux's are ``custom_model_development`` (model
training). MLflow 3.17's UI does not open an experiment by that tag, though: a
switch in its sidebar, GenAI (the default) or Model training, which the browser
remembers, decides between the GenAI overview and the runs, and so does
``workflowType`` in the page's address (:func:`runs_page`).
"""
from __future__ import annotations

from typing import Mapping, Sequence
from cruxlab.store.contract import EXPERIMENT_KIND, NOTE
from cruxlab.store.kinds import is_tracking_server

MODEL_TRAINING = "custom_model_development"


def experiment_tags(claim: str) -> dict[str, str]:
    """An experiment of training runs, described by the sweep's claim (if it has one)."""
    tags = {EXPERIMENT_KIND: MODEL_TRAINING}
    if claim.strip():
        tags[NOTE] = " ".join(claim.split())
    return tags


def runs_page(uri: str, experiment_id: str) -> str:
    """The address of the experiment's runs in MLflow's UI: on the tracking server ``uri`` is, else where
    ``mlflow ui`` serves by default."""
    server = uri if is_tracking_server(uri) else "http://127.0.0.1:5000"
    return f"{server.rstrip('/')}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def sweep_description(command: str, verdicts: Sequence[tuple[str, str, str]] = (), report: str = "") -> str:
    """The parent run's description: the command that ran the sweep, then, once crux-report has judged it,
    each verdict as ``(verdict, claim id, finding)`` and where the report was written."""
    lines = [f"`{command}`"] if command else []
    if verdicts:
        lines += ["", "| verdict | claim | finding |", "|---|---|---|"]
        lines += [f"| **{verdict}** | {_cell(claim)} | {_cell(finding)} |" for verdict, claim, finding in verdicts]
    if report:
        lines += ["", f"Report: `{report}`"]
    return "\n".join(lines).strip()


def job_description(variant: str, repeat: int, metrics: Mapping[str, float]) -> str:
    """A job's description: its training time first (what to compare across jobs), then its compile time,
    speed and final loss. MLflow's Duration column spans the whole job, compilation and logging included."""
    def figure(key: str, unit: str = "") -> str:
        return f"`{key}` = {metrics[key]:.3g}{unit}" if key in metrics else f"`{key}` not recorded"

    return "\n".join([
        f"**{variant}**, repeat {repeat}",
        "",
        f"- training: {figure('run_seconds', ' s')}, {figure('steps_per_second')}: compare jobs on these",
        f"- compiling: {figure('compile_seconds', ' s')} (a job whose program an earlier job of its process "
        "compiled, or that the persistent cache holds, compiles little)",
        f"- {figure('final_loss')}",
        "",
        "Duration counts the whole job: start-up, compilation, training and logging.",
    ])
