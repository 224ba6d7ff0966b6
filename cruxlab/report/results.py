"""The README's verdict table, made from stores by comparisons: a row per sweep, a column per machine.

    python -m cruxlab.report.results CPU=docs/cpu/mlflow.db.xz "TPU v5e=docs/tpu/store-23/mlflow.db.xz,docs/tpu/store-24/mlflow.db.xz" --readme README.md --docs

Each ``LABEL=URI[,URI...]`` is a machine and its stores (any store crux-report reads, a packed ``mlflow.db.gz``
included: :mod:`cruxlab.report.packed`); where a machine's sweeps came in several stores, as the calls of a device
check return them, a sweep is taken from the last store that has it. For every built-in sweep of the first machine,
and every library that ran it there (a row each), each machine's newest complete sweep is judged, and every
machine's after the first is compared with the first's (``crux-report NAME --against``): the table gives each
machine's verdicts, with each timing's ratio and interval, and what changed between them. ``--readme`` writes the
table into a Markdown file between its markers; ``--docs`` writes, into the folder that holds a machine's stores
where they are files, its sweeps' reports (``reports/NAME/``) and, for every machine after the first, the
comparisons (``comparisons/NAME/``), so that a device's folder in docs/ is made from the stores its calls returned.
"""
from __future__ import annotations

import argparse
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from cruxlab.report.backends import backends_in
from cruxlab.report.changes import TIMING, key_figures
from cruxlab.report.claims import CHECKS, draw
from cruxlab.report.comparison import ComparedSweep, Comparison, Incomparable, compare
from cruxlab.report.comparison_document import write_comparison
from cruxlab.report.coverage import claims_of, judge_sound
from cruxlab.report.document import row_name, write_report
from cruxlab.report.sweep_reader import DEFAULT_BACKEND, StoreError, Sweep, load_sweep, open_client
from cruxlab.report.verdict import Verdict
from cruxlab.store.kinds import store_file
from cruxlab.store.connection import READING, bounded_http, store_errors

LIBRARIES = {"jno": "jNO"}
"""How the table names a library other than crux, by its backend's name."""
BEGIN = "<!-- verdicts table: written by `python -m cruxlab.report.results` -->"
END = "<!-- end of verdicts table -->"


@dataclass(frozen=True)
class Column:
    """A machine: the column's label and its stores' URIs (several where its sweeps came in several stores, as a
    device check's calls return them: a sweep is taken from the last store that has it)."""

    label: str
    uris: tuple[str, ...]

    @staticmethod
    def parse(text: str) -> "Column":
        label, equals, uris = text.partition("=")
        if not equals or not label or not uris:
            raise argparse.ArgumentTypeError(f"{text!r}: give a machine's stores as LABEL=URI[,URI...], e.g. "
                                             f"CPU=docs/cpu/mlflow.db.xz")
        return Column(label, tuple(uris.split(",")))

    @property
    def folder(self) -> Path | None:
        """The folder its reports go in: the one holding its stores where they are files (packed, or SQLite);
        None where one is a server."""
        paths = [store_file(uri) for uri in self.uris]
        if None in paths:
            return None
        return Path(os.path.commonpath([path.resolve().parent for path in paths]))


def sweep_names(uri: str) -> list[str]:
    """The built-in sweeps (the claims' names) that the store at ``uri`` has experiments of, in the checks' order."""
    with bounded_http():
        client, resolved = open_client(uri)
        with store_errors(resolved, READING):
            found = {experiment.name for experiment in client.search_experiments()}
    return [name for name in CHECKS if name in found]


Sweeps = dict[str, list[str]]
"""A store's built-in sweeps: each name, and the libraries (backends) that ran sweeps of it, crux first."""


def sweeps_in_store(uri: str) -> Sweeps:
    """The built-in sweeps of the store at ``uri``, and the libraries that ran each."""
    return {name: backends_in(name, uri) for name in sweep_names(uri)}


def _sweep(name: str, backend: str, column: Column, present: Sequence[Sweeps]) -> Sweep | None:
    """The sweep of ``name`` on ``backend`` crux-report would judge in the last of ``column``'s stores that has
    one (``present`` being the sweeps each store has); None where none has."""
    found = [uri for uri, sweeps in zip(column.uris, present) if backend in sweeps.get(name, ())]
    return load_sweep(name, None, found[-1], backend) if found else None


@dataclass(frozen=True)
class SweepRow:
    """One sweep of one library across the machines: each machine's judged side (None: not run there), and each
    comparison of a machine after the first with the first (None where there is nothing to compare, else the
    comparison or why it was refused)."""

    name: str
    sides: tuple[ComparedSweep | None, ...]
    comparisons: tuple[Comparison | str | None, ...]
    backend: str = DEFAULT_BACKEND

    @property
    def label(self) -> str:
        """``accumulation``, or ``accumulation, jNO`` for another library's sweep."""
        library = LIBRARIES.get(self.backend, self.backend)
        return self.name if self.backend == DEFAULT_BACKEND else f"{self.name}, {library}"

    @property
    def folder(self) -> str:
        """The name of its reports' folders: ``accumulation``, ``accumulation-jno``."""
        return self.name if self.backend == DEFAULT_BACKEND else f"{self.name}-{self.backend}"


def sweep_row(name: str, backend: str, columns: Sequence[Column], present: Sequence[Sequence[Sweeps]]) -> SweepRow:
    """Judge and compare sweep ``name`` of ``backend`` across ``columns``' stores, ``present`` being the sweeps
    each column's stores have."""
    sweeps = [_sweep(name, backend, column, found) for column, found in zip(columns, present)]
    reference = sweeps[0]
    comparisons: list[Comparison | str | None] = []
    for column, sweep in zip(columns[1:], sweeps[1:]):
        if reference is None or sweep is None:
            comparisons.append(None)
            continue
        try:
            comparisons.append(compare(reference, sweep, roles=(columns[0].label, column.label)))
        except Incomparable as refused:
            comparisons.append(str(refused))
    sides = [_judged(i, comparisons) or (ComparedSweep(column.label, sweep, tuple(judge_sound(sweep, claims_of(sweep))))
                                         if sweep is not None else None)
             for i, (column, sweep) in enumerate(zip(columns, sweeps))]
    return SweepRow(name, tuple(sides), tuple(comparisons), backend)


def _judged(index: int, comparisons: Sequence[Comparison | str | None]) -> ComparedSweep | None:
    """Column ``index``'s side as a comparison judged it, where one did: the first column's is judged alike by
    every comparison, each other column's by its own."""
    if index == 0:
        return next((c.before for c in comparisons if isinstance(c, Comparison)), None)
    comparison = comparisons[index - 1]
    return comparison.after if isinstance(comparison, Comparison) else None


def kind(verdict: Verdict) -> tuple[str, str]:
    """``accumulation.effective_batch[b8_acc4]`` as (``effective_batch``, ``b8_acc4``)."""
    id = row_name(verdict.id)
    head, _, setting = id.partition("[")
    return head.partition(".")[2] or head, setting.removesuffix("]")


def cell(verdicts: Sequence[Verdict]) -> str:
    """A machine's verdicts on one sweep, by kind: ``effective_batch **holds**; identical **holds** (4
    settings)``, each setting named where the verdicts differ, each paired timing with its ratio and interval."""
    kinds: dict[str, list[tuple[str, Verdict]]] = {}
    for verdict in verdicts:
        name, setting = kind(verdict)
        kinds.setdefault(name, []).append((setting, verdict))
    parts = []
    for name, found in kinds.items():
        timed = {setting: figure for setting, v in found if (figure := key_figures(v).get(TIMING)) is not None}
        outcomes = list(dict.fromkeys(v.verdict for _, v in found))
        if len(outcomes) == 1 and not timed:
            parts.append(f"{name} **{outcomes[0]}**" + (f" ({len(found)} settings)" if len(found) > 1 else ""))
            continue
        settings = []
        for setting, v in found:
            ratio = f" ratio {timed[setting].described()}" if setting in timed else ""
            settings.append(f"{setting + ': ' if setting else ''}**{v.verdict}**{ratio}")
        parts.append(f"{name} " + ", ".join(settings))
    return "; ".join(parts) or "–"


def side_cell(side: ComparedSweep | None) -> str:
    """A machine's cell: its verdicts, and how many of the planned jobs finished where the sweep is incomplete (a
    command that ran out of time: the missing jobs' claims are inconclusive for that reason alone)."""
    if side is None:
        return "not run"
    sweep = side.sweep
    return cell(side.verdicts) + ("" if sweep.complete else f" ({sweep.finished} of {sweep.planned} jobs)")


def changes_cell(comparison: Comparison | str | None, link: str | None) -> str:
    """What changed between the first machine and another, in words (``none``, the rows that changed, or why
    the two were not compared)."""
    if comparison is None:
        return "–"
    if isinstance(comparison, str):
        return f"not compared: {comparison}"
    changed = [f"{row.id.partition('.')[2] or row.id}: {row.why}" for row in comparison.changed]
    text = "; ".join(changed) if changed else "none"
    return f"{text} ([comparison]({link}))" if link else text


def _jobs(sides: Sequence[ComparedSweep | None]) -> str:
    planned = list(dict.fromkeys(str(side.sweep.planned) for side in sides if side is not None))
    return " / ".join(planned)


def _stores(column: Column) -> str:
    return ", ".join(f"`{uri}`" for uri in column.uris)


def _about(column: Column, rows: Sequence[SweepRow], index: int) -> str:
    """Where a column's figures come from: its device, software, crux and when its sweeps ran."""
    sides = [row.sides[index] for row in rows if row.sides[index] is not None]
    if not sides:
        return f"- **{column.label}** ({_stores(column)}): no sweep."
    said = [side.ran_on() for side in sides]
    parts = lambda key: list(dict.fromkeys(part for s in said for part in s[key].split("; ")))
    # the matrix precision is a sweep's own setting (the precision sweep runs both), not the machine's
    software = "; ".join(dict.fromkeys(part.split(", matmul precision")[0] for part in parts("jax, precision")))
    builds = parts("crux")
    crux = (builds[0] if len(builds) == 1 else
            f"crux in {len(builds)} builds (each sweep's report names its own, in its Environment section)")
    started = sorted(side.sweep.started for side in sides if side.sweep.started)
    when = ("sweeps of unrecorded dates" if not started else f"sweep started {started[0]}" if len(started) == 1
            else f"sweeps started {started[0]} to {started[-1]}")
    return (f"- **{column.label}** ({_stores(column)}): {'; '.join(parts('device'))}; {software}; {crux}; "
            f"{when}.")


def table(rows: Sequence[SweepRow], columns: Sequence[Column], links: dict[tuple[str, int], str] | None = None,
          command: str = "") -> list[str]:
    """The table's lines, its markers included: the command that wrote it, a note per column, a row per sweep;
    ``links`` are the comparisons' reports by (the row's folder name, column)."""
    reference = columns[0].label
    header = ["sweep", "jobs", *(c.label for c in columns), *(f"changed, {c.label} against {reference}"
                                                              for c in columns[1:])]
    lines = [BEGIN] + ([f"Written by `{command}`.", ""] if command else [])
    lines += [_about(column, rows, i) for i, column in enumerate(columns)] + [""]
    lines += ["| " + " | ".join(header) + " |", "|---|---:|" + "---|" * (len(header) - 2)]
    for row in rows:
        cells = [side_cell(side) for side in row.sides]
        cells += [changes_cell(c, (links or {}).get((row.folder, i))) for i, c in enumerate(row.comparisons, start=1)]
        lines.append("| " + " | ".join([row.label, _jobs(row.sides), *(c.replace("|", "\\|") for c in cells)]) + " |")
    return lines + [END]


def _bounds(text: str, path: Path) -> tuple[int, int]:
    """Where the table's block starts and ends in ``text`` (of ``path``); ValueError where it has no markers."""
    if BEGIN not in text or END not in text:
        raise ValueError(f"{path} has no verdicts table between {BEGIN!r} and {END!r}: add the two lines where the "
                         f"table goes")
    return text.index(BEGIN), text.index(END) + len(END)


def replace_block(path: Path, lines: Sequence[str]) -> None:
    """Replace the block between the markers of ``path`` with ``lines`` (which hold the markers)."""
    text = path.read_text(encoding="utf-8")
    start, end = _bounds(text, path)
    path.write_text(text[:start] + "\n".join(lines) + text[end:], encoding="utf-8")


def write_docs(rows: Sequence[SweepRow], columns: Sequence[Column], base: Path) -> dict[tuple[str, int], str]:
    """Each machine's reports, and for every machine after the first the comparisons, into the folder that holds
    its stores (none for a machine with a server among them); the comparisons' report.md by (sweep, column), as
    paths relative to ``base``."""
    links = {}
    for row in rows:
        for i, (column, side) in enumerate(zip(columns, row.sides)):
            folder = column.folder
            if side is None or folder is None:
                continue
            out = folder / "reports" / row.folder
            out.mkdir(parents=True, exist_ok=True)
            claims = claims_of(side.sweep)
            figures = draw(claims, [r for r in side.sweep.records if not r.unsupported], out)
            write_report(out, side.sweep, list(side.verdicts), figures, claims)
            comparison = row.comparisons[i - 1] if i else None
            if isinstance(comparison, Comparison):
                compared = folder / "comparisons" / row.folder
                write_comparison(compared, comparison)
                links[(row.folder, i)] = os.path.relpath(compared / "report.md", base)
    return links


def main(argv: list[str] | None = None) -> int:
    """Judge and compare the stores' sweeps; print the table, and write it and the docs where asked. 0 when
    written, 2 when a store could not be read or the README has no markers."""
    parser = argparse.ArgumentParser(prog="python -m cruxlab.report.results", description=__doc__.split("\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stores", nargs="+", type=Column.parse, metavar="LABEL=URI[,URI...]",
                        help="a machine and its stores; the first machine is the one the others are compared with")
    parser.add_argument("--sweeps", help="comma-separated sweeps (default: every built-in sweep of the first machine)")
    parser.add_argument("--readme", type=Path, help=f"a Markdown file to write the table into, between {BEGIN} and "
                                                    f"{END}")
    parser.add_argument("--docs", action="store_true", help="write each machine's reports and comparisons into the "
                                                            "folder that holds its stores")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    if len(args.stores) < 2:
        parser.error("give at least two machines, LABEL=URI each: the first is compared with the others")
    folders = [column.folder for column in args.stores if column.folder is not None]
    if args.docs and len(set(folders)) < len(folders):
        parser.error("--docs writes each machine's reports into the folder that holds its stores: give each machine a "
                     "folder of its own")
    command = "python -m cruxlab.report.results " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None
                                                                                       else argv))
    try:
        if args.readme is not None:
            _bounds(args.readme.read_text(encoding="utf-8"), args.readme)
        present = [[sweeps_in_store(uri) for uri in column.uris] for column in args.stores]
        names = args.sweeps.split(",") if args.sweeps else [n for n in CHECKS if any(n in s for s in present[0])]
        libraries = {name: list(dict.fromkeys(b for sweeps in present[0] for b in sweeps.get(name, ())))
                     for name in names}
        rows = [sweep_row(name, backend, args.stores, present) for name in names
                for backend in libraries[name] or [DEFAULT_BACKEND]]
    except (StoreError, ValueError, OSError) as error:
        print(f"cruxlab.report.results: {error}", file=sys.stderr)
        return 2
    base = args.readme.parent if args.readme is not None else Path.cwd()
    links = write_docs(rows, args.stores, base) if args.docs else {}
    lines = table(rows, args.stores, links, command)
    print("\n".join(lines))
    if args.readme is not None:
        replace_block(args.readme, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
