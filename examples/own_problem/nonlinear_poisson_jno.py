"""The problem of nonlinear_poisson.py written in jNO's terms, for ``backend=jno``: -Δu + u³ = f on the unit
square, u = 0 on its edges, on the same points, so that a sweep can be run on both libraries and reported side
by side.
"""
from __future__ import annotations

from typing import Sequence

import foundax
import jax

import jno
from crux.model import ACTIVATIONS
from cruxlab.backends.jno import OwnProblem
from nonlinear_poisson import unit_square_points


def unit_square(n_interior: int, n_edge: int, source: float, hidden: Sequence[int], activation: str,
                seed: int) -> OwnProblem:
    """The fields of ``conf/problem/unit_square_jno.yaml``, and ``hidden``, ``activation``, ``seed`` as for
    crux (an MLP of ``len(hidden)`` layers of ``hidden[0]``, its activation by name)."""
    interior, edge = unit_square_points(n_interior, n_edge, seed)
    domain = jno.domain.from_array({"interior": interior, "edge": edge})
    x, y, *_ = domain.variable("interior")
    xe, ye, *_ = domain.variable("edge")
    net = jno.nn(foundax.mlp(in_features=2, output_dim=1, activation=ACTIVATIONS[activation],
                             hidden_dims=hidden[0], num_layers=len(hidden), key=jax.random.PRNGKey(seed)))
    u = net(x, y).scalar
    pde = -u.laplacian(x, y) + u ** 3 - source
    return OwnProblem({"pde": pde.mse, "edge": net(xe, ye).scalar.mse}, {"u": net},
                      description=f"-Δu + u³ = {source:g} on [0,1]², u = 0 on the edges (jNO)")
