"""The time to a first update: from the first call that trains, in a fresh process, to the first update's loss on
the host (crux's ``solve(1)``: planning, compiling, the update; the hand-written loop's trace, compile and first
call; jNO's first ``solve(1)``, with ``--jno``), on the standard problem.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Callable

import numpy as np

from crux.timing.pairs import in_turn
from cruxlab.bench.hand_written import SAME_AS_CRUX
from cruxlab.bench.reference_problems import interior, poisson_problem
from cruxlab.bench.variants import HandVariant

FAMILIES = ("crux", "hand")  # timed here, in alternating order


def first_update(family: str, precision: str) -> float:
    """Seconds from the first call that trains the standard problem, in this process, to the first update's loss
    on the host: crux's ``solve(1)`` (planning, compiling, the update), or the hand-written loop's trace,
    compile and first call. Run in a fresh process, so that nothing is compiled or cached before it."""
    n, hidden = 1024, (64, 64, 64)
    if family == "crux":
        solver = poisson_problem(n, hidden)().solver()
        start = time.perf_counter()
        float(solver.solve(1, precision=precision).final_loss)
        return time.perf_counter() - start
    hand = HandVariant("first update", SAME_AS_CRUX, interior(n), (1, *hidden, 1), 1, precision=precision)
    hand.build()
    return hand.compile_seconds + hand.info["first_call_seconds"]


def first_updates(repeats: int, precision: str, log: Callable[[str], None]) -> dict[str, float]:
    """:func:`first_update` of crux and of the hand-written loop, each in fresh processes (JAX's persistent
    compilation cache off), in alternating order: the median over ``repeats`` of each. Called before this
    process opens the device, which a TPU lets one process hold at a time."""
    seconds: dict[str, list[float]] = {family: [] for family in FAMILIES}
    for r in range(repeats):
        for family in (FAMILIES[side] for side in in_turn(r)):
            command = [sys.executable, "-m", "cruxlab.bench", "--first-update", family, "--precision", precision]
            out = subprocess.run(command, capture_output=True, text=True, check=True,
                                 env={**os.environ, "JAX_ENABLE_COMPILATION_CACHE": "false"})
            seconds[family].append(float(out.stdout.split()[-1]))
    result = {family: float(np.median(values)) for family, values in seconds.items()}
    log(f"  time to first update: crux {result['crux']:.2f} s, hand-written {result['hand']:.2f} s")
    return result
