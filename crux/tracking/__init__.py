"""MLflow tracking for crux-run and crux-sweep (the library itself never imports MLflow).

``Multirun`` runs a sweep (crux's Hydra sweeper hands it the multirun): it checks
every job's config and the store, and opens and closes the parent run; ``JobRun``
is the run of one job. The layout is docs/CONTRACT.md's.

Importing this package turns MLflow's usage telemetry off unless
``MLFLOW_DISABLE_TELEMETRY`` is set already (``false`` keeps it on). MLflow 3
starts it when MLflow is imported, in a thread that fetches a configuration from
the internet and, where that fails (a cluster without internet access), removes
an environment variable; a REST call running at that moment iterates the
environment to find proxies and fails with ``KeyError:
'_MLFLOW_TELEMETRY_SESSION_ID'``, failing the job. So the variable must be set
before MLflow's first import: crux's entry points import this package first.
"""
import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from crux.tracking.job import JobRun, ParameterLeaves, parameter_leaves  # noqa: E402 (after the telemetry setting)
from crux.tracking.multirun import Multirun  # noqa: E402

__all__ = ["JobRun", "Multirun", "ParameterLeaves", "parameter_leaves"]
