"""The standard problem (1024 points, 1-64-64-64-1, full batch) and the small one (64 points, 1-32-32-32-1,
dispatch-bound): crux against every hand-written variant, one update a call and fused.

crux runs one update a call and fused at K = 10, 100 and epochs (one call a round), also with
``laplacian_mode=reverse`` (the hand scans' rev-rev formulation of u''), and in each of ``--loop-forms``; the
hand-written code in a loop and in scans of as many updates, each formulation of u''. crux meets the fastest
hand-written variant of its kind back to back (:func:`cruxlab.bench.interleaved.duel`); the other pairs are
taken from the survey's rounds. Beside the clock, XLA's count of the work of crux's update and of the
hand-written one of crux's formulation (:func:`work_per_update`).
"""
from __future__ import annotations

from typing import Any, Callable

import jax
import numpy as np

from crux.loop import unrolled as unrolled_by_crux
from cruxlab.bench.flop_count import per_turn, work
from cruxlab.bench.hand_written import FORMS, SAME_AS_CRUX
from cruxlab.bench.interleaved import (Rounds, call_costs, duel, fastest, fused_depths, measure_interleaved,
                                       paired_ratio, rate)
from cruxlab.bench.reference_problems import interior, poisson_problem
from cruxlab.bench.variants import CruxVariant, HandVariant, Variant, formed, hand_name, hand_survey


def loop_form_variants(rounds: Rounds, make_problem: Callable[[], Any], points: np.ndarray, widths: tuple[int, ...],
                       fused: tuple[int, ...], first: int) -> list[Variant]:
    """crux and the hand-written scan of crux's formulation in each of ``rounds.loop_forms`` at each fused depth
    (crux's own form, a loss check alone, is its plain variant)."""
    out: list[Variant] = []
    for loop in rounds.loop_forms:
        for k in fused:
            if not loop.crux_default:
                out.append(CruxVariant(formed(f"crux inner_steps={k}", loop), make_problem, k, first,
                                       precision=rounds.precision, loop=loop))
            if loop.changes_hand:
                out.append(HandVariant(formed(hand_name("scan", k, SAME_AS_CRUX), loop), SAME_AS_CRUX, points, widths,
                                       k, precision=rounds.precision, loop=loop))
    return out


def loop_form_pairs(results: dict, rounds: Rounds, fused: tuple[int, ...]) -> dict[str, tuple[str, str]]:
    """Each crux loop form against the hand-written scan in the same form, and each against crux's own."""
    pairs = {}
    for loop in rounds.loop_forms:
        for k in fused:
            ours, hand = formed(f"crux inner_steps={k}", loop), hand_name("scan", k, SAME_AS_CRUX)
            if loop.changes_hand:
                hand = formed(hand, loop)
            if loop.crux_default:
                ours = f"crux inner_steps={k}"
            if ours in results and hand in results:
                pairs[f"{ours} / {hand}"] = (ours, hand)
            if ours in results and ours != f"crux inner_steps={k}":
                pairs[f"{ours} / crux inner_steps={k}"] = (ours, f"crux inner_steps={k}")
            if loop.changes_hand and hand in results:
                pairs[f"{hand} / {hand_name('scan', k, SAME_AS_CRUX)}"] = (hand, hand_name("scan", k, SAME_AS_CRUX))
    return pairs


def bench_standard(rounds: Rounds, log: Callable[[str], None], n: int = 1024, hidden: tuple[int, ...] = (64, 64, 64),
                   full_steps: int = 500, quick_steps: int = 40, first_full: int = 2000, forms=FORMS) -> dict:
    """The problem on ``n`` points and ``hidden`` tanh layers: every variant timed in rounds of ``full_steps``
    updates (``quick_steps`` in a smoke run) after a first solve of ``first_full`` epochs, crux against the
    fastest hand-written variant of each kind back to back; the variants, their ratios and the work of an
    update."""
    steps = rounds.steps(full_steps, quick_steps)
    fused = fused_depths(steps)
    first = rounds.steps(first_full, steps)
    first = first - first % steps  # solve(epochs=first) at every fused depth: a multiple of K = epochs
    crux_name = lambda k: f"crux inner_steps={k}"
    variants: list[Variant] = [CruxVariant(crux_name(k), poisson_problem(n, hidden), k, first,
                                           precision=rounds.precision) for k in (1, *fused)]
    crux_reverse = lambda k: f"{crux_name(k)}, laplacian_mode=reverse"
    if "rev-rev" in forms:  # crux with the hand scans' rev-rev formulation of u'', at each fused k
        variants += [CruxVariant(crux_reverse(k), poisson_problem(n, hidden, "reverse"), k, first,
                                 precision=rounds.precision) for k in fused]
    variants += hand_survey(interior(n), (1, *hidden, 1), fused, forms, precision=rounds.precision)
    variants += loop_form_variants(rounds, poisson_problem(n, hidden), interior(n), (1, *hidden, 1), fused, first)
    results = measure_interleaved(variants, steps, rounds.repeats, log)
    loops = [v for v in results if v.startswith("hand loop")]
    scans = {k: [v for v in results if v.startswith(f"hand scan k={k} ")] for k in fused}
    best_loop, best_scan = fastest(results, loops), {k: fastest(results, scans[k]) for k in fused}
    best_hand = fastest(results, loops + sum(scans.values(), []))
    best_crux = fastest(results, [v for v in results if v.startswith("crux")])
    pairs = {"crux inner_steps=1 / fastest hand loop": (crux_name(1), best_loop)}
    for k in fused:
        pairs[f"{crux_name(k)} / fastest hand scan k={k}"] = (crux_name(k), best_scan[k])
    pairs["fastest crux / fastest hand"] = (best_crux, best_hand)
    pairs[f"crux inner_steps=1 / hand loop {SAME_AS_CRUX}"] = (crux_name(1), hand_name("loop", 1, SAME_AS_CRUX))
    for k in fused:
        pairs[f"{crux_name(k)} / {hand_name('scan', k, SAME_AS_CRUX)}"] = (crux_name(k),
                                                                            hand_name("scan", k, SAME_AS_CRUX))
    pairs.update(loop_form_pairs(results, rounds, fused))
    for k in fused:
        if crux_reverse(k) in results:
            pairs[f"{crux_reverse(k)} / {hand_name('scan', k, 'rev-rev')}"] = (crux_reverse(k),
                                                                                hand_name("scan", k, "rev-rev"))
            pairs[f"fastest crux inner_steps={k} (either laplacian_mode) / fastest hand scan k={k}"] = (
                fastest(results, [crux_name(k), crux_reverse(k)]), best_scan[k])
    costs = {"crux": call_costs(results, {k: crux_name(k) for k in fused}),
             "crux, laplacian_mode=reverse": call_costs(results, {k: crux_reverse(k) for k in fused}),
             **{f"hand scan {form}": call_costs(results, {k: hand_name("scan", k, form) for k in fused})
                for form in forms}}
    # crux against the fastest hand-written variant at the same k: back to back; the other pairs from the survey
    dueled = ["crux inner_steps=1 / fastest hand loop", *(f"{crux_name(k)} / fastest hand scan k={k}" for k in fused)]
    by_name = {v.name: v for v in variants}
    paired = {key: paired_ratio(results, a, b) for key, (a, b) in pairs.items() if key not in dueled}
    for key in dueled:
        a, b = pairs[key]
        paired[key] = duel(by_name[a], by_name[b], steps, rounds.duel_rounds)
        log(f"  {key} ({b}), back to back: {paired[key]['median']:.3f} "
            f"[{paired[key]['min']:.3f}-{paired[key]['max']:.3f}]")
    return {"variants": results, "ratios": {key: rate(results, a) / rate(results, b) for key, (a, b) in pairs.items()},
            "paired": paired, "work": work_per_update(by_name, fused),
            "call_costs": {name: cost for name, cost in costs.items() if cost is not None},
            "fused": list(fused), "epochs": steps, "precision": rounds.precision,
            "best": {"loop": best_loop, "scan": best_scan, "hand": best_hand, "crux": best_crux},
            "description": f"{n} points, 1-{'-'.join(map(str, hidden))}-1 tanh, full batch, Adam 1e-3, matmul "
                           f"precision {rounds.precision!r} for crux and the hand-written code; {steps} updates per "
                           f"round, fused at K = {', '.join(map(str, fused))} (K = {steps}: one call a round)"}


def work_per_update(variants: dict[str, Variant], fused: tuple[int, ...]) -> dict[int, dict[str, dict]]:
    """k -> XLA's count (:func:`work`) of crux's call of k updates and of the hand-written loop (k = 1) or scan of
    the same formulation (``SAME_AS_CRUX``): what each does per update, whatever the machine's load."""
    out = {}
    for k in (1, *fused):
        hand = variants.get(hand_name("loop" if k == 1 else "scan", k, SAME_AS_CRUX))
        ours = variants.get(f"crux inner_steps={k}")
        if isinstance(hand, HandVariant) and isinstance(ours, CruxVariant):
            compiled = ours.solver.compiled_call(inner_steps=k, precision=ours.options["precision"])
            # the turns of crux's loop: as the engine chooses them for such a small program (crux.loop.unrolled)
            counts = {"crux": per_turn(work(compiled.call), unrolled_by_crux(k, jax.default_backend())),
                      "hand": work(hand.call)}
            if all(counts.values()):
                out[k] = counts
    return out


def bench_small(rounds: Rounds, log: Callable[[str], None], forms=FORMS) -> dict:
    """The standard problem's variants on 64 points and 3 × 32: where a call's dispatch outweighs its work."""
    return bench_standard(rounds, log, n=64, hidden=(32, 32, 32), full_steps=2000, quick_steps=200,
                          first_full=2000, forms=forms)
