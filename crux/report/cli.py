"""``crux-report NAME [--out DIR] [--run PARENT_RUN_ID]``: judge a sweep's claims from its MLflow runs.

    crux-report accumulation                     # latest run of sweeps/accumulation.yaml
    crux-report accumulation --run 3f2c...       # a given parent run
    crux-report my-experiment --claim inner_steps

Writes report.md, verdicts.json and the figures into DIR (default
reports/<sweep>/<UTC time>/ in the working directory), prints the verdicts and
adds them to the description of the sweep's parent run in MLflow.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from mlflow.exceptions import MlflowException
from mlflow.tracking import MlflowClient

from crux.config import import_from_working_directory
from crux.report.claims import CHECKS, judge
from crux.report.document import verdict_table, write_report
from crux.report.figures import draw
from crux.report.store import Sweep, load_sweep
from crux.report.verdict import Verdict
from crux.tracking.descriptions import COMMAND, NOTE, sweep_description


def default_out(sweep: str) -> Path:
    """``reports/<sweep>/<UTC time>/`` in the working directory: a new folder per report, never overwritten."""
    return Path.cwd() / "reports" / sweep / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def claims_of(sweep: Sweep) -> list[str]:
    """The checks the sweep names (its parent run's ``crux.claims`` tag), else its name if that is a check,
    else every check."""
    named = json.loads(sweep.parent_tags.get("crux.claims") or "[]")
    return named or ([sweep.name] if sweep.name in CHECKS else list(CHECKS))


def describe_verdicts(sweep: Sweep, verdicts: list[Verdict], report: Path) -> None:
    """Add the verdicts and the report's path to the description of the sweep's parent run, after the
    command that ran it; a store that refuses is reported, not fatal (the report is written)."""
    text = sweep_description(sweep.parent_tags.get(COMMAND, ""), [(v.verdict, v.id, v.summary) for v in verdicts],
                             str(report))
    try:
        MlflowClient(sweep.uri).set_tag(sweep.parent_id, NOTE, text)
    except MlflowException as error:
        print(f"crux-report: could not describe parent run {sweep.parent_id}: {error}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    """Returns 0 when the report was written (whatever the verdicts), 2 when the sweep could not be read."""
    parser = argparse.ArgumentParser(prog="crux-report", description=__doc__.split("\n")[0])
    parser.add_argument("name", help="the sweep (= MLflow experiment) name, e.g. accumulation")
    parser.add_argument("--out", type=Path, help="output folder (default reports/<sweep>/<UTC time>/)")
    parser.add_argument("--run", dest="parent", help="parent run id (default: the sweep's latest)")
    parser.add_argument("--claim", action="append", choices=sorted(CHECKS),
                        help="claims to judge (repeatable; default: the sweep file's claims, else the sweep's "
                             "name if it is a claim, else all)")
    parser.add_argument("--tracking-uri", help="MLflow URI (default: $MLFLOW_TRACKING_URI, else mlflow.db in the "
                                               "working directory)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one bar per artifact drowns the table
    import_from_working_directory()  # a user's problem, which a substeps check traces
    try:
        sweep = load_sweep(args.name, args.parent, args.tracking_uri)
    except LookupError as error:
        print(f"crux-report: {error}", file=sys.stderr)
        return 2
    claims = args.claim or claims_of(sweep)
    verdicts = judge(sweep.records, claims)
    out = args.out or default_out(sweep.name)
    out.mkdir(parents=True, exist_ok=True)
    figures = draw(claims, sweep.records, out)
    write_report(out, sweep, verdicts, figures, claims)
    print(verdict_table(verdicts))
    print(f"\nreport: {out / 'report.md'}")
    describe_verdicts(sweep, verdicts, out.resolve() / "report.md")
    return 0
