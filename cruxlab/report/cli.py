"""``crux-report NAME [--out DIR] [--run PARENT_RUN_ID] [--against URI]``: judge a sweep's claims from its runs.

    crux-report accumulation                     # the newest complete accumulation sweep
    crux-report accumulation --run 3f2c...       # a given sweep (its parent run), complete or not
    crux-report my-experiment --claim inner_steps
    crux-report accumulation --against http://cluster:5000             # against the cluster's newest sweep of it
    crux-report accumulation --against sqlite:///$PWD/mlflow.db#9a1b... --strict   # against an earlier one here

An experiment with sweeps of several backends (crux-sweep NAME backend=jno beside
crux-sweep NAME) is reported side by side: the latest sweep of each, judged on its
own runs, in DIR/<backend>/, and their verdicts and speeds in DIR/report.md.

Writes report.md, verdicts.json and the figures into DIR (default
reports/<sweep>/<UTC time>/ in the working directory), prints the verdicts and,
for a sweep that names its claims (crux-sweep's), adds them to the description of
the sweep's parent run in MLflow (--describe / --no-describe decide otherwise). A
sweep that names none (crux-run -m) is judged on the checks its settings concern,
every check otherwise being inconclusive for want of a run to judge. With
--against, writes the two sweeps' verdicts side by side instead, claim by claim,
with whether each changed: report.md, comparison.json and the figures. The
--against sweep is read as before and this one as after (holds → fails is a
regression), each side named by what differs between them.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

from mlflow.exceptions import MlflowException

from cruxlab.config import import_from_working_directory
from cruxlab.report.against import compare_against
from cruxlab.report.backends import load_sweeps
from cruxlab.report.claims import CHECKS, draw
from cruxlab.report.comparison import Incomparable
from cruxlab.report.comparison_document import comparison_table, write_comparison
from cruxlab.report.coverage import judged as judged_verdicts, names_claims
from cruxlab.report.document import (NO_CHECK, completeness, side_by_side_table, verdict_table, write_report, write_side_by_side)
from cruxlab.report.sweep_reader import StoreError, Sweep, open_client
from cruxlab.report.verdict import Verdict
from cruxlab.store.contract import COMMAND, NOTE
from cruxlab.store.descriptions import sweep_description
from cruxlab.store.secrets import masked

COMPLETE, CHANGED, UNREAD, INCOMPLETE = 0, 1, 2, 3
EXIT_CODES = f"""exit codes:
  {COMPLETE}  report written; the sweep is complete and every artifact was read
  {CHANGED}  with --against and --strict: a claim changed between the two sweeps (report written)
  {UNREAD}  nothing written: the store, the sweep or the run could not be read, the arguments are wrong, or
     the two sweeps of --against cannot be compared (different claims, no common variant)
  {INCOMPLETE}  report written, but the sweep (with --against, either sweep) is incomplete or some artifacts could not
     be read: the verdicts that lack data are inconclusive and the report's top says what is missing

By default the newest complete sweep of NAME is judged (newer incomplete ones are
named and passed over); with none complete, the newest. A tracking server that
does not answer is given up within seconds (MLFLOW_HTTP_REQUEST_MAX_RETRIES,
MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR and MLFLOW_HTTP_REQUEST_TIMEOUT, when set,
take precedence)."""


def default_out(sweep: str) -> Path:
    """Where a report goes without ``--out``: a new folder per report, never overwritten.

    Args:
        sweep: the sweep's name.

    Returns:
        ``reports/<sweep>/<UTC time>/`` in the working directory.
    """
    return Path.cwd() / "reports" / sweep / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())


def describe_verdicts(sweep: Sweep, verdicts: list[Verdict], report: Path) -> None:
    """Add the verdicts and the report's path to the description of the sweep's parent run, after the
    command that ran it; a store that refuses is reported, not fatal (the report is written).

    Args:
        sweep: the sweep judged.
        verdicts: its verdicts.
        report: the report's path, as the description names it.
    """
    text = sweep_description(sweep.parent_tags.get(COMMAND, ""), [(v.verdict, v.id, v.summary) for v in verdicts],
                             str(report))
    try:
        open_client(sweep.uri)[0].set_tag(sweep.parent_id, NOTE, text)
    except (MlflowException, StoreError) as error:
        print(f"crux-report: could not describe parent run {sweep.parent_id}: {error}", file=sys.stderr)


def say_which(sweep: Sweep, backend: str | None, chosen: bool) -> None:
    """Print which sweep was judged (of ``backend``, when the report sets several side by side), how complete
    it is, and what it passed over or could not read.

    Args:
        sweep: the sweep judged.
        backend: its library where the report sets several side by side, else None.
        chosen: whether ``--run`` chose it (newer sweeps are then named, not passed over).
    """
    of = f" ({backend})" if backend else ""
    print(f"sweep {sweep.name}{of}, parent run {sweep.parent_id} (started {sweep.started}): {completeness(sweep)}")
    if sweep.newer:
        print(f"newer sweeps of {sweep.name}{of}, " + ("named in the report" if chosen else
                                                      "passed over as incomplete") + ": "
              + ", ".join(s.parent_id for s in sweep.newer))
    if sweep.none_complete:
        print(f"no sweep of {sweep.name}{of} is complete: judged the newest")
    if sweep.elsewhere:
        print(sweep.artifacts_elsewhere)
    if sweep.unreadable:
        print(f"{len(sweep.unreadable)} artifact(s) could not be read: the report's top names them")


def report_against(args: argparse.Namespace) -> int:
    """``--against``: writes the comparison's report and prints its table.

    Args:
        args: ``main``'s parsed command line.

    Returns:
        The exit status, as :func:`main` says it.
    """
    try:
        comparison = compare_against(args.name, args.parent, args.tracking_uri, args.against, args.claim)
    except (StoreError, Incomparable) as error:
        print(f"crux-report: {error}", file=sys.stderr)
        return UNREAD
    out = args.out or default_out(args.name)
    write_comparison(out, comparison)
    for when, side in (("before", comparison.before), ("after", comparison.after)):
        print(f"{when}: sweep {side.sweep.name} at {masked(side.sweep.uri)}, parent run {side.sweep.parent_id}: "
              f"{completeness(side.sweep)}")
    print(comparison_table(comparison))
    print(f"\nreport: {out / 'report.md'}")
    if args.strict and comparison.changed:
        return CHANGED
    return COMPLETE if comparison.sound else INCOMPLETE


def main(argv: list[str] | None = None) -> int:
    """The console script ``crux-report``: judges a sweep's claims from its runs and writes the report (with
    ``--against``, two sweeps' verdicts side by side).

    Args:
        argv: the command line without the program's name (None: ``sys.argv[1:]``).

    Returns:
        The exit status (:data:`EXIT_CODES`): 0 when the report of a complete sweep was written, whatever the
        verdicts; 1 with ``--against --strict`` when a claim changed; 2 when nothing could be read (the store, the
        sweep, the run) or the two sweeps cannot be compared; 3 when the report was written from an incomplete
        sweep or with unreadable artifacts.

    Raises:
        SystemExit: status 2 on bad arguments (an unknown ``--claim``, ``--strict`` without ``--against``).
    """
    parser = argparse.ArgumentParser(prog="crux-report", description=__doc__.split("\n")[0], epilog=EXIT_CODES,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("name", help="the sweep (= MLflow experiment) name, e.g. accumulation")
    parser.add_argument("--out", type=Path, help="output folder (default reports/<sweep>/<UTC time>/)")
    parser.add_argument("--run", dest="parent", help="parent run id of the sweep to judge (default: the newest "
                                                     "complete sweep)")
    parser.add_argument("--claim", action="append", choices=sorted(CHECKS),
                        help="claims to judge (repeatable; default: the sweep file's claims, else the sweep's "
                             "name if it is a claim, else all)")
    parser.add_argument("--tracking-uri", help="MLflow URI (default: $MLFLOW_TRACKING_URI, else mlflow.db in the "
                                               "working directory)")
    parser.add_argument("--against", metavar="URI[#PARENT_RUN]",
                        help="compare with the sweep of NAME in another store (a SQLite file, a server, PostgreSQL, "
                             "a packed mlflow.db.gz or .xz): its newest complete sweep, or the parent run after '#' (#jno: "
                             "its newest complete jNO sweep), read as before and this sweep as after")
    parser.add_argument("--describe", action=argparse.BooleanOptionalAction,
                        help="write the verdicts into the description of the sweep's parent run in MLflow (default: "
                             "for a sweep that names its claims, as crux-sweep's do; a crux-run -m sweep's "
                             "description is left as it is)")
    parser.add_argument("--strict", action="store_true", help=f"with --against: exit {CHANGED} when any claim "
                                                              f"changed")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.strict and not args.against:
        parser.error("--strict needs --against URI: it fails on a claim that changed between two sweeps")
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one bar per artifact drowns the table
    import_from_working_directory()  # a user's problem, which a substeps check traces
    if args.against:
        return report_against(args)
    try:
        sweeps = load_sweeps(args.name, args.parent, args.tracking_uri)
    except StoreError as error:
        print(f"crux-report: {error}", file=sys.stderr)
        return UNREAD
    out = args.out or default_out(args.name)
    judged = {}
    for backend, sweep in sweeps.items():  # one library's runs at a time: never paired across libraries
        folder = out / backend if len(sweeps) > 1 else out
        folder.mkdir(parents=True, exist_ok=True)
        claims, verdicts = judged_verdicts(sweep, args.claim or ())
        figures = draw(claims, [r for r in sweep.records if not r.unsupported], folder)
        write_report(folder, sweep, verdicts, figures, claims)
        judged[backend] = (sweep, verdicts)
        say_which(sweep, backend if len(sweeps) > 1 else None, chosen=args.parent is not None)
    if len(sweeps) > 1:
        write_side_by_side(out, args.name, judged)
        print(side_by_side_table(judged))
    else:
        print(verdict_table(verdicts) if verdicts else f"Claims judged: {NO_CHECK}.")
    print(f"\nreport: {out / 'report.md'}")
    for backend, (sweep, verdicts) in judged.items():
        if args.describe or (args.describe is None and names_claims(sweep)):
            folder = out / backend if len(sweeps) > 1 else out
            describe_verdicts(sweep, verdicts, folder.resolve() / "report.md")
    return COMPLETE if all(sweep.sound for sweep, _ in judged.values()) else INCOMPLETE
