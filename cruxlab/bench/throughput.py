"""Throughput at scale: full-batch Adam fused ×100 at ``--sizes`` and ``--widths``, at each of ``--precisions``:
crux beside the hand-written scan, FLOP/s (XLA's count of an update over its time) and the fraction of
``--peak-tflops``.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from cruxlab.bench.flop_count import throughput, work
from cruxlab.bench.hand_written import SAME_AS_CRUX
from cruxlab.bench.interleaved import PRECISIONS, Rounds, rates_in_turn
from cruxlab.bench.reference_problems import interior, poisson_problem
from cruxlab.bench.tables import figure
from cruxlab.bench.variants import CruxVariant, HandVariant, hand_name

# The sizes and widths on a CPU (small: a smoke run) and the fused depth of every row.
THROUGHPUT_SIZES, THROUGHPUT_WIDTHS, THROUGHPUT_K = (1024,), (64,), 100


def bench_throughput(rounds: Rounds, log: Callable[[str], None], sizes: tuple[int, ...] = THROUGHPUT_SIZES,
                     widths: tuple[int, ...] = THROUGHPUT_WIDTHS, precisions: tuple[str, ...] = PRECISIONS,
                     peak_tflops: float | None = None, k: int = THROUGHPUT_K,
                     on_row: Callable[[dict], None] = lambda result: None) -> dict:
    """Full-batch Adam on the standard problem fused ×``k``, crux beside the hand-written scan of crux's
    formulation, for every size and width (3 hidden layers) at each matmul precision: updates/s, and FLOP/s
    from XLA's count of one update of the hand-written program (the same arithmetic for both: tests hold crux's
    count to it), with the fraction of ``peak_tflops``. ``on_row`` gets the result after every row, so that a
    run cut short keeps its rows."""
    rows: list[dict] = []
    result = {"rows": rows, "k": k, "peak_tflops": peak_tflops,
              "description": f"Poisson 1-D, 3 hidden tanh layers, full batch, Adam 1e-3, fused ×{k}: crux beside "
                             f"the hand-written scan ({SAME_AS_CRUX}); FLOP/s from XLA's count of one update"}
    for n in sizes:
        for width in widths:
            hidden, layers = (width,) * 3, (1, width, width, width, 1)
            counter = HandVariant("count", SAME_AS_CRUX, interior(n), layers, 1)
            counter.build()
            flops = work(counter.call).get("flops")
            for precision in precisions:
                pair = [CruxVariant(f"crux inner_steps={k}", poisson_problem(n, hidden), k, k, precision=precision),
                        HandVariant(hand_name("scan", k, SAME_AS_CRUX), SAME_AS_CRUX, interior(n), layers, k,
                                    precision=precision)]
                try:
                    for variant in pair:
                        variant.build()
                except Exception as error:  # the largest sizes may not fit the device: say so, go on with the rest
                    if "RESOURCE_EXHAUSTED" not in str(error):
                        raise
                    result.setdefault("out_of_memory", []).append({"points": n, "width": width,
                                                                   "precision": precision})
                    log(f"  {n:7d} points width {width:3d} {precision:>7}: out of device memory, skipped")
                    on_row(result)
                    continue
                probe = min(v.run(k)[0] for v in pair) / k  # seconds per update, to size the rounds
                steps = k * int(np.clip(round((0.15 if rounds.quick else 1.0) / (probe * k)), 1, 50))
                rates = rates_in_turn(pair, steps, rounds.repeats)
                row = {"points": n, "width": width, "precision": precision, "steps": steps,
                       "flops_per_update": flops}
                for family, variant in zip(("crux", "hand"), pair):
                    rate_ = float(np.median(rates[variant.name]))
                    row[family] = {"steps_per_second": rate_, "compile_seconds": variant.compile_seconds,
                                   **throughput(flops, rate_, peak_tflops)}
                row["ratio"] = float(np.median(np.array(rates[pair[0].name]) / np.array(rates[pair[1].name])))
                rows.append(row)
                log(f"  {n:7d} points width {width:3d} {precision:>7}: crux {row['crux']['steps_per_second']:9.1f} "
                    f"updates/s {figure(row['crux']['tflops'], '{:.3f}')} TFLOP/s, hand "
                    f"{row['hand']['steps_per_second']:9.1f} {figure(row['hand']['tflops'], '{:.3f}')} TFLOP/s "
                    f"({row['ratio']:.2f}x)")
                on_row(result)
    return result
