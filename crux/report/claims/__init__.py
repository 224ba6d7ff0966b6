"""The claim checks: pure functions from run records to verdicts, one module per claim.

``CHECKS`` maps a sweep's claim (its ``crux.claim`` tag, which is also the
sweep's name for the built-in sweeps) to its check.
"""
from __future__ import annotations

from typing import Callable, Sequence

from crux.report.claims.accumulation import check_accumulation
from crux.report.claims.checkpoint import check_checkpoint
from crux.report.claims.fusion import check_inner_steps
from crux.report.claims.offload import check_offload
from crux.report.claims.phases import check_phases
from crux.report.claims.resume import check_resume
from crux.report.claims.substeps import check_substeps
from crux.report.records import RunRecord
from crux.report.verdict import Verdict

CHECKS: dict[str, Callable[[list[RunRecord]], list[Verdict]]] = {
    "accumulation": check_accumulation,
    "inner_steps": check_inner_steps,
    "checkpoint": check_checkpoint,
    "offload": check_offload,
    "substeps": check_substeps,
    "phases": check_phases,
    "resume": check_resume,
}


def judge(records: Sequence[RunRecord], claims: Sequence[str]) -> list[Verdict]:
    """Run the checks of ``claims`` (keys of ``CHECKS``) over ``records``, in the order given."""
    unknown = [c for c in claims if c not in CHECKS]
    if unknown:
        raise ValueError(f"no check for claim(s) {unknown}; known claims: {sorted(CHECKS)}")
    return [verdict for claim in claims for verdict in CHECKS[claim](list(records))]


__all__ = ["CHECKS", "check_accumulation", "check_checkpoint", "check_inner_steps", "check_offload", "check_phases",
           "check_resume", "check_substeps", "judge"]
