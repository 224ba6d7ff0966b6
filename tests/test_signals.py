"""Within crux's runs SIGTERM stops a job as Ctrl-C does, once: later signals wait for the runs to be closed,
and a write to the store is never broken off half way."""
from __future__ import annotations

import os
import signal

import pytest

from cruxlab.runtime.interrupt import Terminated, deferred, exit_status, interruptible, signal_name


def test_sigterm_raises_terminated_once_and_later_signals_wait_for_the_closing():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated) as stopped:
        with interruptible():
            os.kill(os.getpid(), signal.SIGTERM)
    assert isinstance(stopped.value, KeyboardInterrupt)
    assert (signal_name(stopped.value), exit_status(stopped.value)) == ("SIGTERM", 143)

    with interruptible():
        try:
            with interruptible():  # a job inside a sweep, both in one process
                os.kill(os.getpid(), signal.SIGINT)
        except KeyboardInterrupt as error:
            assert (signal_name(error), exit_status(error)) == ("SIGINT", 130)
        os.kill(os.getpid(), signal.SIGTERM)  # while the sweep closes its runs: ignored
        os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_signal_during_a_store_write_is_raised_when_the_write_is_done():
    written = []
    with pytest.raises(Terminated):
        with interruptible():
            with deferred():
                os.kill(os.getpid(), signal.SIGTERM)
                written.append("all of it")
    assert written == ["all of it"]
