"""Micro-batches: one update of 4 micro-batches of 8 against single updates of 8 and of 32 points, crux and
the hand-written loop and scan alike, on the standard problem (1024 points, 1-64-64-64-1).
"""
from __future__ import annotations

from typing import Callable

from cruxlab.bench.interleaved import SCAN_STEPS, Rounds, measure_interleaved, rate
from cruxlab.bench.reference_problems import interior, poisson_problem
from cruxlab.bench.variants import CruxVariant, HandVariant, Variant


def bench_accumulation(rounds: Rounds, log: Callable[[str], None], form: str) -> dict:
    """One update of 4 micro-batches of 8 against single updates of 8 and of 32 points (same problem)."""
    n, hidden = 1024, (64, 64, 64)
    steps = rounds.steps(1000, 100)
    fused = min(SCAN_STEPS, steps)
    cases = {"b8": dict(batchsize=8), "b32": dict(batchsize=32), "b8x4": dict(batchsize=8, accumulation_steps=4)}
    variants: list[Variant] = []
    for k in ((1,) if rounds.quick else (1, fused)):
        for case, options in cases.items():
            variants.append(CruxVariant(f"crux {case} inner_steps={k}", poisson_problem(n, hidden), k, k,
                                        precision=rounds.precision, **options))
    hand_cases = ("b8", "b8x4") if rounds.quick else tuple(cases)
    for mode, k in (("loop", 1),) if rounds.quick else (("loop", 1), ("scan", fused)):
        for case in hand_cases:
            options = cases[case]
            variants.append(HandVariant(f"hand {mode} {form} {case}", form, interior(n), (1, *hidden, 1), k,
                                        batch=options["batchsize"], micro=options.get("accumulation_steps", 1),
                                        precision=rounds.precision))
    results = measure_interleaved(variants, steps, rounds.repeats, log)
    ratios = {}
    for prefix in ["crux", f"hand loop {form}", f"hand scan {form}"]:
        for suffix in ["inner_steps=1", f"inner_steps={fused}"] if prefix == "crux" else [""]:
            name = lambda case: " ".join(filter(None, [prefix, case, suffix]))
            label = " ".join(filter(None, [prefix, suffix]))
            t = {case: 1 / rate(results, name(case)) for case in cases if name(case) in results}
            if "b8x4" in t and "b8" in t:
                ratios[f"{label}: t(4x8) / (4 t(8))"] = t["b8x4"] / (4 * t["b8"])
            if "b8x4" in t and "b32" in t:
                ratios[f"{label}: t(4x8) / t(32)"] = t["b8x4"] / t["b32"]
    return {"variants": results, "ratios": ratios, "form": form,
            "description": f"{n} points, 1-64-64-64-1; per update: 8 points, 32 points, 4 micro-batches of 8; "
                           f"{steps} updates per round"}
