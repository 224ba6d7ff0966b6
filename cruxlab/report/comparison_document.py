"""A comparison's ``report.md`` and ``comparison.json``: written from the two sweeps' runs alone, so the same
two sweeps give the same bytes; the earlier side first, in every table, as ``before → after``."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from cruxlab.report.changes import RULES, figures_json, key_figures
from cruxlab.report.comparison import ComparedSweep, Comparison, Row
from cruxlab.report.comparison_figures import draw_comparison
from cruxlab.report.document import SAME_AS_CRUX_BATCHING, table_cell
from cruxlab.report.drawing import Figure
from cruxlab.report.verdict import Verdict


def _verdict(verdict: Verdict | None) -> str:
    return f"**{verdict.verdict}**" if verdict is not None else "–"


def _changed(row: Row) -> str:
    if row.before is None or row.after is None:
        return "not compared: one side only"
    return "**changed**" if row.changed else "no"


def changed_line(comparison: Comparison) -> str:
    """``3 claims compared: none changed`` or ``1 of 3 claims changed: …``."""
    compared = [row for row in comparison.rows if row.before is not None and row.after is not None]
    changed = comparison.changed
    if not changed:
        return f"{len(compared)} claim(s) compared: none changed."
    return (f"{len(changed)} of {len(compared)} claim(s) changed: "
            + "; ".join(f"{row.id} ({row.why})" for row in changed) + ".")


def comparison_table(comparison: Comparison) -> str:
    """Plain-text table for the terminal: per claim, both verdicts (before, after) and whether it changed; the
    sides' names above it."""
    width = max((len(row.id) for row in comparison.rows), default=5)
    lines = [f"before: {comparison.before.role}", f"after:  {comparison.after.role}", "",
             f"{'claim':<{width}}  {'before':<13} {'after':<13} changed",
             f"{'-' * width}  {'-' * 13} {'-' * 13} -------"]
    for row in comparison.rows:
        earlier, later = (v.verdict if v is not None else "–" for v in (row.before, row.after))
        lines.append(f"{row.id:<{width}}  {earlier:<13} {later:<13} {_changed(row).strip('*')}"
                     + (f": {row.why}" if row.changed else ""))
    return "\n".join(lines + ["", changed_line(comparison)])


def _header(comparison: Comparison) -> str:
    """The two sides' columns: ``| | before: crux 1a2b3c4 | after: crux 5d6e7f8 |``."""
    return f"| | before: {table_cell(comparison.before.role)} | after: {table_cell(comparison.after.role)} |"


def _sides(comparison: Comparison) -> list[str]:
    before, after = comparison.before, comparison.after
    earlier, later = before.ran_on(), after.ran_on()
    lines = [_header(comparison), "|---|---|---|"]
    lines += [f"| {key} | {table_cell(earlier[key])} | {table_cell(later[key])} |" for key in earlier]
    lines.append(f"| variants | {table_cell(', '.join(before.variants))} | {table_cell(', '.join(after.variants))} |")
    return lines


def _rules() -> list[str]:
    return [f"- **{name}**: {rule}" for name, rule in RULES.items()]


def _row_section(row: Row, comparison: Comparison) -> list[str]:
    first = row.before or row.after
    lines = [f"### {row.id}: {_changed(row)}", "", f"> {first.claim}", "", f"Quoted from {first.source}.", "",
             _header(comparison), "|---|---|---|",
             f"| verdict | {_verdict(row.before)} | {_verdict(row.after)} |",
             f"| runs | {len(row.before.runs) if row.before else '–'} | {len(row.after.runs) if row.after else '–'} |",
             f"| finding | {table_cell(row.before.summary) if row.before else '–'} | "
             f"{table_cell(row.after.summary) if row.after else '–'} |"]
    earlier = key_figures(row.before) if row.before else {}
    later = key_figures(row.after) if row.after else {}
    for name in dict.fromkeys([*earlier, *later]):
        lines.append(f"| {table_cell(name)} | {table_cell(earlier[name].described()) if name in earlier else '–'} | "
                     f"{table_cell(later[name].described()) if name in later else '–'} |")
    lines.append("")
    if row.tests:
        lines += ["| test | figure | result (before → after) |", "|---|---|---|"]
        lines += [f"| {test.rule} | {table_cell(test.figure)} | {'**changed**' if test.changed else 'same'}"
                  f"{': ' + table_cell(test.detail) if test.detail else ''} |" for test in row.tests]
        lines.append("")
    return lines


def comparison_markdown(comparison: Comparison, figures: Sequence[Figure]) -> str:
    """The whole ``report.md`` of ``comparison``."""
    before, after = comparison.before, comparison.after
    lines = [f"# crux comparison: {comparison.name}, {before.role} → {after.role}", "",
             f"Before: {before.role}; after: {after.role}; every table gives the earlier side first, and a change "
             f"reads before → after. Claims judged on both: {', '.join(comparison.claims)}. Each side is judged on "
             f"its own runs, as "
             f"`crux-report {comparison.name}` judges it; verdicts are matched by claim and setting "
             f"(`{SAME_AS_CRUX_BATCHING}`, jNO's form that batches as crux does, left out).", "",
             f"**{changed_line(comparison)}**", ""]
    lines += _sides(comparison) + [""]
    lines += ["## Verdicts", "", f"| claim | before: {table_cell(before.role)} | after: {table_cell(after.role)} | changed | "
                                 f"what moved (before → after) |", "|---|---|---|---|---|"]
    lines += [f"| {table_cell(row.id)} | {_verdict(row.before)} | {_verdict(row.after)} | {_changed(row)} | "
              f"{table_cell(row.why)} |" for row in comparison.rows]
    lines += ["", "## How a claim is tested for a change", "",
              "A claim changed when its verdict flipped, or when a key figure moved further than both sides' own "
              "spreads allow; the test depends on the figure:", ""] + _rules() + [""]
    lines += ["## Claims", ""]
    for row in comparison.rows:
        lines += _row_section(row, comparison)
    if figures:
        lines += ["## Figures", ""]
        lines += [line for figure in figures for line in (f"![{figure.caption}]({figure.file})", "",
                                                          f"*{figure.caption}.*", "")]
    lines += ["## Each side's own report", "", "```sh"]
    lines += [f"MLFLOW_TRACKING_URI={side.ran_on()['store']} crux-report {comparison.name} --run "
              f"{side.sweep.parent_id}" for side in (before, after)]
    lines += ["```", ""]
    return "\n".join(lines).rstrip() + "\n"


def _side_json(side: ComparedSweep) -> dict:
    return {"role": side.role, "parent_run": side.sweep.parent_id, "complete": side.sweep.complete,
            "sound": side.sweep.sound, **side.ran_on(), "variants": side.variants}


def _verdict_json(verdict: Verdict | None) -> dict | None:
    if verdict is None:
        return None
    return {"verdict": verdict.verdict, "summary": verdict.summary, "runs": len(verdict.runs),
            "run_ids": sorted(verdict.runs), "figures": figures_json(verdict)}


def comparison_json(comparison: Comparison) -> str:
    """The ``comparison.json`` text: the sides (``before``, ``after``), the tests' rules, and per claim both
    verdicts, their key figures, the tests and ``changed``."""
    entries = [{"id": row.id, "changed": row.changed, "flipped": row.flipped,
                "compared": row.before is not None and row.after is not None,
                "before": _verdict_json(row.before), "after": _verdict_json(row.after),
                "tests": [test.as_dict() for test in row.tests]} for row in comparison.rows]
    document = {"name": comparison.name, "claims": list(comparison.claims),
                "changed": bool(comparison.changed), "sides": {"before": _side_json(comparison.before),
                                                              "after": _side_json(comparison.after)},
                "rules": RULES, "rows": entries}
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_comparison(out: Path, comparison: Comparison) -> None:
    """``report.md``, ``comparison.json`` and the figures of ``comparison`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    figures = draw_comparison(comparison, out)
    (out / "report.md").write_text(comparison_markdown(comparison, figures), encoding="utf-8")
    (out / "comparison.json").write_text(comparison_json(comparison), encoding="utf-8")
