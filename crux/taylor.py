"""Forward Laplacian ("Taylor mode"): the Laplacian of a pointwise function in one forward pass.

``f`` is traced to a jaxpr and re-evaluated on triples (value, J, L): ``J`` holds the first
derivatives along each input axis (one array per axis, shaped like the value), ``L`` is the sum of
the second derivatives. Values that do not depend on ``x`` (the network weights) stay plain arrays, so
no derivative work is spent on them. Forward-over-forward instead carries a duplicate first-derivative
stream, whose adjoint the reverse pass over the loss computes too, so Taylor mode's lead grows with the
input dimension; so does its compile time, as each axis has its own set of operations. The rules below
stay lean: a generic forward Laplacian was no faster than forward-over-forward (figures in
docs/BENCHMARK.md, "Measurements behind the library's design").

Anything without a rule raises :class:`Unsupported` while tracing, and ``crux.laplacian`` then
uses forward-over-forward for the whole call.
"""
from __future__ import annotations

import functools
import math
import threading
from collections import OrderedDict
from typing import Any, Callable, NamedTuple

import jax
import jax.extend.core as jex
import jax.numpy as jnp
from jax.extend.core import primitives as P

from crux import executables


class Unsupported(Exception):
    """The function holds something the Taylor interpreter has no rule for."""


class Taylor(NamedTuple):
    """A value depending on ``x``: ``jac[i]`` is its derivative along axis i, ``lap`` the summed second ones.

    One array per axis rather than one stacked ``(d, ...)`` array, which trained slower."""
    value: jax.Array
    jac: tuple[jax.Array, ...]
    lap: jax.Array


def forward_laplacian(f: Callable[[jax.Array], jax.Array]) -> Callable[[jax.Array], jax.Array]:
    """The Laplacian in Taylor mode: value, first derivatives and the summed second derivative pushed through
    ``f`` in one forward pass.

    Args:
        f: a pointwise function ``(d,) -> array``; the Laplacian of each component for a non-scalar one.

    Returns:
        The pointwise function of the Laplacian, of ``f``'s shape.

    Raises:
        Unsupported: (when traced) the point is not a float vector, ``f`` needs the point's value to trace, does
            not return one float array, or uses a primitive without a Taylor rule; :func:`crux.laplacian` then
            falls back to forward over forward.
    """
    def lap(x):
        x = jnp.asarray(x)
        if x.ndim != 1 or not jnp.issubdtype(x.dtype, jnp.floating):
            raise Unsupported(f"the point must be a float vector (d,), got {x.dtype}{list(x.shape)}")
        try:
            closed, shape = jax.make_jaxpr(f, return_shape=True)(jax.ShapeDtypeStruct(x.shape, x.dtype))
        except jax.errors.JAXTypeError as error:  # Python control flow on x: only a concrete x can run f
            raise Unsupported(f"f needs the value of x to trace: {type(error).__name__}") from error
        if not isinstance(shape, jax.ShapeDtypeStruct) or not jnp.issubdtype(shape.dtype, jnp.inexact):
            raise Unsupported(f"f must return one float array, got {shape}")
        return _interpreted(closed, shape)(closed.consts, x)
    return lap


def _interpreted(closed: jex.ClosedJaxpr, shape: jax.ShapeDtypeStruct) -> Callable[[list[Any], jax.Array], jax.Array]:
    """``(consts, x) -> the Laplacian at x`` of the function ``closed`` holds, its constants passed in; an inlined
    ``jax.jit`` shared by every function of the same program (:func:`crux.executables.program_key`).

    JAX keeps a jit's trace, and the vmap and differentiation of that trace, so a process's later trace of the same
    function (the next constraint on the network, a sweep's next job) takes them instead of interpreting the
    function again under the caller's transformations: that was a third of the time spent tracing an update. The
    program is the same (the jit is inlined). Shared only where the key says everything: a function with a custom
    differentiation rule (which the key leaves out) or a constant that is not a traced value (the parameters are)
    is interpreted for itself.
    """
    jaxpr = closed.jaxpr

    def laplacian(consts, x):
        seed = Taylor(x, tuple(jnp.eye(x.shape[0], dtype=x.dtype)), jnp.zeros_like(x))
        out, = _evaluate(jaxpr, consts, [seed])
        return out.lap if isinstance(out, Taylor) else jnp.zeros(shape.shape, shape.dtype)
    held = getattr(jaxpr, "consts", ())  # JAX >= 0.11: a Jaxpr may hold constants of its own
    if _custom_rules(jaxpr) or held or not all(isinstance(c, jax.core.Tracer) for c in closed.consts):
        return laplacian
    key = (executables.program_key(jaxpr), shape)
    with _LOCK:
        shared = _INTERPRETED.get(key)
        if shared is None:
            shared = _INTERPRETED[key] = jax.jit(laplacian, inline=True)
            if len(_INTERPRETED) > INTERPRETED:
                _INTERPRETED.popitem(last=False)
        _INTERPRETED.move_to_end(key)
    return shared


INTERPRETED = 64  # functions whose interpreted trace is kept, the least recently used dropped first
_INTERPRETED: OrderedDict[tuple, Callable] = OrderedDict()
_LOCK = threading.Lock()  # solvers in threads (an unrolled loop compiling beside the plain one) trace at once


def _custom_rules(jaxpr: jex.Jaxpr) -> bool:
    """Whether ``jaxpr`` (or one nested in it) calls a function with a custom differentiation rule."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in executables.LOWERED_FROM_CALL_JAXPR:
            return True
        for value in eqn.params.values():
            for inner in value if isinstance(value, (tuple, list)) else (value,):
                inner = inner.jaxpr if isinstance(inner, jex.ClosedJaxpr) else inner
                if isinstance(inner, jex.Jaxpr) and _custom_rules(inner):
                    return True
    return False


# -- the interpreter ---------------------------------------------------------------------------------
def _evaluate(jaxpr: jex.Jaxpr, consts: list[Any], args: list[Any]) -> list[Any]:
    env: dict[jex.Var, Any] = dict(zip(jaxpr.constvars, consts))
    env.update(zip(jaxpr.invars, args))
    read = lambda v: v.val if isinstance(v, jex.Literal) else env[v]
    for eqn in jaxpr.eqns:
        inputs = [read(v) for v in eqn.invars]
        prim = eqn.primitive
        if any(isinstance(a, Taylor) for a in inputs) and any(_inexact(v.aval.dtype) for v in eqn.outvars):
            if any(jnp.issubdtype(v.aval.dtype, jnp.complexfloating) for v in eqn.outvars):
                raise Unsupported(f"complex values ({prim}) have no Taylor rules")
            rule = _RULES.get(prim) or _RULES_BY_NAME.get(prim.name)
            if rule is None:
                raise Unsupported(f"no Taylor rule for the primitive '{prim}'")
            outputs = _transformed_once(rule, prim, eqn.params)(*inputs)
        else:  # nothing depends on x, or the results are integers: plain evaluation
            with eqn.ctx.manager:
                outputs = _transformed_once(_plain, prim, prim.get_bind_params(eqn.params))(
                    *[_value(a) for a in inputs])
            outputs = outputs if prim.multiple_results else [outputs]
        env.update(zip(eqn.outvars, outputs))
    return [read(v) for v in jaxpr.outvars]


def _transformed_once(rule: Callable, prim, params: dict) -> Callable[..., Any]:
    """``rule(prim, params, inputs)`` as a function of the inputs: an inlined ``jax.jit`` of it, one per (rule,
    primitive, params), where the params are hashable and hold no jaxpr (those rules interpret one).

    The interpreter runs under the caller's vmap and value_and_grad, whose rules act on every operation
    bound bare, and those rules were most of the time spent tracing an update. A jit's transformed jaxpr
    is cached by the inputs' shapes and structure, so an operation repeated in layers of equal width, and
    in the next trace of the process (a sweep's next job), is transformed once. The program is unchanged
    (the jit is inlined; same StableHLO): only the trace gets shorter.
    """
    key = tuple(sorted(params.items()))
    try:
        hash(key)
    except TypeError:
        key = None
    if key is None or any(isinstance(v, (jex.Jaxpr, jex.ClosedJaxpr)) or callable(v) for _, v in key):
        return lambda *inputs: rule(prim, params, list(inputs))
    return _compiled(rule, prim, key)


@functools.lru_cache(maxsize=4096)
def _compiled(rule: Callable, prim, params: tuple) -> Callable[..., Any]:
    def apply(*inputs):
        return rule(prim, dict(params), list(inputs))
    apply.__name__ = f"taylor_{prim.name}"
    return jax.jit(apply, inline=True)


def _plain(prim, params, inputs):
    """The primitive itself, as a list of outputs when it has several."""
    return prim.bind(*inputs, **params)


def _inexact(dtype) -> bool:
    return jnp.issubdtype(dtype, jnp.inexact)


def _value(a: Any) -> Any:
    return a.value if isinstance(a, Taylor) else a


def _expand(a: Taylor, shape: tuple[int, ...]) -> Taylor:
    """Broadcast a (scalar) operand of an elementwise primitive to the result's shape."""
    if a.value.shape == shape:
        return a
    grow = lambda v: jnp.broadcast_to(v, shape)
    return Taylor(grow(a.value), tuple(map(grow, a.jac)), grow(a.lap))


def _zero(a: Any, d: int) -> Taylor:
    """A plain value as a triple with zero derivatives (a scan carry that becomes dependent on x)."""
    a = jnp.asarray(a)
    zero = jnp.zeros_like(a)
    return Taylor(a, (zero,) * d, zero)


def _cross(a: tuple[jax.Array, ...], b: tuple[jax.Array, ...]) -> jax.Array:
    """sum_i a_i b_i over the input axes."""
    return functools.reduce(jnp.add, [u * v for u, v in zip(a, b)])


# -- rules: each takes (primitive, params, inputs) and returns the list of outputs ---------------------
def _bind(prim, params) -> Callable[..., jax.Array]:
    return lambda *args: prim.bind(*args, **params)


def _linear(prim, params, inputs):
    """Primitives linear in all their float operands together: apply them to each J and to L; a plain
    float operand contributes zero derivatives, integer operands (indices, predicates) pass unchanged."""
    op = _bind(prim, params)
    d = next(len(a.jac) for a in inputs if isinstance(a, Taylor))
    fixed = [a if isinstance(a, Taylor) or not _inexact(jnp.result_type(a)) else jnp.zeros_like(a) for a in inputs]
    part = lambda pick: op(*[pick(a) if isinstance(a, Taylor) else a for a in fixed])
    value, lap = op(*map(_value, inputs)), part(lambda a: a.lap)
    jac = [part(lambda a: a.jac[i]) for i in range(d)]
    if prim.multiple_results:  # split
        return [Taylor(v, tuple(j), l) for v, l, *j in zip(value, lap, *jac)]
    return [Taylor(value, tuple(jac), lap)]


def _bilinear(prim, params, inputs):
    """mul and dot_general: linear in each operand, product rule L = a_L b + a b_L + 2 sum_i a_Ji b_Ji."""
    op = _bind(prim, params)
    a, b = inputs
    value = op(_value(a), _value(b))
    if not isinstance(b, Taylor):
        return [Taylor(value, tuple(op(j, b) for j in a.jac), op(a.lap, b))]
    if not isinstance(a, Taylor):
        return [Taylor(value, tuple(op(a, j) for j in b.jac), op(a, b.lap))]
    jac = tuple(op(ja, b.value) + op(a.value, jb) for ja, jb in zip(a.jac, b.jac))
    cross = functools.reduce(jnp.add, [op(ja, jb) for ja, jb in zip(a.jac, b.jac)])
    return [Taylor(value, jac, op(a.lap, b.value) + op(a.value, b.lap) + 2 * cross)]


def _add(prim, params, inputs):
    """add / sub / add_any, without materialising zeros for a plain operand (the bias of every layer)."""
    value = prim.bind(*[_value(a) for a in inputs], **params)
    a, b = [_expand(t, value.shape) if isinstance(t, Taylor) else None for t in inputs]
    if b is None:
        return [a._replace(value=value)]
    b = b if prim is not P.sub_p else Taylor(b.value, tuple(-j for j in b.jac), -b.lap)
    if a is None:
        return [b._replace(value=value)]
    return [Taylor(value, tuple(u + v for u, v in zip(a.jac, b.jac)), a.lap + b.lap)]


def _div(prim, params, inputs):
    """q = a / b: from a = q b, J_q = (J_a - q J_b) / b and L_q = (L_a - q L_b - 2 sum_i J_qi J_bi) / b."""
    a, b = inputs
    q = prim.bind(_value(a), _value(b), **params)
    if not isinstance(b, Taylor):
        a = _expand(a, q.shape)
        return [Taylor(q, tuple(j / b for j in a.jac), a.lap / b)]
    b = _expand(b, q.shape)
    a = _expand(a, q.shape) if isinstance(a, Taylor) else _zero(jnp.broadcast_to(a, q.shape), len(b.jac))
    jac = tuple((ja - q * jb) / b.value for ja, jb in zip(a.jac, b.jac))
    return [Taylor(q, jac, (a.lap - q * b.lap - 2 * _cross(jac, b.jac)) / b.value)]


def _chain(a: Taylor, value: jax.Array, first: jax.Array, second: jax.Array | None) -> Taylor:
    """An elementwise f with f'(a), f''(a) given: J = f' a_J, L = f' a_L + f'' sum_i a_Ji^2 (None: f'' = 0)."""
    lap = first * a.lap if second is None else first * a.lap + second * _cross(a.jac, a.jac)
    return Taylor(value, tuple(first * j for j in a.jac), lap)


def _tanh(a, y, params):
    s = 1 - y * y
    return s, -2 * y * s


def _logistic(a, y, params):
    s = y * (1 - y)
    return s, s * (1 - 2 * y)


def _erf(a, y, params):
    first = 2 / math.sqrt(math.pi) * jnp.exp(-a * a)
    return first, -2 * a * first


def _power(a, exponent):
    """f'(a), f''(a) of a ** exponent, zero where the coefficient is (jax's rule: no 0 * inf at a = 0)."""
    if isinstance(exponent, int):  # integer_pow: a static exponent
        first = exponent * a ** (exponent - 1) if exponent else 0
        second = exponent * (exponent - 1) * a ** (exponent - 2) if exponent * (exponent - 1) else None
        return first, second

    def term(coefficient, power):
        return jnp.where(coefficient == 0, 0, coefficient * jnp.power(a, power)).astype(a.dtype)
    return term(exponent, exponent - 1), term(exponent * (exponent - 1), exponent - 2)


_DERIVATIVES: dict[Any, Callable[[jax.Array, jax.Array, dict], tuple[Any, Any]]] = {
    P.sin_p: lambda a, y, p: (jnp.cos(a), -y),
    P.cos_p: lambda a, y, p: (-jnp.sin(a), -y),
    P.sinh_p: lambda a, y, p: (jnp.cosh(a), y),
    P.cosh_p: lambda a, y, p: (jnp.sinh(a), y),
    P.atan_p: lambda a, y, p: (1 / (1 + a * a), -2 * a / ((1 + a * a) * (1 + a * a))),
    P.tanh_p: _tanh,
    P.logistic_p: _logistic,
    P.exp_p: lambda a, y, p: (y, y),
    P.expm1_p: lambda a, y, p: (y + 1, y + 1),
    P.log_p: lambda a, y, p: (1 / a, -1 / (a * a)),
    P.log1p_p: lambda a, y, p: (1 / (1 + a), -1 / ((1 + a) * (1 + a))),
    P.sqrt_p: lambda a, y, p: (0.5 / y, -0.25 / (y * a)),
    P.rsqrt_p: lambda a, y, p: (-0.5 * y / a, 0.75 * y / (a * a)),
    P.square_p: lambda a, y, p: (2 * a, 2),
    P.integer_pow_p: lambda a, y, p: _power(a, p["y"]),
    P.erf_p: _erf,
    P.erfc_p: lambda a, y, p: tuple(-t for t in _erf(a, y, p)),
    P.abs_p: lambda a, y, p: (jnp.where(a >= 0, 1, -1).astype(a.dtype), None),  # jax's choice at 0
}


def _unary(prim, params, inputs):
    a, = inputs
    value = prim.bind(a.value, **params)
    return [_chain(a, value, *_DERIVATIVES[prim](a.value, value, params))]


def _pow(prim, params, inputs):
    base, exponent = inputs
    value = prim.bind(_value(base), _value(exponent), **params)
    if isinstance(exponent, Taylor):
        if isinstance(base, Taylor):
            raise Unsupported("pow with both base and exponent depending on x")
        log = jnp.log(jnp.where(base == 0, 1, base))  # jax's rule replaces a zero base
        return [_chain(_expand(exponent, value.shape), value, value * log, value * log * log)]
    return [_chain(_expand(base, value.shape), value, *_power(base.value, exponent))]


def _select_max(prim, params, inputs):
    """max / min: the derivative of the chosen operand, split in half on ties (jax's balanced rule)."""
    value = prim.bind(*[_value(a) for a in inputs], **params)
    picked = [jnp.where(_value(a) == value, 1, 0).astype(value.dtype) for a in inputs]
    weights = [picked[0] / (1 + picked[1]), picked[1] / (1 + picked[0])]
    terms = [(_expand(a, value.shape), w) for a, w in zip(inputs, weights) if isinstance(a, Taylor)]
    jac = tuple(functools.reduce(jnp.add, parts) for parts in zip(*[[w * j for j in t.jac] for t, w in terms]))
    return [Taylor(value, jac, functools.reduce(jnp.add, [w * t.lap for t, w in terms]))]


def _constant(prim, params, inputs):
    """Zero derivative (sign, floor, round, stop_gradient): the result is plain."""
    return [prim.bind(*[_value(a) for a in inputs], **params)]


def _call(prim, params, inputs):
    """jit / closed_call: evaluate the inner jaxpr on triples, inlined."""
    closed = params["jaxpr"] if prim is P.jit_p else params["call_jaxpr"]
    return _evaluate(closed.jaxpr, closed.consts, inputs)


def _checkpoint(prim, params, inputs):
    """Rematerialised block: the interpreted block stays under ``jax.checkpoint`` with the same policy."""
    block = jax.checkpoint(lambda args: _evaluate(params["jaxpr"], [], args),
                           prevent_cse=params["prevent_cse"], policy=params["policy"])
    return block([jnp.asarray(a) if not isinstance(a, Taylor) else a for a in inputs])


def _custom_jvp(prim, params, inputs):
    """A custom derivative rule (jax.nn.relu, softplus, jnp.sinc, crux's accurate tanh) is respected by
    differentiating the call forward-over-forward locally: its primal may not be differentiable as written (sinc
    at 0). An elementwise function of one dependent input (an activation) takes its first and second derivatives
    once, along a vector of ones, and chains them as :func:`_tanh` does: its rule's work then appears twice in the
    program, not twice per input axis."""
    if not all(_inexact(v.aval.dtype) for v in params["call_jaxpr"].jaxpr.outvars):
        raise Unsupported("custom_jvp function with integer outputs")
    bind_params = prim.get_bind_params(params)
    where = [i for i, a in enumerate(inputs) if isinstance(a, Taylor)]

    def call(*dependent):
        args = list(inputs)
        for i, a in zip(where, dependent):
            args[i] = a
        return prim.bind(*args, **bind_params)

    if len(where) == 1 and _elementwise(params["call_jaxpr"].jaxpr):
        a = inputs[where[0]]
        a = _expand(a, params["call_jaxpr"].jaxpr.outvars[0].aval.shape)
        ones = jnp.ones_like(a.value)
        slope = lambda v: jax.jvp(lambda u: call(u)[0], (v,), (ones,))
        value, first = slope(a.value)
        second = jax.jvp(lambda v: slope(v)[1], (a.value,), (ones,))[1]
        return [_chain(a, value, first, second)]
    primals = tuple(inputs[i].value for i in where)
    values, firsts = jax.jvp(call, primals, tuple(inputs[i].lap for i in where))
    jacs, seconds = [], []
    for axis in range(len(inputs[where[0]].jac)):
        tangents = tuple(inputs[i].jac[axis] for i in where)
        jac, second = jax.jvp(lambda *p: jax.jvp(call, p, tangents)[1], primals, tangents)
        jacs.append(jac)
        seconds.append(second)
    return [Taylor(v, tuple(j), functools.reduce(jnp.add, [f, *s]))
            for v, f, j, s in zip(values, firsts, zip(*jacs), zip(*seconds))]


# Primitives whose every output element depends on the same element of each input alone.
ELEMENTWISE = frozenset({
    "abs", "acos", "acosh", "add", "and", "asin", "asinh", "atan", "atan2", "atanh", "cbrt", "ceil", "clamp",
    "convert_element_type", "copy", "copy_p", "cos", "cosh", "div", "eq", "erf", "erf_inv", "erfc", "exp", "exp2",
    "expm1", "floor", "ge", "gt", "integer_pow", "is_finite", "le", "log", "log1p", "logistic", "lt", "max", "min",
    "mul", "ne", "neg", "nextafter", "not", "or", "pow", "reduce_precision", "rem", "round", "rsqrt", "select_n",
    "sign", "sin", "sinh", "sqrt", "square", "stop_gradient", "sub", "tan", "tanh"})


def _elementwise(jaxpr: jex.Jaxpr) -> bool:
    """Whether a one-output function's jaxpr computes each output element from the same element of its inputs
    alone: elementwise primitives, scalars broadcast, and calls of such functions."""
    if len(jaxpr.outvars) != 1:
        return False
    shape = jaxpr.outvars[0].aval.shape
    for eqn in jaxpr.eqns:
        if any(v.aval.shape not in ((), shape) for v in (*eqn.invars, *eqn.outvars)):
            return False
        inner = eqn.params.get("jaxpr", eqn.params.get("call_jaxpr"))
        if inner is not None:
            if not _elementwise(getattr(inner, "jaxpr", inner)):
                return False
        elif eqn.primitive.name == "broadcast_in_dim":
            if eqn.invars[0].aval.shape != ():
                return False
        elif eqn.primitive.name not in ELEMENTWISE:
            return False
    return True


def _dependent_outputs(jaxpr: jex.Jaxpr, dependent: list[bool]) -> list[bool]:
    """Which outputs may depend on the flagged inputs (float values only, like the interpreter)."""
    seen = {v for v, flag in zip(jaxpr.invars, dependent) if flag}
    for eqn in jaxpr.eqns:
        if any(not isinstance(v, jex.Literal) and v in seen for v in eqn.invars):
            seen.update(v for v in eqn.outvars if _inexact(v.aval.dtype))
    return [not isinstance(v, jex.Literal) and v in seen for v in jaxpr.outvars]


def _scan(prim, params, inputs):
    """lax.scan with triples for the carries that depend on x (found by fixpoint) and plain values for the
    rest, so the stacked weights of crux.mlp stay plain; ``unroll`` and ``reverse`` are kept."""
    body, n_consts, n_carry = params["jaxpr"], params["num_consts"], params["num_carry"]
    d = next(len(a.jac) for a in inputs if isinstance(a, Taylor))
    flags = [isinstance(a, Taylor) for a in inputs]
    while True:
        carried = _dependent_outputs(body.jaxpr, flags)[:n_carry]
        merged = [a or b for a, b in zip(flags[n_consts:n_consts + n_carry], carried)]
        if merged == flags[n_consts:n_consts + n_carry]:
            break
        flags[n_consts:n_consts + n_carry] = merged
    consts, init, xs = inputs[:n_consts], inputs[n_consts:n_consts + n_carry], inputs[n_consts + n_carry:]
    init = [_zero(a, d) if flag and not isinstance(a, Taylor) else a
            for a, flag in zip(init, flags[n_consts:n_consts + n_carry])]

    def step(carry, x):
        out = _evaluate(body.jaxpr, body.consts, [*consts, *carry, *x])
        carry_out = [_zero(c, d) if isinstance(c0, Taylor) and not isinstance(c, Taylor) else c
                     for c, c0 in zip(out[:n_carry], carry)]
        return carry_out, out[n_carry:]

    carry, ys = jax.lax.scan(step, init, xs, length=params["length"], reverse=params["reverse"],
                             unroll=params["unroll"])
    return [*carry, *ys]


_RULES: dict[Any, Callable[[Any, dict, list], list]] = {
    **{p: _linear for p in (P.neg_p, P.broadcast_in_dim_p, P.reshape_p, P.squeeze_p, P.slice_p, P.dynamic_slice_p,
                            P.gather_p, P.concatenate_p, P.transpose_p, P.reduce_sum_p, P.convert_element_type_p,
                            P.copy_p, P.select_n_p, P.rev_p, P.pad_p)},
    **{p: _add for p in (P.add_p, P.sub_p, P.add_jaxvals_p)},
    **{p: _unary for p in _DERIVATIVES},
    **{p: _constant for p in (P.sign_p, P.floor_p, P.ceil_p, P.round_p, P.stop_gradient_p)},
    P.mul_p: _bilinear,
    P.dot_general_p: _bilinear,
    P.div_p: _div,
    P.pow_p: _pow,
    P.max_p: _select_max,
    P.min_p: _select_max,
    P.jit_p: _call,
    P.closed_call_p: _call,
    P.remat_p: _checkpoint,
    P.custom_jvp_call_p: _custom_jvp,
    P.scan_p: _scan,
}
_RULES_BY_NAME = {"stack": _linear, "split": _linear}  # jnp.stack / jnp.split: primitives jax.extend does not export
