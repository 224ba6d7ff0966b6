"""A job of a pool's worker runs in a process of its own: what it returns or raises is the caller's, and its
process's death is that job's failure alone, said in the user's words (``cruxlab.runtime.job_process``)."""
from __future__ import annotations

import os
import signal

import pytest

from cruxlab.runtime.job_process import InOwnProcess, JobProcessKilled

# JAX's warning where an earlier test started it, and Python's (3.12 on) where a thread of pytest's runs
pytestmark = [pytest.mark.filterwarnings("ignore:os.fork"), pytest.mark.filterwarnings("ignore:This process")]
ELSEWHERE = -1
"""A sweep's process id that is not this process's: called here, as in a worker of the sweep's pool."""


class Refused(Exception):
    pass


def refuse(cfg):
    raise Refused(f"no {cfg}")


def test_the_job_runs_in_a_child_and_its_value_comes_back():
    pid = InOwnProcess(lambda cfg: (os.getpid(), os.getppid(), cfg), ELSEWHERE)("cfg")
    assert pid[0] != os.getpid() and pid[1:] == (os.getpid(), "cfg")


def test_called_in_the_sweeps_own_process_the_job_runs_there():
    assert InOwnProcess(lambda cfg: os.getpid())("cfg") == os.getpid()


def test_the_jobs_exception_is_raised_in_the_caller():
    with pytest.raises(Refused, match="^no cfg$"):
        InOwnProcess(refuse, ELSEWHERE)("cfg")


def test_a_killed_job_process_is_its_jobs_failure_in_one_line():
    with pytest.raises(JobProcessKilled, match=r"^its process \(pid \d+\) was killed by SIGKILL, as the kernel's "
                                               r"out-of-memory killer does; the jobs of the other workers go on$"):
        InOwnProcess(lambda cfg: os.kill(os.getpid(), signal.SIGKILL), ELSEWHERE)("cfg")


def test_a_job_process_that_exits_without_a_word_says_its_status():
    with pytest.raises(JobProcessKilled, match=r"^its process \(pid \d+\) ended with exit status 3 before the job "
                                               r"returned$"):
        InOwnProcess(lambda cfg: os._exit(3), ELSEWHERE)("cfg")
