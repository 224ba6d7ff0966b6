"""The hand-written baselines: crux's reference problems written in plain JAX + optax, as a user would without crux.

A list of (W, b) layers from crux's initial parameters (:func:`initial_layers`), the same loss (the mean squared
residual of -Δu = f with u = envelope * N, the boundary held by the envelope), and u'' (or the Laplacian, summed
over the axes unrolled in Python) by each of ``FORMS``: forward-over-forward ``jvp`` (``fwd-fwd``, crux's
fallback), reverse-over-reverse ``grad`` (``rev-rev``), ``jacfwd(jacrev)`` (``fwd-rev``), Taylor mode
``jax.experimental.jet`` (``jet``), and a hand-derived second-order forward propagation through the tanh layers,
batched over the points (``hand-taylor``; tanh only, the formulation crux.laplacian derives generically in
crux/taylor.py). Mini-batches are drawn without replacement like crux's point stream, by the cheapest such draw
found (:func:`sampled`). tests/test_bench.py checks that each formulation takes crux's loss at crux's start.
"""
from __future__ import annotations

from typing import Callable

import jax
import jax.numpy as jnp
from jax.experimental import jet

import crux

FORMS = ("fwd-fwd", "rev-rev", "fwd-rev", "jet", "hand-taylor")
SAME_AS_CRUX = "hand-taylor"  # crux.laplacian's formulation: Taylor mode (crux/taylor.py), written by hand


def initial_layers(widths: tuple[int, ...], seed: int = 0) -> list[tuple[jax.Array, jax.Array]]:
    """crux.mlp's initial parameters (``seed``) as one ``(W, b)`` per layer, its stacks of equal layers split:
    a hand-written loop starts where crux starts, so their losses compare update by update."""
    model = crux.model.mlp(widths[0], widths[-1], widths[1:-1], seed=seed)  # crux.mlp itself, even where patched
    return [(stack["w"][k], stack["b"][k]) for stack in model.params for k in range(stack["w"].shape[0])]


def network(params, x: jax.Array) -> jax.Array:
    """One point ``(d,)`` -> scalar."""
    h = x
    for w, b in params[:-1]:
        h = jnp.tanh(h @ w + b)
    w, b = params[-1]
    return (h @ w + b)[0]


def envelope(x: jax.Array) -> jax.Array:
    """prod_i x_i (1 - x_i): zero on the boundary of the unit cube (the hard boundary condition)."""
    g = x[..., 0] * (1.0 - x[..., 0])
    for i in range(1, x.shape[-1]):  # not jnp.prod: jax.experimental.jet has no rule for reduce_prod
        g = g * x[..., i] * (1.0 - x[..., i])
    return g


def solution(params, x: jax.Array) -> jax.Array:
    return envelope(x) * network(params, x)


def source(x: jax.Array) -> jax.Array:
    """-Δ of prod_i sin(pi x_i)."""
    d = x.shape[-1]
    return d * jnp.pi ** 2 * jnp.prod(jnp.sin(jnp.pi * x), axis=-1)


def _directions(x: jax.Array) -> list[jax.Array]:
    eye = jnp.eye(x.shape[0], dtype=x.dtype)
    return [eye[i] for i in range(x.shape[0])]


def laplacian_fwd_fwd(f: Callable) -> Callable:
    """sum_i d^2 f / dx_i^2 by jvp of jvp along each axis, the axes unrolled in Python.

    Unrolled, not ``vmap`` over the identity (crux.laplacian's form): vmapping the directions made the
    2-D and 3-D steps 1.4-1.7x slower on 2 CPU cores (the bench's problem ``laplacian``)."""
    def lap(x):
        def second(e):
            return jax.jvp(lambda y: jax.jvp(f, (y,), (e,))[1], (x,), (e,))[1]
        return sum(second(e) for e in _directions(x))
    return lap


def laplacian_rev_rev(f: Callable) -> Callable:
    """sum_i d/dx_i (df/dx_i), each by reverse mode (``jnp.trace(jacrev(grad(f)))`` was 1.6x slower in 1-D)."""
    def lap(x):
        gradient = jax.grad(f)
        return sum(jax.grad(lambda y, i=i: gradient(y)[i])(x)[i] for i in range(x.shape[0]))
    return lap


def laplacian_fwd_rev(f: Callable) -> Callable:
    return lambda x: jnp.trace(jax.jacfwd(jax.jacrev(f))(x))


def laplacian_jet(f: Callable) -> Callable:
    def lap(x):
        # jet's series are derivatives (not divided by k!): the second term is e^T H e.
        return sum(jet.jet(f, (x,), ((e, jnp.zeros_like(e)),))[1][1] for e in _directions(x))
    return lap


POINTWISE = {"fwd-fwd": laplacian_fwd_fwd, "rev-rev": laplacian_rev_rev, "fwd-rev": laplacian_fwd_rev,
             "jet": laplacian_jet}


def taylor_laplacian(params, xs: jax.Array) -> jax.Array:
    """Δ(envelope * N) at points ``(B, d)`` by pushing value, first and second directional derivatives
    along each axis through the tanh layers at once (tanh' = s = 1 - t^2, tanh'' = -2 t s).

    One ``(B, width)`` array per axis: a ``(B, d, width)`` layout was 1.15x slower than fwd-fwd in 1-D."""
    batch, d = xs.shape
    h = xs
    dh = [jnp.broadcast_to(jnp.eye(d, dtype=xs.dtype)[i], (batch, d)) for i in range(d)]
    ddh = [jnp.zeros_like(xs) for _ in range(d)]
    for w, b in params[:-1]:
        t = jnp.tanh(h @ w + b)
        s = 1.0 - t * t
        dz, ddz = [v @ w for v in dh], [v @ w for v in ddh]
        h, dh, ddh = t, [s * v for v in dz], [s * a - 2.0 * t * s * v * v for a, v in zip(ddz, dz)]
    w, b = params[-1]
    n = (h @ w + b)[:, 0]
    grad_n = jnp.stack([(v @ w)[:, 0] for v in dh], 1)
    second_n = jnp.stack([(v @ w)[:, 0] for v in ddh], 1)
    g = xs * (1.0 - xs)                                       # per-axis factors of the envelope
    g_all = jnp.prod(g, axis=1)
    others = g_all[:, None] / jnp.where(g == 0, 1.0, g)       # product over the other axes
    grad_g, second_g = (1.0 - 2.0 * xs) * others, -2.0 * others
    return g_all * jnp.sum(second_n, 1) + 2.0 * jnp.sum(grad_g * grad_n, 1) + n * jnp.sum(second_g, 1)


def residual_loss(form: str) -> Callable:
    """``loss(params, xs (B, d)) = mean((-Δu - f)^2)``."""
    if form == "hand-taylor":
        return lambda params, xs: jnp.mean(jnp.square(-taylor_laplacian(params, xs) - source(xs)))
    lap = POINTWISE[form]

    def loss(params, xs):
        laps = jax.vmap(lambda x: lap(lambda y: solution(params, y))(x))(xs)
        return jnp.mean(jnp.square(-laps - source(xs)))
    return loss


def sampled(loss: Callable, n: int, batch: int | None, micro: int) -> Callable:
    """``step_loss_and_grad(params, points, key, step)``: full batch, or ``micro`` micro-batches of ``batch``
    drawn without replacement at each update (crux's point-stream semantics).

    The draw is the top ``micro * batch`` of ``n`` uniform numbers: a uniformly random subset in random
    order, like ``permutation(n)[:m]``, but without sorting all ``n`` keys (measured on 2 CPU cores:
    13-19 us against 210-230 us per draw at n = 1024, 0.6-1 ms against 44 ms at n = 65536).
    """
    value_and_grad = jax.value_and_grad(loss)
    if batch is None or batch >= n:
        return lambda params, points, key, step: value_and_grad(params, points)

    def draw(params, points, key, step):
        take = jax.lax.top_k(jax.random.uniform(jax.random.fold_in(key, step), (n,)), micro * batch)[1]
        batches = points[take].reshape(micro, batch, points.shape[1])
        if micro == 1:
            return value_and_grad(params, batches[0])

        def accumulate(total, xs):
            value, grads = value_and_grad(params, xs)
            return jax.tree.map(jnp.add, total, grads), value
        total, values = jax.lax.scan(accumulate, jax.tree.map(jnp.zeros_like, params), batches)
        return jnp.mean(values), jax.tree.map(lambda g: g / micro, total)
    return draw
