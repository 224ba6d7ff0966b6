"""A thread of the process's own that writes a finished job's results to the store while the next job trains.

A job's results (the histories, ``history.png``, the summary, its artifacts as one
folder) and the closing of its run are requests to the store and a figure to draw:
done on the job's path, they add to every job what the store and the machine make
them cost. A sweep whose jobs run one after another in one process hands them to
this writer instead, one task after another in the order given, and its next job
starts training meanwhile (:class:`cruxlab.runtime.job.JobRun`); a sweep whose jobs
run in other processes has its own writer write what they hand over
(:mod:`cruxlab.runtime.handover`). The process waits
for the writer before it exits and the sweep before it counts its runs
(:meth:`Writer.drain`), so nothing handed over is lost on a normal exit; a task's
failure is its own to record (the run closes FAILED with the reason). Between a job's end and the next job's
training the writer is held (:meth:`Writer.hold`): the previous job's requests and figure, which share the
interpreter with the next job's set-up (Hydra's job files and logging, the collection, the problem's build),
wait for its training, which leaves the interpreter to them, instead of slowing that set-up down. While the
process waits for the writer (:meth:`Writer.drain`: the last job's writes, a single run's) nothing else of it
runs, and a task may start a later one beside it (:class:`Beside`: a job's figure drawn while the store answers
its histories' request).
"""
from __future__ import annotations

import atexit
import logging
import queue
import threading
from typing import Callable

from crux.failures import failure_line
from cruxlab.store.secrets import masked

log = logging.getLogger(__name__)

Task = Callable[[], None]


class Writer:
    """One background thread running the tasks handed to it, in order; started by the first task."""

    def __init__(self) -> None:
        self._tasks: queue.Queue[Task] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._going = threading.Event()
        self._going.set()
        self._draining = threading.Event()

    def submit(self, task: Task) -> None:
        """Run ``task`` after those handed over before it. An exception it lets out is logged in one line, any
        credential in it masked, nothing more: a task records its own failures where they belong."""
        with self._lock:
            if self._thread is None:
                # daemon: a thread blocked on a dead store must not hold the process past its exit handlers,
                # which drain the writer first (process_writer)
                self._thread = threading.Thread(target=self._work, name="crux-tracking-writer", daemon=True)
                self._thread.start()
        self._tasks.put(task)

    def hold(self) -> None:
        """Start no task until :meth:`go_on` or :meth:`drain` (the one under way finishes)."""
        self._going.clear()

    def go_on(self) -> None:
        """Run the tasks again, after :meth:`hold`."""
        self._going.set()

    def drain(self) -> None:
        """Return once every task handed over so far is done; a held writer goes on."""
        self._draining.set()
        self._going.set()
        try:
            self._tasks.join()
        finally:
            self._draining.clear()

    @property
    def draining(self) -> bool:
        """Whether the process waits for the writer (:meth:`drain`), so that nothing else of it runs."""
        return self._draining.is_set()

    def _work(self) -> None:
        while True:
            task = self._tasks.get()
            self._going.wait()
            try:
                task()
            except Exception as error:  # noqa: BLE001 - the thread must outlive a task's unforeseen error
                # one masked line, no traceback: a store URI with its password can be in the error's frames
                log.error("a background tracking write failed: %s", masked(failure_line(error)))
            finally:
                self._tasks.task_done()


class Beside:
    """A task of the writer's that a task before it may start in a thread of its own (:meth:`start`), so that it
    runs while that one waits on the store; :meth:`finish`, where the writer comes to it, waits for it and raises
    what it raised, or runs it there if it was not started."""

    def __init__(self, task: Task) -> None:
        self._task = task
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="crux-tracking-beside", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._task()
        except BaseException as error:  # noqa: BLE001 - raised again by finish(), in the writer's task
            self._error = error

    def finish(self) -> None:
        if self._thread is None:
            self._task()
            return
        self.wait()
        if self._error is not None:
            raise self._error

    def wait(self) -> None:
        """Return once the task started is done (at once where none was started)."""
        if self._thread is not None:
            self._thread.join()


_writer: Writer | None = None
_writer_lock = threading.Lock()


def process_writer() -> Writer:
    """This process's writer, drained when the process exits."""
    global _writer
    with _writer_lock:
        if _writer is None:
            _writer = Writer()
            atexit.register(_writer.drain)
        return _writer
