"""The learning rate of an L-BFGS phase after Adam: the error each rate reaches, and its time.

A phase of ``optax.lbfgs`` follows Adam, as in the README's example and ``phases=lbfgs``: every problem trains
Adam once (warmup_cosine from 1e-3 to 1e-5, full batch), then from those same parameters an L-BFGS phase runs at
each rate (a fresh optimizer each time, as ``.optimizer(optax.lbfgs).scale(lrs(rate))`` attaches it). Printed per
problem and rate: the relative L2 error against the exact solution (each field's), the total loss, and the
phase's compile and run seconds. The problems are the built-in ones and a 1-D wave equation written as a user
writes a problem of their own (:func:`wave1d`).

    python scripts/lbfgs_rate.py [--adam-epochs 2000] [--lbfgs-epochs 500] [--rates 5e-5,1e-3,1e-1,1.0]
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
from pathlib import Path
from typing import Callable, Sequence

import jax
import numpy as np
import optax

import crux
from crux.problems import Problem
from crux.timing.machine import cpu_model, load_average


def wave1d(hidden: Sequence[int] = (64, 64, 64), activation: str = "tanh", seed: int = 0) -> Problem:
    """u_tt = u_xx on (0, 1) x (0, 1), u(x, 0) = sin(pi x), u_t(x, 0) = 0, u = 0 at x = 0 and 1: exact
    u = sin(pi x) cos(pi t). Points (x, t): 2,400 inside, 60 and 60 on t = 0 (value and velocity), 37 on the
    walls, the sizes of a user's problem that tried the README's L-BFGS phase."""
    rng = np.random.default_rng(seed)
    inside = rng.uniform(0, 1, (2400, 2))
    start = np.stack([rng.uniform(0, 1, 60), np.zeros(60)], axis=1)
    moving = np.stack([rng.uniform(0, 1, 60), np.zeros(60)], axis=1)
    walls = np.stack([rng.integers(0, 2, 37), rng.uniform(0, 1, 37)], axis=1)
    partial = crux.partial
    constraints = [
        crux.Constraint("pde", lambda net, x: partial(net.u, 1, 1)(x) - partial(net.u, 0, 0)(x), inside),
        crux.Constraint("initial", lambda net, x: net.u(x) - jax.numpy.sin(jax.numpy.pi * x[0]), start),
        crux.Constraint("velocity", lambda net, x: partial(net.u, 1)(x), moving),
        crux.Constraint("walls", lambda net, x: net.u(x), walls),
    ]
    grid = np.stack(np.meshgrid(np.linspace(0, 1, 64), np.linspace(0, 1, 64)), -1).reshape(-1, 2).astype(np.float32)
    exact = lambda xs: np.sin(np.pi * xs[:, 0]) * np.cos(np.pi * xs[:, 1])
    return Problem("wave1d", constraints, {"u": crux.mlp(2, 1, hidden, activation, seed=seed)},
                   {"u": lambda models, xs: np.asarray(models["u"](xs))[:, 0]}, {"u": exact}, grid,
                   "u_tt = u_xx, u(x,0) = sin(pi x), u_t(x,0) = 0, zero walls", seed)


PROBLEMS: dict[str, Callable[[], Problem]] = {
    "poisson1d": crux.problems.poisson1d, "heat1d": crux.problems.heat1d,
    "mixed_poisson1d": crux.problems.mixed_poisson1d, "wave1d": wave1d,
}


def errors(problem: Problem) -> str:
    return ", ".join(f"{field} {error:.3g}" for field, error in problem.relative_l2().items())


def measure(name: str, adam_epochs: int, lbfgs_epochs: int, rates: list[float]) -> None:
    """Adam once on problem ``name``, then an L-BFGS phase at each of ``rates`` from Adam's parameters."""
    problem = PROBLEMS[name]()
    for model in problem.models.values():
        model.optimizer(optax.adam).scale(crux.lrs.warmup_cosine(adam_epochs, adam_epochs // 10, 1e-3, 1e-5))
    adam = problem.solver().solve(adam_epochs, inner_steps=100 if adam_epochs % 100 == 0 else 1)
    trained = {model: network.params for model, network in problem.models.items()}
    print(f"| {name} | Adam {adam_epochs} | {errors(problem)} | {adam.final_loss:.3g} | {adam.compile_seconds:.1f} | "
          f"{adam.run_seconds:.1f} |", flush=True)
    for rate in rates:
        phase = PROBLEMS[name]()
        for model, network in phase.models.items():
            network.params = trained[model]
            network.optimizer(optax.lbfgs).scale(crux.lrs(rate))
        try:
            stats = phase.solver().solve(lbfgs_epochs)
            row = f"{errors(phase)} | {stats.final_loss:.3g} | {stats.compile_seconds:.1f} | {stats.run_seconds:.1f}"
        except FloatingPointError as error:
            row = f"diverged: {' '.join(str(error).split())[:80]} | - | - | -"
        print(f"| {name} | + L-BFGS {lbfgs_epochs} at {rate:g} | {row} |", flush=True)


def commit() -> str:
    folder = Path(__file__).resolve().parent
    done = subprocess.run(["git", "-C", str(folder), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--adam-epochs", type=int, default=2000)
    parser.add_argument("--lbfgs-epochs", type=int, default=500)
    parser.add_argument("--rates", default="5e-5,1e-3,1e-1,1.0", help="comma-separated L-BFGS learning rates")
    parser.add_argument("--problems", default=",".join(PROBLEMS), help="comma-separated, of " + ", ".join(PROBLEMS))
    args = parser.parse_args()
    rates = [float(rate) for rate in args.rates.split(",")]
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, commit {commit()}; jax {jax.__version__},"
          f" optax {optax.__version__}, Python {platform.python_version()} on {jax.default_backend()}; CPU "
          f"{cpu_model()}, {os.cpu_count()} cores, load average at start {load_average():.2f}")
    print("| problem | phase | relative L2 error | total loss | compile s | run s |\n|---|---|---|---|---:|---:|")
    for name in args.problems.split(","):
        measure(name, args.adam_epochs, args.lbfgs_epochs, rates)


if __name__ == "__main__":
    main()
