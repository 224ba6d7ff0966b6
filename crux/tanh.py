"""``tanh`` to float32 accuracy on every backend: the activation of crux's networks.

A TPU computes ``jnp.tanh`` with a fast approximation: about 190 ulp off in the median and up to 1,400 ulp over
[-6, 6] on a TPU v5e, against at most 4.4 ulp on a CPU (``scripts/function_accuracy.py`` measures it). A PINN's
loss holds the network's derivatives, built from tanh and from ``1 - tanh**2``, so that error reaches the trained
solution whatever the matmul precision (docs/api.md#precision has the figures). There crux evaluates tanh as a
rational function of ``x**2`` with positive coefficients: the convergent of Lambert's continued fraction
``tanh x = x / (1 + x**2 / (3 + x**2 / (5 + ...)))`` ending at 27, within 4.6e-9 of tanh on [-9, 9] (its float32
evaluation stays within a few ulp: every term it adds is positive, nothing cancels) and +-1 beyond, where float32
rounds tanh to +-1. Its derivative rule is tanh's own, ``1 - tanh**2`` of that accurate value.

It runs where the program is compiled for a TPU and traced at a matmul precision other than ``"default"``: at
``"default"`` the user asked for the device's fastest arithmetic, and gets the device's tanh with it. Elsewhere
``jnp.tanh`` is already accurate and is used as it is, so a CPU computes the same bits as before.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from numpy.polynomial import polynomial

from crux import precision as matmul

DEPTH = 13  # partial denominators 1, 3, ..., 27: 4.6e-9 relative error on [-9, 9], below float32's half ulp
LIMIT = 9.0  # |x| beyond which float32 rounds tanh to +-1 (1 - tanh(9) = 3e-8, under half the spacing below 1)


def _convergent(depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients (in ``s = x**2``, lowest first) of ``P``, ``Q`` with ``tanh x ~ x P(s) / Q(s)``, ``Q(0) = 1``."""
    numerator, denominator = np.array([2.0 * depth + 1]), np.array([1.0])
    for k in range(depth - 1, -1, -1):  # (2k + 1) + s / (numerator / denominator), from the innermost term out
        numerator, denominator = polynomial.polyadd((2 * k + 1) * numerator, polynomial.polymulx(denominator)), \
            numerator
    return denominator / numerator[0], numerator / numerator[0]


P, Q = (tuple(np.float32(c) for c in coefficients) for coefficients in _convergent(DEPTH))


def _horner(coefficients: tuple, s: jax.Array) -> jax.Array:
    total = jnp.full_like(s, coefficients[-1])
    for c in coefficients[-2::-1]:
        total = total * s + c
    return total


@jax.custom_jvp
def accurate_tanh(x: jax.Array) -> jax.Array:
    """tanh within a few float32 ulp, from additions, multiplications and one division.

    Args:
        x: a float array.

    Returns:
        tanh of ``x``, elementwise, in ``[-1, 1]``; its derivative is ``1 - tanh(x)**2``.
    """
    x = jnp.clip(x, -LIMIT, LIMIT)
    s = x * x
    return jnp.clip(x * _horner(P, s) / _horner(Q, s), -1, 1)  # rounding near |x| = 9 may pass 1 by an ulp


@accurate_tanh.defjvp
def _accurate_tanh_jvp(primals, tangents):
    y = accurate_tanh(primals[0])
    return y, (1 - y * y) * tangents[0]


def tanh(x: jax.Array) -> jax.Array:
    """``jnp.tanh`` where it is accurate or where the fastest arithmetic was asked for; else :func:`accurate_tanh`
    (chosen while the program is traced: part of what it is).

    Args:
        x: an array.

    Returns:
        tanh of ``x``, elementwise: ``jnp.tanh`` off a TPU or at matmul precision ``default``, else
        :func:`accurate_tanh`.
    """
    traced_at = jax.config.jax_default_matmul_precision
    if jax.default_backend() != "tpu" or matmul.JAX_NAMES.get(traced_at, traced_at) == "default":
        return jnp.tanh(x)
    return accurate_tanh(x)
