"""The libraries a pipeline job can train with (the ``backend`` config group).

``crux`` is crux's own solver (cruxlab/commands/experiment.py runs it); ``jno`` builds the same
built-in problem in jNO's API and logs the same MLflow layout
(:mod:`cruxlab.backends.jno`, imported only when chosen, so crux never needs jNO).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from omegaconf import DictConfig

from cruxlab.backends.gradient_draws import GradientDraws, crux_gradient_draws, draws_wanted

if TYPE_CHECKING:  # cruxlab.runtime's sweeper checks jobs with this package
    from cruxlab.runtime import JobRun


def run_on_backend(cfg: DictConfig, run: JobRun) -> float:
    """Train the job on its (non-crux) backend, logging into ``run``; returns the final total loss."""
    from cruxlab.backends.jno.pipeline_job import train_and_log  # jNO is imported only here

    return train_and_log(cfg, run)


__all__ = ["GradientDraws", "crux_gradient_draws", "draws_wanted",
           "run_on_backend"]
