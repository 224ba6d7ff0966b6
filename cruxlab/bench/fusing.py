"""Fusing: the cost of an update against the fused depth K on Burgers' equation, updates of 4 micro-batches
of 8: each K's rounds run the same updates, K = 1 pays a dispatch per update.
"""
from __future__ import annotations

from typing import Callable

from cruxlab.bench.interleaved import Rounds, measure_interleaved, paired_ratio, rate
from cruxlab.bench.reference_problems import burgers_problem
from cruxlab.bench.variants import CruxVariant, Variant

FUSING_DEPTHS = (1, 10, 100, 1000)


def per_update_cost(results: dict, names: dict[int, str]) -> list[dict[str, float]]:
    """For each fused depth k (``names``: k -> variant): µs per update (median of the rounds), and its time per
    update over K = 1's and over the next shallower depth's, round by round (:func:`paired_ratio`: the median of
    the rounds' ratios and their range; above 1, fusing made an update dearer)."""
    depths = sorted(k for k, name in names.items() if name in results)
    rows = []
    for previous, k in zip([depths[0], *depths], depths):
        against_one = paired_ratio(results, names[depths[0]], names[k])  # steps/s of K=1 over K's: t(K) / t(1)
        rows.append({"k": k, "us_per_update": 1e6 / rate(results, names[k]),
                     "over_k1": against_one["median"], "over_k1_min": against_one["min"],
                     "over_k1_max": against_one["max"],
                     "over_previous": paired_ratio(results, names[previous], names[k])["median"]})
    return rows


def bench_fusing(rounds: Rounds, log: Callable[[str], None]) -> dict:
    """Per-update cost against the fused depth K on Burgers' equation, batches of 4 micro-batches of 8: each K's
    rounds run the same updates (``steps`` a round, one solve()), K = 1 pays a dispatch per update."""
    n, hidden, batch, micro = 1024, (32, 32, 32), 8, 4
    steps = rounds.steps(max(FUSING_DEPTHS), 100)
    depths = [k for k in FUSING_DEPTHS if k <= steps]
    names = {k: f"crux inner_steps={k}" for k in depths}
    variants: list[Variant] = [CruxVariant(names[k], burgers_problem(n, hidden), k, steps, batchsize=batch,
                                           accumulation_steps=micro, precision=rounds.precision) for k in depths]
    results = measure_interleaved(variants, steps, rounds.repeats, log)
    rows = per_update_cost(results, names)
    for row in rows:
        log(f"  K={row['k']:<5d} {row['us_per_update']:9.1f} µs/update, {row['over_k1']:.3f}x K=1's "
            f"[{row['over_k1_min']:.3f}-{row['over_k1_max']:.3f}], {row['over_previous']:.3f}x the shallower K's")
    return {"variants": results, "per_update": rows, "precision": rounds.precision,
            "description": f"Burgers u_t + u u_x = nu u_xx on (x, t), 2-{'-'.join(map(str, hidden))}-1 tanh, {n} "
                           f"interior points, updates of {micro} micro-batches of {batch}, Adam 1e-3; {steps} "
                           f"updates per round at each fused depth K"}
