"""Claims 2 and 3: fusing K steps (inner_steps=K) changes no number, and is it faster on this device?

Identity is judged against K=1 with the same other options, on final
parameters and per-epoch histories, for every batch setting the sweep ran: on
mini-batches the K updates of a fused call each draw their own points, so only
there can a fused call that drew the wrong ones be told apart from K=1.
Speed is judged on the fused jobs' paired timings (K against K=1, alternating
chunks in one process, crux.timing): faster when the 95% interval of the time
ratio lies below 0.95 (a 5% noise threshold), per device: the quoted page
measured it slower on a CPU, and expects it to pay off where dispatch latency
dominates.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from cruxlab.bands import FASTER_BAND, NOISE_THRESHOLD
from cruxlab.report import drawing
from cruxlab.report.claims.equivalence import same_numbers
from cruxlab.report.numerics import (TIMING_ORIGIN, TIMING_RULE, agreement, paired_timing, parameter_bound,
                                     spread)
from cruxlab.report.pairing import Pair, paired_settings, reference_and_twins, run_ids
from cruxlab.report.run_records import RunRecord, describe
from cruxlab.report.verdict import FAILS, HOLDS, INCONCLUSIVE, Claim, Threshold, Verdict, fmt, not_in_sweep

IDENTICAL = Claim("inner_steps=N runs N gradient steps inside a single jax.lax.fori_loop [...] "
                  "Numerically identical [...] Fusing is a dispatch change, not a numerical one",
                  "inner-steps-identical")
FASTER = Claim("inner_steps=N runs N gradient steps inside a single jax.lax.fori_loop, so Python dispatches once per "
               "N steps instead of once per step. [...] The argument exists for the case where dispatch latency "
               "dominates a small kernel, which is far likelier on a GPU than in this test — measure on your own "
               "problem", "inner-steps-faster")
NOISE_ORIGIN = ("a noise threshold on the change, as benchmark tools keep one (criterion.rs: 1% by default): "
                "fusing is worth its longer compile only for a visible gain, and on a shared CPU a cost that "
                "differs by a few percent between two settings can be the cores' caches and clocks rather than "
                "the option, so a speed-up must be more than 5%")


def fused_pairs(records: list[RunRecord]) -> list[Pair]:
    """``(repeats at K, repeats at K=1)`` for every fused setting, by batch setting and then K."""
    pairs = paired_settings(records, lambda o: o.inner_steps > 1, inner_steps=1)
    return sorted(pairs, key=lambda pair: (pair[0][0].group, batches(pair[0][0]), pair[0][0].options.inner_steps))


def batches(record: RunRecord) -> str:
    """The run's options apart from K, as ``describe`` names them: ``full``, ``b8_acc4``, ..."""
    return describe(replace(record.options, inner_steps=1))


def setting(record: RunRecord) -> str:
    """What the verdicts on a fused run are named after: ``K=10`` on the full batch, ``b8_acc4 K=10`` otherwise."""
    return describe(record.options).removeprefix("full ")


def check_inner_steps(records: list[RunRecord]) -> list[Verdict]:
    """Per fused setting (batch setting and K): one verdict on numerical identity, one on speed."""
    pairs = fused_pairs(records)
    if not pairs:
        return [not_in_sweep("inner_steps.identical", IDENTICAL, "runs with inner_steps > 1", "fused",
                             run_ids(records))]
    verdicts = []
    for fused, reference in pairs:
        partner, twins = reference_and_twins(reference, fused[0])
        identical = same_numbers(f"inner_steps.identical[{setting(fused[0])}]", IDENTICAL, fused[0], partner,
                                 f"inner_steps={fused[0].options.inner_steps}", twins)
        verdicts += [identical, _faster(fused, reference, same_work=identical.verdict != FAILS)]
    return _across_settings(verdicts)


def _faster(fused: list[RunRecord], reference: list[RunRecord], same_work: bool = True) -> Verdict:
    """The speed verdict; where the fused runs do not train as K=1 does (``same_work`` false: identity fails,
    e.g. a library that makes fewer updates than epochs), their time per epoch is not that of the same work, and
    the verdict is inconclusive, saying so."""
    k = fused[0].options.inner_steps
    name = f"inner_steps.faster[{setting(fused[0])}]"
    timing = paired_timing(fused)
    runs = run_ids(fused, reference)
    if timing is None:
        return FASTER.verdict(name, f"paired timing of inner_steps={k} against inner_steps=1 (timing.against)",
                              INCONCLUSIVE, "no fused run timed itself against inner_steps=1: set "
                              "timing.against={inner_steps: 1} (sweeps/inner_steps.yaml does)", runs=runs)
    test = (f"seconds per epoch at inner_steps={k} over inner_steps=1, timed in one process in alternating chunks "
            f"({timing.clock}) on {timing.device} ({timing.cpu}): the ratio's 95% interval against {FASTER_BAND.high} (faster: "
            f"wholly below it, by more than the {fmt(NOISE_THRESHOLD * 100)}% noise threshold); compile time reported "
            f"separately (the slowest repeat's, as later repeats may hit the persistent compilation cache)")
    verdict = timing.judge(FASTER_BAND)
    speedup = 1 / timing.interval.estimate
    summary = {HOLDS: f"faster on {timing.device} by {fmt(speedup)}×: {timing.described()}",
               FAILS: f"not faster on {timing.device} by more than {fmt(NOISE_THRESHOLD * 100)}% "
                      f"({fmt(speedup)}×): {timing.described()}",
               INCONCLUSIVE: f"on {timing.device}, {timing.undecided('both a speed-up and none')}"}[verdict]
    if not same_work:
        verdict = INCONCLUSIVE
        summary = (f"not judged: the fused runs do not make K=1's updates (inner_steps.identical fails), so "
                   f"{fmt(speedup)}× K=1's epochs per second is no speed-up of the same work: {timing.described()}")
    # The slowest compile is the cold one: later repeats may hit the persistent compilation cache.
    decides, costs = _what_decides(timing.interval.estimate, timing.reference, k)
    evidence = {"K": k, **timing.evidence(), "speedup": speedup, **costs,
                "compile_seconds_max_K": spread(fused, "compile_seconds").high,
                "compile_seconds_max_K1": spread(reference, "compile_seconds").high}
    thresholds = {"time_ratio": Threshold(FASTER_BAND.high, f"95% interval below {FASTER_BAND.high}",
                                          NOISE_ORIGIN + "; " + TIMING_RULE + "; " + TIMING_ORIGIN)}
    return FASTER.verdict(name, test, verdict, summary + decides + timing.warning(verdict), evidence, thresholds,
                          runs)


def _what_decides(ratio: float, unfused: np.ndarray, k: int) -> tuple[str, dict[str, float]]:
    """What the gain depends on, from the paired ratio (fused over unfused seconds per update, the verdict's own
    estimate) and the unfused chunks' seconds per update (one epoch is one update): fusing K updates into a call
    dispatches once instead of K times, so it saves (1 - 1/K) of the per-call overhead o per update and no more:
    unfused - fused = o (1 - 1/K). The gain is o's share of an unfused update, large where the step is cheap and
    vanishing where the step itself costs far more than a call.

    Every figure is derived from the one ratio the verdict states, so the finding cannot contradict itself: the
    share is (1 - ratio) / (1 - 1/K), at least 1 - ratio, so the ceiling 1 / (1 - share) is at least the
    speed-up 1 / ratio. (A fused cost taken as the fused chunks' own median would come from another estimator,
    and where a load drifts its ceiling can fall below the speed-up measured.)"""
    per_update = float(np.median(unfused))
    per_fused_update = ratio * per_update
    share = (1 - ratio) / (1 - 1 / k)
    overhead = share * per_update
    costs = {"seconds_per_update_K1": per_update, "seconds_per_update_K": per_fused_update,
             "call_overhead_seconds": overhead, "call_overhead_share": share}
    timed = (f"; what decides it: an unfused update takes {_ms(per_update)} here (the median of its chunks) and a "
             f"fused one {_ms(per_fused_update)} (the ratio times that)")
    if overhead <= 0:
        return (timed + ": no per-call overhead left to save at this step's cost (the gain is the call overhead's "
                "share of an update: it appears where a step costs little next to a call, e.g. a small model on a "
                "GPU)"), costs
    ceiling = (f"no K gains more than {fmt(1 / (1 - share))}×" if share < 1 else
               "nearly all of an update is call overhead")  # o beyond an update: the chunks' noise
    return (timed + f", so fusing saves a per-call overhead of {_ms(overhead)}, {fmt(share * 100)}% of an unfused "
            f"update: at this step's cost {ceiling}, and a costlier step (a larger model or batch) gains less"), costs


def _ms(seconds: float) -> str:
    return f"{fmt(seconds * 1e3)} ms"


def _across_settings(verdicts: list[Verdict]) -> list[Verdict]:
    """Where the sweep timed several fused settings, each speed finding lists every setting's gain beside the cost
    of its unfused update, so that a reader sees the gain follow the step's cost."""
    timed = [v for v in verdicts if v.id.startswith("inner_steps.faster") and "seconds_per_update_K1" in v.evidence]
    if len(timed) < 2:
        return verdicts
    by_cost = sorted(timed, key=lambda v: v.evidence["seconds_per_update_K1"])
    listed = ", ".join(f"{v.id.removeprefix('inner_steps.faster[').removesuffix(']')} {fmt(v.evidence['speedup'])}× "
                       f"at {_ms(v.evidence['seconds_per_update_K1'])} per unfused update" for v in by_cost)
    return [replace(v, summary=f"{v.summary}; across this sweep: {listed}") if v in timed else v for v in verdicts]


def inner_steps_figures(records: list[RunRecord], out: Path) -> list[drawing.Figure]:
    """One figure per batch setting: K=1 and each fused K of it."""
    by_batches: dict[tuple[str, str], list] = {}
    for pair in fused_pairs(records):
        by_batches.setdefault((pair[0][0].group, batches(pair[0][0])), []).append(pair)
    return [_inner_steps_figure(name, pairs, out) for (_, name), pairs in by_batches.items()]


def _inner_steps_figure(name: str, pairs: list, out: Path) -> drawing.Figure:
    """The paired timing each speed verdict judges (every pair's ratio, their median and its 95% interval against
    the noise threshold), compile times, and each K's final-parameter distance to K=1 against its bound."""
    plt = drawing.pyplot()
    fig, (ax_time, ax_compile, ax_dist) = plt.subplots(1, 3, figsize=(14, 4))
    fused = [(f"K={runs[0].options.inner_steps}", runs) for runs, _ in pairs]
    drawing.paired_ratio_panel(ax_time, fused, FASTER_BAND, "K=1")
    columns = [("K=1", pairs[0][1])] + fused
    for i, (label, runs) in enumerate(columns):
        compiles = [r.metrics["compile_seconds"] for r in runs if "compile_seconds" in r.metrics]
        ax_compile.plot([i] * len(compiles), compiles, "o", color="C1", alpha=0.6)
    ax_compile.set_xticks(range(len(columns)), [label for label, _ in columns])
    ax_compile.set_ylabel("seconds")
    ax_compile.set_title("compile time (repeats may hit the compilation cache)", fontsize=10)
    labels, distances, bounds, identical = [], [], [], []
    for (label, runs), (_, ref) in zip(fused, pairs):
        partner, twins = reference_and_twins(ref, runs[0])
        if partner is not None:
            found = agreement(runs[0], partner)
            labels.append(label)
            distances.append(found.distance)
            bounds.append(parameter_bound(runs[0], partner, twins))
            identical.append(found.bit_identical)
    drawing.distance_panel(ax_dist, labels, distances, bounds, identical, "|θ_K − θ_1| (final parameters)")
    ax_dist.set_title("distance to K=1 against its round-off bound", fontsize=10)
    file = drawing.save_figure(fig, out, f"inner_steps_{name}")
    return drawing.Figure(file, f"inner_steps, {name}, on {pairs[0][0][0].device}: the paired timing the speed "
                                f"verdicts judge (each pair's ratio of K to K=1, their median and its 95% interval, "
                                f"below {FASTER_BAND.high} is faster), compile time, and the final-parameter distance "
                                f"to K=1 against its round-off bound", "inner_steps")
