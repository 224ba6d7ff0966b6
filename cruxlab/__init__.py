"""The lab around crux: the pipeline that runs experiments on the library and judges its claims.

:mod:`cruxlab.config` (the job's config: its schema, what it builds, its refusals), :mod:`cruxlab.store` (the
MLflow layout written and read back), :mod:`cruxlab.runtime` (a job's run and a sweep's), :mod:`cruxlab.backends`
(jNO), :mod:`cruxlab.report` (claims and reports), :mod:`cruxlab.commands` (crux-run, crux-sweep); docs/architecture.md
draws the layers. The library, ``crux``, imports none of it.

Importing this package turns MLflow's usage telemetry off unless
``MLFLOW_DISABLE_TELEMETRY`` is set already (``false`` keeps it on). MLflow 3
starts it when MLflow is imported, in a thread that fetches a configuration from
the internet and, where that fails (a cluster without internet access), removes
an environment variable; a REST call running at that moment iterates the
environment to find proxies and fails with ``KeyError:
'_MLFLOW_TELEMETRY_SESSION_ID'``, failing the job. So the variable must be set
before MLflow's first import: every module of the lab is imported after this package.
"""
import os

os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
