"""README.md's speed table: the figures of a bench run in the column of the device it ran on (the CPU's, or the
accelerator's), the other column's cells and note kept as they stand, and the rows it does not name kept too.

``crux-bench --readme`` measures the CPU column from a clean checkout; ``crux-bench --readme-from BENCH_JSON ...``
writes a column from runs made elsewhere (e.g. on a TPU, their problems together).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from cruxlab.bench.host import CHECKOUT
from cruxlab.bench.interleaved import DUEL_ROUNDS, calls_label

README = CHECKOUT / "README.md"
README_BEGIN = "<!-- speed table: written by `crux-bench --readme` -->"
README_END = "<!-- end of speed table -->"
README_PROBLEMS = ("standard", "small", "accumulation")
README_SEPARATOR = "|---|---|---|---|"
# jax's device_kind -> the name of the README's column; other kinds are named as jax names them
DEVICE_NAMES = {"TPU v5 lite": "TPU v5e", "TPU v5e": "TPU v5e", "NVIDIA H200": "H200"}
# row label -> (problem, kind, goal); the cells of the column a run did not measure are kept as they stand
README_ROWS = {
    "crux / fastest hand-written JAX, standard problem": ("standard", "hand", "≥ 1.0"),
    "crux / fastest hand-written JAX, 64 points, 3×32": ("small", "hand", "≥ 1.0"),
    "FLOPs of an update, crux / hand-written JAX (XLA's count), standard problem": ("standard", "work", "≤ 1.0"),
    "FLOPs of an update, crux / hand-written JAX (XLA's count), 64 points, 3×32": ("small", "work", "≤ 1.0"),
    "crux / jNO, standard problem": ("standard", "jNO", "≥ 1.3"),
    "crux / jNO, 64 points, 3×32": ("small", "jNO", "–"),
    "one update of 4×8 / four updates of 8": ("accumulation", "accumulation", "≤ 1.2"),
    "time to first update, standard problem (fresh process)": ("standard", "first", "–"),
}


def readme_header(device: str) -> str:
    """The table's header line, its accelerator column named ``device``."""
    return f"| ratio | CPU | {device} | goal |"


def readme_cell(problem: dict, kind: str) -> str:
    """The cell of one row: ratios back to back (median, range) against the hand-written code, of XLA's FLOP
    counts against the hand-written code of crux's formulation, or of the medians against jNO (timed in its own
    process)."""
    epochs = problem.get("epochs")
    if kind == "accumulation":
        r = problem["ratios"]
        parts = [f"{r[key]:.2f} {calls_label(int(k))}" for key in r
                 for k in re.findall(r"^crux inner_steps=(\d+): t\(4x8\) / \(4 t\(8\)\)$", key)]
        jno = r.get("jNO inner_steps=1: t(4x8) / (4 t(8))")
        return "; ".join(parts) + ("" if jno is None else f"; jNO {jno:.2f}")
    if kind == "first":
        first = problem.get("first_update", {})
        return "; ".join(f"{name} {first[family]:.2f} s" for family, name in (
            ("crux", "crux"), ("hand", "hand-written"), ("jNO", "jNO")) if family in first) or "not run"
    if kind == "work":
        return "; ".join(f"{c['crux']['flops'] / c['hand']['flops']:.3f} {calls_label(int(k), epochs)}"
                         for k, c in problem.get("work", {}).items()) or "not run"
    parts = []
    for k in [1, *problem.get("fused", [])]:
        if kind == "hand":
            key = "crux inner_steps=1 / fastest hand loop" if k == 1 else \
                f"crux inner_steps={k} / fastest hand scan k={k}"
            pair = problem["paired"][key]
            parts.append(f"{pair['median']:.2f} ({pair['min']:.2f}–{pair['max']:.2f}) {calls_label(k, epochs)}")
        else:
            value = problem["ratios"].get(f"crux inner_steps={k} / jNO inner_steps={k} (separate process)")
            if value is not None:
                parts.append(f"{value:.2f} {calls_label(k, epochs)}")
    return "; ".join(parts) or "not run"


def report_column(report: dict) -> str:
    """The README column a report's figures belong in: ``CPU``, or the accelerator it ran on (DEVICE_NAMES)."""
    env = report["environment"]
    if env.get("backend", "cpu") == "cpu":
        return "CPU"
    kind = env.get("device_kind") or env["backend"].upper()
    return DEVICE_NAMES.get(kind, kind)


@dataclass
class ReadmeTable:
    """The README's speed table as it stands."""

    block: list[str]  # its lines, the markers included
    device: str  # the name of its accelerator column
    notes: dict[str, str]  # column -> the line that says how and when its figures were taken
    cells: dict[str, dict[str, str]]  # row label (of README_ROWS) -> column -> cell
    kept: list[str]  # the rows README_ROWS does not name, as they stand


def readme_block(report: dict, table: ReadmeTable) -> list[str]:
    """The README's speed table with the figures of ``report`` in the column of the device it ran on: the CPU's,
    or the accelerator's (named after the device; an accelerator column of another device is replaced, its
    figures kept in docs/BENCHMARK.md's history). The other column's cells and note stay as they stand."""
    env, column = report["environment"], report_column(report)
    device = table.device if column == "CPU" else column
    notes = {"CPU": table.notes.get("CPU"), device: table.notes.get(device) if device == table.device else None}
    notes[column] = (f"{column} column: `{without_out(report['command'])}`, {env['summary']}. Ratios against the "
                     f"fastest hand-written JAX of each kind: the two timed back to back, {DUEL_ROUNDS} rounds in "
                     f"alternating order, the median of the rounds' ratios and their range in brackets; against "
                     f"jNO (timed in its own process): the ratio of the medians.")
    lines = [README_BEGIN, *(notes[c] for c in ("CPU", device) if notes[c]), "", readme_header(device),
             README_SEPARATOR]
    for label, (name, kind, goal) in README_ROWS.items():
        kept = table.cells.get(label, {})
        cells = {"CPU": kept.get("CPU", "not run"), device: kept.get(device, "not run")}
        if name in report["problems"]:
            cells[column] = readme_cell(report["problems"][name], kind)
        lines.append(f"| {label} | {cells['CPU']} | {cells[device]} | {goal} |")
    return lines + table.kept + [README_END]


def without_out(command: str) -> str:
    """``command`` without its ``--out FOLDER``: where the run wrote its files changes no figure, and a
    scratch folder's path has no place in the README."""
    return re.sub(r" --out(=| )[^\s`]+", "", command)


def readme_table(text: str) -> ReadmeTable:
    """The README's speed table: its lines between the markers, its accelerator column, each column's note,
    each row's cells by label and column, and the rows that ``README_ROWS`` does not name (kept as they are)."""
    if README_BEGIN not in text or README_END not in text:
        raise ValueError(f"README.md has no speed table between {README_BEGIN!r} and {README_END!r}")
    block = text[text.index(README_BEGIN):text.index(README_END) + len(README_END)].splitlines()
    headers = [m.group(1) for line in block for m in [re.fullmatch(r"\| ratio \| CPU \| (.+) \| goal \|", line)] if m]
    if len(headers) != 1:
        raise ValueError(f"README.md's speed table needs one header line {readme_header('DEVICE')!r}")
    device, notes, cells, kept = headers[0], {}, {}, []
    for line in block:
        note = None if line.startswith("|") else re.match(r"(.+?) column: `", line)
        if note:
            notes[note.group(1)] = line
        if not line.startswith("|") or line in (readme_header(device), README_SEPARATOR):
            continue
        row = [c.strip() for c in line.strip().strip("|").split("|")]
        if row[0] in README_ROWS:
            cells[row[0]] = {"CPU": row[1], device: row[2]}
        else:
            kept.append(line)
    return ReadmeTable(block, device, notes, cells, kept)


def merged(reports: list[dict]) -> dict:
    """Runs of the bench on one device as one report: their problems together (a later run's over an earlier's),
    their commands in turn, the first's environment."""
    devices = {report_column(r) for r in reports}
    if len(devices) > 1:
        raise ValueError(f"--readme-from: the runs come from different devices ({', '.join(sorted(devices))}); "
                         f"give the runs of one device")
    return {"command": "`; `".join(r["command"] for r in reports), "environment": reports[0]["environment"],
            "problems": {name: p for r in reports for name, p in r["problems"].items()}}


def update_readme(report: dict, path: Path | None = None) -> str:
    """Replace the speed table of the README at ``path`` (default :data:`README`) with the figures of ``report``;
    returns the table."""
    path = path or README
    text = path.read_text()
    table = readme_table(text)
    new = "\n".join(readme_block(report, table))
    path.write_text(text.replace("\n".join(table.block), new))
    return new
