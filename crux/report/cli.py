"""``crux-report NAME [--out DIR] [--run PARENT_RUN_ID]``: judge a sweep's claims from its MLflow runs.

    crux-report accumulation                     # latest run of sweeps/accumulation.yaml
    crux-report accumulation --run 3f2c...       # a given parent run
    crux-report my-experiment --claim inner_steps

An experiment with sweeps of several backends (crux-sweep NAME backend=jno beside
crux-sweep NAME) is reported side by side: the latest sweep of each, judged on its
own runs, in DIR/<backend>/, and their verdicts and speeds in DIR/report.md.

Writes report.md, verdicts.json and the figures into DIR (default
reports/<sweep>/<UTC time>/ under the project root) and prints the verdicts.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from crux.config import PROJECT_ROOT
from crux.report.backends import load_sweeps
from crux.report.claims import CHECKS, judge
from crux.report.document import side_by_side_table, verdict_table, write_report, write_side_by_side
from crux.report.figures import draw


def default_out(sweep: str) -> Path:
    """``reports/<sweep>/<UTC time>/`` under the project root: a new folder per report, never overwritten."""
    return PROJECT_ROOT / "reports" / sweep / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def main(argv: list[str] | None = None) -> int:
    """Returns 0 when the report was written (whatever the verdicts), 2 when the sweep could not be read."""
    parser = argparse.ArgumentParser(prog="crux-report", description=__doc__.split("\n")[0])
    parser.add_argument("name", help="the sweep (= MLflow experiment) name, e.g. accumulation")
    parser.add_argument("--out", type=Path, help="output folder (default reports/<sweep>/<UTC time>/)")
    parser.add_argument("--run", dest="parent", help="parent run id (default: the sweep's latest)")
    parser.add_argument("--claim", action="append", choices=sorted(CHECKS),
                        help="claims to judge (repeatable; default: the sweep's name if it is a claim, else all)")
    parser.add_argument("--tracking-uri", help="MLflow URI (default: $MLFLOW_TRACKING_URI, else mlflow.db at the "
                                               "project root)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one bar per artifact drowns the table
    try:
        sweeps = load_sweeps(args.name, args.parent, args.tracking_uri)
    except LookupError as error:
        print(f"crux-report: {error}", file=sys.stderr)
        return 2
    claims = args.claim or ([args.name] if args.name in CHECKS else list(CHECKS))
    out = args.out or default_out(args.name)
    judged = {}
    for backend, sweep in sweeps.items():  # one library's runs at a time: never paired across libraries
        folder = out / backend if len(sweeps) > 1 else out
        folder.mkdir(parents=True, exist_ok=True)
        verdicts = judge(sweep.records, claims)
        figures = draw(claims, [r for r in sweep.records if not r.unsupported], folder)
        write_report(folder, sweep, verdicts, figures, claims)
        judged[backend] = (sweep, verdicts)
    if len(sweeps) > 1:
        write_side_by_side(out, args.name, judged)
        print(side_by_side_table(judged))
    else:
        print(verdict_table(verdicts))
    print(f"\nreport: {out / 'report.md'}")
    return 0
