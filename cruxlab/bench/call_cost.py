"""What a fused ``solve()`` call costs beyond its compiled program, against crux-bench's hand-written scans.

    crux-bench calls                                 # small problem, inner_steps 10 and 100, 9 rounds (~4 min)
    crux-bench calls --k 10 --rounds 15
    taskset -c 0 crux-bench calls                    # on one core: XLA runs the program's operations in turn

Ways to run the same ``2000`` updates of the small problem (64 points, 1-32-32-32-1), timed in interleaved
rounds: the hand-written ``lax.scan`` of k updates a call, with the hand-derived Taylor u'' and with reverse
over reverse; crux's compiled call of k updates in a bare Python loop (no host loop, no history), with its
default Laplacian and with ``laplacian_mode="reverse"``; and ``solve(2000, inner_steps=k)``. Per call: wall and
CPU microseconds (all threads of the process; CPU time moves less than wall time on a loaded machine), and
each one's speed over the hand Taylor scan's, round by round. With two values of k, each way's time is split
into a cost per call and a cost per update (a call of k updates takes ``per_call + k * per_update``). Then the
CPU time of the parts of a ``solve()`` outside its compiled calls, over repeated one-call solves.
"""
from __future__ import annotations

import argparse
import collections
import functools
import os
import time

import jax
import numpy as np


import crux.loop
import crux.solver
from crux import sharding
from cruxlab.bench.hand_written import SAME_AS_CRUX
from cruxlab.bench.host import bench_environment
from cruxlab.bench.interleaved import in_rounds, split_call
from cruxlab.bench.reference_problems import interior, poisson_problem
from cruxlab.bench.variants import CruxVariant, HandVariant

N, HIDDEN, STEPS = 64, (32, 32, 32), 2000


def bare_loop(variant: CruxVariant, k: int):
    """``run(steps)`` for crux's compiled call of ``k`` updates, called in a plain loop on its own state."""
    call, state, data = variant.solver.compiled_call(inner_steps=k, precision="default")
    state = [state]

    def run(steps: int) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps // k):
            state[0] = call(state[0], data)
        jax.block_until_ready(state[0])
        return time.perf_counter() - wall, time.process_time() - cpu
    return run


def per_call(k: int, rounds: int) -> dict[str, float]:
    """Each way's median wall seconds per call of ``k`` updates."""
    hands = {form: HandVariant(f"hand scan {form}", form, interior(N), (1, *HIDDEN, 1), k)
             for form in (SAME_AS_CRUX, "rev-rev")}
    for hand in hands.values():
        hand.build()
    solve = CruxVariant("solve()", poisson_problem(N, HIDDEN), k, STEPS)
    reverse = CruxVariant("solve(), reverse", poisson_problem(N, HIDDEN, "reverse"), k, STEPS)
    solve.build()
    reverse.build()
    runs = {**{f"hand scan {form}": hand.run for form, hand in hands.items()},
            "crux call, bare loop": bare_loop(solve, k), "crux call, bare loop, reverse": bare_loop(reverse, k),
            "solve()": solve.run}
    times = in_rounds({name: functools.partial(run, STEPS) for name, run in runs.items()}, rounds)
    calls = STEPS // k
    hand_wall = np.array([w for w, _ in times[f"hand scan {SAME_AS_CRUX}"]])
    medians = {}
    for name, values in times.items():
        wall, cpu = np.array([w for w, _ in values]), np.array([c for _, c in values])
        ratio = hand_wall / wall
        medians[name] = float(np.median(wall)) / calls
        print(f"k={k:4d} {name:30s} wall {np.median(wall) / calls * 1e6:8.1f} us/call, CPU "
              f"{np.median(cpu) / calls * 1e6:8.1f} us/call; speed / hand Taylor scan round by round "
              f"{np.median(ratio):.2f} ({ratio.min():.2f}-{ratio.max():.2f})")
    return medians


def split_call_time(per_k: dict[int, dict[str, float]]) -> None:
    """Each way's time per call as ``per_call + k * per_update`` (crux-bench's ``split_call``)."""
    k1, k2 = min(per_k), max(per_k)
    for name in per_k[k1]:
        cost = split_call({k: medians[name] for k, medians in per_k.items()})
        print(f"{name:30s} {cost['per_call_us']:7.1f} us a call beyond its updates, "
              f"{cost['per_update_us']:7.2f} us an update (k = {k1} and {k2})")


def fixed_parts(k: int, solves: int = 200) -> None:
    """CPU microseconds per solve() of one call of ``k`` updates, by part."""
    variant = CruxVariant("solve()", poisson_problem(N, HIDDEN), k, k)
    variant.build()
    spent = collections.defaultdict(list)
    parts = [(crux.solver.Crux, "solve"), (crux.solver.Crux, "_resume_point"), (sharding, "put"),
             (crux.solver, "started"), (crux.loop.HostLoop, "run"), (crux.loop, "_read_window"),
             (crux.solver.Crux, "_fingerprint"),
             (crux.loop.HostLoop, "statistics"), (crux.solver.Crux, "_commit")]
    originals = []
    for owner, name in parts:
        original = getattr(owner, name)
        originals.append((owner, name, original))

        def timed(*args, _original=original, _label=f"{owner.__name__}.{name}", **kwargs):
            start = time.process_time()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[_label].append(time.process_time() - start)
        setattr(owner, name, timed)
    try:
        for _ in range(solves):
            variant.run(k)
    finally:
        for owner, name, original in originals:
            setattr(owner, name, original)
    for label, values in spent.items():
        print(f"k={k:4d} {label:32s} {len(values) / solves:4.1f} a solve, CPU {np.median(values) * 1e6:8.0f} us")


def main(argv: list[str] | None = None) -> int:
    """Run ``crux-bench calls``: print what a fused call costs beyond its updates, for each ``--k``.

    Args:
        argv: the command line after ``crux-bench calls`` (None: ``sys.argv[1:]``).

    Returns:
        0 when it ran.

    Raises:
        ValueError: a ``--k`` value that is not an integer.
    """
    parser = argparse.ArgumentParser(prog="crux-bench calls", description=__doc__.split("\n")[0])
    parser.add_argument("--k", default="10,100", help="inner_steps, comma-separated")
    parser.add_argument("--rounds", type=int, default=9)
    args = parser.parse_args(argv)
    print(f"{bench_environment()['summary']}; CPU affinity {sorted(os.sched_getaffinity(0))}")
    per_k = {}
    for k in (int(k) for k in args.k.split(",")):
        per_k[k] = per_call(k, args.rounds)
        fixed_parts(k)
    if len(per_k) > 1:
        split_call_time(per_k)
    return 0
