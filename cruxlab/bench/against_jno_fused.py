"""crux and jNO fusing K = 1, 10, 100, 1000 updates into a call, on the same problems, timed in one process.

    crux-bench fused --out DIR                              # fused.json and fused.md in DIR
    crux-bench fused --out DIR --quick                      # a smoke run: fewer updates, K up to 100

Needs the jno extra. Every variant is one library at one K on one problem: crux's ``solve(steps, inner_steps=K)``
or jNO's ``core.solve(steps, inner_steps=K)``, both at the device's default matmul precision (what jNO runs at
unless told otherwise). Each variant's first solve() compiles; then ``repeats`` rounds, every variant once a round
in a rotating order, so a drifting load falls on all alike. A round's figure is the library's own loop time
(crux's compiled calls, jNO's training loop: set-up, compile and jNO's warm-up calls left out), as updates per
second; the whole call's rate (``steps`` over the solve()'s wall time) is reported beside it. Reported per
problem: each variant's median and range, each library's ratio of K to K = 1 (what fusing buys it), crux / jNO
at each K, and the fastest crux over the fastest jNO (each at its best K).

Problems: ``standard`` (crux's poisson1d, 1024 points, 3 × 64 tanh, hard boundary), ``small`` (64 points,
3 × 32), and ``own``, a problem of a user's own: -Δu + u³ = 1 on the unit square, 256 + 64 points, 3 × 32
(examples/own_problem: nonlinear_poisson.py for crux, nonlinear_poisson_jno.py for jNO, on the same points).
Adam at 1e-3 throughout. jNO's arrays are read back after training, and the devices they live on are recorded.
"""
from __future__ import annotations

import argparse
import functools
import json
import platform
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any, Callable

import equinox as eqx
import jax
import numpy as np
import optax
from omegaconf import OmegaConf

import crux
from cruxlab.backends.jno import own
from cruxlab.backends.jno.pipeline_job import jno_schedule
from cruxlab.backends.jno.problems import JnoProblem
from cruxlab.backends.jno.training import Timed
from cruxlab.bench.interleaved import in_rounds
from cruxlab.bench.jno_problems import jno_poisson
from cruxlab.config import ModelConfig

ROOT = Path(__file__).resolve().parents[2]  # the checkout: its examples/ and its commit
EXAMPLE = ROOT / "examples" / "own_problem"
PRECISION = "default"


def _adam(models: Any) -> None:
    for model in models:
        model.optimizer(optax.adam).scale(crux.lrs(1e-3))


def crux_poisson(n: int, width: int) -> Any:
    problem = crux.problems.poisson1d(n_interior=n, hidden=(width,) * 3, hard_boundary=True)
    _adam(problem.models.values())
    return problem.solver()


def crux_own(width: int) -> Any:
    from nonlinear_poisson import unit_square

    problem = unit_square(256, 64, 1.0, (width,) * 3, "tanh", 0)
    _adam(problem.models.values())
    return problem.solver()


def jno_own(width: int) -> JnoProblem:
    node = OmegaConf.create({"_target_": "nonlinear_poisson_jno.unit_square", "n_interior": 256, "n_edge": 64,
                             "source": 1.0})
    problem = own.build_own(node, ModelConfig(width=width, depth=3, activation="tanh"), seed=0, twin=0)
    for net in problem.networks.values():
        net.optimizer(optax.adam).scale(jno_schedule(crux.lrs(1e-3)))
    return problem


PROBLEMS: dict[str, tuple[str, Callable[[], Any], Callable[[], JnoProblem]]] = {
    "standard": ("poisson1d, 1024 points, 3 × 64", lambda: crux_poisson(1024, 64), lambda: jno_poisson(1024, 64)),
    "small": ("poisson1d, 64 points, 3 × 32", lambda: crux_poisson(64, 32), lambda: jno_poisson(64, 32)),
    "own": ("-Δu + u³ = 1 on the unit square (examples/own_problem), 256 + 64 points, 3 × 32",
            lambda: crux_own(32), lambda: jno_own(32)),
}


def devices_of(problem: JnoProblem) -> list[str]:
    """The devices that hold jNO's parameter arrays."""
    leaves = [leaf for net in problem.networks.values() for leaf in jax.tree.leaves(eqx.filter(net.module,
                                                                                                eqx.is_array))]
    return sorted({str(device) for leaf in leaves for device in leaf.devices()})


class FusedVariant:
    """One library at one K: ``trainee.solve(epochs, inner_steps=K, precision=...)`` (crux's solver, or jNO's
    core through :class:`cruxlab.backends.jno.training.Timed`, which takes crux's keywords)."""

    def __init__(self, family: str, k: int, trainee: Any):
        self.family, self.k, self.trainee = family, k, trainee
        self.name = f"{family} inner_steps={k}"
        self.loop: list[float] = []
        self.whole: list[float] = []

    def solve(self, steps: int) -> tuple[float, Any]:
        start = time.perf_counter()
        stats = self.trainee.solve(steps, inner_steps=self.k, precision=PRECISION)
        return time.perf_counter() - start, stats

    def round(self, steps: int) -> None:
        wall, stats = self.solve(steps)
        self.loop.append(steps / stats.run_seconds)
        self.whole.append(steps / wall)


def measure_fused(name: str, ks: list[int], steps: int, repeats: int) -> dict:
    description, crux_trainee, jno_problem = PROBLEMS[name]
    variants, first, held = [], {}, []
    for k in ks:
        problem = jno_problem()
        held.append(problem)
        for v in (FusedVariant("crux", k, crux_trainee()), FusedVariant("jNO", k, Timed(problem, "points"))):
            first[v.name] = v.solve(k)[0]
            variants.append(v)
            print(f"  {name}: built {v.name}, first solve() {first[v.name]:.2f} s", file=sys.stderr, flush=True)
    in_rounds({v.name: functools.partial(v.round, steps) for v in variants}, repeats)
    rate = {v.name: float(np.median(v.loop)) for v in variants}
    out = {"description": description, "steps": steps, "repeats": repeats, "precision": PRECISION,
           "jno_devices": devices_of(held[0]), "variants": {}, "ratios": {}}
    for v in variants:
        out["variants"][v.name] = {"family": v.family, "inner_steps": v.k, "first_solve_seconds": first[v.name],
                                   "steps_per_second": {"median": rate[v.name], "min": min(v.loop),
                                                        "max": max(v.loop), "all": v.loop},
                                   "whole_call_steps_per_second": float(np.median(v.whole))}
        print(f"  {name}: {v.name:<22} {rate[v.name]:10.1f} updates/s in the loop [{min(v.loop):.1f}-"
              f"{max(v.loop):.1f}], {np.median(v.whole):10.1f} whole calls", file=sys.stderr, flush=True)
    ratios = out["ratios"]
    for k in ks:
        ratios[f"crux inner_steps={k} / jNO inner_steps={k}"] = rate[f"crux inner_steps={k}"] / rate[
            f"jNO inner_steps={k}"]
    for family in ("crux", "jNO"):
        for k in ks[1:]:
            ratios[f"{family} inner_steps={k} / {family} inner_steps=1"] = rate[f"{family} inner_steps={k}"] / rate[
                f"{family} inner_steps=1"]
    ratios["fastest crux / fastest jNO"] = max(rate[f"crux inner_steps={k}"] for k in ks) / max(
        rate[f"jNO inner_steps={k}"] for k in ks)
    return out


def fused_markdown(report: dict) -> str:
    lines = ["# crux and jNO, K updates a call", "", f"`{report['command']}`  ", report["summary"], ""]
    for name, p in report["problems"].items():
        ks = sorted({v["inner_steps"] for v in p["variants"].values()})
        lines += [f"## {name}", "", f"{p['description']}; {p['steps']} updates a round, {p['repeats']} rounds, "
                  f"matmul precision '{p['precision']}'; jNO's arrays on {', '.join(p['jno_devices'])}", "",
                  "| K | crux updates/s | jNO updates/s | crux / jNO | crux K / K=1 | jNO K / K=1 |",
                  "|---:|---:|---:|---:|---:|---:|"]
        for k in ks:
            c, j = (p["variants"][f"{f} inner_steps={k}"]["steps_per_second"]["median"] for f in ("crux", "jNO"))
            fused = [p["ratios"].get(f"{f} inner_steps={k} / {f} inner_steps=1", 1.0) for f in ("crux", "jNO")]
            lines.append(f"| {k} | {c:.1f} | {j:.1f} | {c / j:.2f} | {fused[0]:.2f} | {fused[1]:.2f} |")
        lines += ["", f"fastest crux / fastest jNO: {p['ratios']['fastest crux / fastest jNO']:.2f}", ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run ``crux-bench fused``: crux beside jNO at each number of updates a call, printed and written into ``--out``
    (``fused.json``, ``fused.md``).

    Args:
        argv: the command line after ``crux-bench fused`` (None: ``sys.argv[1:]``).

    Returns:
        0 when it ran.

    Raises:
        SystemExit: status 2 without ``--out`` or for a problem ``--problems`` does not know, before any compute.
    """
    parser = argparse.ArgumentParser(prog="crux-bench fused", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="folder for fused.json and fused.md")
    parser.add_argument("--quick", action="store_true", help="K up to 100, 200 updates a round: a smoke run")
    parser.add_argument("--problems", default=",".join(PROBLEMS), help=f"from {','.join(PROBLEMS)}")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    wanted = args.problems.split(",")
    unknown = [p for p in wanted if p not in PROBLEMS]
    if unknown:
        parser.error(f"--problems {args.problems}: no problem {', '.join(unknown)}; choose from {','.join(PROBLEMS)}")
    sys.path.insert(0, str(EXAMPLE))  # the example's modules, as crux-run finds them in the working directory
    ks, steps = ([1, 10, 100], 200) if args.quick else ([1, 10, 100, 1000], 2000)
    device = jax.devices()[0]
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "unknown"
    report = {"command": " ".join(["crux-bench", "fused", *(sys.argv[1:] if argv is None else argv)]),
              "backend": jax.default_backend(), "device_kind": device.device_kind, "jax_version": jax.__version__,
              "jno_version": version("jax-numerical-operators"), "python": platform.python_version(),
              "summary": f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit}; jax "
                         f"{jax.__version__}, jNO {version('jax-numerical-operators')} on {device.device_kind}",
              "problems": {}}
    for name in wanted:
        report["problems"][name] = measure_fused(name, ks, steps, args.repeats)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "fused.json").write_text(json.dumps(report, indent=1))
    text = fused_markdown(report)
    (args.out / "fused.md").write_text(text + "\n")
    print(text)
    return 0
