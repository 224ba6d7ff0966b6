"""Poisson problems: in 1-D -u'' = pi^2 sin(pi x) on [0, 1], u(0) = u(1) = 0, exact u = sin(pi x); on the cube
[0, 1]^D -Laplacian u = D pi^2 prod_i sin(pi x_i), u = 0 on its faces, exact u = prod_i sin(pi x_i)."""
from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np

from crux.constraint import Constraint
from crux.derivatives import LAPLACIAN_MODES, laplacian, partial
from crux.model import mlp
from crux.problems.problem import Problem


def _source(x):
    return jnp.pi ** 2 * jnp.sin(jnp.pi * x[0])


def _exact(xs: np.ndarray) -> np.ndarray:
    return np.sin(np.pi * xs[:, 0])


def _interior(n: int) -> np.ndarray:
    return np.linspace(0.0, 1.0, n + 2, dtype=np.float32)[1:-1, None]


def poisson1d(n_interior: int = 1024, hidden: Sequence[int] = (64, 64, 64), activation: str = "tanh",
              seed: int = 0, hard_boundary: bool = False, bc_weight: float = 1.0,
              laplacian_mode: str = "taylor") -> Problem:
    """-u'' = pi^2 sin(pi x) on [0, 1], u(0) = u(1) = 0: the problem of jNO's documented multi-phase example.

    Args:
        n_interior: the evenly spaced interior points of constraint ``pde``.
        hidden, activation: the network's (:func:`crux.mlp`).
        seed: the initial parameters'.
        hard_boundary: write u = x(1-x) N(x), which meets the boundary condition by construction: constraint
            ``pde`` alone, the PDE residual unchanged (else constraints ``pde`` and ``bc``, x = 0 and 1).
        bc_weight: the weight of ``bc``.
        laplacian_mode: how u'' is taken (:func:`crux.laplacian`'s ``mode``).

    Returns:
        A :class:`Problem` of model ``u`` (Adam at 1e-3 attached), exact ``u = sin(pi x)`` scored at 1001
        points.

    Raises:
        ValueError: an unknown ``laplacian_mode``.
    """
    if laplacian_mode not in LAPLACIAN_MODES:
        raise ValueError(f"poisson1d: laplacian_mode={laplacian_mode!r}; choose one of {list(LAPLACIAN_MODES)}")
    lap = lambda f: laplacian(f, laplacian_mode)
    net = mlp(1, 1, hidden, activation, seed=seed)
    boundary = np.array([[0.0], [1.0]], np.float32)
    if hard_boundary:
        u_of = lambda net: (lambda x: x[0] * (1.0 - x[0]) * net.u(x))
        constraints = [Constraint("pde", lambda net, x: -lap(u_of(net))(x) - _source(x), _interior(n_interior))]
        predict = lambda models, xs: xs[:, 0] * (1 - xs[:, 0]) * np.asarray(models["u"](xs))[:, 0]
    else:
        constraints = [Constraint("pde", lambda net, x: -lap(net.u)(x) - _source(x), _interior(n_interior)),
                       Constraint("bc", lambda net, x: net.u(x), boundary, weight=bc_weight)]
        predict = lambda models, xs: np.asarray(models["u"](xs))[:, 0]
    return Problem("poisson1d", constraints, {"u": net}, {"u": predict}, {"u": _exact},
                   np.linspace(0, 1, 1001, dtype=np.float32)[:, None],
                   "-u'' = pi^2 sin(pi x) on [0,1], u(0)=u(1)=0", seed)


def mixed_poisson1d(n_interior: int = 256, hidden: Sequence[int] = (32, 32), activation: str = "tanh",
                    seed: int = 0) -> Problem:
    """The same problem in mixed form with two networks: flux q = u', -q' = f.

    Constraint 0 (``flux_balance``: -q' - f) reaches only q, constraint 2 (``bc``)
    only u, constraint 1 (``flux``: q - u') both: the problem for ``substeps``.

    Args:
        n_interior: the evenly spaced interior points of ``flux_balance`` and ``flux``.
        hidden, activation: each network's (:func:`crux.mlp`).
        seed: ``u``'s initial parameters (``q``'s: ``seed + 1``).

    Returns:
        A :class:`Problem` of models ``u`` and ``q`` (Adam at 1e-3 attached), exact ``u = sin(pi x)``,
        ``q = pi cos(pi x)``.
    """
    u, q = mlp(1, 1, hidden, activation, seed=seed), mlp(1, 1, hidden, activation, seed=seed + 1)
    x = _interior(n_interior)
    constraints = [
        Constraint("flux_balance", lambda net, x: -partial(net.q, 0)(x) - _source(x), x),
        Constraint("flux", lambda net, x: net.q(x) - partial(net.u, 0)(x), x),
        Constraint("bc", lambda net, x: net.u(x), np.array([[0.0], [1.0]], np.float32)),
    ]
    return Problem("mixed_poisson1d", constraints, {"u": u, "q": q},
                   {"u": lambda models, xs: np.asarray(models["u"](xs))[:, 0],
                    "q": lambda models, xs: np.asarray(models["q"](xs))[:, 0]},
                   {"u": _exact, "q": lambda xs: np.pi * np.cos(np.pi * xs[:, 0])},
                   np.linspace(0, 1, 1001, dtype=np.float32)[:, None],
                   "-q' = pi^2 sin(pi x), q = u', u(0)=u(1)=0 (two networks)", seed)


def _product_of_sines(x):
    return jnp.prod(jnp.sin(jnp.pi * x))


def poisson_cube(n_interior: int = 4096, dims: int = 2, hidden: Sequence[int] = (64, 64, 64),
                 activation: str = "tanh", seed: int = 0, n_face: int = 64) -> Problem:
    """The Poisson problem on ``[0, 1]^dims``: -Laplacian u = dims pi^2 prod_i sin(pi x_i), u = 0 on the faces.
    The interior points are drawn as float32 straight into their array, so a point set near the host's memory is
    never held twice.

    Args:
        n_interior: the points of constraint ``pde``, drawn uniformly from ``seed``.
        dims: the dimension.
        hidden, activation: the network's (:func:`crux.mlp`).
        seed: the points' and the initial parameters'.
        n_face: the points of constraint ``bc`` drawn on each of the ``2 * dims`` faces.

    Returns:
        A :class:`Problem` of model ``u`` (Adam at 1e-3 attached), exact ``u = prod_i sin(pi x_i)`` scored at
        1024 random points.

    Raises:
        ValueError: ``n_interior``, ``dims`` or ``n_face`` is not a whole number ``>= 1``.
    """
    for name, value in (("n_interior", n_interior), ("dims", dims), ("n_face", n_face)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"poisson_cube: {name}={value!r}; pass a whole number >= 1")
    rng = np.random.default_rng(seed)
    interior = np.empty((n_interior, dims), np.float32)
    rng.random(dtype=np.float32, out=interior)
    faces = rng.random((2 * dims, n_face, dims), dtype=np.float32)
    for face in range(2 * dims):
        faces[face, :, face // 2] = face % 2  # face 2i holds x_i = 0, face 2i+1 holds x_i = 1
    net = mlp(dims, 1, hidden, activation, seed=seed)
    constraints = [
        Constraint("pde", lambda net, x: -laplacian(net.u)(x) - dims * jnp.pi ** 2 * _product_of_sines(x), interior),
        Constraint("bc", lambda net, x: net.u(x), faces.reshape(-1, dims)),
    ]
    return Problem(f"poisson_cube{dims}", constraints, {"u": net},
                   {"u": lambda models, xs: np.asarray(models["u"](xs))[:, 0]},
                   {"u": lambda xs: np.prod(np.sin(np.pi * xs), axis=1)},
                   rng.random((1024, dims), dtype=np.float32),
                   f"-Laplacian u = {dims} pi^2 prod sin(pi x_i) on [0,1]^{dims}, u = 0 on the faces", seed)
