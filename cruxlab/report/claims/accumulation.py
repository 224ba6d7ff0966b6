"""Claim 1: gradient accumulation N×B gives an effective batch of N·B, at the memory of B.

The test rests on crux's own guarantee: N micro-batches of B draw exactly the
points of one batch of N·B, so their trajectories agree to round-off, while
plain B follows another trajectory. A run that follows plain B
instead accumulated the same points N times: the documented effect did not
happen, whatever the log line said.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from cruxlab.report import drawing
from cruxlab.report.claims.split_batch import SplitBatch, split_batch_verdict
from cruxlab.report.pairing import reference_and_twins, repeats, run_ids, settings
from cruxlab.report.run_records import RunRecord
from cruxlab.report.verdict import FAILS, HOLDS, INCONCLUSIVE, Claim, Threshold, Verdict, fmt, fmt_bytes, not_in_sweep

EFFECTIVE_BATCH = Claim("accumulation_steps=N — Average gradients over N micro-batches before one optimizer "
                        "update — You want a larger effective batch than fits in memory [...] INFO: Gradient "
                        "accumulation enabled: 4 micro-batches per update (effective batch = 8 × 4 = 32)",
                        "accumulation-effective-batch")
MEMORY = Claim("accumulation_steps=N — Average gradients over N micro-batches before one optimizer update — You "
               "want a larger effective batch than fits in memory", "accumulation-memory")
MEMORY_ORIGIN = ("compiled memory_analysis() of the update is exact and deterministic for a given program, so no noise "
                 "allowance is needed: any difference is real")


@dataclass(frozen=True)
class AccumulationSet:
    """The three runs claim 1 compares: N×B, one batch of N·B, plain B (None where the sweep lacks one), all three
    started alike, and the round-off twins of one batch of N·B (its repeats that started one ulp away)."""

    accumulated: RunRecord
    big_batch: RunRecord | None
    plain: RunRecord | None
    twins: tuple[RunRecord, ...] = ()

    @property
    def n(self) -> int:
        return self.accumulated.options.accumulation_steps

    @property
    def b(self) -> int:
        return int(self.accumulated.options.batchsize)


def accumulation_sets(records: list[RunRecord]) -> list[AccumulationSet]:
    """One set per accumulated setting of the sweep (its first repeat, and the partners that started as it did)."""
    found = []
    for (group, options), runs in settings(records, lambda o: o.accumulation_steps > 1 and o.batchsize).items():
        n, b = options.accumulation_steps, options.batchsize
        big, twins = reference_and_twins(repeats(records, group, replace(options, batchsize=n * b,
                                                                         accumulation_steps=1)), runs[0])
        plain, _ = reference_and_twins(repeats(records, group, replace(options, accumulation_steps=1)), runs[0])
        found.append(AccumulationSet(runs[0], big, plain, tuple(twins)))
    return found


def check_accumulation(records: list[RunRecord]) -> list[Verdict]:
    """Verdicts on the effective batch and the memory of every accumulated setting in ``records``."""
    sets = accumulation_sets(records)
    if not sets:
        return [not_in_sweep("accumulation.effective_batch", EFFECTIVE_BATCH,
                             "a run with accumulation_steps > 1 and batchsize set", "accumulated", run_ids(records))]
    verdicts = []
    for s in sets:
        verdicts.append(_effective_batch(s))
        verdicts.append(_memory(s))
    return verdicts


def _effective_batch(s: AccumulationSet) -> Verdict:
    n, b = s.n, s.b
    name = f"accumulation.effective_batch[{s.accumulated.label}]"
    test = (f"final parameters and loss/total history of {n}×{b} against one batch of {n * b} (must agree to "
            f"round-off) and against plain batch {b} (must differ beyond round-off)")
    runs = run_ids(s.accumulated, s.big_batch, s.plain, s.twins)
    split = SplitBatch(s.accumulated, s.big_batch, s.plain, n, "N", f"{n}×{b}", f"one batch of {n * b}",
                       f"batchsize={n * b} (accumulation_steps=1)", f"batch {b}",
                       f"batchsize={b} (accumulation_steps=1)", "micro-batches identical", "vs_NxB_batch_", s.twins)
    return split_batch_verdict(EFFECTIVE_BATCH, name, test, split, runs)


def _memory(s: AccumulationSet) -> Verdict:
    n, b = s.n, s.b
    name = f"accumulation.memory[{s.accumulated.label}]"
    test = (f"compiled temporary memory (memory/temp_bytes) of {n}×{b} against batch {b} and one batch of {n * b}: "
            f"accumulating must cost less than the big batch it replaces")
    runs = run_ids(s.accumulated, s.big_batch, s.plain)
    key = "memory/temp_bytes"
    found = {label: r.metrics[key] for label, r in (("NxB", s.accumulated), ("N_B", s.big_batch), ("B", s.plain))
             if r is not None and key in r.metrics}
    if len(found) < 3:
        return MEMORY.verdict(name, test, INCONCLUSIVE, f"{key} missing for {sorted({'NxB', 'N_B', 'B'} - set(found))}",
                              runs=runs)
    acc, big, plain = found["NxB"], found["N_B"], found["B"]
    evidence = {"temp_bytes_NxB": acc, "temp_bytes_N_times_B": big, "temp_bytes_B": plain,
                "ratio_NxB_to_B": acc / plain, "ratio_NxB_to_N_times_B": acc / big}
    threshold = {"temp_bytes_NxB": Threshold(big, f"temp_bytes({n}×{b}) < temp_bytes({n * b})", MEMORY_ORIGIN)}
    summary = (f"{n}×{b} needs {fmt(acc / plain)}× the temporary memory of batch {b} and {fmt(acc / big)}× that "
               f"of one batch of {n * b}")
    if big <= plain:
        # Both batches below one of the device's tiles (a TPU pads arrays to them): no batch size can show a saving.
        return MEMORY.verdict(name, test, INCONCLUSIVE,
                              f"sizes too small to decide: one batch of {n * b} needs no more temporary memory than "
                              f"batch {b} ({fmt_bytes(big)} against {fmt_bytes(plain)}, both padded to the device's "
                              f"tiles); {summary}; sweep larger batches", evidence, threshold, runs)
    return MEMORY.verdict(name, test, HOLDS if acc < big else FAILS, summary, evidence, threshold, runs)


def accumulation_figures(records: list[RunRecord], out: Path) -> list[drawing.Figure]:
    figures = []
    for s in accumulation_sets(records):
        n, b = s.n, s.b
        runs = [(f"{n}×{b}", s.accumulated), (f"{n * b}", s.big_batch), (f"{b}", s.plain)]
        figures.append(drawing.one_batch_figure(runs, out, f"accumulation_{s.accumulated.label}", "accumulation",
                                                f"{n}×{b} against one batch of {n * b} and plain {b}", s.twins))
    return figures
