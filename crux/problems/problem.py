"""A ready PINN problem: constraints, models, and the exact solution to score against where there is one."""
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


def exact_solution_faults(predict: dict, exact: dict, test_points: np.ndarray | None) -> list[str]:
    """What keeps an exact solution from being compared with the model's.

    Args:
        predict: ``{field: function}`` of the model's prediction.
        exact: ``{field: function}`` of the exact solution.
        test_points: the points to compare on, or None.

    Returns:
        One line per fault (an exact field without ``predict``, an exact solution without ``test_points``);
        empty where there is none.
    """
    unpredicted = sorted(set(exact) - set(predict))
    faults = [f"exact solution for {unpredicted} without predict[...] to compare it with"] if unpredicted else []
    return faults + (["an exact solution needs test_points to compare on"] if exact and test_points is None else [])


@dataclass
class Problem:
    """A PINN problem: its constraints and models, and, where there is one, the exact solution to score
    against. Models without an optimizer get Adam at a constant 1e-3 (their names are :attr:`defaulted`); replace it
    with ``.optimizer()``/``.scale()``.

    crux-run builds a problem from its config's ``_target_``, a function called as
    ``function(**fields, hidden=(model.width,) * model.depth,
    activation=model.activation, seed=solver.seed)``: ``fields`` are the problem
    config's other keys, ``hidden`` and ``activation`` are meant for
    ``crux.mlp(in_dim, out_dim, hidden, activation, seed=seed)``, and ``seed`` for
    anything random (points, initial parameters). The built-in problems
    (``crux.problems.poisson1d``, ...) are such functions.

    Args:
        name: the problem's name.
        constraints: its :class:`crux.Constraint` list.
        models: ``{name: crux.Model}``, the names its residuals use (``net.u``).
        predict: ``predict[f](models, xs)``: field ``f`` at points ``(N, d)`` as ``(N,)``.
        exact: ``exact[f](xs)``: the exact field ``f`` at points ``(N, d)`` as ``(N,)``; every field of it needs
            its ``predict``, and ``test_points``. A problem without an exact solution leaves all three out
            (:meth:`relative_l2` is then empty).
        test_points: ``(N, d)``, where :meth:`relative_l2` compares.
        description: the equation in words.
        seed: the solver's (:class:`crux.Crux`'s point stream).

    Raises:
        ValueError: an exact solution without what scores it.
    """

    name: str
    constraints: list[Constraint]
    models: dict[str, Model]
    predict: dict[str, Field] = field(default_factory=dict)
    exact: dict[str, Callable[[np.ndarray], np.ndarray]] = field(default_factory=dict)
    test_points: np.ndarray | None = None
    description: str = ""
    seed: int = 0
    _solver: Crux | None = field(default=None, repr=False)
    _defaults: dict[str, int] = field(init=False, default_factory=dict, repr=False)

    def __post_init__(self):
        faults = exact_solution_faults(self.predict, self.exact, self.test_points)
        if faults:
            raise ValueError(f"Problem {self.name!r}: {faults[0]}")
        for name, model in self.models.items():
            if not model.has_optimizer:
                model.optimizer(optax.adam).scale(lrs(1e-3))
                self._defaults[name] = model.optimizer_version

    @property
    def defaulted(self) -> frozenset[str]:
        """The models that came without an optimizer and still train with the Adam at a constant 1e-3 they were
        given: whoever trains the problem may attach its own to them, while the others keep the optimizer the
        problem chose (one set with ``.optimizer()``/``.scale()`` after the problem was built is the problem's)."""
        return frozenset(name for name, version in self._defaults.items()
                         if self.models[name].optimizer_version == version)

    def solver(self) -> Crux:
        """The solver of this problem (built once, so repeated calls resume it)."""
        if self._solver is None:
            self._solver = Crux(self.constraints, self.models, seed=self.seed)
        return self._solver

    def relative_l2(self) -> dict[str, float]:
        """The relative L2 error of each field with the current parameters.

        Returns:
            ``{field: ||prediction - exact|| / ||exact||}`` on the test points (empty without an exact solution).
        """
        errors = {}
        for name, exact in self.exact.items():
            truth = np.asarray(exact(self.test_points), np.float64).reshape(-1)
            guess = np.asarray(self.predict[name](self.models, self.test_points), np.float64).reshape(-1)
            errors[name] = float(np.linalg.norm(guess - truth) / np.linalg.norm(truth))
        return errors
