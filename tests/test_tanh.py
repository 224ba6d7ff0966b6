"""crux's tanh: float32-accurate where it replaces the device's (a TPU), jnp.tanh itself elsewhere."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import crux
import crux.tanh
from crux.taylor import forward_laplacian
from cruxlab.measure import function_accuracy

# Bounds from the arithmetic: P and Q by Horner (degrees 6 and 7 in s = x*x, every term positive, so each step
# adds at most one rounding of half an ulp to the relative error: 7 and 8 roundings), x*x, x*P, the division: about
# 18 half-ulp = 9 ulp, plus the continued fraction's 4.6e-9 (0.04 ulp). The derivatives 1 - y^2 and -2y(1 - y^2)
# are measured in ulp of 1, their scale in a network: 2|y| times y's error, plus their own roundings.
VALUE_ULP, FIRST_ULP, SECOND_ULP = 9, 2 * 9 + 2, 2 * (2 * 9 + 2) + 4
X = np.linspace(-12, 12, 48_001, dtype=np.float32)


def ulp_error(got, exact, floor=0.0):
    scale = np.maximum(np.abs(exact), max(floor, float(np.finfo(np.float32).tiny)))
    return np.abs(np.asarray(got, np.float64) - exact) / np.spacing(scale.astype(np.float32)).astype(np.float64)


def test_accurate_tanh_and_its_derivatives_are_float32_accurate():
    x64 = X.astype(np.float64)
    value = jax.jit(crux.tanh.accurate_tanh)(X)
    first = jax.jit(jax.vmap(jax.grad(crux.tanh.accurate_tanh)))(X)
    second = jax.jit(jax.vmap(jax.grad(jax.grad(crux.tanh.accurate_tanh))))(X)
    assert ulp_error(value, np.tanh(x64)).max() <= VALUE_ULP
    assert ulp_error(first, 1 / np.cosh(x64) ** 2, 1.0).max() <= FIRST_ULP
    assert ulp_error(second, -2 * np.tanh(x64) / np.cosh(x64) ** 2, 1.0).max() <= SECOND_ULP
    # odd, and +-1 (not NaN) far out
    np.testing.assert_array_equal(np.asarray(jax.jit(crux.tanh.accurate_tanh)(-X)), -np.asarray(value))
    assert np.abs(np.asarray(value)).max() == 1
    np.testing.assert_array_equal(np.asarray(crux.tanh.accurate_tanh(jnp.array([-1e30, 1e30, -np.inf, np.inf]))),
                                  [-1, 1, -1, 1])


def test_on_a_cpu_crux_tanh_is_jnp_tanh_to_the_bit():
    with jax.default_matmul_precision("highest"):
        np.testing.assert_array_equal(np.asarray(jax.jit(crux.tanh.tanh)(X)), np.asarray(jax.jit(jnp.tanh)(X)))


def _primitives(function, precision):
    """The primitives ``function`` traces to (through a new wrapper each time: no trace of it is reused)."""
    with jax.default_matmul_precision(precision):
        return {str(e.primitive) for e in jax.make_jaxpr(lambda x: function(x))(X).jaxpr.eqns}


def test_traced_for_a_tpu_the_accurate_tanh_replaces_the_devices_except_at_the_fast_precision(monkeypatch):
    monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
    assert "tanh" not in _primitives(crux.tanh.tanh, "highest")
    assert "tanh" not in _primitives(crux.tanh.tanh, "high")
    assert _primitives(crux.tanh.tanh, "default") == {"tanh"}


def test_taylor_mode_differentiates_the_accurate_tanh_as_tanh(monkeypatch):
    """A network's Laplacian through the accurate tanh: crux's Taylor mode takes it (no fallback) and gives
    what it gives through jnp.tanh, within the two tanhs' few ulp carried through two layers."""
    model = crux.mlp(2, 1, hidden=(16, 16))
    f = lambda x: model.apply(model.params, x)[0]
    points = np.random.default_rng(0).uniform(-1, 1, (64, 2)).astype(np.float32)
    with jax.default_matmul_precision("highest"):
        device = jax.jit(jax.vmap(forward_laplacian(f)))(points)
        monkeypatch.setattr(jax, "default_backend", lambda: "tpu")
        jax.clear_caches()  # the network's apply was traced for the CPU above: trace it again
        accurate = jax.jit(jax.vmap(forward_laplacian(f)))(points)
        assert "tanh" not in {str(e.primitive) for e in jax.make_jaxpr(f)(points[0]).jaxpr.eqns}
    scale = np.abs(np.asarray(device)).max()
    assert np.abs(np.asarray(accurate) - np.asarray(device)).max() <= 64 * np.finfo(np.float32).eps * scale
    assert not np.array_equal(np.asarray(accurate), np.asarray(device))  # it did take the other path
    jax.clear_caches()  # nor is the accurate trace kept for the tests after this one


def test_function_accuracy_counts_ulp_of_the_exact_value_or_of_the_floor():
    one_up = np.nextafter(np.float32(1), np.float32(2))
    assert function_accuracy.ulp_errors(np.array([one_up]), np.array([1.0])) == pytest.approx([1.0])
    # 1e-3 off an exact value of 1e-8: 1e-3 in ulp of 1 (2**-23 each) with a floor of 1
    assert function_accuracy.ulp_errors(np.array([1e-3 + 1e-8], np.float32), np.array([1e-8]), 1.0) == \
        pytest.approx([1e-3 / 2 ** -23], rel=1e-4)
    report = function_accuracy.probe(jax.devices("cpu")[0], 2001)
    assert report["crux's accurate tanh"]["max_ulp"] <= VALUE_ULP
    # a float32 sum of 256 products is off by at most about 256 eps of the sum of their sizes
    assert report["matmul 256 (highest)"]["max_relative"] < 256 * np.finfo(np.float32).eps
