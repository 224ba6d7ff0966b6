"""Claim 5: offload_data keeps the data off the device and the numbers unchanged.

The data left on the device is read from the compiled update's argument bytes
(exact): with offloading the points are no longer an argument, only the
current batch is.
"""
from __future__ import annotations

from pathlib import Path

from cruxlab.report import drawing
from cruxlab.report.claims.equivalence import same_numbers
from cruxlab.report.pairing import Pair, first, paired_settings, reference_and_twins, run_ids
from cruxlab.report.run_records import RunRecord
from cruxlab.report.verdict import FAILS, HOLDS, INCONCLUSIVE, Claim, Threshold, Verdict, fmt_bytes, not_in_sweep

MOVES_DATA = Claim("offload_data=False,         # True → keep dataset on CPU, stream mini-batches [...] "
                   "offload_data=True — Keep dataset on CPU; stream each mini-batch — Very large datasets",
                   "offload-moves-data")
SAME_NUMBERS = Claim("offload_data=True keeps the points in host memory, gathers each update's batch there with the "
                     "same indices as on the device and streams it: the same numbers as on-device batching",
                     "offload-same-numbers")
BYTES_ORIGIN = ("compiled memory_analysis() argument sizes are exact and deterministic for a given program, so no "
                "noise allowance is needed: any difference is real")


def offload_pairs(records: list[RunRecord]) -> list[Pair]:
    """``(repeats offloaded, repeats batched on the device)`` per offloaded setting."""
    return paired_settings(records, lambda o: o.offload_data, offload_data=False)


def check_offload(records: list[RunRecord]) -> list[Verdict]:
    """Per offloaded setting: same numbers as on-device batching, fewer bytes resident on the device."""
    pairs = offload_pairs(records)
    if not pairs:
        return [not_in_sweep("offload.moves_data", MOVES_DATA, "a run with offload_data=True", "offloaded",
                             run_ids(records))]
    verdicts = []
    for on, off in pairs:
        label = on[0].label
        reference, twins = reference_and_twins(off, on[0])
        verdicts.append(same_numbers(f"offload.same_numbers[{label}]", SAME_NUMBERS, on[0], reference,
                                     "offload_data=True", twins))
        verdicts.append(_moves_data(label, on[0], first(off)))
    return verdicts


def _moves_data(label: str, on: RunRecord, off: RunRecord | None) -> Verdict:
    name = f"offload.moves_data[{label}]"
    test = ("device-resident argument bytes of the compiled update (memory/argument_bytes) with offload_data "
            "against on-device batching of the same batch size")
    key = "memory/argument_bytes"
    if off is None or key not in on.metrics or key not in off.metrics:
        return MOVES_DATA.verdict(name, test, INCONCLUSIVE, f"needs {key} of an offloaded run and an on-device one",
                                  runs=run_ids(on, off))
    offloaded, resident = on.metrics[key], off.metrics[key]
    evidence = {"argument_bytes_offloaded": offloaded, "argument_bytes_on_device": resident,
                "bytes_moved_off_device": resident - offloaded}
    threshold = {"argument_bytes_offloaded": Threshold(resident, "argument_bytes(offload) < argument_bytes(device)",
                                                       BYTES_ORIGIN)}
    summary = (f"the update takes {fmt_bytes(offloaded)} of arguments offloaded vs {fmt_bytes(resident)} with the "
               f"points on the device ({fmt_bytes(resident - offloaded)} moved off)")
    return MOVES_DATA.verdict(name, test, HOLDS if offloaded < resident else FAILS, summary, evidence, threshold,
                              run_ids(on, off))


def offload_figures(records: list[RunRecord], out: Path) -> list[drawing.Figure]:
    return drawing.paired_figures(offload_pairs(records), out, "offload", "memory/argument_bytes",
                                  ("offloaded", "on device"), "device-resident argument bytes")
