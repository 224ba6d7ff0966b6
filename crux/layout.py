"""How a model's parameters sit in the training state: one flat vector, or the model's own tree of arrays.

The optimizer update, the non-finite guard and the keep-or-apply select run once
per array of the state; on a CPU each is its own small kernel. For an optimizer
whose update does not depend on how the parameters are split into arrays
(Adam, SGD, L-BFGS, ... : elementwise rules or inner products over all
parameters), one flat vector gives the same numbers with one kernel per
operation instead of one per layer: the small reference problem
(``scripts/bench.py``) steps 1.25x faster and compiles 30% sooner. Optimizers
that use the shapes (SOAP's per-matrix preconditioners, LAMB's per-layer trust
ratios) and any tree-shaped argument (a weight-decay ``mask``) keep the tree.
"""
from __future__ import annotations

import functools
from typing import Any

import optax
from jax.flatten_util import ravel_pytree

# optax factories whose update is the same on any split of the parameters into arrays
LAYOUT_FREE_FACTORIES = frozenset({
    optax.adam, optax.adamw, optax.adamax, optax.adamaxw, optax.nadam, optax.nadamw, optax.amsgrad,
    optax.adabelief, optax.adagrad, optax.adadelta, optax.rmsprop, optax.yogi, optax.lion, optax.sgd,
    optax.sign_sgd, optax.lbfgs,
})
SCALAR = (int, float, bool, type(None))


def layout_free(optimizer: Any) -> bool:
    """True for a layout-free optax factory, also behind ``functools.partial`` with scalar keywords only."""
    if isinstance(optimizer, functools.partial):
        if optimizer.args or not all(isinstance(v, SCALAR) for v in optimizer.keywords.values()):
            return False
        optimizer = optimizer.func
    try:
        return optimizer in LAYOUT_FREE_FACTORIES
    except TypeError:  # unhashable: not one of them
        return False


class Layout:
    """A model's parameters in their form in the state (``packed``), and ``unpack`` to get the tree back."""

    def __init__(self, params: Any, flat: bool):
        self.flat = flat
        vector, self._unravel = ravel_pytree(params)
        self.packed: Any = vector if flat else params

    def unpack(self, packed: Any) -> Any:
        return self._unravel(packed) if self.flat else packed
