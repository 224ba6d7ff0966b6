"""A comparison's ``report.md`` and ``comparison.json``: written from the two sweeps' runs alone, so the same
two sweeps give the same bytes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from cruxlab.report.changes import RULES, figures_json, key_figures
from cruxlab.report.comparison import Comparison, Row, Side
from cruxlab.report.comparison_figures import draw_comparison
from cruxlab.report.document import SAME_AS_CRUX_BATCHING, table_cell
from cruxlab.report.figures import Figure
from cruxlab.report.verdict import Verdict


def _verdict(verdict: Verdict | None) -> str:
    return f"**{verdict.verdict}**" if verdict is not None else "–"


def _changed(row: Row) -> str:
    if row.this is None or row.other is None:
        return "not compared: one side only"
    return "**changed**" if row.changed else "no"


def changed_line(comparison: Comparison) -> str:
    """``3 claims compared: none changed`` or ``1 of 3 claims changed: …``."""
    compared = [row for row in comparison.rows if row.this is not None and row.other is not None]
    changed = comparison.changed
    if not changed:
        return f"{len(compared)} claim(s) compared: none changed."
    return (f"{len(changed)} of {len(compared)} claim(s) changed: "
            + "; ".join(f"{row.id} ({row.why})" for row in changed) + ".")


def comparison_table(comparison: Comparison) -> str:
    """Plain-text table for the terminal: per claim, both verdicts and whether it changed."""
    this, other = comparison.this.role, comparison.other.role
    width = max((len(row.id) for row in comparison.rows), default=5)
    lines = [f"{'claim':<{width}}  {this:<13} {other:<13} changed", f"{'-' * width}  {'-' * 13} {'-' * 13} -------"]
    for row in comparison.rows:
        mine, theirs = (v.verdict if v is not None else "–" for v in (row.this, row.other))
        lines.append(f"{row.id:<{width}}  {mine:<13} {theirs:<13} {_changed(row).strip('*')}"
                     + (f": {row.why}" if row.changed else ""))
    return "\n".join(lines + ["", changed_line(comparison)])


def _sides(comparison: Comparison) -> list[str]:
    this, other = comparison.this, comparison.other
    mine, theirs = this.ran_on(), other.ran_on()
    lines = [f"| | {this.role} | {other.role} |", "|---|---|---|"]
    lines += [f"| {key} | {table_cell(mine[key])} | {table_cell(theirs[key])} |" for key in mine]
    lines.append(f"| variants | {table_cell(', '.join(this.variants))} | {table_cell(', '.join(other.variants))} |")
    return lines


def _rules() -> list[str]:
    return [f"- **{name}**: {rule}" for name, rule in RULES.items()]


def _row_section(row: Row, this: Side, other: Side) -> list[str]:
    first = row.this or row.other
    lines = [f"### {row.id}: {_changed(row)}", "", f"> {first.claim}", "", f"Quoted from {first.source}.", "",
             f"| | {this.role} | {other.role} |", "|---|---|---|",
             f"| verdict | {_verdict(row.this)} | {_verdict(row.other)} |",
             f"| runs | {len(row.this.runs) if row.this else '–'} | {len(row.other.runs) if row.other else '–'} |",
             f"| finding | {table_cell(row.this.summary) if row.this else '–'} | "
             f"{table_cell(row.other.summary) if row.other else '–'} |"]
    mine = key_figures(row.this) if row.this else {}
    theirs = key_figures(row.other) if row.other else {}
    for name in dict.fromkeys([*mine, *theirs]):
        lines.append(f"| {table_cell(name)} | {table_cell(mine[name].described()) if name in mine else '–'} | "
                     f"{table_cell(theirs[name].described()) if name in theirs else '–'} |")
    lines.append("")
    if row.tests:
        lines += ["| test | figure | result |", "|---|---|---|"]
        lines += [f"| {test.rule} | {table_cell(test.figure)} | {'**changed**' if test.changed else 'same'}"
                  f"{': ' + table_cell(test.detail) if test.detail else ''} |" for test in row.tests]
        lines.append("")
    return lines


def comparison_markdown(comparison: Comparison, figures: Sequence[Figure]) -> str:
    """The whole ``report.md`` of ``comparison``."""
    this, other = comparison.this, comparison.other
    lines = [f"# crux comparison: {comparison.name}, {this.role} against {other.role}", "",
             f"Claims judged on both: {', '.join(comparison.claims)}. Each side is judged on its own runs, as "
             f"`crux-report {comparison.name}` judges it; verdicts are matched by claim and setting "
             f"(`{SAME_AS_CRUX_BATCHING}`, jNO's form that batches as crux does, left out).", "",
             f"**{changed_line(comparison)}**", ""]
    lines += _sides(comparison) + [""]
    lines += ["## Verdicts", "", f"| claim | {this.role} | {other.role} | changed | what moved |", "|---|---|---|---|---|"]
    lines += [f"| {table_cell(row.id)} | {_verdict(row.this)} | {_verdict(row.other)} | {_changed(row)} | "
              f"{table_cell(row.why)} |" for row in comparison.rows]
    lines += ["", "## How a claim is tested for a change", "",
              "A claim changed when its verdict flipped, or when a key figure moved further than both sides' own "
              "spreads allow; the test depends on the figure:", ""] + _rules() + [""]
    lines += ["## Claims", ""]
    for row in comparison.rows:
        lines += _row_section(row, this, other)
    if figures:
        lines += ["## Figures", ""]
        lines += [line for figure in figures for line in (f"![{figure.caption}]({figure.file})", "",
                                                          f"*{figure.caption}.*", "")]
    lines += ["## Each side's own report", "", "```sh"]
    lines += [f"MLFLOW_TRACKING_URI={side.ran_on()['store']} crux-report {comparison.name} --run "
              f"{side.sweep.parent_id}" for side in (this, other)]
    lines += ["```", ""]
    return "\n".join(lines).rstrip() + "\n"


def _side_json(side: Side) -> dict:
    return {"role": side.role, "parent_run": side.sweep.parent_id, "complete": side.sweep.complete,
            "sound": side.sweep.sound, **side.ran_on(), "variants": side.variants}


def _verdict_json(verdict: Verdict | None) -> dict | None:
    if verdict is None:
        return None
    return {"verdict": verdict.verdict, "summary": verdict.summary, "runs": len(verdict.runs),
            "run_ids": sorted(verdict.runs), "figures": figures_json(verdict)}


def comparison_json(comparison: Comparison) -> str:
    """The ``comparison.json`` text: the sides, the tests' rules, and per claim both verdicts, their key
    figures, the tests and ``changed``."""
    entries = [{"id": row.id, "changed": row.changed, "flipped": row.flipped,
                "compared": row.this is not None and row.other is not None,
                "this": _verdict_json(row.this), "other": _verdict_json(row.other),
                "tests": [test.as_dict() for test in row.tests]} for row in comparison.rows]
    document = {"name": comparison.name, "claims": list(comparison.claims),
                "changed": bool(comparison.changed), "sides": {"this": _side_json(comparison.this),
                                                              "other": _side_json(comparison.other)},
                "rules": RULES, "rows": entries}
    return json.dumps(document, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_comparison(out: Path, comparison: Comparison) -> None:
    """``report.md``, ``comparison.json`` and the figures of ``comparison`` into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    figures = draw_comparison(comparison, out)
    (out / "report.md").write_text(comparison_markdown(comparison, figures), encoding="utf-8")
    (out / "comparison.json").write_text(comparison_json(comparison), encoding="utf-8")
