"""Claim reports: read a sweep's runs back, judge each claim, write report.md, figures and verdicts.json.

The checks (:mod:`cruxlab.report.claims`) are pure functions of run records, so
they run as well on records made straight from solves (:func:`record_from_solve`)
as on a sweep read from MLflow (:func:`load_sweep`).
"""
from cruxlab.report.claims import CHECKS, judge
from cruxlab.report.cli import main
from cruxlab.report.coverage import judge_sound
from cruxlab.report.document import report_markdown, verdicts_json, write_report
from cruxlab.report.run_records import PhaseCall, RunRecord, SolveOptions, UnreadableArtifact, record_from_solve
from cruxlab.report.sweep_reader import StoreError, Sweep, load_sweep
from cruxlab.report.verdict import FAILS, HOLDS, INCONCLUSIVE, NO_EFFECT, NOT_SUPPORTED, Verdict

__all__ = ["CHECKS", "FAILS", "HOLDS", "INCONCLUSIVE", "NO_EFFECT", "NOT_SUPPORTED", "PhaseCall", "RunRecord", "SolveOptions", "StoreError", "Sweep",
           "UnreadableArtifact", "Verdict", "judge", "judge_sound", "load_sweep", "main", "record_from_solve",
           "report_markdown", "verdicts_json", "write_report"]
