"""The bench's reference problems trained through jNO's public API (run by scripts/bench_jno.sh and by
``crux-bench --readme``).

    python -m cruxlab.bench.jno_problems --out jno.json [--quick] [--problems standard,small,accumulation]

Runs with the jno extra installed (pip install -e ".[jno]"); the problems are the jNO backend's
(cruxlab.backends.jno.problems), so the benchmark times what the claim sweeps run. Same protocol as crux-bench: every
variant's first solve() compiles (its time, less the steady time of its updates, is reported as
compile seconds), then ``repeats`` interleaved rounds. A round is one solve() of ``steps`` updates
and one of ``inner_steps`` updates: jNO's solve() has a fixed cost of its own (parameter summary,
logging, set-up), so the steady rate is taken from the difference of the two,
``(steps - inner_steps) / (t_long - t_short)``, and the fixed cost is reported beside it
(``solve_overhead_seconds``); ``whole_call_steps_per_second`` is ``steps / t_long``.
Writes the variants in crux-bench's JSON layout, so ``crux-bench --jno FILE`` merges them as jNO rows.

The problems: crux's poisson1d with a hard boundary (u = x(1-x) N(x), N a foundax MLP of three tanh
layers) on crux's n interior points, residual -u'' - pi^2 sin(pi x), jno.core([pde.mse]), Adam at
1e-3. Mini-batches: solve(points=B).

jNO's persistent compilation cache, which its import turns on, is turned off here before anything compiles, as
JAX's is for crux and the hand-written code: a first solve() that read its programs from disk would not be timing
what it compiles.
"""
from __future__ import annotations

import argparse
import json
import logging
import platform
import sys
import time
from importlib.metadata import version
from typing import Callable

import jax
import jno
import numpy as np
import optax

import crux
from cruxlab.backends.jno.pipeline_job import jno_schedule
from cruxlab.backends.jno.problems import Batching, JnoProblem, build_built_in
from cruxlab.bench.interleaved import in_rounds
from cruxlab.config import ModelConfig


def jno_poisson(n: int, width: int) -> JnoProblem:
    """The reference problem on ``n`` points, 3 tanh layers of ``width``, in jNO, with Adam at 1e-3."""
    model = ModelConfig(width=width, depth=3, activation="tanh")
    fields = {"n_interior": n, "hard_boundary": True, "bc_weight": 1.0}
    reference = crux.problems.poisson1d(n_interior=n, hidden=(width,) * 3, hard_boundary=True)
    problem = build_built_in("poisson1d", reference, fields, model, seed=0, twin=0, batching=Batching("points", 1))
    problem.networks["u"].optimizer(optax.adam).scale(jno_schedule(crux.lrs(1e-3)))
    return problem


def make_core(n: int, width: int):
    return jno_poisson(n, width).core


class JnoVariant:
    def __init__(self, name: str, n: int, width: int, inner_steps: int = 1, points: int | None = None,
                 accumulation_steps: int = 1):
        self.name, self.n, self.width = name, n, width
        self.options = dict(inner_steps=inner_steps, points=points, accumulation_steps=accumulation_steps)
        self.info = {"inner_steps": inner_steps, "points": points, "accumulation_steps": accumulation_steps}

    def build(self, first_epochs: int) -> None:
        self.core = make_core(self.n, self.width)
        start = time.perf_counter()
        self.core.solve(first_epochs, **self.options)
        self.first_seconds = time.perf_counter() - start

    def run(self, steps: int) -> tuple[float, float]:
        wall, cpu = time.perf_counter(), time.process_time()
        stats = self.core.solve(steps, **self.options)
        self.last_loss = float(np.asarray(stats.total_loss_history)[-1]) if hasattr(stats, "total_loss_history") \
            else None
        return time.perf_counter() - wall, time.process_time() - cpu


def fused_variants(n: int, width: int, steps: int) -> list[JnoVariant]:
    """One update a call and the fused calls of crux-bench (inner_steps 10 and 100, those fewer than ``steps``: the
    steady rate is taken from a solve() of ``steps`` updates against one of ``inner_steps``)."""
    ks = [1, *(k for k in (10, 100) if k < steps)]
    return [JnoVariant(f"jNO inner_steps={k}", n, width, inner_steps=k) for k in ks]


def measure_jno_variants(variants: list[JnoVariant], steps: int, repeats: int) -> dict:
    for v in variants:
        v.build(v.options["inner_steps"])
        print(f"  built {v.name}: first solve {v.first_seconds:.2f} s", file=sys.stderr, flush=True)
    def a_round(v: JnoVariant) -> Callable[[], tuple]:
        """One call's solve(), then the long one whose further updates give the steady rate: (long, short)."""
        def timed() -> tuple:
            short = v.run(v.options["inner_steps"])
            return v.run(steps), short
        return timed
    rounds = in_rounds({v.name: a_round(v) for v in variants}, repeats)
    out = {}
    for v in variants:
        k = v.options["inner_steps"]
        long_wall = np.array([lw for (lw, _), _ in rounds[v.name]])
        short_wall = np.array([sw for _, (sw, _) in rounds[v.name]])
        cpu = np.array([lc - sc for (_, lc), (_, sc) in rounds[v.name]])
        rate = (steps - k) / np.maximum(long_wall - short_wall, 1e-9)
        steady = 1.0 / float(np.median(rate))
        overhead = float(np.median(short_wall)) - k * steady
        out[v.name] = {"family": "jNO", "steps_per_call": k, "steps": steps, "repeats": repeats,
                       "compile_seconds": max(v.first_seconds - float(np.median(short_wall)), 0.0),
                       "first_solve_seconds": v.first_seconds, "solve_overhead_seconds": overhead,
                       "steps_per_second": {"median": float(np.median(rate)), "min": float(rate.min()),
                                            "max": float(rate.max()), "all": rate.tolist()},
                       "whole_call_steps_per_second": float(np.median(steps / long_wall)),
                       "ms_per_step": steady * 1e3, "cpu_ms_per_step": float(np.median(cpu)) / (steps - k) * 1e3,
                       "final_loss": getattr(v, "last_loss", None), **v.info}
        print(f"  {v.name:<32} {out[v.name]['steps_per_second']['median']:9.1f} steps/s "
              f"[{rate.min():.1f}-{rate.max():.1f}], solve() fixed cost {overhead:.3f} s", file=sys.stderr,
              flush=True)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--problems", default="standard,small,accumulation")
    parser.add_argument("--repeats", type=int)
    args = parser.parse_args()
    logging.getLogger("jno").setLevel(logging.WARNING)  # progress lines are not what is measured
    jno.disable_compile_cache()
    quick = args.quick
    problems = {}
    wanted = args.problems.split(",")
    if "standard" in wanted:
        steps = 40 if quick else 500
        problems["standard"] = {"variants": measure_jno_variants(fused_variants(1024, 64, steps), steps,
                                                              args.repeats or 3)}
    if "small" in wanted:
        steps = 200 if quick else 2000
        problems["small"] = {"variants": measure_jno_variants(fused_variants(64, 32, steps), steps,
                                                              args.repeats or (3 if quick else 5))}
    if "accumulation" in wanted:
        steps = 100 if quick else 1000
        problems["accumulation"] = {"variants": measure_jno_variants(
            [JnoVariant("jNO b8 inner_steps=1", 1024, 64, points=8),
             JnoVariant("jNO b32 inner_steps=1", 1024, 64, points=32),
             JnoVariant("jNO b8x4 inner_steps=1", 1024, 64, points=8, accumulation_steps=4)],
            steps, args.repeats or (3 if quick else 5))}
        v = problems["accumulation"]["variants"]
        t = {c: 1 / v[f"jNO {c} inner_steps=1"]["steps_per_second"]["median"] for c in ("b8", "b32", "b8x4")}
        problems["accumulation"]["ratios"] = {"jNO inner_steps=1: t(4x8) / (4 t(8))": t["b8x4"] / (4 * t["b8"]),
                                              "jNO inner_steps=1: t(4x8) / t(32)": t["b8x4"] / t["b32"]}
    report = {"jno_version": version("jax-numerical-operators"), "jax_version": jax.__version__,
              "python": platform.python_version(), "backend": jax.default_backend(),
              "command": " ".join(sys.argv), "problems": problems}
    with open(args.out, "w") as f:
        json.dump(report, f, indent=1)
    print(json.dumps({p: {n: round(r["steps_per_second"]["median"], 1) for n, r in e["variants"].items()}
                      for p, e in problems.items()}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
