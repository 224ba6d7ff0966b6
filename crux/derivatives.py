"""Derivatives of pointwise functions ``f: (d,) -> scalar``.

Forward mode (nested ``jvp``) is used for second derivatives: for the small input
dimensions of PINNs it costs ``d`` forward passes and no tape, and of the general
autodiff formulations ``crux-bench`` compares (reverse over reverse, jacfwd of
jacrev, jet) it trained fastest in 1-D. ``laplacian`` goes one better through Taylor
mode (``crux.taylor``) whenever it has a rule for everything ``f`` does.

One exception: a tiny network on a CPU, where reverse over reverse spends less CPU per
update than Taylor mode; on larger networks it is slower than Taylor mode, and on a GPU
it was the slowest form. Hence ``mode``. The figures are in docs/BENCHMARK.md ("Measurements behind the library's design").
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp

from crux.taylor import Unsupported, forward_laplacian

Pointwise = Callable[[jax.Array], jax.Array]
UNROLLED_DIMENSIONS = 4  # beyond this, vmap over directions keeps compile time in check


def _unit(x: jax.Array, i: int) -> jax.Array:
    return jnp.zeros_like(x).at[i].set(1.0)


def grad(f: Pointwise) -> Pointwise:
    """The gradient of a scalar pointwise function, in reverse mode.

    Args:
        f: a pointwise function ``(d,) -> scalar``, such as ``net.u``.

    Returns:
        The pointwise function ``(d,) -> (d,)`` of its gradient, to be called inside a residual.
    """
    return jax.grad(f)


def partial(f: Pointwise, *dims: int) -> Pointwise:
    """A mixed partial derivative, one nested forward-mode product per axis: ``partial(u, 0, 0)`` is u_xx,
    ``partial(u, 1)`` is u_t for ``x = (x, t)``.

    Args:
        f: a pointwise function ``(d,) -> scalar`` (or vector: the derivative of each component).
        *dims: the input axes to differentiate along, in order; at least one.

    Returns:
        The pointwise function of the derivative, of ``f``'s shape.

    Raises:
        ValueError: no axis given; an axis beyond the point's coordinates (when the residual is traced).
        TypeError: an axis that is not an integer.
    """
    if not dims:
        raise ValueError("crux.partial needs at least one dimension index, e.g. partial(u, 0)")
    for i in dims:
        if isinstance(i, bool) or not isinstance(i, int):
            raise TypeError(f"crux.partial: the axes are the input's integer indices (0 for x, 1 for the next), "
                            f"got {i!r} in partial(f, {', '.join(map(repr, dims))})")
    derivative = f
    for i in dims:
        derivative = _directional(derivative, i)
    return derivative


def _directional(f: Pointwise, i: int) -> Pointwise:
    def df(x):
        if not -x.shape[0] <= i < x.shape[0]:  # an axis beyond the point would be a derivative of zero
            raise ValueError(f"crux.partial: axis {i} of a point of {x.shape[0]} coordinates; the axes are "
                             f"0 to {x.shape[0] - 1} (or -{x.shape[0]} to -1 from the last)")
        return jax.jvp(f, (x,), (_unit(x, i),))[1]
    return df


LAPLACIAN_MODES = ("taylor", "forward", "reverse")


def laplacian(f: Pointwise, mode: str = "taylor") -> Pointwise:
    """The Laplacian: the sum of the unmixed second derivatives. The three modes compute the same value; they
    differ in float32 round-off and in speed.

    Args:
        f: a pointwise function ``(d,) -> scalar``, or a vector (the Laplacian of each component; not with
            ``mode="reverse"``).
        mode: ``"taylor"``: Taylor mode (:mod:`crux.taylor`), which pushes the value, the first derivatives and
            the summed second derivative through ``f`` in one forward pass, where it has a rule for everything
            ``f`` does (decided while tracing; else forward over forward); ``"forward"``: forward over forward,
            one nested ``jvp`` per axis; ``"reverse"``: reverse over reverse, for a scalar ``f`` (faster only
            for tiny networks on a CPU, see above).

    Returns:
        The pointwise function of the Laplacian, of ``f``'s shape.

    Raises:
        ValueError: an unknown ``mode``; ``mode="reverse"`` on a function that is not scalar (when traced).
    """
    if mode not in LAPLACIAN_MODES:
        raise ValueError(f"crux.laplacian: unknown mode {mode!r}; choose one of {list(LAPLACIAN_MODES)}")
    if mode == "forward":
        return _forward_over_forward(f)
    if mode == "reverse":
        return _reverse_over_reverse(f)
    taylor, fallback = forward_laplacian(f), _forward_over_forward(f)

    def lap(x):
        try:
            return taylor(x)
        except Unsupported:
            return fallback(x)
    return lap


def _forward_over_forward(f: Pointwise) -> Pointwise:
    def lap(x):
        def second(e):
            first = lambda y: jax.jvp(f, (y,), (e,))[1]
            return jax.jvp(first, (x,), (e,))[1]
        eye = jnp.eye(x.shape[0], dtype=x.dtype)
        if x.shape[0] <= UNROLLED_DIMENSIONS:  # unrolled, the few directions train faster than under vmap
            return sum(second(e) for e in eye)
        return jnp.sum(jax.vmap(second)(eye), axis=0)
    return lap


def _reverse_over_reverse(f: Pointwise) -> Pointwise:
    def lap(x):
        if jax.eval_shape(f, x).shape != ():
            raise ValueError("crux.laplacian(mode='reverse') needs a scalar function; use mode='taylor' for "
                             "one with vector values (it takes the Laplacian of each component)")
        gradient = jax.grad(f)
        return sum(jax.grad(lambda y, i=i: gradient(y)[i])(x)[i] for i in range(x.shape[0]))
    return lap


def hessian(f: Pointwise) -> Callable[[jax.Array], jax.Array]:
    """The Hessian of a scalar pointwise function, forward over forward.

    Args:
        f: a pointwise function ``(d,) -> scalar``.

    Returns:
        The pointwise function ``(d,) -> (d, d)`` of its Hessian.
    """
    return jax.jacfwd(jax.jacfwd(f))
