"""SIGTERM handled like Ctrl-C, so that a stopped job or sweep closes its runs KILLED with what it has.

``timeout``, ``docker stop``, ``kill`` and Slurm at a job's time limit send
SIGTERM, which by default ends Python at once, leaving its runs RUNNING. Within
:func:`interruptible`, SIGTERM raises :class:`Terminated`, a ``KeyboardInterrupt``,
so it takes the path Ctrl-C takes: ``solve()`` keeps the history it synchronised,
the job's run logs it and closes KILLED, the sweep's parent closes KILLED. Signals
after the first are ignored until the outermost :func:`interruptible` ends: they
would break off that closing half way (Slurm follows its SIGTERM with SIGKILL).
Writes to the store are made within :func:`deferred`, where a signal waits until
the write is done: one broken off inside a SQLite transaction can leave the store
locked for the rest of the process.
"""
from __future__ import annotations

import logging
import signal
import threading
from contextlib import contextmanager
from typing import Iterator

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Terminated(KeyboardInterrupt):
    """SIGTERM arrived."""

    def __init__(self) -> None:
        super().__init__("SIGTERM")


_depth = 0
_stopping = False
_deferring = 0
_pending: int | None = None


def _stop(signum: int, frame: object) -> None:
    global _stopping, _pending
    if _stopping:
        log.warning("%s ignored: the runs are being closed", signal.Signals(signum).name)
        return
    if _deferring:
        _pending = signum
        return
    _stopping = True
    raise Terminated() if signum == signal.SIGTERM else KeyboardInterrupt("SIGINT")


@contextmanager
def deferred() -> Iterator[None]:
    """Within: a signal that :func:`interruptible` turns into an exception waits until the block is done."""
    global _deferring, _pending
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if not _deferring and _pending is not None:
            signum, _pending = _pending, None
            _stop(signum, None)


@contextmanager
def interruptible() -> Iterator[None]:
    """Within: SIGINT raises ``KeyboardInterrupt`` and SIGTERM :class:`Terminated`, the first of them only.
    Outside the main thread (where Python cannot handle signals) nothing changes."""
    global _depth, _stopping
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {number: signal.getsignal(number) for number in SIGNALS}
    for number in SIGNALS:
        signal.signal(number, _stop)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            _stopping = False
        for number, handler in previous.items():
            signal.signal(number, handler)


def signal_name(error: KeyboardInterrupt) -> str:
    """``SIGTERM`` or ``SIGINT``: what stopped the process."""
    return "SIGTERM" if isinstance(error, Terminated) else "SIGINT"


def exit_status(error: KeyboardInterrupt) -> int:
    """The shell's status for a process ended by that signal: 128 + its number."""
    return 128 + (signal.SIGTERM if isinstance(error, Terminated) else signal.SIGINT)
