"""SOAP: Adam run in the eigenbasis of Shampoo's preconditioner.

Vyas et al. 2024, "SOAP: Improving and Stabilizing Shampoo using Adam"
(arXiv:2409.11321), written as an optax ``GradientTransformation``.

For a weight matrix ``W`` (m, n) with gradient ``G`` SOAP keeps Shampoo's two
Kronecker factors ``L = EMA(G G^T)`` and ``R = EMA(G^T G)`` and their
eigenbases ``Q_L``, ``Q_R``.  Adam is then run on the rotated gradient
``Q_L^T G Q_R``, where the loss curvature of a Kronecker-structured problem is
(close to) diagonal, so Adam's per-coordinate step sizes become a good
preconditioner.  Leaves that are not matrices get plain Adam.

Choices that are not fixed by the paper's pseudo-code (they follow the
authors' reference implementation, github.com/nikhilvyas/SOAP):

* Step 1 of a preconditioned matrix returns a ZERO update: it only seeds
  ``L``/``R`` and computes ``Q_L``/``Q_R`` by ``eigh``.  Using the eigenbasis of
  ``G_1`` for ``G_1`` itself is numerically meaningless: ``Q_L^T G_1 Q_R`` is
  diagonal in exact arithmetic, its off-diagonal entries are float32
  round-off (~1e-7 |G|), and Adam normalises that round-off to +-1, i.e. a
  random-sign update.  Adam's step counter (bias correction) therefore starts
  at step 2 for these leaves.  Vectors/scalars, and matrices with both sides
  above ``max_precond_dim``, have nothing to seed and take an Adam step at
  step 1 (exactly ``optax.scale_by_adam``).
* The Adam step at step t rotates ``G_t`` with bases built from
  ``G_1..G_{t-1}``; ``G_t`` enters ``L``/``R`` only for later bases, so a basis
  never contains the gradient it rotates.
* Later basis refreshes (every ``precondition_frequency`` Adam steps) use one
  power-iteration step plus QR, ``Q <- qr(L Q)``, as in the paper: it is
  cheaper than ``eigh`` on accelerators, and, being warm-started from the old
  basis, it keeps each column close to its predecessor, so the rotated second
  moment stays attached to (nearly) the same direction.  ``eigh`` would be free
  to reorder or arbitrarily rotate near-degenerate eigenvectors, which would
  invalidate the second moment.
* Before the QR the columns of ``Q`` are sorted by their estimated eigenvalues
  ``diag(Q^T L Q)`` (descending; QR then orthogonalises the dominant
  directions first) and the rotated second moment is permuted the same way.
  It is not otherwise re-projected, as in the paper: the basis moves slowly.
  The first moment lives in the original space, so it needs no transport.
* All rotations use ``Precision.HIGHEST`` so that TF32 matmuls on GPUs do not
  degrade the eigenbasis (PINN losses are often driven to 1e-6 and below).
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax
from jax import lax

_HIGHEST = lax.Precision.HIGHEST


class ScaleBySoapState(NamedTuple):
    """State of ``scale_by_soap``; every field but ``count`` mirrors the params.

    Kronecker factors and bases are ``None`` for leaves (or sides) that are not
    preconditioned; for stacked leaves (ndim > 2) they carry the leading axes.
    """

    count: jax.Array  # calls of update so far (int32 scalar)
    mu: optax.Updates  # Adam first moment, original coordinates
    nu: optax.Updates  # Adam second moment, rotated coordinates for matrices
    gg_left: optax.Updates  # EMA of G G^T, shape (..., m, m)
    gg_right: optax.Updates  # EMA of G^T G, shape (..., n, n)
    q_left: optax.Updates  # eigenbasis of gg_left, columns by descending eigenvalue
    q_right: optax.Updates  # eigenbasis of gg_right


def _mm(a: jax.Array, b: jax.Array) -> jax.Array:
    """Full-float32 matmul (no TF32), see module docstring."""
    return jnp.matmul(a, b, precision=_HIGHEST)


def _rotate(x: jax.Array, ql: jax.Array | None, qr: jax.Array | None) -> jax.Array:
    """Original coordinates -> eigenbasis: ``Q_L^T x Q_R`` (identity for None)."""
    if ql is not None:
        x = _mm(ql.T, x)
    if qr is not None:
        x = _mm(x, qr)
    return x


def _unrotate(x: jax.Array, ql: jax.Array | None, qr: jax.Array | None) -> jax.Array:
    """Eigenbasis -> original coordinates: ``Q_L x Q_R^T``."""
    if ql is not None:
        x = _mm(ql, x)
    if qr is not None:
        x = _mm(x, qr.T)
    return x


def _eigenbasis(gg: jax.Array | None) -> jax.Array | None:
    """Eigenvectors of a symmetric factor, columns by descending eigenvalue."""
    if gg is None:
        return None
    return jnp.linalg.eigh(gg)[1][:, ::-1]


def _power_qr(
    gg: jax.Array | None, q: jax.Array | None, nu: jax.Array, axis: int
) -> tuple[jax.Array | None, jax.Array]:
    """One warm-started power-iteration step; permutes ``nu`` along ``axis`` to match."""
    if gg is None:
        return q, nu
    order = jnp.argsort(-jnp.diagonal(_mm(q.T, _mm(gg, q))))
    q = q[:, order]
    nu = jnp.take(nu, order, axis=axis)
    return jnp.linalg.qr(_mm(gg, q))[0], nu


def _adam(g, mu, nu, count_inc, b1, b2, eps):
    """Plain Adam, same arithmetic as ``optax.scale_by_adam``."""
    mu = (1 - b1) * g + b1 * mu
    nu = (1 - b2) * (g**2) + b2 * nu
    mu_hat = mu / (1 - b1**count_inc).astype(mu.dtype)
    nu_hat = nu / (1 - b2**count_inc).astype(nu.dtype)
    return mu_hat / (jnp.sqrt(nu_hat) + eps), mu, nu


def _soap_matrix(g, mu, nu, ll, rr, ql, qr, count, b1, b2, eps, frequency):
    """SOAP on one (m, n) matrix; ``count`` is the number of earlier calls."""

    def ema(gg, outer):
        return None if gg is None else (1 - b2) * outer + b2 * gg

    # L, R include the current gradient; the Adam step below uses the old bases.
    ll1, rr1 = ema(ll, _mm(g, g.T)), ema(rr, _mm(g.T, g))

    def first(_):
        return jnp.zeros_like(g), mu, nu, _eigenbasis(ll1), _eigenbasis(rr1)

    def later(_):
        # Adam step index: step 1 only seeded the preconditioner.
        k = count
        g_rot = _rotate(g, ql, qr)
        mu1 = (1 - b1) * g + b1 * mu
        nu1 = (1 - b2) * (g_rot**2) + b2 * nu
        mu_hat = _rotate(mu1, ql, qr) / (1 - b1**k).astype(g.dtype)
        nu_hat = nu1 / (1 - b2**k).astype(g.dtype)
        update = _unrotate(mu_hat / (jnp.sqrt(nu_hat) + eps), ql, qr)

        def refresh(operand):
            ql0, qr0, nu0 = operand
            ql1, nu0 = _power_qr(ll1, ql0, nu0, axis=0)
            qr1, nu0 = _power_qr(rr1, qr0, nu0, axis=1)
            return ql1, qr1, nu0

        ql1, qr1, nu1 = lax.cond(
            k % frequency == 0, refresh, lambda operand: operand, (ql, qr, nu1)
        )
        return update, mu1, nu1, ql1, qr1

    update, mu1, nu1, ql1, qr1 = lax.cond(count == 0, first, later, None)
    return update, mu1, nu1, ll1, rr1, ql1, qr1


def scale_by_soap(
    b1: float = 0.95,
    b2: float = 0.95,
    eps: float = 1e-8,
    precondition_frequency: int = 10,
    max_precond_dim: int = 10000,
) -> optax.GradientTransformation:
    """Rescale updates by SOAP (Adam in Shampoo's eigenbasis); see module docstring.

    Matrices (ndim == 2) are preconditioned on each side whose size is
    ``<= max_precond_dim`` (identity otherwise, bounding the O(d^2) memory and
    O(d^3) refresh cost).  Leaves with ndim > 2 are stacks of independent
    matrices over their leading axes (the library stores stacked MLP layers as
    (n_layers, d_in, d_out)).  ndim < 2 leaves get plain Adam.  The factors are
    updated every step, their eigenbases every ``precondition_frequency`` Adam
    steps. The first step of a preconditioned matrix only builds its basis and
    moves nothing.

    Args:
        b1: the decay of Adam's first moment.
        b2: the decay of Adam's second moment and of the Kronecker factors, as in the paper's default.
        eps: added to the second moment's square root.
        precondition_frequency: the steps between two refreshes of the eigenbases.
        max_precond_dim: the largest side that is preconditioned.

    Returns:
        An optax transform whose updates are the preconditioned direction (not yet scaled or negated).
    """

    def sides(p):
        """Sizes of the preconditioned (left, right) sides; None = identity."""
        if p.ndim < 2:
            return None, None
        m, n = p.shape[-2:]
        return (m if m <= max_precond_dim else None), (n if n <= max_precond_dim else None)

    def factor(p, dim):
        return None if dim is None else jnp.zeros(p.shape[:-2] + (dim, dim), p.dtype)

    def init_fn(params):
        tree_map = jax.tree_util.tree_map
        # Bases start as zeros: they are first read after eigh has set them at step 1.
        return ScaleBySoapState(
            count=jnp.zeros([], jnp.int32),
            mu=optax.tree.zeros_like(params),
            nu=optax.tree.zeros_like(params),
            gg_left=tree_map(lambda p: factor(p, sides(p)[0]), params),
            gg_right=tree_map(lambda p: factor(p, sides(p)[1]), params),
            q_left=tree_map(lambda p: factor(p, sides(p)[0]), params),
            q_right=tree_map(lambda p: factor(p, sides(p)[1]), params),
        )

    def update_fn(updates, state, params=None):
        del params
        count = state.count
        count_inc = optax.safe_increment(count)

        def per_leaf(g, mu, nu, ll, rr, ql, qr):
            if ll is None and rr is None:
                update, mu, nu = _adam(g, mu, nu, count_inc, b1, b2, eps)
                return update, mu, nu, ll, rr, ql, qr

            def one(*args):
                return _soap_matrix(*args, count, b1, b2, eps, precondition_frequency)

            if g.ndim == 2:
                return one(g, mu, nu, ll, rr, ql, qr)
            lead = g.shape[:-2]
            flat = jax.tree_util.tree_map(
                lambda x: x.reshape((-1,) + x.shape[len(lead):]), (g, mu, nu, ll, rr, ql, qr)
            )
            out = jax.vmap(one)(*flat)
            return jax.tree_util.tree_map(lambda x: x.reshape(lead + x.shape[1:]), out)

        results = jax.tree_util.tree_map(
            per_leaf, updates, state.mu, state.nu,
            state.gg_left, state.gg_right, state.q_left, state.q_right,
        )
        # Unzip the per-leaf 7-tuples into 7 trees (entries may be None, so no tree_transpose).
        treedef = jax.tree_util.tree_structure(updates)
        per_leaf_results = treedef.flatten_up_to(results)
        new_updates, mu, nu, ll, rr, ql, qr = (
            treedef.unflatten([r[i] for r in per_leaf_results]) for i in range(7)
        )
        return new_updates, ScaleBySoapState(count_inc, mu, nu, ll, rr, ql, qr)

    return optax.GradientTransformation(init_fn, update_fn)


def soap(
    learning_rate: float | optax.Schedule,
    b1: float = 0.95,
    b2: float = 0.95,
    eps: float = 1e-8,
    weight_decay: float = 0.0,
    precondition_frequency: int = 10,
    max_precond_dim: int = 10000,
) -> optax.GradientTransformation:
    """SOAP (Vyas et al. 2024, arXiv:2409.11321) with decoupled (AdamW-style) weight decay and a learning rate.

    Updates follow the optax convention (add them to the params), so
    ``soap(1)`` is minus the preconditioned direction and can be scaled by a
    schedule afterwards: ``model.optimizer(soap(1)).scale(crux.lrs(1e-5))``.
    Defaults (b1 = b2 = 0.95, frequency 10) are the paper's language-model
    settings.

    Args:
        learning_rate: a rate or an optax schedule.
        b1, b2, eps, precondition_frequency, max_precond_dim: as :func:`scale_by_soap` takes them.
        weight_decay: the decoupled weight decay (0: none, and the transform needs no params).

    Returns:
        An optax transform.

    References:
        Vyas et al., "SOAP: Improving and Stabilizing Shampoo using Adam", 2024, arXiv:2409.11321.
    """
    # Without weight decay, leave it out so update() also works without params.
    return optax.chain(
        scale_by_soap(b1, b2, eps, precondition_frequency, max_precond_dim),
        optax.add_decayed_weights(weight_decay) if weight_decay else optax.identity(),
        optax.scale_by_learning_rate(learning_rate),
    )
