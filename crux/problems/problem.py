"""A ready PINN problem: constraints, models, and the exact solution to score against."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import optax

from crux.constraint import Constraint
from crux.model import Model
from crux.schedules import lrs
from crux.solver import Crux

Field = Callable[[dict[str, Model], np.ndarray], np.ndarray]


@dataclass
class Problem:
    """``predict[f](models, xs)`` and ``exact[f](xs)`` give field ``f`` at points ``(N, d)`` as ``(N,)``.

    Models come with Adam at a constant 1e-3 attached; replace it with ``.optimizer()``/``.scale()``.
    """

    name: str
    constraints: list[Constraint]
    models: dict[str, Model]
    predict: dict[str, Field]
    exact: dict[str, Callable[[np.ndarray], np.ndarray]]
    test_points: np.ndarray
    description: str = ""
    seed: int = 0
    _solver: Crux | None = field(default=None, repr=False)

    def __post_init__(self):
        for model in self.models.values():
            if not model.has_optimizer:
                model.optimizer(optax.adam).scale(lrs(1e-3))

    def solver(self) -> Crux:
        """The solver of this problem (built once, so repeated calls resume it)."""
        if self._solver is None:
            self._solver = Crux(self.constraints, self.models, seed=self.seed)
        return self._solver

    def relative_l2(self) -> dict[str, float]:
        """``||prediction - exact|| / ||exact||`` on the test points, per field, with the current parameters."""
        errors = {}
        for name, exact in self.exact.items():
            truth = np.asarray(exact(self.test_points), np.float64).reshape(-1)
            guess = np.asarray(self.predict[name](self.models, self.test_points), np.float64).reshape(-1)
            errors[name] = float(np.linalg.norm(guess - truth) / np.linalg.norm(truth))
        return errors
