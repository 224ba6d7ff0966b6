"""What a job returns to the Hydra sweeper that ran it: the value a searching sweeper (Optuna's) minimises.

``objective`` in the job's config names it (:data:`cruxlab.config.OBJECTIVES`): ``final_loss`` (the default),
``error`` (the largest relative L2 error against the problem's exact solution, refused before the run for a
problem without one) or ``run_seconds`` (the training time, compilation left out). Each is also a metric of the
run (``final_loss``, ``error/<field>``, ``run_seconds``).
"""
from __future__ import annotations

import math
from typing import Mapping

from crux.stats import Statistics


def objective_value(objective: str, stats: Statistics, errors: Mapping[str, float]) -> float:
    """The value ``objective`` names, of a job that trained to ``stats`` with relative L2 ``errors`` per field
    (NaN where the problem gave none)."""
    if objective == "error":
        return max(errors.values()) if errors else math.nan
    if objective == "run_seconds":
        return stats.run_seconds
    return stats.final_loss
