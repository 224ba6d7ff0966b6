"""A problem of one's own (``problem._target_=chaotic_problem.biharmonic_square``) on which the accumulation sweep's
plain SGD at 1e-3 is chaotic: its loss is some 1e5, so each step is far past the edge of stability, the loss does
not fall, and two runs one ulp apart part to the size of the parameters. The fix a verdict should name, a smaller
learning rate, makes it train calmly.

Δ²u = f on the unit square, split into Δu = v and Δv = f with a network for each, u = v = 0 on the edges:
four constraints of different sizes (two interior sets, two edge sets), f = 4π⁴·``scale``·sin(πx)·sin(πy)."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

import crux
from crux.problems import Problem


def _edge_points(rng: np.random.Generator, n: int) -> np.ndarray:
    along, side = rng.uniform(0.0, 1.0, n), rng.integers(0, 4, n)  # sides x=0, x=1, y=0, y=1
    return np.stack([np.where(side < 2, side, along), np.where(side < 2, along, side - 2)], axis=1).astype(np.float32)


def biharmonic_square(n_interior: int, n_edge: int, scale: float, hidden, activation, seed) -> Problem:
    """Constraints ``laplace_u`` (``n_interior`` points), ``laplace_v`` (half as many), ``edge_u`` (``n_edge``)
    and ``edge_v`` (half as many); models ``u`` and ``v``."""
    rng = np.random.default_rng(seed)
    inner = lambda n: rng.uniform(0.0, 1.0, (n, 2)).astype(np.float32)
    source = lambda x: 4 * jnp.pi ** 4 * scale * jnp.sin(jnp.pi * x[0]) * jnp.sin(jnp.pi * x[1])
    constraints = [crux.Constraint("laplace_u", lambda net, x: crux.laplacian(net.u)(x) - net.v(x), inner(n_interior)),
                   crux.Constraint("laplace_v", lambda net, x: crux.laplacian(net.v)(x) - source(x),
                                   inner(max(n_interior // 2, 1))),
                   crux.Constraint("edge_u", lambda net, x: net.u(x), _edge_points(rng, n_edge)),
                   crux.Constraint("edge_v", lambda net, x: net.v(x), _edge_points(rng, max(n_edge // 2, 1)))]
    models = {"u": crux.mlp(2, 1, hidden, activation, seed=seed), "v": crux.mlp(2, 1, hidden, activation, seed=seed + 1)}
    return Problem("biharmonic_square", constraints, models, seed=seed)
