"""Claim 4: checkpoint_gradients saves memory at about 30% more time, and changes no number.

Memory is the compiled update's temporary bytes (exact, so compared strictly);
time is the ratio of seconds per epoch with and without, timed against each
other in one process (the checkpointed jobs' paired timings, crux.timing);
"~30%" is read at the precision it is stated with (one significant digit:
a cost in [25%, 35%)). The claim holds when the ratio's 95% interval lies in
that range and fails when it lies wholly outside; anything between is
inconclusive.
"""
from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

from crux import remat
from cruxlab.bands import CLAIMED_COST
from cruxlab.report import drawing
from cruxlab.report.claims.equivalence import same_numbers
from cruxlab.report.numerics import TIMING_ORIGIN, TIMING_RULE, paired_timing
from cruxlab.report.pairing import Pair, first, paired_settings, reference_and_twins, run_ids
from cruxlab.report.run_records import RunRecord
from cruxlab.report.verdict import (FAILS, HOLDS, INCONCLUSIVE, Claim, Threshold, Verdict, fmt, fmt_bytes, not_in_sweep)
from cruxlab.store.contract import recorded_form

COMPARED = "memory/checkpoint_compared"  # whether the run's form was chosen by comparing every form (crux.remat)

SAVES_MEMORY = Claim("checkpoint_gradients=False, # True → gradient checkpointing (saves memory, ~30% slower)",
                     "checkpoint-saves-memory")
SAME_NUMBERS = Claim("checkpoint_gradients=True rematerialises activations in the backward pass and gives the same "
                     "numbers as checkpoint_gradients=False", "checkpoint-same-numbers")
COST_ORIGIN = ("the claim's own figure, ~30%, read at the precision it is written with: one significant digit, so "
               "any cost that rounds to 30% ([25%, 35%)); a cost that rounds to 20% or 40% is another figure")
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
               f"{fmt_bytes(without)})"
               f"{_what_decides(evidence, recorded_form(on.tags, on.metrics), on.metrics.get(COMPARED, math.nan))}")
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


def _what_decides(evidence: dict[str, float], form: str | None, compared: float = math.nan) -> str:
    """What decided the memory: the ``form`` crux chose (a run that records one, :func:`recorded_form`), on the model
    it was measured on, and how (``compared``, the run's ``memory/checkpoint_compared``: 1 where the update was
    measured in each form of :mod:`crux.remat` and the one of the fewest temporary bytes run, 0 where the form likely
    to need the least ran uncompared, needing at most ``crux.remat.COMPARED_FROM`` of the device's memory; NaN, a
    run made before it: compared); for a run without a form, the model alone: checkpointing keeps the inputs of
    segments of layers and recomputes the rest, so what it saves grows with the depth, and with the width each
    layer holds."""
    model = ""
    if "model_depth" in evidence:
        width = f", width {int(evidence['model_width'])}" if "model_width" in evidence else ""
        model = f" on a model of depth {int(evidence['model_depth'])}{width}"
    if form is not None:
        if compared == 0.0:
            return (f": crux ran the form likely to need the least, '{form}'{model}, without comparing the forms: "
                    f"it needed at most {remat.COMPARED_FROM:.0%} of the device's memory, where the choice decides "
                    f"nothing that fits (on a device it fills, the forms are compared and the least kept)")
        if form == remat.PLAIN:
            return (f": no rematerialisation (the model's own segments, scanned or unrolled, or the whole "
                    f"network's) needed fewer temporary bytes than the plain update for this residual{model}, so "
                    f"crux ran the plain update; which activations a residual's derivatives keep alive decides "
                    f"it, not the option")
        return (f": crux compiled the update plain and with each rematerialisation and ran the one of the fewest "
                f"temporary bytes, '{form}'{model}")
    if not model:
        return ""
    return (f",{model}: checkpointing keeps the inputs of segments of layers and recomputes the "
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
    timing = paired_timing(on)
    runs = run_ids(on, off)
    if timing is None:
        return SAVES_MEMORY.verdict(name, "paired timing of checkpointing against none (timing.against)",
                                    INCONCLUSIVE, "no checkpointed run timed itself against checkpoint_gradients="
                                    "false: set timing.against={checkpoint_gradients: false} (sweeps/"
                                    "checkpoint.yaml does)", runs=runs)
    test = (f"seconds per epoch with checkpointing over without, timed in one process in alternating chunks "
            f"({timing.clock}) on {timing.device} ({timing.cpu}): the ratio's 95% interval against the claimed ~30% "
            f"[{CLAIMED_COST.low}, {CLAIMED_COST.high})")
    verdict = timing.judge(CLAIMED_COST)
    cost = f"{fmt(abs(timing.interval.estimate - 1) * 100)}% {'more' if timing.interval.estimate >= 1 else 'less'}"
    summary = {HOLDS: f"{cost} time per update, {timing.described()}",
               FAILS: f"{cost} time per update, not ~30%: {timing.described()}",
               INCONCLUSIVE: timing.undecided("~30% and costs other than it")}[verdict]
    thresholds = {"time_ratio": Threshold(CLAIMED_COST.low, f"95% interval within [{CLAIMED_COST.low}, "
                                          f"{CLAIMED_COST.high})", COST_ORIGIN + "; " + TIMING_RULE + "; " +
                                          TIMING_ORIGIN)}
    return SAVES_MEMORY.verdict(name, test, verdict, summary + timing.warning(verdict), timing.evidence(),
                                thresholds, runs)


def checkpoint_figures(records: list[RunRecord], out: Path) -> list[drawing.Figure]:
    return drawing.paired_figures(checkpoint_pairs(records), out, "checkpoint", "memory/temp_bytes",
                                  ("checkpointed", "plain"), "compiled temp bytes", CLAIMED_COST)
