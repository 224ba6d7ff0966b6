"""Scaling: crux one update a call against the hand-written loop, from 1k to 64k points and from width 32 to 256
(3 hidden layers), the two in alternating rounds; and the figure of time per update against each.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

from cruxlab.bench.interleaved import Rounds, rates_in_turn
from cruxlab.bench.reference_problems import interior, poisson_problem
from cruxlab.bench.variants import CruxVariant, HandVariant


def bench_scaling(rounds: Rounds, log: Callable[[str], None], form: str) -> dict:
    """crux inner_steps=1 against the hand loop with ``form``, from 1k to 64k points, width 32 to 256."""
    if rounds.quick:
        configs = [(1024, 32), (4096, 32)]
    else:
        configs = [(1024, 64), (4096, 64), (16384, 64), (65536, 64), (1024, 32), (1024, 128), (1024, 256)]
    rows = []
    for n, width in configs:
        hidden = (width,) * 3
        pair = [CruxVariant("crux inner_steps=1", poisson_problem(n, hidden), 1, 2, precision=rounds.precision),
                HandVariant(f"hand loop {form}", form, interior(n), (1, *hidden, 1), 1, precision=rounds.precision)]
        for variant in pair:
            variant.build()
        probe = min(v.run(2)[0] / 2 for v in pair)  # seconds per update, to size the rounds
        steps = int(np.clip((0.15 if rounds.quick else 1.0) / probe, 2, 500))
        rates = rates_in_turn(pair, steps, rounds.repeats)
        row = {"points": n, "width": width, "steps": steps,
               "crux_steps_per_second": float(np.median(rates[pair[0].name])),
               "hand_steps_per_second": float(np.median(rates[pair[1].name])),
               "crux_compile_seconds": pair[0].compile_seconds, "hand_compile_seconds": pair[1].compile_seconds}
        row["ratio"] = row["crux_steps_per_second"] / row["hand_steps_per_second"]
        rows.append(row)
        log(f"  {n:6d} points width {width:3d}: crux {row['crux_steps_per_second']:8.2f} steps/s, "
            f"hand {row['hand_steps_per_second']:8.2f} ({row['ratio']:.2f}x)")
    return {"rows": rows, "form": form, "description": f"crux inner_steps=1 vs hand loop {form}; 3 hidden layers"}


def plot_scaling(scaling: dict, path: Path) -> None:
    """scaling.png: ms per update of crux and of the hand-written loop against the points and against the width
    (matplotlib is imported here: only a run of this problem draws)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = scaling["rows"]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, key, fixed, label in ((axes[0], "points", ("width", 64), "collocation points (width 64)"),
                                  (axes[1], "width", ("points", 1024), "hidden width (1024 points)")):
        sel = sorted((r for r in rows if r[fixed[0]] == fixed[1]), key=lambda r: r[key])
        if not sel:
            continue
        xs = [r[key] for r in sel]
        ax.loglog(xs, [1e3 / r["crux_steps_per_second"] for r in sel], "o-", label="crux inner_steps=1")
        ax.loglog(xs, [1e3 / r["hand_steps_per_second"] for r in sel], "s--", label=f"hand loop {scaling['form']}")
        ax.set_xlabel(label)
        ax.set_ylabel("ms per update")
        ax.set_xscale("log", base=2)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
    fig.suptitle("crux vs hand-written JAX: time per Adam update (median of rounds)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
