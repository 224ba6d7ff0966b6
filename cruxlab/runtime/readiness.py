"""Before a sweep's job trains: its stores take what it will write, else it does not start.

A job trains for minutes and writes at its end; a store that is already away when it would start (a tracking
server killed or stopped between two jobs, an artifact folder turned read-only) would cost that training. So a
sweep's job first has the tracking store's server answer (:func:`wait_for_store`, up to
``tracking.retry_seconds``) and its artifact folder take a file (:func:`check_artifact_store`); a refusal is a
store fault recorded in the sweep's folder (:mod:`cruxlab.store.faults`), and no job starts after it. Only a
job that passes is said to start (:mod:`cruxlab.runtime.launch_lines`: the launcher's line about it).
"""
from __future__ import annotations

from pathlib import Path
from cruxlab.runtime.writer import process_writer
from cruxlab.store.artifacts import check_artifact_folder
from cruxlab.store.faults import StoreFault, patiently, reach, record_fault, recorded_fault

def wait_for_store(uri: str, sweep_dir: Path) -> None:
    """Return once the store's server answers (:func:`cruxlab.store.faults.reach`); where it does not, the writes
    handed over before this job are waited for (they meet the same store, and record its fault), then the server,
    up to the retry budget; StoreFault, recorded in ``sweep_dir``, where it stays away."""
    try:
        reach(uri)
        return
    except OSError:
        process_writer().drain()
    fault = recorded_fault(sweep_dir)
    if fault is not None:
        raise StoreFault(f"not started: {fault['message']}")
    try:
        patiently(lambda: reach(uri), "a connection before the job starts")
    except StoreFault as away:
        record_fault(sweep_dir, None, str(away))
        raise StoreFault(f"not started: {away}") from None


def check_artifact_store(location: str, uri: str, sweep_dir: Path) -> None:
    """StoreFault, recorded in ``sweep_dir``, where the artifact folder ``location`` takes no file
    (:func:`cruxlab.store.artifacts.check_artifact_folder`)."""
    try:
        check_artifact_folder(location, uri)
    except StoreFault as fault:
        record_fault(sweep_dir, None, fault)
        raise StoreFault(f"not started: {fault}", fault.store) from None
