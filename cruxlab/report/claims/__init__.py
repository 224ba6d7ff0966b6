"""The claims: one module per claim, holding its check (a pure function from run records to verdicts) and its
figures (drawn from the same pairings the check uses, with :mod:`cruxlab.report.drawing`).

``CHECKS`` maps a sweep's claim (its ``crux.claim`` tag, which is also the
sweep's name for the built-in sweeps) to its check, ``FIGURES`` to its figures; its keys are also
:data:`cruxlab.store.contract.CHECKED_CLAIMS`, which crux-sweep reads without importing the report. Runs of
another library than crux (``crux.backend``) are judged by the same checks, except those that rely on crux's own
point stream; a run whose library refused an option or fell back from it
gets a "not supported" verdict quoting the library, and no other.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from cruxlab.report import drawing
from cruxlab.report.claims.accumulation import accumulation_figures, check_accumulation
from cruxlab.report.claims.capacity import capacity_figures, check_capacity
from cruxlab.report.claims.checkpoint import check_checkpoint, checkpoint_figures
from cruxlab.report.claims.devices import check_devices, devices_figures
from cruxlab.report.claims.fusion import check_inner_steps, inner_steps_figures
from cruxlab.report.claims.gradient_noise import check_gradient_noise
from cruxlab.report.claims.matmul_precision import check_precision, precision_figures
from cruxlab.report.claims.offload import check_offload, offload_figures
from cruxlab.report.claims.phases import check_phases, phases_figures
from cruxlab.report.claims.resume import check_resume, resume_figures
from cruxlab.report.claims.substeps import check_substeps, substeps_figures
from cruxlab.report.run_records import RunRecord, UnreadableArtifact
from cruxlab.report.verdict import CLAIMS_DOCUMENT, NOT_SUPPORTED, Verdict
from cruxlab.store.contract import CLAIM

CHECKS: dict[str, Callable[[list[RunRecord]], list[Verdict]]] = {
    "accumulation": lambda records: check_accumulation(records) + check_gradient_noise(records),
    "inner_steps": check_inner_steps,
    "checkpoint": check_checkpoint,
    "offload": check_offload,
    "substeps": check_substeps,
    "phases": check_phases,
    "resume": check_resume,
    "devices": check_devices,
    "precision": check_precision,
    "capacity": check_capacity,
}
FIGURES: dict[str, Callable[[list[RunRecord], Path], list[drawing.Figure]]] = {
    "accumulation": accumulation_figures,
    "inner_steps": inner_steps_figures,
    "checkpoint": checkpoint_figures,
    "offload": offload_figures,
    "substeps": substeps_figures,
    "phases": phases_figures,
    "resume": resume_figures,
    "devices": devices_figures,
    "precision": precision_figures,
    "capacity": capacity_figures,
}


def judge(records: Sequence[RunRecord], claims: Sequence[str]) -> list[Verdict]:
    """Run the checks of ``claims`` over ``records``, in the order given.

    Args:
        records: the runs to judge; those a backend could not train (``unsupported``) are judged by no check.
        claims: keys of :data:`CHECKS`.

    Returns:
        The checks' verdicts, claim by claim, then one ``not supported`` verdict per claim and unsupported run.

    Raises:
        ValueError: a claim without a check, before any check runs.
        UnreadableArtifact: a check needed an artifact of a run that could not be read.
    """
    unknown = [c for c in claims if c not in CHECKS]
    if unknown:
        raise ValueError(f"no check for claim(s) {unknown}; known claims: {sorted(CHECKS)}")
    refused = [r for r in records if r.unsupported]
    judged = [r for r in records if not r.unsupported]
    other_library = {r.run_id for r in judged if r.backend != "crux"}
    verdicts = [verdict for claim in claims for verdict in CHECKS[claim](judged)
                if not (verdict.id.startswith(NEEDS_CRUX_POINT_STREAM) and other_library & set(verdict.runs))]
    return verdicts + [_not_supported(claim, r) for claim in claims for r in refused]


NEEDS_CRUX_POINT_STREAM = ("accumulation.effective_batch", "devices.one_batch")
"""Verdicts whose test needs micro-batches that see exactly the points of one batch of N·B (crux's stream);
other libraries draw each micro-batch on their own, and accumulation.noise judges the claim for them."""


def _not_supported(claim: str, record: RunRecord) -> Verdict:
    return Verdict(f"{claim}.supported[{record.label}]", record.tags.get(CLAIM, claim),
                   f"{CLAIMS_DOCUMENT}#not-supported", f"{record.backend} trains {record.label} as configured",
                   NOT_SUPPORTED, f"{record.backend}: {record.unsupported}", runs=(record.run_id,))


def draw(claims: Sequence[str], records: list[RunRecord], out: Path) -> list[drawing.Figure]:
    """Draw the figures of ``claims`` into ``out``.

    Args:
        claims: keys of :data:`FIGURES`.
        records: the sweep's runs, as the checks read them.
        out: the report folder the PNGs are written into.

    Returns:
        The figures, claim by claim; none for a claim whose figures need an artifact that could not be read (its
        verdicts say which).
    """
    figures = []
    for claim in claims:
        try:
            figures += FIGURES[claim](records, out)
        except UnreadableArtifact:
            drawing.pyplot().close("all")
    return figures


__all__ = ["CHECKS", "FIGURES", "check_accumulation", "check_capacity", "check_checkpoint", "check_devices",
           "check_gradient_noise", "check_inner_steps", "check_offload", "check_phases", "check_precision",
           "check_resume", "check_substeps", "draw", "judge"]
