"""The performance targets of docs/BENCHMARK.md, each with the figure a report measured: figures to read, not test
assertions (a shared machine's clock decides no test)."""
from __future__ import annotations

import re

import numpy as np

from cruxlab.bench.hand_written import SAME_AS_CRUX
from cruxlab.bench.interleaved import calls_label, how_timed, rate


def targets(report: dict) -> list[dict]:
    """The performance targets of docs/BENCHMARK.md (figures, not test assertions), each with its measured value."""
    out = []
    problems = report["problems"]

    def add(what, value, goal, ok):
        out.append({"target": what, "value": value, "goal": goal,
                    "met": None if value is None or not np.isfinite(value) else bool(ok(value))})

    for name in ("standard", "small"):
        if name not in problems:
            continue
        p = problems[name]
        v = p["variants"]
        jno = [n for n in v if v[n]["family"] == "jNO"]
        if name == "standard":
            add("standard: fastest crux / fastest jNO", rate(v, p["best"]["crux"]) / max(rate(v, n) for n in jno)
                if jno else None, ">= 1.3", lambda x: x >= 1.3)
        dueled = [k for k in p["paired"] if re.fullmatch(r"crux inner_steps=\d+ / fastest hand (loop|scan k=\d+)", k)]
        for key in dueled:
            add(f"{name}: {key} ({how_timed(p['paired'][key])})", p["paired"][key]["median"], ">= 1.0",
                lambda x: x >= 1.0)
        for k, counts in p.get("work", {}).items():
            add(f"{name}: FLOPs of an update, crux / hand-written {SAME_AS_CRUX} (XLA's count), {calls_label(int(k))}",
                counts["crux"]["flops"] / counts["hand"]["flops"], "<= 1.0", lambda x: x <= 1.0)
    if "accumulation" in problems:
        r = problems["accumulation"]["ratios"]
        for key in [k for k in r if k.startswith("crux") and "(4 t(8))" in k]:
            add(f"accumulation: {key}", r[key], "<= 1.2", lambda x: x <= 1.2)
    for row in problems.get("fusing", {}).get("per_update", [])[1:]:
        add(f"fusing: time per update at K={row['k']} / at K=1 (round by round)", row["over_k1"], "<= 1.0",
            lambda x: x <= 1.0)
    for row in problems.get("shapes", {}).get("rows", []):
        add(f"shapes: crux / fastest hand-written scan, {row['shape']}, precision {row['precision']}, fused "
            f"×{row['k']} (back to back)", row["duel"]["median"], ">= 1.0", lambda x: x >= 1.0)
    for row in problems.get("throughput", {}).get("rows", []):
        add(f"throughput: crux / hand-written, {row['points']} points, width {row['width']}, precision "
            f"{row['precision']}", row["ratio"], ">= 1.0", lambda x: x >= 1.0)
    for name, p in problems.items():
        for vname, result in p.get("variants", {}).items():
            if "second_solve_compiles_nothing" in result:
                add(f"{name}: {vname}: later solve() calls compile nothing (compile_seconds == 0)",
                    float(max(result["recompile_seconds"], default=0.0)), "== 0", lambda x: x == 0)
    return out
