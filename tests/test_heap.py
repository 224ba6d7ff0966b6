"""The collector between jobs: the first job freezes what the process made before it; what jobs leave behind is
still collected, and frozen by no later job. What the commands import is made without collections, and frozen.
A command that is done ends without the interpreter's teardown, unless a thread would hold a normal exit."""
from __future__ import annotations

import gc
import subprocess
import sys
import weakref

import pytest

from cruxlab.commands import heap

ENDING = """
import atexit, sys, threading
from cruxlab.commands import heap

class Noisy:
    def __del__(self):  # runs when the interpreter's teardown frees the module's objects
        print("torn down", flush=True)

kept = Noisy()
atexit.register(print, "exit handler")
sys.stdout.write("buffered ")  # no newline: still in the stream's buffer
if sys.argv[1:] == ["thread"]:
    gate = threading.Event()
    threading.Thread(target=gate.wait).start()  # not a daemon: a normal exit waits for it
heap.exit_without_teardown()
print("returned")
gate.set()
"""


class Node:
    """An object that can hold itself: a reference cycle, freed only by the collector."""


def tracked(value: object) -> bool:
    """Whether the collector still walks ``value`` (frozen objects are in no generation it collects)."""
    return any(candidate is value for candidate in gc.get_objects())


@pytest.fixture
def unfrozen_after():
    """The test process's objects back in the collector's generations once the test is done."""
    yield
    gc.unfreeze()


def test_the_first_job_freezes_what_exists_and_a_cycle_left_by_a_job_is_collected(monkeypatch, unfrozen_after):
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
    # a later job freezes nothing: ``kept`` is walked still, and no object joined the frozen ones (some of which
    # another thread of the process may have freed meanwhile)
    assert tracked(kept) and gc.get_freeze_count() <= frozen


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


@pytest.mark.integration
def test_a_process_ends_with_its_exit_handlers_and_its_output_but_without_the_teardown():
    done = subprocess.run([sys.executable, "-c", ENDING], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "buffered exit handler\n"


@pytest.mark.integration
def test_a_thread_that_a_normal_exit_waits_for_leaves_the_exit_to_the_interpreter():
    done = subprocess.run([sys.executable, "-c", ENDING, "thread"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "buffered returned\nexit handler\ntorn down\n"
