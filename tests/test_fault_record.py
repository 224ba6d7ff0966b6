"""A sweep's folder holds a store fault's record only when one happened: the room for it is reserved under a name
that is no JSON, and the record, written into that room, is JSON."""
from __future__ import annotations

import json

from cruxlab.store.faults import (FAULT_FILE, RESERVE_FILE, RESERVED_BYTES, record_fault, recorded_fault,
                                  reserve_fault_record)


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
