"""Shapes users train: the 2-D problem with few points on a narrow network (256 points, 2 × 32) and many on a
wide one (16,384 points, 4 × 128; 4,096 on a CPU), at each of ``--precisions``: crux fused ×100 and ×1000
against the fastest hand-written scan of as many updates (plain, and unrolled four to a turn), back to back.
"""
from __future__ import annotations

from typing import Callable

import jax

from cruxlab.bench.hand_written import SAME_AS_CRUX
from cruxlab.bench.interleaved import PRECISIONS, Rounds, duel, fastest, measure_interleaved, rate
from cruxlab.bench.loop_forms import LoopForm
from cruxlab.bench.reference_problems import grid2d, laplacian2d_problem
from cruxlab.bench.variants import CruxVariant, HandVariant, Variant, formed, hand_name

# The shapes problem: (label, points per side of the grid, hidden widths); on a CPU the wide shape at 32 × 32
# points (an update of 16,384 would take some 0.3 s there), fused ×100 only.
SHAPES = (("2-D, 256 points, 2×32", 16, (32, 32)), ("2-D, 16,384 points, 4×128", 128, (128,) * 4))
SHAPE_DEPTHS = (100, 1000)
CPU_WIDE_SIDE = 32
SHAPE_UNROLL = LoopForm(unroll=4)  # the hand-written scan's fastest form on a TPU


def bench_shapes(rounds: Rounds, log: Callable[[str], None], precisions: tuple[str, ...] = PRECISIONS) -> dict:
    """crux fused ×100 and ×1000 on the 2-D problem in shapes outside the standard ones, each against the fastest
    of the hand-written Taylor scans of as many updates (plain and unrolled four to a turn), back to back, at
    each matmul precision."""
    rows = []
    for label, side, hidden in SHAPES:
        depths = SHAPE_DEPTHS
        if jax.default_backend() == "cpu" and hidden[0] > 32:
            side, depths = CPU_WIDE_SIDE, SHAPE_DEPTHS[:1]
            label = f"{label} ({side * side:,} points on a CPU)"
        points, widths = grid2d(side * side), (2, *hidden, 1)
        steps = rounds.steps(max(depths), min(depths))
        depths = tuple(sorted({min(k, steps) for k in depths}))
        for precision in precisions:
            variants: list[Variant] = []
            for k in depths:
                variants.append(CruxVariant(f"crux inner_steps={k}", laplacian2d_problem(points, hidden), k, steps,
                                            precision=precision))
                variants += [HandVariant(formed(hand_name("scan", k, SAME_AS_CRUX), loop), SAME_AS_CRUX, points,
                                         widths, k, precision=precision, loop=loop)
                             for loop in (LoopForm(), SHAPE_UNROLL)]
            log(f"  {label}, precision {precision}")
            results = measure_interleaved(variants, steps, rounds.repeats, log)
            by_name = {v.name: v for v in variants}
            for k in depths:
                best = fastest(results, [n for n in results if n.startswith(f"hand scan k={k} ")])
                pair = duel(by_name[f"crux inner_steps={k}"], by_name[best], steps, rounds.duel_rounds)
                rows.append({"shape": label, "points": len(points), "hidden": list(hidden), "precision": precision,
                             "k": k, "steps": steps, "hand": best, "duel": pair,
                             "crux_steps_per_second": rate(results, f"crux inner_steps={k}"),
                             "hand_steps_per_second": rate(results, best)})
                log(f"  {label} {precision} fused ×{k}: crux / {best} {pair['median']:.3f} "
                    f"[{pair['min']:.3f}-{pair['max']:.3f}]")
    return {"rows": rows, "description": "-Δu = 2 pi^2 sin(pi x) sin(pi y) on a grid, u = x(1-x)y(1-y) N(x, y), N a "
                                         "tanh MLP, full batch, Adam 1e-3: crux fused against the fastest hand-written "
                                         "Taylor scan of as many updates (plain or unrolled 4), back to back"}
