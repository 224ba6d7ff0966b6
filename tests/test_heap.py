"""The collector between jobs: the first job freezes what the process made before it; what jobs leave behind is
still collected, and frozen by no later job. What the commands import is made without collections, and frozen."""
from __future__ import annotations

import gc
import weakref

from crux.pipeline import heap


class Node:
    """An object that can hold itself: a reference cycle, freed only by the collector."""


def tracked(value: object) -> bool:
    """Whether the collector still walks ``value`` (frozen objects are in no generation it collects)."""
    return any(candidate is value for candidate in gc.get_objects())


def test_the_first_job_freezes_what_exists_and_a_cycle_left_by_a_job_is_collected(monkeypatch):
    monkeypatch.setattr(heap, "_frozen", False)  # as in a new process
    before = Node()
    heap.between_jobs()
    assert not tracked(before)  # alive when the first job started: frozen
    frozen = gc.get_freeze_count()

    left = Node()
    left.itself = left  # what a job leaves behind: garbage only the collector frees
    gone = weakref.ref(left)
    kept = Node()
    del left
    heap.between_jobs()
    assert gone() is None
    assert tracked(kept) and gc.get_freeze_count() == frozen  # a later job freezes nothing


def test_what_is_made_while_lasting_is_frozen_and_the_collector_is_on_again():
    assert gc.isenabled()
    with heap.lasting():
        collecting = gc.isenabled()
        made = Node()
    assert not collecting  # no collection walks the imports while they are made
    assert not tracked(made) and gc.isenabled()


def test_lasting_leaves_a_collector_that_was_off_off():
    gc.disable()
    try:
        with heap.lasting():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
