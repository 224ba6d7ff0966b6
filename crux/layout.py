"""How a model's parameters sit in the training state: one flat vector, or the model's own tree of arrays.

The optimizer update, the non-finite guard and the keep-or-apply select run once
per array of the state; on a CPU each is its own small kernel. For an optimizer
whose update does not depend on how the parameters are split into arrays
(Adam, SGD, L-BFGS, ... : elementwise rules or inner products over all
parameters), one flat vector gives the same numbers with one kernel per
operation instead of one per layer. Optimizers that use the shapes (SOAP's
per-matrix preconditioners, LAMB's per-layer trust ratios) and any tree-shaped
argument (a weight-decay ``mask``) keep the tree.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
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
    """Whether an optimizer trains the same on one flat vector as on the parameters' tree.

    Args:
        optimizer: what :meth:`crux.Model.optimizer` was given.

    Returns:
        True for a factory of :data:`LAYOUT_FREE_FACTORIES`, also behind ``functools.partial`` with scalar keywords
        only; False for anything else (a ready transform).
    """
    if isinstance(optimizer, functools.partial):
        if optimizer.args or not all(isinstance(v, SCALAR) for v in optimizer.keywords.values()):
            return False
        optimizer = optimizer.func
    try:
        return optimizer in LAYOUT_FREE_FACTORIES
    except TypeError:  # unhashable: not one of them
        return False


@jax.jit
def _ravel(params: Any) -> jax.Array:
    return ravel_pytree(params)[0]


@functools.partial(jax.jit, static_argnums=1)
def _unravel(vector: jax.Array, spec: tuple) -> Any:
    treedef, leaves = spec
    like = jax.tree.unflatten(treedef, [jnp.zeros(shape, dtype) for shape, dtype in leaves])
    return ravel_pytree(like)[1](vector)


@dataclass(frozen=True)
class Layout:
    """A model's parameters packed for the state (``pack``) and back (``unpack``): static, and hashable.

    ``spec`` is the parameters' tree structure with each leaf's shape and dtype. Packing and unpacking
    are each one compiled call, cached by ``spec``: done op by op they cost a dispatch per leaf.
    """

    flat: bool
    spec: tuple

    @classmethod
    def of(cls, params: Any, flat: bool) -> "Layout":
        """The layout of ``params`` (a pytree of arrays): one flat vector where ``flat``, else the tree as it is."""
        leaves, treedef = jax.tree.flatten(params)
        return cls(flat, (treedef, tuple((jnp.shape(leaf), jnp.result_type(leaf)) for leaf in leaves)))

    def pack(self, params: Any) -> Any:
        """``params`` (of this layout's tree and leaves) packed: one 1-D vector where flat, else as they are."""
        return _ravel(params) if self.flat else params

    def unpack(self, packed: Any) -> Any:
        """The parameters' tree back from what :meth:`pack` gave."""
        return _unravel(packed, self.spec) if self.flat else packed
