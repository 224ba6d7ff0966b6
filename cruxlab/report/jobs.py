"""What became of a sweep's jobs: which were planned, which finished, and why the others did not.

The parent run of a sweep records the jobs it plans (tag ``crux.planned_jobs``,
artifact ``planned_jobs.json``: each job's number and overrides) and every child
run carries its job's number (``crux.job``), as docs/CONTRACT.md lays out. A job
may have been attempted more than once under one parent (a resumed sweep runs
its unfinished jobs again): its newest finished attempt is the one judged, and a
job without one is missing, for the reason its newest attempt gives (FAILED with
its error, KILLED, still RUNNING) or because it never started. A sweep is
complete when its parent run FINISHED and no planned job is missing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from mlflow.entities import Run
from cruxlab.store.contract import ERROR_MESSAGE, ERROR_TYPE, FAILED, FINISHED, JOB, KILLED, RUNNING, VARIANT

NEVER_STARTED = "never started"
ERROR_CHARS = 300  # an error's first line, cut here: the report names it, the run's tags keep all of it


@dataclass(frozen=True)
class MissingJob:
    """A planned job without a finished run: ``status`` is its newest attempt's (or ``never started``),
    ``reason`` says what that means; ``overrides`` are those that tell it from the sweep's other jobs
    (empty where no plan was recorded)."""

    job: int | None
    overrides: tuple[str, ...]
    variant: str
    run_id: str | None
    status: str
    reason: str

    @property
    def name(self) -> str:
        """``job 3 (memory=b32 repeat=1)``."""
        what = " ".join(self.overrides) or self.variant
        number = f"job {self.job}" if self.job is not None else f"run {self.run_id}"
        return f"{number} ({what})" if what else number


@dataclass(frozen=True)
class JobAccount:
    """The jobs of one sweep: ``planned`` counts them (the jobs that started where the parent recorded no
    plan), ``finished`` maps the run id of each finished job's judged attempt to the job's setting (its
    overrides apart from ``repeat``), ``missing`` lists the rest."""

    parent_status: str
    planned: int
    plan_recorded: bool
    finished: dict[str, str] = field(default_factory=dict)
    missing: tuple[MissingJob, ...] = ()
    missing_settings: dict[str, tuple[MissingJob, ...]] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        """The parent run FINISHED and every planned job has a finished run."""
        return self.parent_status == FINISHED and not self.missing

    def lacking(self, run_id: str) -> tuple[MissingJob, ...]:
        """The missing jobs of the setting that ``run_id`` belongs to: the repeats a verdict using it lacks."""
        return self.missing_settings.get(self.finished.get(run_id, ""), ())


def plan_from_artifact(entries: Sequence[dict]) -> dict[int, tuple[str, ...]]:
    """``planned_jobs.json`` (``[{"job": n, "overrides": [...]}, ...]``) as job number -> overrides."""
    return {int(entry["job"]): tuple(str(o) for o in entry["overrides"]) for entry in entries}


def account(parent: Run, children: Iterable[Run], planned: int | None,
            plan: dict[int, tuple[str, ...]] | None) -> JobAccount:
    """What became of each job of ``parent``. ``planned`` is its ``crux.planned_jobs`` tag (None if absent);
    ``plan`` its planned overrides by job number (None if unknown: jobs are then told apart by variant)."""
    varying = _varying_keys((plan or {}).values())
    plan = {number: tuple(o for o in overrides if o.partition("=")[0] in varying)
            for number, overrides in (plan or {}).items()}
    attempts: dict[object, list[Run]] = {}
    for run in children:
        number = run.data.tags.get(JOB)
        key = int(number) if number is not None and number.isdigit() else run.info.run_id
        attempts.setdefault(key, []).append(run)
    numbers = set(range(planned)) if planned is not None else set()
    keys = sorted(numbers | set(attempts), key=lambda k: (isinstance(k, str), k))
    finished: dict[str, str] = {}
    missing: list[MissingJob] = []
    for key in keys:
        runs = sorted(attempts.get(key, ()), key=lambda r: (r.info.start_time or 0, r.info.run_id), reverse=True)
        done = [r for r in runs if r.info.status == FINISHED]
        number = key if isinstance(key, int) else None
        overrides = plan.get(number, ()) if number is not None else ()
        variant = runs[0].data.tags.get(VARIANT, "") if runs else ""
        if done:
            finished[done[0].info.run_id] = _setting(overrides, variant)
        elif runs:
            newest = runs[0]
            missing.append(MissingJob(number, overrides, variant, newest.info.run_id, newest.info.status,
                                      _reason(newest, parent.info.status)))
        else:
            missing.append(MissingJob(number, overrides, variant, None, NEVER_STARTED,
                                      "no run: the sweep stopped before this job started"))
    settings: dict[str, tuple[MissingJob, ...]] = {}
    for job in missing:
        key = _setting(job.overrides, job.variant)
        settings[key] = settings.get(key, ()) + (job,)
    return JobAccount(parent.info.status, planned if planned is not None else len(keys), planned is not None,
                      finished, tuple(missing), settings)


def _setting(overrides: Sequence[str], variant: str) -> str:
    """Jobs that differ only in ``repeat`` are repeats of one setting: their overrides without it, or, where
    no plan was recorded, their variant (which leaves the repeat out too)."""
    if not overrides:
        return f"variant {variant}"
    return " ".join(o for o in overrides if o.split("=", 1)[0].lstrip("+~") != "repeat")


def _varying_keys(jobs: Iterable[Sequence[str]]) -> set[str]:
    """The override keys whose values differ between ``jobs``: what tells one job from another."""
    values: dict[str, set[str]] = {}
    for overrides in jobs:
        for override in overrides:
            key, _, value = override.partition("=")
            values.setdefault(key, set()).add(value)
    return {key for key, seen in values.items() if len(seen) > 1}


def _reason(run: Run, parent_status: str) -> str:
    """Why a job's newest attempt did not finish, in words."""
    tags, status = run.data.tags, run.info.status
    error = ": ".join(t for t in (tags.get(ERROR_TYPE), tags.get(ERROR_MESSAGE)) if t)
    error = error.strip().splitlines()[0][:ERROR_CHARS] if error.strip() else ""
    if status == FAILED:
        return error or "FAILED, no error recorded"
    if status == KILLED:
        return f"interrupted ({error})" if error else "interrupted"
    if status == RUNNING:
        if parent_status == RUNNING:
            return "still running, or orphaned if the sweep's process was killed"
        return f"orphaned: still RUNNING though its sweep ended {parent_status} (its process is gone)"
    return f"{status}: it never ran to the end"
