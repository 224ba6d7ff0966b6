"""MLflow tracking for crux-run and crux-sweep (the library itself never imports MLflow).

``SweepCallback`` (a Hydra callback) opens and closes the parent run of a
multirun; ``JobRun`` is the run of one job. The layout is docs/CONTRACT.md's.
"""
from crux.tracking.callback import SweepCallback
from crux.tracking.job import JobRun, ParameterLeaves, parameter_leaves

__all__ = ["JobRun", "ParameterLeaves", "SweepCallback", "parameter_leaves"]
