"""The jNO column: the variants that :mod:`cruxlab.bench.jno_problems` timed in a process of its own (so not
interleaved with crux's rounds), merged into a report's problems beside crux's, with the ratios they make."""
from __future__ import annotations

import json
from pathlib import Path

from cruxlab.bench.interleaved import fastest, rate


def merge_jno(report: dict, path: Path) -> None:
    """Add the variants of the JSON at ``path`` (:mod:`cruxlab.bench.jno_problems`'s, measured in its own process) to
    each problem of ``report``, with the ratios crux's variants make against them."""
    jno = json.loads(path.read_text())
    report["jno"] = {k: v for k, v in jno.items() if k != "problems"}
    for problem, entry in jno.get("problems", {}).items():
        if problem not in report["problems"]:
            continue
        for name, result in entry.get("variants", {}).items():  # idempotent: called after every problem
            report["problems"][problem]["variants"][name] = {**result, "family": "jNO", "separate_process": True}
        first = entry.get("variants", {}).get("jNO inner_steps=1", {}).get("first_solve_seconds")
        if "first_update" in report["problems"][problem] and first is not None:  # its process's first solve(1)
            report["problems"][problem]["first_update"]["jNO"] = first
        ratios = report["problems"][problem].setdefault("ratios", {})
        ratios.update(entry.get("ratios", {}))
        variants = report["problems"][problem]["variants"]
        by = {family: [n for n, r in variants.items() if r["family"] == family] for family in ("crux", "jNO")}
        if by["crux"] and by["jNO"]:
            ratios["fastest crux / fastest jNO (separate process)"] = \
                rate(variants, fastest(variants, by["crux"])) / rate(variants, fastest(variants, by["jNO"]))
        for name in by["jNO"]:  # the same call of crux, where there is one: "jNO b8 inner_steps=1" -> "crux b8 ..."
            twin = "crux" + name[len("jNO"):]
            if twin in variants:
                ratios[f"{twin} / {name} (separate process)"] = rate(variants, twin) / rate(variants, name)
