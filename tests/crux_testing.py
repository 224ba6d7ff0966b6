"""Small problems and comparisons shared by the tests."""
from __future__ import annotations

import jax
import numpy as np
import optax

import crux

EPS32 = float(np.finfo(np.float32).eps)  # 1.19e-7: float32 round-off unit


def flat(params) -> np.ndarray:
    """All parameter leaves as one float64 vector."""
    return np.concatenate([np.ravel(np.asarray(leaf, np.float64)) for leaf in jax.tree.leaves(params)])


def poisson(optimizer=optax.sgd, lr: float | crux.Schedule = 1e-3, n: int = 256, hidden=(16, 16), seed: int = 0,
            **kwargs) -> crux.problems.Problem:
    """The seed Poisson problem, small: 256 interior points, 2 boundary points."""
    problem = crux.problems.poisson1d(n_interior=n, hidden=hidden, seed=seed, **kwargs)
    problem.models["u"].optimizer(optimizer).scale(lr if isinstance(lr, crux.Schedule) else crux.lrs(lr))
    return problem


def train(problem: crux.problems.Problem, epochs: int, **options) -> tuple[np.ndarray, np.ndarray, crux.Statistics]:
    """Solve and return (initial parameters, final parameters, statistics)."""
    solver = problem.solver()
    initial = flat(solver.params)
    stats = solver.solve(epochs, **options)
    return initial, flat(solver.params), stats


def relative(a: np.ndarray, b: np.ndarray, scale: float) -> float:
    return float(np.linalg.norm(a - b) / scale)


class CompileCounter:
    """Counts XLA backend compilations while active: ``with CompileCounter() as compiles: ...; compiles.count``."""

    def __init__(self):
        self.count = 0

    def _listen(self, event: str, seconds: float, **_) -> None:
        if "backend_compile" in event:
            self.count += 1

    def __enter__(self) -> "CompileCounter":
        jax.monitoring.register_event_duration_secs_listener(self._listen)
        return self

    def __exit__(self, *_) -> None:
        jax.monitoring.unregister_event_duration_listener(self._listen)
