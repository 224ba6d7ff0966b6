"""1-D heat equation u_t = nu u_xx on [0,1]x[0,1], u(x,0) = sin(pi x), u(0,t) = u(1,t) = 0.

Exact solution u = exp(-nu pi^2 t) sin(pi x). Points are x = (x, t).
"""
from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np

from crux.constraint import Constraint
from crux.derivatives import partial
from crux.model import mlp
from crux.problems.problem import Problem


def heat1d(n_interior: int = 2048, n_initial: int = 128, n_boundary: int = 128, nu: float = 0.1,
           hidden: Sequence[int] = (64, 64, 64), activation: str = "tanh", seed: int = 0) -> Problem:
    """The heat equation on ``[0, 1]^2``, points ``x = (x, t)``, every point set drawn uniformly from ``seed``.

    Args:
        n_interior: the points of constraint ``pde``, u_t - nu u_xx.
        n_initial: the points of constraint ``initial``, u(x, 0) - sin(pi x).
        n_boundary: the points of constraint ``boundary``, u at x = 0 or 1.
        nu: the diffusivity.
        hidden, activation: the network's (:func:`crux.mlp`).
        seed: the points' and the initial parameters'.

    Returns:
        A :class:`Problem` of model ``u`` (Adam at 1e-3 attached), exact ``u = exp(-nu pi^2 t) sin(pi x)``
        scored on a 64 x 64 grid.
    """
    rng = np.random.default_rng(seed)
    interior = rng.uniform(0.0, 1.0, (n_interior, 2)).astype(np.float32)
    initial = np.stack([rng.uniform(0, 1, n_initial), np.zeros(n_initial)], axis=1).astype(np.float32)
    walls = np.stack([rng.integers(0, 2, n_boundary), rng.uniform(0, 1, n_boundary)], axis=1).astype(np.float32)
    exact = lambda xs: np.exp(-nu * np.pi ** 2 * xs[:, 1]) * np.sin(np.pi * xs[:, 0])
    constraints = [
        Constraint("pde", lambda net, x: partial(net.u, 1)(x) - nu * partial(net.u, 0, 0)(x), interior),
        Constraint("initial", lambda net, x: net.u(x) - jnp.sin(jnp.pi * x[0]), initial),
        Constraint("boundary", lambda net, x: net.u(x), walls),
    ]
    grid = np.stack(np.meshgrid(np.linspace(0, 1, 64), np.linspace(0, 1, 64)), -1).reshape(-1, 2)
    return Problem("heat1d", constraints, {"u": mlp(2, 1, hidden, activation, seed=seed)},
                   {"u": lambda models, xs: np.asarray(models["u"](xs))[:, 0]}, {"u": exact},
                   grid.astype(np.float32), f"u_t = {nu} u_xx, u(x,0) = sin(pi x), zero walls", seed)
