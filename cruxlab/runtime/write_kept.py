"""Results kept after a store fault (:mod:`cruxlab.runtime.kept`) written into their runs once the store is back.

``crux-sweep NAME --resume`` writes those of a sweep's jobs before it runs anything
(:mod:`cruxlab.runtime.sweep_parent`); ``crux-run --write-kept FOLDER`` writes those of a lone ``crux-run``, which
its last line names, into the store its run is in (the kept results name it, without credentials: those come
from the environment, as for the run itself). Either way the run closes FINISHED with its own history, and the
job is not trained again.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from mlflow.tracking import MlflowClient

from cruxlab.runtime.handover import ARTIFACTS, RESULTS, read_results
from cruxlab.runtime.job import JobRun
from cruxlab.runtime.kept import WRITE_KEPT
from cruxlab.runtime.writer import process_writer
from cruxlab.store.connection import writable_store
from cruxlab.store.contract import FINISHED
from cruxlab.store.faults import PatientClient, StoreFault, recorded_fault


def write_kept(client: MlflowClient, folder: Path, entry: Path) -> JobRun:
    """Write the results kept in ``entry`` into their run, through ``client``, the run's faults recorded in
    ``folder``; the run, closed. StoreFault where the store fails again (the results stay kept)."""
    results = read_results(entry)
    with tempfile.TemporaryDirectory(prefix="crux-kept-") as copy:
        shutil.copytree(entry / ARTIFACTS, Path(copy) / ARTIFACTS)
        run = JobRun.taken_over(client, folder, results, Path(copy) / ARTIFACTS, kept=True)
        process_writer().drain()
    if run.closed != FINISHED:
        fault = recorded_fault(folder)
        raise StoreFault(f"the kept results of job {results.job} could not be written"
                         + (f": {fault['message']}" if fault else "") + f"; they stay in {entry}")
    shutil.rmtree(entry, ignore_errors=True)
    return run


def write_lone_kept(entry: Path) -> str:
    """``crux-run --write-kept FOLDER``: the results a lone run kept in ``entry`` written into its run, in the store
    they name; the line saying so. ValueError where ``entry`` holds no kept results, StoreFault where the store
    fails again."""
    if not (entry / RESULTS).is_file():
        raise ValueError(f"{WRITE_KEPT} {entry}: no results kept there (no {RESULTS}); give the folder the run's last "
                         f"line named")
    store = read_results(entry).store
    if not store:
        raise ValueError(f"{WRITE_KEPT} {entry}: these results are a sweep's: `crux-sweep NAME --resume` writes them")
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")  # the line returned says where it is
    run = write_kept(PatientClient(writable_store(store)), entry.parent.parent, entry)
    return f"the results kept in {entry} are written into run {run.run_id}, closed {FINISHED}"
