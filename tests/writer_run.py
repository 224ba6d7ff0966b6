"""A job's results handed to a background writer, against a client that fails or waits on its upload:

    python tests/writer_run.py STORE_URI RUN_ID   # the process's writer; the upload waits for a line on stdin

The process prints ``handed over`` once the job's run is left (its closing handed to the writer), then ends.
"""
from __future__ import annotations

import sys
import threading
from typing import Any, Callable

import numpy as np
from mlflow.tracking import MlflowClient

from crux.stats import Statistics
from cruxlab.runtime.job import JobRun
from cruxlab.store.contract import HISTORY_PLOT, PARAMS, STATS

EPOCHS = 40
ARTIFACTS = {HISTORY_PLOT, PARAMS, STATS}


class Upload:
    """An MlflowClient whose artifact upload first calls ``before`` (which may wait, or raise as a full disk or a
    refused request would)."""

    def __init__(self, client: MlflowClient, before: Callable[[], None]):
        self._client, self._before = client, before

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def log_artifacts(self, run_id: str, folder: str, artifact_path: str | None = None) -> None:
        self._before()
        self._client.log_artifacts(run_id, folder, artifact_path)


def finish_a_job(run: JobRun) -> None:
    """What a job logs once trained: a loss history of ``EPOCHS`` epochs and a model's parameters."""
    losses = np.geomspace(1.0, 1e-3, EPOCHS)[:, None].astype(np.float32)
    stats = Statistics(["pde"], losses, np.arange(EPOCHS), run_seconds=1.0)
    leaves = {"u": [np.ones(3, np.float32)]}
    run.log_outcome(stats, {}, leaves, [], leaves)


def main(uri: str, run_id: str) -> None:
    released = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.readline(), released.set()), daemon=True).start()
    with JobRun(Upload(MlflowClient(uri), released.wait), run_id, "default", 0, overlap=True) as run:
        finish_a_job(run)
    print("handed over", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
