"""Tests for crux.optim.soap: Adam equivalence, the hand-computed SOAP step,
the speed-up on Kronecker-structured curvature, stacking and scan-ability."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from crux.optim import scale_by_soap, soap

F32_EPS = float(np.finfo(np.float32).eps)  # 1.19e-7


def _random_grads(seed, shapes, steps):
    rng = np.random.default_rng(seed)
    return [
        {k: jnp.asarray(rng.normal(size=s), jnp.float32) for k, s in shapes.items()}
        for _ in range(steps)
    ]


def _run(opt, grads):
    state = opt.init(grads[0])
    update = jax.jit(opt.update)
    out = []
    for g in grads:
        u, state = update(g, state)
        out.append(u)
    return out, state


def test_non_matrix_leaves_are_adam():
    """Vectors, scalars and matrices too big to precondition get exactly Adam.

    Both sides do the same ~10 float32 operations per step in the same order;
    allowing for different XLA fusion, each can add <= 1 ulp, so 10 steps stay
    within ~100 ulp ~ 1e-5 relative of updates that are O(1).
    """
    # Not the defaults, so mis-wired betas would show; eps = 1e-3 changes the
    # O(1) updates by ~1e-3, so its placement (outside the sqrt) is checked too.
    b1, b2, eps = 0.9, 0.99, 1e-3
    grads = _random_grads(0, {"v": (7,), "s": (), "big": (3, 20)}, steps=10)
    got, _ = _run(scale_by_soap(b1, b2, eps, max_precond_dim=2), grads)
    want, _ = _run(optax.scale_by_adam(b1, b2, eps), grads)
    for u_got, u_want in zip(got, want):
        for k in u_want:
            np.testing.assert_allclose(u_got[k], u_want[k], rtol=1e-5, atol=1e-6)


def _relative_gap(eigenvalues):
    """Smallest gap between sorted eigenvalue estimates, relative to the largest."""
    srt = np.sort(eigenvalues)[::-1]
    return np.min(-np.diff(srt)) / srt[0]


def _soap_reference(grads, b1, b2, eps, frequency, precondition_right):
    """SOAP on one matrix, written out in float64 numpy (the paper's algorithm).

    Also returns the relative eigen-gaps met on the way (the test's tolerance
    depends on them).
    """
    g0 = grads[0]
    m, n = g0.shape
    ll, rr = (1 - b2) * g0 @ g0.T, (1 - b2) * g0.T @ g0
    (ev_l, ql), (ev_r, qr) = np.linalg.eigh(ll), np.linalg.eigh(rr)
    ql, qr = ql[:, ::-1], (qr[:, ::-1] if precondition_right else np.eye(n))
    gaps = [_relative_gap(ev_l)] + ([_relative_gap(ev_r)] if precondition_right else [])
    mu, nu = np.zeros((m, n)), np.zeros((m, n))
    updates = [np.zeros((m, n))]
    for k, g in enumerate(grads[1:], start=1):
        def rot(x):
            return ql.T @ x @ qr
        mu = b1 * mu + (1 - b1) * g
        nu = b2 * nu + (1 - b2) * rot(g) ** 2
        m_hat, v_hat = rot(mu) / (1 - b1**k), nu / (1 - b2**k)
        updates.append(-(ql @ (m_hat / (np.sqrt(v_hat) + eps)) @ qr.T))
        ll = b2 * ll + (1 - b2) * g @ g.T
        rr = b2 * rr + (1 - b2) * g.T @ g
        if k % frequency == 0:
            sides = [(0, ll, ql)] + ([(1, rr, qr)] if precondition_right else [])
            new = []
            for axis, gg, q in sides:
                est = np.diag(q.T @ gg @ q)
                gaps.append(_relative_gap(est))
                order = np.argsort(-est)
                nu = np.take(nu, order, axis=axis)
                new.append(np.linalg.qr(gg @ q[:, order])[0])
            ql = new[0]
            qr = new[1] if precondition_right else qr
    return updates, gaps


def test_weight_decay_is_decoupled_and_scaled_by_the_learning_rate():
    """soap(lr, weight_decay=wd) steps by -lr * (SOAP's direction + wd * params), as AdamW does: with a zero
    gradient the direction is 0 (0 / (0 + eps)) and the step is -lr * wd * params, one float32 product each."""
    params = {"b": jnp.array([1.0, -2.0, 3.0])}
    opt = soap(0.1, weight_decay=0.01)
    updates, _ = opt.update({"b": jnp.zeros(3)}, opt.init(params), params)
    np.testing.assert_allclose(updates["b"], -0.1 * 0.01 * params["b"], rtol=4 * F32_EPS)


@pytest.mark.parametrize(("frequency", "max_precond_dim"), [(3, 10000), (1, 4)])
def test_matrix_step_matches_hand_computation(frequency, max_precond_dim):
    """A (4, 5) leaf follows the float64 algorithm: eigh at step 1 (zero update),
    rotated Adam afterwards, and sort + power/QR refreshes every 3 (catches an
    off-by-one) or every Adam step.  max_precond_dim=4 makes the right side the
    identity.  eps = 1e-2
    is large enough that its placement (outside the sqrt) is checked.

    Tolerance: float32 eigenvectors (and the sort/QR that follows) are accurate
    to ~eps32 / relative eigen-gap; the gaps are asserted >= 5e-3, so <= 2.4e-5.
    The rotations, moments and the O(1) Adam ratios m/sqrt(v) pass this on at
    the same order (seen: <= 7e-6 over 4 seeds), so atol = 2e-4.  A wrong basis,
    order, bias correction or moment transport moves these O(1) updates by far
    more.
    """
    b1, b2, eps = 0.9, 0.95, 1e-2  # b1 != b2, so the decays cannot be swapped unseen
    grads = [g["w"] for g in _random_grads(1, {"w": (4, 5)}, steps=8)]
    opt = soap(1.0, b1, b2, eps, precondition_frequency=frequency, max_precond_dim=max_precond_dim)
    got, _ = _run(opt, [{"w": g} for g in grads])
    want, gaps = _soap_reference(
        [np.asarray(g, np.float64) for g in grads], b1, b2, eps, frequency, max_precond_dim >= 5
    )
    assert min(gaps) > 5e-3  # property of the seed that the tolerance relies on

    np.testing.assert_array_equal(got[0]["w"], 0.0)
    for u_got, u_want in zip(got[1:], want[1:]):
        assert np.abs(u_want).max() > 0.5  # O(1) updates: atol is relative to them
        np.testing.assert_allclose(u_got["w"], u_want, rtol=0, atol=2e-4)


def test_beats_adam_on_kronecker_ill_conditioned_quadratic():
    """loss = ||A W B - C||^2 has Hessian (B B^T) kron (A^T A), condition 1e8 here.

    SOAP's factors recover that Kronecker eigenbasis, so it converges to the
    float32 floor (<~1e-7 of the initial loss), while Adam with the same betas
    (SOAP minus the rotation) stalls near 1e-4 at every learning rate of a grid
    (optax's default betas do worse still).  Over 4 seeds the smallest gap
    seen was ~400x, so asserting 100x is robust.
    """
    steps = 300
    rng = np.random.default_rng(0)

    def conditioned(n, cond):
        u, v = (np.linalg.qr(rng.normal(size=(n, n)))[0] for _ in range(2))
        return u @ np.diag(np.logspace(0, -np.log10(cond), n)) @ v

    a, b = conditioned(10, 100.0), conditioned(6, 100.0)
    c = a @ rng.normal(size=(10, 6)) @ b
    a, b, c = (jnp.asarray(x, jnp.float32) for x in (a, b, c))

    def loss(w):
        return jnp.sum((a @ w @ b - c) ** 2)

    def final_loss(make, lr):
        opt = make(optax.cosine_decay_schedule(lr, steps))

        def step(carry, _):
            w, state = carry
            u, state = opt.update(jax.grad(loss)(w), state, w)
            return (optax.apply_updates(w, u), state), None

        w0 = jnp.zeros((10, 6), jnp.float32)
        (w, _), _ = jax.lax.scan(step, (w0, opt.init(w0)), None, length=steps)
        return loss(w) / loss(w0)

    soap_loss = jax.jit(lambda: final_loss(soap, 0.3))()
    lrs = jnp.asarray([1e-2, 3e-2, 1e-1, 3e-1, 1.0])
    def adam(schedule):
        return optax.adam(schedule, b1=0.95, b2=0.95)

    best_adam = float(jax.jit(jax.vmap(lambda lr: final_loss(adam, lr)))(lrs).min())
    assert best_adam > 100 * float(soap_loss), (best_adam, float(soap_loss))


def test_stacked_leaf_is_independent_matrices():
    """A (3, 4, 5) leaf is three independent (4, 5) matrices (own L, R, Q each).

    frequency=2 over 7 steps covers eigh and three QR refreshes.  On CPU the
    results are bitwise equal; batched kernels elsewhere may round differently
    (~1e-7), amplified by the eigenvectors' ~1/gap, so rtol/atol = 1e-4 for O(1)
    updates.  Mixing matrices up (shared factors, wrong axis) gives O(1) errors.
    """
    grads = _random_grads(2, {"w": (3, 4, 5)}, steps=7)
    opt = scale_by_soap(precondition_frequency=2)
    stacked, stacked_state = _run(opt, grads)
    for i in range(3):
        single, single_state = _run(opt, [{"w": g["w"][i]} for g in grads])
        for u_stacked, u_single in zip(stacked, single):
            np.testing.assert_allclose(u_stacked["w"][i], u_single["w"], rtol=1e-4, atol=1e-4)
        for field in ("nu", "gg_left", "gg_right"):
            np.testing.assert_allclose(
                getattr(stacked_state, field)["w"][i], getattr(single_state, field)["w"],
                rtol=1e-4, atol=1e-6,
            )


def test_scan_matches_jitted_loop():
    """20 steps inside lax.scan equal a Python loop of the jitted update.

    The scanned and the standalone programs run the same float32 operations but
    XLA may fuse them differently (seen: 1-ulp differences); gradients are fed
    from a fixed sequence, so nothing amplifies these beyond the eigenvector
    sensitivity (~1/gap): rtol = 1e-5, atol = 1e-7 (1e-5 of the ~1e-2
    updates).  Mixed leaf kinds, a schedule, weight decay and frequency 3 cover
    every branch.
    """
    shapes = {"w": (4, 6), "stack": (2, 3, 5), "b": (6,)}
    grads = _random_grads(3, shapes, steps=20)
    params = {k: jnp.ones(s, jnp.float32) for k, s in shapes.items()}
    opt = soap(optax.exponential_decay(1e-2, 20, 0.1), weight_decay=1e-2, precondition_frequency=3)

    def step(carry, g):
        p, state = carry
        u, state = opt.update(g, state, p)
        return (optax.apply_updates(p, u), state), u

    stacked_grads = jax.tree.map(lambda *xs: jnp.stack(xs), *grads)
    (p_scan, _), u_scan = jax.jit(lambda c: jax.lax.scan(step, c, stacked_grads))(
        (params, opt.init(params))
    )

    jitted = jax.jit(step)
    carry = (params, opt.init(params))
    for t, g in enumerate(grads):
        carry, u = jitted(carry, g)
        for k in shapes:
            np.testing.assert_allclose(u_scan[k][t], u[k], rtol=1e-5, atol=1e-7)
    for k in shapes:
        np.testing.assert_allclose(p_scan[k], carry[0][k], rtol=1e-5, atol=1e-7)
