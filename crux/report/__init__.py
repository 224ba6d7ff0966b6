"""Claim reports: read a sweep's runs back, judge each claim, write report.md, figures and verdicts.json.

The checks (:mod:`crux.report.claims`) are pure functions of run records, so
they run as well on records made straight from solves (:func:`record_from_solve`)
as on a sweep read from MLflow (:func:`load_sweep`).
"""
import cruxlab  # noqa: F401 (first: it keeps MLflow's telemetry off, which must be set before MLflow loads)
from crux.report.claims import CHECKS, judge
from crux.report.cli import main
from crux.report.coverage import judge_sound
from crux.report.document import report_markdown, verdicts_json, write_report
from crux.report.records import PhasePlan, RunRecord, SolveOptions, UnreadableArtifact, record_from_solve
from crux.report.store import StoreError, Sweep, load_sweep
from crux.report.verdict import FAILS, HOLDS, INCONCLUSIVE, NO_EFFECT, NOT_SUPPORTED, Verdict

__all__ = ["CHECKS", "FAILS", "HOLDS", "INCONCLUSIVE", "NO_EFFECT", "NOT_SUPPORTED", "PhasePlan", "RunRecord", "SolveOptions", "StoreError", "Sweep",
           "UnreadableArtifact", "Verdict", "judge", "judge_sound", "load_sweep", "main", "record_from_solve",
           "report_markdown", "verdicts_json", "write_report"]
