"""Taylor-mode Laplacian: the same values as forward-over-forward, and the fallback when a rule is missing."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend.core import primitives as P

import crux
from crux.derivatives import _forward_over_forward
from crux import taylor
from crux.taylor import Unsupported, _compiled, forward_laplacian
from crux_testing import EPS32

# Both sides sum the same second-derivative terms in float32, in another order: the difference is a few
# ulp of the largest value (measured: up to 6 ulp); 32 ulp leaves a 5x margin and still catches any wrong
# factor or missing term, which moves the result by O(1) of it.
ULPS = 32


# Compile time dominates these tests: XLA's cheapest optimisation level compiles 1.4x faster than the
# default and evaluates both formulations alike.
QUICK = {"xla_backend_optimization_level": 0, "xla_llvm_disable_expensive_passes": True}


def quick(f):
    return jax.jit(f, compiler_options=QUICK)


def points(d: int, n: int = 8) -> np.ndarray:
    return np.random.default_rng(d).uniform(0.05, 0.95, (n, d)).astype(np.float32)


def assert_round_off(got, expected) -> None:
    expected = np.asarray(expected)
    scale = max(float(np.max(np.abs(expected))), EPS32)
    np.testing.assert_allclose(got, expected, rtol=ULPS * EPS32, atol=ULPS * EPS32 * scale)


def assert_same_as_forward_over_forward(*cases) -> None:
    """``cases``: (f, points) pairs, evaluated in one program."""
    def both():
        return [(jax.vmap(forward_laplacian(f))(xs), jax.vmap(_forward_over_forward(f))(xs)) for f, xs in cases]
    for taylor, reference in quick(both)():
        assert_round_off(taylor, reference)


def closed_form(x):
    return jnp.tanh(x[0]) * x[1] ** 2 + jnp.sqrt(1 + x @ x) + jnp.exp(x[2]) / (1 + x[1] ** 2)


def closed_form_laplacian(x: np.ndarray) -> float:
    t, r2 = np.tanh(x[0]), x @ x
    r = np.sqrt(1 + r2)
    return (-2 * t * (1 - t * t) * x[1] ** 2 + 2 * t + 3 / r - r2 / r ** 3
            + np.exp(x[2]) / (1 + x[1] ** 2) + np.exp(x[2]) * (6 * x[1] ** 2 - 2) / (1 + x[1] ** 2) ** 3)


def test_taylor_laplacian_equals_the_closed_form_and_is_what_crux_laplacian_runs():
    x = jnp.array([0.3, -0.8, 0.5])
    expected = closed_form_laplacian(np.asarray(x, np.float64))
    np.testing.assert_allclose(forward_laplacian(closed_form)(x), expected, rtol=ULPS * EPS32)
    assert str(jax.make_jaxpr(crux.laplacian(closed_form))(x)) == str(jax.make_jaxpr(forward_laplacian(closed_form))(x))


# Each activation in 1, 2 and 3 dimensions, once as one layer, once as three (the last two stacked and
# scanned), once three checkpointed; across activations every dimension meets every structure.
STRUCTURES = [((8,), False), ((8, 8, 8), False), ((8, 8, 8), True)]


@pytest.mark.parametrize("rotation, activation", list(enumerate(["tanh", "sin", "gelu", "silu"])))
def test_mlp_laplacian_equals_forward_over_forward(rotation, activation):
    cases = []
    for i, (hidden, checkpointed) in enumerate(STRUCTURES):
        d = 1 + (i + rotation) % 3
        u = crux.mlp(d, 1, hidden, activation, seed=d)
        cases.append((lambda x, u=u, c=checkpointed: u.pointwise(u.params, x, "layers" if c else "plain"), points(d)))
    assert_same_as_forward_over_forward(*cases)


def test_hard_boundary_and_several_networks():
    u, v = crux.mlp(2, 1, (8, 8, 8)), crux.mlp(2, 2, (8,), "silu", seed=1)

    def f(x):
        a, b = v.pointwise(v.params, x)
        return x[0] * (1 - x[0]) * x[1] * (1 - x[1]) * u.pointwise(u.params, x) + a * b / (1 + a ** 2)
    assert_same_as_forward_over_forward((f, points(2)))


@pytest.mark.parametrize("f", [
    lambda x: jnp.stack([jnp.sin(x[0]) * x[1], x[0] ** 3]),  # vector output: one Laplacian per component
    lambda x: jnp.concatenate(jnp.split(x ** 1.5, 2)[::-1]) @ jnp.cos(x) + jnp.log1p(jnp.linalg.norm(x))
    + jnp.sum(jnp.pad(x, 1, constant_values=0.5) ** 3 * jnp.arange(4)),
    lambda x: jnp.where(x > 0.5, jnp.abs(x - 0.7) ** 3, jnp.maximum(x, 0.3) ** 2).sum() + x[jnp.argmax(x)] ** 3
    + jnp.minimum(jnp.sin(x), jnp.sin(x)).sum() ** 2,  # a tie everywhere: half the derivative from each side
    lambda x: jax.lax.scan(lambda c, a: (c * jnp.sin(a) + jnp.exp(-c), c), x[0], x)[0] + jnp.sinh(x).sum() ** 2,
    lambda x: jnp.clip(x, 0.2, 0.8).sum() ** 2 + jax.nn.softplus(x * x[::-1]).sum() + jax.nn.sigmoid(x[0] * x[1])
    + 2.0 ** x[1] / jnp.arctan(x[0]),
    lambda x: jnp.ones(3),  # no dependence on x
], ids=["vector", "structure", "piecewise", "scan-over-x", "elementwise", "constant"])
def test_primitive_rules_equal_forward_over_forward(f):
    assert_same_as_forward_over_forward((f, points(2)))


# One jnp function per primitive that crux.taylor has a one-operand rule for.
UNARY = {P.sin_p: jnp.sin, P.cos_p: jnp.cos, P.sinh_p: jnp.sinh, P.cosh_p: jnp.cosh, P.atan_p: jnp.arctan,
         P.tanh_p: jnp.tanh, P.logistic_p: jax.nn.sigmoid, P.exp_p: jnp.exp, P.expm1_p: jnp.expm1, P.log_p: jnp.log,
         P.log1p_p: jnp.log1p, P.sqrt_p: jnp.sqrt, P.rsqrt_p: jax.lax.rsqrt, P.square_p: jnp.square,
         P.integer_pow_p: lambda a: a ** 3, P.erf_p: jax.scipy.special.erf, P.erfc_p: jax.scipy.special.erfc,
         P.abs_p: jnp.abs}


def test_every_one_operand_rule_equals_forward_over_forward():
    assert set(UNARY) == set(crux.taylor._DERIVATIVES)  # a new rule gets a case here

    def inner(x):  # in (0.3, 1.5) on the points, inside every rule's domain, curved in both coordinates
        return 0.3 + x[0] * x[1] + 0.5 * x[1] ** 2
    assert_same_as_forward_over_forward(*[(lambda x, op=op: op(inner(x)), points(2)) for op in UNARY.values()])


def test_parameter_gradient_equals_forward_over_forward():
    u = crux.mlp(2, 1, (8, 8, 8))
    xs = points(2, 16)

    def loss(params, lap):
        g = lambda x: x[0] * (1 - x[0]) * u.pointwise(params, x)
        return jnp.mean(jnp.square(-jax.vmap(lap(g))(xs) - 1.0))
    grads = quick(lambda: [jax.grad(loss)(u.params, lap) for lap in (crux.laplacian, _forward_over_forward)])()
    flat = [np.concatenate([np.ravel(leaf) for leaf in jax.tree.leaves(g)]) for g in grads]
    assert_round_off(*flat)


def test_weights_carry_no_derivatives():
    """Per layer one product for the value, one per input axis, one for L: none for a weight's derivative."""
    d, u = 2, crux.mlp(2, 1, (8,))
    jaxpr = jax.make_jaxpr(forward_laplacian(lambda x: u.pointwise(u.params, x)))(jnp.ones(d))
    assert sum(eqn.primitive is P.dot_general_p for eqn in jaxpr.eqns) == 2 * (d + 2)


def test_custom_derivative_rules_are_respected():
    """jnp.sinc selects 1 at 0 and carries its derivatives in a custom rule: sinc''(0) = -pi^2 / 3."""
    np.testing.assert_allclose(forward_laplacian(lambda x: jnp.sinc(x[0]))(jnp.zeros(1)), -np.pi ** 2 / 3,
                               rtol=ULPS * EPS32)


def _count(jaxpr, primitive) -> int:
    """Equations of ``primitive`` in a jaxpr and the jaxprs it calls."""
    total = 0
    for eqn in jaxpr.eqns:
        total += eqn.primitive is primitive
        inner = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
        total += _count(getattr(inner, "jaxpr", inner), primitive) if inner is not None else 0
    return total


@pytest.mark.parametrize("d", [1, 3])
def test_an_elementwise_custom_rule_is_evaluated_once_per_layer_whatever_the_dimension(d):
    """crux's accurate tanh (one division, its derivative a custom rule) in a 3-D network of two layers: its value
    and its first and second derivatives, at most three evaluations a layer, not two more per input axis; the Laplacian
    that of forward over forward."""
    from crux.tanh import accurate_tanh
    layers = [crux.mlp(d, 8, (), seed=1).params, crux.mlp(8, 1, (), seed=2).params]
    u = crux.mlp(d, 1, (8,), seed=1)

    def f(x):
        h = accurate_tanh(u.apply(layers[0], x))
        return u.apply(layers[1], h)[0]
    jaxpr = jax.make_jaxpr(forward_laplacian(f))(jnp.ones(d)).jaxpr
    assert _count(jaxpr, P.div_p) <= 3
    assert_same_as_forward_over_forward((f, points(d)))


def test_unsupported_primitive_falls_back_to_forward_over_forward():
    f = lambda x: jnp.sum(jnp.sort(x) ** 3)  # sum_i x_i^3: Laplacian 6 sum_i x_i
    x = jnp.array([0.4, -0.2, 0.9])
    with pytest.raises(Unsupported, match="sort"):
        forward_laplacian(f)(x)
    np.testing.assert_allclose(crux.laplacian(f)(x), 6 * np.sum(np.asarray(x)), rtol=ULPS * EPS32)
    branches = lambda x: x[0] ** 3 if x[0] > 0 else -x[0] ** 3  # runs on a concrete x only, as before
    np.testing.assert_allclose(crux.laplacian(branches)(jnp.array([0.5])), 3.0, rtol=ULPS * EPS32)


def test_a_second_trace_reuses_the_transformed_operations():
    """Each operation is bound through a cached, inlined jit: tracing the parameter gradient of a Laplacian again
    (a sweep's next job) builds no new bound operation, and the program holds no nested calls."""
    u = crux.mlp(1, 1, (8, 8))

    def trace():  # fresh closures, as a new job has
        def loss(p):
            return jnp.mean(jax.vmap(forward_laplacian(lambda x: u.pointwise(p, x)))(jnp.ones((4, 1))) ** 2)
        return jax.make_jaxpr(jax.grad(loss))(u.params)
    first = trace()
    built = _compiled.cache_info().misses
    second = trace()
    assert _compiled.cache_info().misses == built
    assert str(second) == str(first)
    assert not [eqn for eqn in second.eqns if eqn.primitive is P.jit_p]


def test_a_function_traced_again_takes_the_interpreted_trace_and_gives_the_same_program(monkeypatch):
    """A sweep's next job traces the same network afresh (new closures): the interpreter does not run again, and the
    program is the one that interpreting the function anew gives."""
    u = crux.mlp(1, 1, (8, 8), activation="sin")

    def lowered():
        def loss(p):
            return jnp.mean(jax.vmap(forward_laplacian(lambda x: u.pointwise(p, x)))(jnp.ones((4, 1))) ** 2)
        return jax.jit(jax.grad(loss)).lower(u.params).as_text(debug_info=False)
    ran = []
    evaluate = taylor._evaluate
    monkeypatch.setattr(taylor, "_evaluate", lambda *args: ran.append(args) or evaluate(*args))
    first = lowered()
    interpreted = len(ran)
    assert lowered() == first
    assert len(ran) == interpreted
    monkeypatch.setattr(taylor, "_custom_rules", lambda jaxpr: True)  # shared with nothing: interpreted anew
    assert lowered() == first
    assert len(ran) > interpreted


def test_functions_that_differ_only_in_a_custom_rule_are_each_interpreted_for_itself():
    """The program key leaves a custom differentiation rule out, and the Laplacian is built from it: sin(w x)
    whose rule says scale * cos has the Laplacian -scale * sin(w x) at w = 1, for each scale in turn."""
    def sine(scale):
        f = jax.custom_jvp(jnp.sin)
        f.defjvp(lambda primals, tangents: (jnp.sin(primals[0]), scale * jnp.cos(primals[0]) * tangents[0]))
        return f

    def laplacian(f):  # the weight traced, as a network's parameters are
        return jax.jit(lambda w, x: forward_laplacian(lambda y: f(w * y[0]))(x))(np.float32(1), np.float32([0.3]))
    for scale in (1.0, 2.0):
        np.testing.assert_allclose(laplacian(sine(scale)), -scale * np.sin(np.float32(0.3)), rtol=ULPS * EPS32)
