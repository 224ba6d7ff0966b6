"""Accuracy on the README's problem: 1-D Poisson, 5000 Adam epochs, relative L2 error against sin(pi x).

    python scripts/accuracy.py [--epochs 5000] [--batchsize 128] [--plot accuracy.png]
"""
from __future__ import annotations

import argparse
import json

import optax

import crux


def train_poisson(epochs: int, batchsize: int | None, seed: int, hard_boundary: bool) -> dict:
    problem = crux.problems.poisson1d(n_interior=1024, hidden=(64, 64, 64), seed=seed, hard_boundary=hard_boundary)
    problem.models["u"].optimizer(optax.adam).scale(crux.lrs.warmup_cosine(epochs, epochs // 10, 1e-3, 1e-5))
    stats = problem.solver().solve(epochs, batchsize=batchsize, inner_steps=100 if epochs % 100 == 0 else 1)
    return {"epochs": epochs, "batchsize": batchsize, "seed": seed, "hard_boundary": hard_boundary,
            "relative_l2": problem.relative_l2()["u"], "final_loss": stats.final_loss,
            "run_seconds": round(stats.run_seconds, 2), "compile_seconds": round(stats.compile_seconds, 2)}, stats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=5000)
    parser.add_argument("--batchsize", type=int, default=None)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hard-boundary", action="store_true")
    parser.add_argument("--plot", default=None)
    args = parser.parse_args()
    result, stats = train_poisson(args.epochs, args.batchsize, args.seed, args.hard_boundary)
    if args.plot:
        stats.plot(args.plot)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
