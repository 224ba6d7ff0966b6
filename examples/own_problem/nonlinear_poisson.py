"""A problem of one's own for crux-run and crux-sweep: -Δu + u³ = f on the unit square, u = 0 on its edges.

It has no closed-form solution, so it gives no exact solution: its runs log no ``error/*`` metrics, and the
claim checks judge them all the same.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

import crux
from crux.problems import Problem


def unit_square_points(n_interior: int, n_edge: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``n_interior`` random points inside the unit square and ``n_edge`` on its edges, ``(N, 2)`` float32 each
    (nonlinear_poisson_jno.py trains jNO on the same ones)."""
    rng = np.random.default_rng(seed)
    interior = rng.uniform(0.0, 1.0, (n_interior, 2))
    along, side = rng.uniform(0.0, 1.0, n_edge), rng.integers(0, 4, n_edge)  # sides x=0, x=1, y=0, y=1
    edge = np.stack([np.where(side < 2, side, along), np.where(side < 2, along, side - 2)], axis=1)
    return interior.astype(np.float32), edge.astype(np.float32)


def unit_square(n_interior: int, n_edge: int, source: float, hidden: Sequence[int], activation: str,
                seed: int) -> Problem:
    """:func:`unit_square_points`; ``source`` is the constant f.

    crux-run passes the fields of ``conf/problem/unit_square.yaml`` and ``hidden``, ``activation`` (the
    ``model`` group) and ``seed`` (``solver.seed``).
    """
    interior, edge = unit_square_points(n_interior, n_edge, seed)

    def residual(net, x):  # one point x = (x, y); net.u(x) is a scalar
        return -crux.laplacian(net.u)(x) + net.u(x) ** 3 - source

    constraints = [crux.Constraint("pde", residual, interior),
                   crux.Constraint("edge", lambda net, x: net.u(x), edge)]
    return Problem("unit_square", constraints, {"u": crux.mlp(2, 1, hidden, activation, seed=seed)},
                   description=f"-Δu + u³ = {source:g} on [0,1]², u = 0 on the edges", seed=seed)
