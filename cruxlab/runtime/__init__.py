"""A job's run and a sweep's, for crux-run and crux-sweep (the library itself never imports MLflow).

``Multirun`` runs a sweep (crux's Hydra sweeper hands it the multirun): it checks
every job's config and the store, and opens and closes the parent run; ``JobRun``
is the run of one job. The layout is docs/CONTRACT.md's (:mod:`cruxlab.store`).
"""
from cruxlab.runtime.job import JobRun, ParameterLeaves, parameter_leaves
from cruxlab.runtime.multirun import Multirun

__all__ = ["JobRun", "Multirun", "ParameterLeaves", "parameter_leaves"]
