"""The 2-D problem, -Δu = 2 pi^2 sin(pi x) sin(pi y) on 1024 grid points (2-64-64-64-1): the Laplacian's
formulations ranked where there is more than one direction, crux against each hand-written loop.
"""
from __future__ import annotations

from typing import Callable

from cruxlab.bench.hand_written import FORMS, SAME_AS_CRUX
from cruxlab.bench.interleaved import Rounds, fastest, measure_interleaved, rate
from cruxlab.bench.reference_problems import grid2d, laplacian2d_problem
from cruxlab.bench.variants import CruxVariant, Variant, hand_survey


def bench_laplacian(rounds: Rounds, log: Callable[[str], None], forms=FORMS) -> dict:
    """crux one update a call against the hand-written loop of each formulation in ``forms``."""
    points, hidden = grid2d(1024), (64, 64, 64)
    steps = rounds.steps(100, 10)
    variants: list[Variant] = [CruxVariant("crux inner_steps=1", laplacian2d_problem(points, hidden), 1, steps,
                                           precision=rounds.precision)]
    variants += hand_survey(points, (2, *hidden, 1), (), forms, modes=("loop",), precision=rounds.precision)
    results = measure_interleaved(variants, steps, rounds.repeats, log)
    loops = [v for v in results if v.startswith("hand loop")]
    best = fastest(results, loops)
    return {"variants": results, "best": {"loop": best},
            "ratios": {"crux inner_steps=1 / fastest hand loop": rate(results, "crux inner_steps=1") /
                       rate(results, best),
                       f"crux inner_steps=1 / hand loop {SAME_AS_CRUX}": rate(results, "crux inner_steps=1") /
                       rate(results, f"hand loop {SAME_AS_CRUX}")},
            "description": f"-Δu = 2 pi^2 sin(pi x) sin(pi y), {len(points)} grid points, 2-64-64-64-1; "
                           f"{steps} updates per round"}
