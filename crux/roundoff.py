"""Round-off twins: a start that differs from a model's parameters the way round-off makes numbers differ, so
that a run from it shows how far training carries a difference of that size (the report's round-off bound)."""
from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np


def roundoff_twin(params: Any, twin: int) -> Any:
    """``params`` with every nonzero entry moved one unit in the last place, up or down at random (directions
    drawn with seed ``twin``): a start that differs from ``params`` the way round-off makes numbers differ.

    About eps relative per entry, in no common direction: moving every entry away
    from zero instead would rescale each layer by 1 + eps, a coherent change that
    moves the loss several times more than round-off does. Zeros stay zero (one ulp
    of zero is a subnormal number, which some CPUs compute slowly).

    Args:
        params: a pytree of float arrays.
        twin: the twin's number: the seed of the directions; 0 leaves ``params`` as they are.

    Returns:
        ``params`` moved (``params`` itself for ``twin=0``), each leaf a JAX array of its dtype.

    Raises:
        ValueError: ``twin < 0``.
    """
    if twin < 0:
        raise ValueError(f"roundoff_twin must be >= 0, got {twin}")
    if twin == 0:
        return params
    directions = np.random.default_rng(twin)

    def move(leaf: Any) -> jax.Array:
        values = np.asarray(leaf)
        toward = np.where(directions.random(values.shape) < 0.5, -np.inf, np.inf).astype(values.dtype)
        return jnp.asarray(np.where(values == 0, values, np.nextafter(values, toward)))

    return jax.tree.map(move, params)
