"""What became of a sweep's jobs, from its parent's plan and its child runs: finished, missing, and why."""
from __future__ import annotations

import pytest

from cruxlab.report.jobs import NEVER_STARTED, account
from cruxlab.store import contract
from crux_testing import mlflow_run

PLAN = {n: ("+sweeps=accumulation", f"memory={memory}", f"repeat={repeat}")
        for n, (memory, repeat) in enumerate([("b8", 0), ("b8", 1), ("b32", 0), ("b32", 1)])}


def child(run_id: str, job: int, status: str, start_time: int = 0, **error: str):
    tags = {contract.JOB: str(job), contract.VARIANT: PLAN[job][1].split("=")[1], **{f"crux.{k}": v for k, v in error.items()}}
    return mlflow_run(run_id, status, tags, start_time)


def test_a_job_run_again_after_failing_counts_as_finished_with_its_newest_finished_attempt():
    children = [child("b8-0", 0, contract.FINISHED), child("b8-1-first", 1, contract.FAILED, 1, error_type="FloatingPointError",
                                                      error_message="loss is nan"),
                child("b8-1-again", 1, contract.FINISHED, 2), child("b32-0", 2, contract.FINISHED), child("b32-1", 3, contract.FINISHED)]
    jobs = account(mlflow_run("parent", contract.FINISHED), children, 4, PLAN)
    assert jobs.complete and jobs.missing == ()
    assert set(jobs.finished) == {"b8-0", "b8-1-again", "b32-0", "b32-1"}


def test_a_job_run_again_and_stopped_is_missing_with_its_newest_attempts_status_and_reason():
    children = [child("b8-0", 0, contract.FINISHED), child("b8-1-first", 1, contract.FAILED, 1, error_type="FloatingPointError",
                                                      error_message="loss is nan"),
                child("b8-1-again", 1, contract.KILLED, 2), child("b32-0", 2, contract.FINISHED), child("b32-1", 3, contract.FINISHED)]
    (missing,) = account(mlflow_run("parent", contract.KILLED), children, 4, PLAN).missing
    assert (missing.run_id, missing.status) == ("b8-1-again", contract.KILLED)
    assert "loss is nan" not in missing.reason


def test_missing_jobs_say_why_in_job_order_and_only_their_setting_lacks_them():
    children = [child("b8-0", 0, contract.FINISHED), child("b8-1", 1, contract.FAILED, error_type="ValueError",
                                                  error_message="epochs must be >= 1, got 0\nTraceback ..."),
                child("b32-0", 2, contract.KILLED, error_type="KeyboardInterrupt", error_message="")]
    jobs = account(mlflow_run("parent", contract.KILLED), children, 4, PLAN)
    assert not jobs.complete and jobs.planned == 4 and list(jobs.finished) == ["b8-0"]
    assert [(j.name, j.status, j.reason) for j in jobs.missing] == [
        ("job 1 (memory=b8 repeat=1)", contract.FAILED, "ValueError: epochs must be >= 1, got 0"),
        ("job 2 (memory=b32 repeat=0)", contract.KILLED, "interrupted (KeyboardInterrupt)"),
        ("job 3 (memory=b32 repeat=1)", NEVER_STARTED, "no run: the sweep stopped before this job started")]
    assert [j.name for j in jobs.lacking("b8-0")] == ["job 1 (memory=b8 repeat=1)"]


@pytest.mark.parametrize("parent, reason", [
    (contract.RUNNING, "still running, or orphaned if the sweep's process was killed"),
    (contract.KILLED, "orphaned: still RUNNING though its sweep ended KILLED (its process is gone)"),
])
def test_a_job_left_running_is_in_progress_or_orphaned_as_its_sweep_is(parent, reason):
    jobs = account(mlflow_run("parent", parent), [child("b8-0", 0, contract.RUNNING)], 1, {0: PLAN[0]})
    (missing,) = jobs.missing
    assert (missing.status, missing.reason) == (contract.RUNNING, reason)


def test_a_parent_that_did_not_finish_is_incomplete_even_with_every_job_finished():
    jobs = account(mlflow_run("parent", contract.RUNNING), [child("b8-0", 0, contract.FINISHED)], 1, {0: PLAN[0]})
    assert jobs.missing == () and not jobs.complete


def test_without_a_recorded_plan_the_jobs_that_started_are_counted_and_told_apart_by_variant():
    children = [child("b8-0", 0, contract.FINISHED), child("b8-1", 1, contract.KILLED)]
    jobs = account(mlflow_run("parent", contract.KILLED), children, None, None)
    assert (jobs.planned, jobs.plan_recorded) == (2, False)
    assert [j.name for j in jobs.lacking("b8-0")] == ["job 1 (b8)"]
