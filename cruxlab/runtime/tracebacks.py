"""How a failure reaches the terminal: one line (what, and where in the user's code: :mod:`crux.failures`), the
traceback in the job's log file, and the whole traceback on the terminal with Hydra's ``HYDRA_FULL_ERROR=1``.

A job that fails writes its traceback to the job's log file (Hydra's ``<job
folder>/crux.log``) and raises :class:`JobFailed`, whose message is the one line
a sweep shows; a single run exits with it. Hydra prints a config that does not
compose as a message of several lines and exits: crux-run has Hydra hand such
errors back instead (:func:`errors_raised_by_hydra`), so that it can say a field
the problem does not take in one line of its own.
"""
from __future__ import annotations

import logging
import os
import traceback
from contextlib import contextmanager
from typing import Iterator

from crux.failures import failure_line

FULL_ERROR = "HYDRA_FULL_ERROR"
"""Hydra's switch: set to 1, Hydra raises what it would report, and crux shows tracebacks on the terminal."""
HANDED_BACK = "CRUX_HYDRA_RAISES"
"""Set while crux (not the user) has set :data:`FULL_ERROR`, in this process and the jobs it starts."""


class JobFailed(Exception):
    """A job's failure in one line: the error, where the user's code raised it, and the log file holding its
    traceback. Raised from the job's own exception."""


def tracebacks_shown() -> bool:
    """Whether the user asked for tracebacks on the terminal (``HYDRA_FULL_ERROR=1``)."""
    return os.environ.get(FULL_ERROR) == "1" and HANDED_BACK not in os.environ


@contextmanager
def errors_raised_by_hydra() -> Iterator[None]:
    """While Hydra runs, have it raise what it would print (``HYDRA_FULL_ERROR=1``), unless the user set that
    switch; the environment as it was afterwards."""
    if FULL_ERROR in os.environ:
        yield
        return
    os.environ.update({FULL_ERROR: "1", HANDED_BACK: "1"})
    try:
        yield
    finally:
        del os.environ[FULL_ERROR], os.environ[HANDED_BACK]


def job_failed(error: BaseException) -> JobFailed:
    """``error`` as :class:`JobFailed`, its traceback written to the job's log files, those of the root logger's
    file handlers (to the terminal when the job has none)."""
    files = [handler for handler in logging.getLogger().handlers if isinstance(handler, logging.FileHandler)]
    record = logging.LogRecord(__name__, logging.ERROR, __file__, 0, "the job failed", None,
                               (type(error), error, error.__traceback__))
    for handler in files:
        handler.handle(record)
    if not files:
        traceback.print_exception(error)
    where = f"; traceback in {', '.join(handler.baseFilename for handler in files)}" if files else ""
    return JobFailed(f"{failure_line(error)}{where}")


def one_line(error: BaseException) -> str:
    """An error's message on one line (Hydra's config errors run over several), or its type where it has none."""
    return " ".join(str(error).split()) or type(error).__name__
