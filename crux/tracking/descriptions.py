"""What the MLflow UI shows first: an experiment's kind and description, and each run's description.

MLflow keeps the description of an experiment or a run in its tag
``mlflow.note.content`` (Markdown). MLflow 3's UI opens an experiment on its GenAI
overview unless the experiment tag ``mlflow.experimentKind`` says it holds model
training (``custom_model_development``), so crux's experiments say that.
"""
from __future__ import annotations

from typing import Mapping, Sequence

NOTE = "mlflow.note.content"
EXPERIMENT_KIND = "mlflow.experimentKind"
MODEL_TRAINING = "custom_model_development"
COMMAND = "crux.command"
"""The parent run's tag holding the command that ran the sweep."""


def experiment_tags(claim: str) -> dict[str, str]:
    """An experiment of training runs, described by the sweep's claim (if it has one)."""
    tags = {EXPERIMENT_KIND: MODEL_TRAINING}
    if claim.strip():
        tags[NOTE] = " ".join(claim.split())
    return tags


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
