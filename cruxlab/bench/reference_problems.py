"""The bench's reference problems as crux trains them: their points and a builder of each problem.

-u'' = pi^2 sin(pi x) on [0, 1] with u = x(1-x) N(x), N a tanh MLP, Adam 1e-3 (crux.problems.poisson1d with a hard
boundary); its 2-D analogue -Δu = 2 pi^2 sin(pi x) sin(pi y), u = x(1-x)y(1-y) N(x, y), built from the public API;
and Burgers' equation on (x, t), three partial derivatives. The hand-written code trains the same problems on
the same points (:mod:`cruxlab.bench.hand_written`).
"""
from __future__ import annotations

import math
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np
import optax

import crux
from cruxlab.bench.hand_written import envelope, source


def interior(n: int) -> np.ndarray:
    """``n`` evenly spaced points inside [0, 1], as a column ``(n, 1)``."""
    return np.linspace(0.0, 1.0, n + 2, dtype=np.float32)[1:-1, None]


def grid2d(n: int) -> np.ndarray:
    """A square grid of about ``n`` points inside [0, 1]^2, ``(side * side, 2)``."""
    side = int(round(math.sqrt(n)))
    axis = np.linspace(0.0, 1.0, side + 2, dtype=np.float32)[1:-1]
    return np.stack(np.meshgrid(axis, axis, indexing="ij"), -1).reshape(-1, 2)


def poisson_problem(n: int, hidden: tuple[int, ...], laplacian_mode: str = "taylor") -> Callable[[], Any]:
    """A builder of the 1-D problem on ``n`` interior points, ``hidden`` tanh layers, u'' by ``laplacian_mode``."""
    return lambda: crux.problems.poisson1d(n_interior=n, hidden=hidden, hard_boundary=True,
                                           laplacian_mode=laplacian_mode)


def laplacian2d_problem(points: np.ndarray, hidden: tuple[int, ...]) -> Callable[[], Any]:
    """The 2-D analogue built from the public API: a Constraint, crux.mlp, crux.laplacian."""
    def make():
        model = crux.mlp(2, 1, hidden)
        model.optimizer(optax.adam).scale(crux.lrs(1e-3))
        u_of = lambda net: (lambda x: envelope(x) * net.u(x))
        constraint = crux.Constraint("pde", lambda net, x: -crux.laplacian(u_of(net))(x) - source(x), points)

        class Problem2D:  # the two things CruxVariant asks of a problem
            solver_ = crux.Crux([constraint], {"u": model})

            def solver(self):
                return self.solver_

            def relative_l2(self):
                exact = np.prod(np.sin(np.pi * points), axis=1)
                guess = np.prod(points * (1 - points), axis=1) * np.asarray(model(points))[:, 0]
                return {"u": float(np.linalg.norm(guess - exact) / np.linalg.norm(exact))}
        return Problem2D()
    return make


def burgers_problem(n: int, hidden: tuple[int, ...], nu: float = 0.01 / math.pi) -> Callable[[], Any]:
    """Burgers' equation u_t + u u_x = nu u_xx on (x, t) in [0, 1]^2 with u(x, 0) = sin(pi x), from the public
    API: two inputs, three partial derivatives (u_t, u_x, u_xx), ``n`` interior and ``n // 8`` initial points."""
    def make():
        rng = np.random.default_rng(0)
        interior_points = rng.uniform(0.0, 1.0, (n, 2)).astype(np.float32)
        initial = np.stack([rng.uniform(0.0, 1.0, n // 8), np.zeros(n // 8)], 1).astype(np.float32)
        u = lambda net: net.u
        pde = lambda net, x: (crux.partial(u(net), 1)(x) + u(net)(x) * crux.partial(u(net), 0)(x)
                              - nu * crux.partial(u(net), 0, 0)(x))
        constraints = [crux.Constraint("pde", pde, interior_points),
                       crux.Constraint("initial", lambda net, x: u(net)(x) - jnp.sin(jnp.pi * x[0]), initial)]
        return crux.problems.problem.Problem("burgers", constraints, {"u": crux.mlp(2, 1, hidden)})
    return make
