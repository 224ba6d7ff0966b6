"""A sweep's folder holds a store fault's record only when one happened: the room for it is reserved under a name
that is no JSON, and the record, written into that room, is JSON; the processes of a sweep that record at once
(its driver, its launcher's workers) each find their entry in it."""
from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from cruxlab.store.faults import (FAULT_FILE, RESERVE_FILE, RESERVED_BYTES, record_fault, record_kept,
                                  recorded_fault, reserve_fault_record)


def test_the_record_takes_the_reserved_room_and_is_json_only_once_a_fault_happened(tmp_path):
    reserve_fault_record(tmp_path)
    assert not (tmp_path / FAULT_FILE).exists() and recorded_fault(tmp_path) is None
    assert (tmp_path / RESERVE_FILE).stat().st_size == RESERVED_BYTES
    record_fault(tmp_path, "run-a", "the disk is full")
    assert not (tmp_path / RESERVE_FILE).exists() and not (tmp_path / f"{FAULT_FILE}.part").exists()
    assert (tmp_path / FAULT_FILE).stat().st_size == RESERVED_BYTES  # the room taken, not more
    record_fault(tmp_path, "run-b", "the store is away")  # the first fault stays the sweep's
    assert json.loads((tmp_path / FAULT_FILE).read_text()) == {
        "message": "the disk is full", "runs": {"run-a": "the disk is full", "run-b": "the store is away"}}
    assert (tmp_path / FAULT_FILE).stat().st_size == RESERVED_BYTES
    reserve_fault_record(tmp_path)  # a resumed sweep: the fault is over
    assert not (tmp_path / FAULT_FILE).exists() and recorded_fault(tmp_path) is None


def test_a_record_longer_than_the_room_or_without_one_is_written_whole(tmp_path):
    record_fault(tmp_path, None, "no room was reserved")
    assert recorded_fault(tmp_path) == {"message": "no room was reserved", "runs": {}}
    reserve_fault_record(tmp_path)
    long = "x" * (RESERVED_BYTES + 10)
    record_fault(tmp_path, "run-a", long)
    assert recorded_fault(tmp_path)["runs"] == {"run-a": long}
    assert not (tmp_path / RESERVE_FILE).exists() and not (tmp_path / f"{FAULT_FILE}.part").exists()


def _record_at_once(folder: Path, job: int, everyone_ready, errors) -> None:
    """In a process of its own: once every process is ready, record the fault of run ``run-<job>`` and that job's
    results kept beside the folder; an error goes into ``errors``."""
    everyone_ready.wait(timeout=120)  # a process that never came breaks the barrier: this one ends, failed
    try:
        record_fault(folder, f"run-{job}", f"fault {job}")
        record_kept(folder, job, folder.parent / f"kept-{job}")
    except Exception as error:  # noqa: BLE001 - the test names it
        errors.put(repr(error))


def test_processes_recording_at_once_each_find_their_entry_and_none_fails(tmp_path):
    """Four processes released together into a freshly reserved record (a sweep's driver and its workers meeting
    one read-only folder at once), eight times: none raises, and every run and kept folder is in the record."""
    context = multiprocessing.get_context("forkserver")  # not forked from this process, whose JAX runs threads
    context.set_forkserver_preload(["pytest", "cruxlab.store.faults"])  # imported once, by the server
    for round_ in range(8):
        folder = tmp_path / str(round_)
        folder.mkdir()
        reserve_fault_record(folder)
        everyone_ready, errors = context.Barrier(4), context.Queue()
        processes = [context.Process(target=_record_at_once, args=(folder, job, everyone_ready, errors))
                     for job in range(4)]
        for process in processes:
            process.start()
        for process in processes:
            process.join(timeout=240)
        assert [process.exitcode for process in processes] == [0] * 4
        assert errors.empty(), errors.get()
        recorded = recorded_fault(folder)
        assert recorded["message"] in {f"fault {job}" for job in range(4)}
        assert recorded["runs"] == {f"run-{job}": f"fault {job}" for job in range(4)}
        assert recorded["kept"] == {str(job): str(folder.parent / f"kept-{job}") for job in range(4)}
