"""Claim 4: checkpoint_gradients saves memory at about 30% more time, and changes no number.

Memory is the compiled update's temporary bytes (exact, so compared strictly);
time is the steady-state time per update, with the repeats' spread as noise;
"~30%" is read at the precision it is stated with (one significant digit:
a cost in [25%, 35%)). The claim holds when every ratio the repeats allow lies
in that range and fails when none does; anything between, or repeats of one
setting that differ by as much as the 30% in question (a busy shared CPU), is
within noise.
"""
from __future__ import annotations

import math
from dataclasses import replace

from crux.report.claims.equivalence import same_numbers
from crux.report.numerics import SPREAD_ORIGIN, STEP_TIME, ratio_range, spread
from crux.report.pairing import Pair, first, paired_settings, reference_and_twins, run_ids
from crux.report.records import RunRecord, UnreadableArtifact
from crux.report.verdict import (FAILS, HOLDS, INCONCLUSIVE, Claim, Threshold, Verdict, cannot_judge, fmt, fmt_bytes,
                                 not_in_sweep)

SAVES_MEMORY = Claim("checkpoint_gradients=False, # True → gradient checkpointing (saves memory, ~30% slower)",
                     "checkpoint-saves-memory")
SAME_NUMBERS = Claim("checkpoint_gradients=True rematerialises activations in the backward pass and gives the same "
                     "numbers as checkpoint_gradients=False", "checkpoint-same-numbers")
CLAIMED_COST = (1.25, 1.35)  # "~30% slower" at its one significant digit
CLAIMED_SLOWDOWN = 0.3  # repeats of one setting that differ by this much cannot tell ~30% from no cost
COST_ORIGIN = ("the claim's own figure, ~30%, read at its one significant digit ([25%, 35%)); the measured ratio is "
               "the range its repeats allow, " + SPREAD_ORIGIN)
NOISE_ORIGIN = ("a measurement resolves a 30% cost only if repeating the same setting changes its time by less than "
                "30%; on a busy shared CPU it may not")
MEMORY_ORIGIN = ("compiled memory_analysis() of the update is exact and deterministic for a given program, so no "
                 "noise allowance is needed: any difference is real")


def checkpoint_pairs(records: list[RunRecord]) -> list[Pair]:
    """``(repeats with checkpointing, repeats without)`` per checkpointed setting."""
    return paired_settings(records, lambda o: o.checkpoint_gradients, checkpoint_gradients=False)


def check_checkpoint(records: list[RunRecord]) -> list[Verdict]:
    """Per checkpointed setting: same numbers, memory saved, time cost."""
    pairs = checkpoint_pairs(records)
    if not pairs:
        return [not_in_sweep("checkpoint.saves_memory", SAVES_MEMORY, "a run with checkpoint_gradients=True",
                             "checkpointed", run_ids(records))]
    verdicts = []
    for on, off in pairs:
        label = on[0].label
        reference, twins = reference_and_twins(off, on[0])
        verdicts.append(same_numbers(f"checkpoint.same_numbers[{label}]", SAME_NUMBERS, on[0], reference,
                                     "checkpoint_gradients=True", twins))
        verdicts.append(_memory(label, on[0], first(off)))
        verdicts.append(_time(label, on, off))
    return _across_models(verdicts)


def _memory(label: str, on: RunRecord, off: RunRecord | None) -> Verdict:
    name = f"checkpoint.saves_memory[{label}]"
    test = "compiled temporary memory (memory/temp_bytes) of the update with checkpointing against without"
    key = "memory/temp_bytes"
    if off is None or key not in on.metrics or key not in off.metrics:
        return SAVES_MEMORY.verdict(name, test, INCONCLUSIVE,
                                    f"needs {key} of a run with and one without checkpointing", runs=run_ids(on, off))
    with_, without = on.metrics[key], off.metrics[key]
    ratio = with_ / without
    evidence = {"temp_bytes_checkpointed": with_, "temp_bytes_plain": without, "ratio": ratio, **model_shape(on)}
    threshold = {"temp_bytes_checkpointed": Threshold(without, "temp_bytes(on) < temp_bytes(off)", MEMORY_ORIGIN)}
    summary = (f"checkpointing needs {fmt(ratio)}× the temporary memory ({fmt_bytes(with_)} vs "
               f"{fmt_bytes(without)}){_what_decides(evidence)}")
    return SAVES_MEMORY.verdict(name, test, HOLDS if with_ < without else FAILS, summary, evidence, threshold,
                                run_ids(on, off))


def model_shape(run: RunRecord) -> dict[str, float]:
    """``model_depth`` and ``model_width`` of the run's resolved config (its ``model.depth`` and ``model.width``
    params), those it has."""
    shape = {}
    for field in ("depth", "width"):
        value = run.params.get(f"model.{field}")
        if value is not None and value.isdigit():
            shape[f"model_{field}"] = float(value)
    return shape


def _what_decides(evidence: dict[str, float]) -> str:
    """The model the memory was measured on, and why that decides it: checkpointing keeps one layer's input per
    layer and recomputes the rest, so what it saves grows with the depth, and with the width each layer holds."""
    if "model_depth" not in evidence:
        return ""
    depth = int(evidence["model_depth"])
    width = f", width {int(evidence['model_width'])}" if "model_width" in evidence else ""
    return (f", on a model of depth {depth}{width}: checkpointing keeps each layer's input and recomputes the "
            f"rest, so what it saves grows with the depth and width of the model (measure at your own)")


def _across_models(verdicts: list[Verdict]) -> list[Verdict]:
    """Where the sweep measured the memory on models of several shapes, each memory finding lists them all."""
    memory = [v for v in verdicts if v.id.startswith("checkpoint.saves_memory") and "ratio" in v.evidence
              and "model_depth" in v.evidence]
    shapes = {(v.evidence["model_depth"], v.evidence.get("model_width", math.nan)): v.evidence["ratio"]
              for v in memory}
    if len(shapes) < 2:
        return verdicts
    listed = ", ".join(f"{fmt(ratio)}× at depth {int(depth)}" + (f" width {int(width)}" if width == width else "")
                       for (depth, width), ratio in sorted(shapes.items()))
    return [replace(v, summary=f"{v.summary}; across this sweep: {listed}") if v in memory else v for v in verdicts]


def _time(label: str, on: list[RunRecord], off: list[RunRecord]) -> Verdict:
    name = f"checkpoint.time_cost[{label}]"
    try:
        device = on[0].device
    except UnreadableArtifact as error:
        return cannot_judge(name, SAVES_MEMORY, "time per update with checkpointing over without, on "
                            "the device the runs recorded", error, run_ids(on, off))
    test = (f"steady-state time per update ({STEP_TIME}) with checkpointing over without, on {device}: "
            f"the range of the ratio over repeats against the claimed ~1.3")
    mine, base = spread(on, STEP_TIME), spread(off, STEP_TIME)
    runs = run_ids(on, off)
    thresholds = {"time_ratio": Threshold(CLAIMED_COST[0], f"ratio range meets [{CLAIMED_COST[0]}, "
                                          f"{CLAIMED_COST[1]})", COST_ORIGIN)}
    if not (mine.measured and base.measured):
        return SAVES_MEMORY.verdict(name, test, INCONCLUSIVE, f"needs at least 2 repeats with and without "
                                    f"checkpointing (have {len(mine.values)} and {len(base.values)})",
                                    thresholds=thresholds, runs=runs)
    low, high = ratio_range(mine, base)
    median = mine.median / base.median
    noise = max(mine.relative_range, base.relative_range)
    evidence = {"time_ratio_median": median, "time_ratio_low": low, "time_ratio_high": high,
                "step_seconds_median_checkpointed": mine.median, "step_seconds_median_plain": base.median,
                "repeats_checkpointed": len(mine.values), "repeats_plain": len(base.values),
                "repeat_spread": noise}
    thresholds["repeat_spread"] = Threshold(CLAIMED_SLOWDOWN, "(max - min) / min over the repeats of each setting "
                                            f"< {CLAIMED_SLOWDOWN}", NOISE_ORIGIN)
    change = f"{fmt(abs(median - 1) * 100)}% {'more' if median >= 1 else 'less'} time per update"
    cost = f"{change} on {device} (ratio {fmt(median)}, {fmt(low)}–{fmt(high)} over repeats)"
    if noise >= CLAIMED_SLOWDOWN:
        verdict, summary = INCONCLUSIVE, (f"within noise: repeats of one setting differ by up to "
                                          f"{fmt(noise * 100)}%, as much as the ~30% in question; {cost}")
    elif high < CLAIMED_COST[0] or low >= CLAIMED_COST[1]:
        verdict, summary = FAILS, f"{cost}, not ~30%"
    elif CLAIMED_COST[0] <= low and high < CLAIMED_COST[1]:
        verdict, summary = HOLDS, cost
    else:
        verdict, summary = INCONCLUSIVE, f"within noise: {cost}, a range that takes in ~30% and costs other than it"
    return SAVES_MEMORY.verdict(name, test, verdict, summary, evidence, thresholds, runs)
